"""``simulate(exe, inputs) -> (outputs, report)``: run an executable as the chip would.

1. :func:`resolve_target` finds the target the executable was compiled for (its
   fingerprint), or checks the one given against it;
2. :func:`corefold.sim.timed.time_executable` runs every instruction on the timing engine
   (unit occupancy, NoC contention per hop, DRAM channels, host link);
3. :func:`corefold.sim.memory.sram_use` derives every buffer's lifetime from those times
   and asserts that no core's live buffers exceed its SRAM or overlap at any time;
4. :func:`corefold.sim.functional.run_functional` moves and computes the bytes, in the
   order the timed run started the instructions;
5. the report (:mod:`corefold.sim.report`).

O(I log I + S log S + kernel work) for I instructions and S engine stages.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from corefold.backend.executable import Compute, Executable, TargetFingerprint, target_fingerprint
from corefold.errors import DataError, TargetError
from corefold.sim.functional import run_functional
from corefold.sim.memory import SramUse, sram_use
from corefold.sim.report import DIRECTION_INDEX, Roofline, SimReport, roofline
from corefold.sim.timed import TimedRun, time_executable
from corefold.sim.trace import write_trace
from corefold.target import PRESETS, Target, load_target


@dataclass
class Simulation:
    """Everything one simulated run produced.

    Attributes:
        outputs: graph outputs by name (empty when run without the functional part).
        report: the report (:class:`SimReport`).
        timed: the timed run (engine, resources, timeline).
        sram: lifetimes and SRAM curves per core.
        target: the chip.
        roofline: the roofline bound's three terms.
    """

    outputs: dict[str, np.ndarray]
    report: SimReport
    timed: TimedRun
    sram: SramUse
    target: Target
    roofline: Roofline

    def write_trace(self, path: str | Path) -> None:
        """Chrome trace-event JSON (:mod:`corefold.sim.trace`) with the SRAM curves as counters.

        Raises:
            OutputPathError: the folder is missing or ``path`` is a folder.
        """
        counters = [(f"core ({x},{y})", f"SRAM ({x},{y})", t, v) for (x, y), (t, v) in sorted(
            self.sram.curves.items(), key=lambda kv: (kv[0][1], kv[0][0]))]
        write_trace(path, self.timed.engine, self.timed.timeline, counters)

    @property
    def link_bytes(self) -> np.ndarray:
        """``link_bytes`` as an int64 array (H, W, 4)."""
        return np.asarray(self.report.link_bytes, dtype=np.int64)


def resolve_target(fingerprint: TargetFingerprint, target: Target | str | Path | None = None) -> Target:
    """The target an executable was compiled for.

    With ``target`` None, the bundled preset whose fingerprint matches; else ``target``
    (a :class:`Target`, a preset name or a TOML path), which must match.

    Raises:
        TargetError: no preset matches, or the given target is not the executable's.
    """
    if target is None:
        for name in PRESETS:
            candidate = load_target(name)
            if target_fingerprint(candidate).digest == fingerprint.digest:
                return candidate
        raise TargetError(f"the executable was compiled for target '{fingerprint.name}', which is no bundled preset "
                          f"(fingerprint {fingerprint.digest[:12]}); give its TOML file with --target")
    t = target if isinstance(target, Target) else load_target(target)
    got = target_fingerprint(t)
    if got.digest != fingerprint.digest:
        raise TargetError(f"the executable was compiled for target '{fingerprint.name}' (fingerprint "
                          f"{fingerprint.digest[:12]}), not for '{t.name}' ({got.digest[:12]})")
    return t


def random_inputs(exe: Executable, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs for every graph input: standard normal floats, integers in [0, 10)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for io in exe.inputs:
        dt = np.dtype(io.dtype)
        if dt.kind == "f":
            feeds[io.name] = rng.standard_normal(io.shape).astype(dt)
        elif dt == np.bool_:
            feeds[io.name] = rng.integers(0, 2, io.shape).astype(dt)
        else:
            feeds[io.name] = rng.integers(0, 10, io.shape).astype(dt)
    return feeds


def run_simulation(exe: Executable, inputs: dict[str, np.ndarray] | None, target: Target | str | Path | None = None,
                   functional: bool = True, probe: Callable | None = None) -> Simulation:
    """Simulate ``exe`` (module docstring); ``functional=False`` skips the data (timing,
    SRAM checks and report only; ``inputs`` may then be None). ``probe`` goes to the
    functional run (:func:`~corefold.sim.functional.run_functional`).

    Raises:
        TargetError: see :func:`resolve_target`.
        DataError: the inputs do not match the executable's.
        ProgramError, SramError, KernelError, DeadlockError: the executable breaks its own
            rules (internal errors: a lowering bug).
    """
    t = resolve_target(exe.target, target)
    if functional and inputs is None:
        raise DataError("no inputs to simulate with")
    timed = time_executable(exe, t)
    sram = sram_use(exe, timed, t.sram_bytes)
    outputs = run_functional(exe, t, timed, inputs, probe) if functional else {}
    report, bound = build_report(exe, t, timed, sram)
    return Simulation(outputs, report, timed, sram, t, bound)


def simulate(exe: Executable, inputs: dict[str, np.ndarray], target: Target | str | Path | None = None
             ) -> tuple[dict[str, np.ndarray], SimReport]:
    """Run ``exe`` on ``inputs`` as the chip would: ``(outputs by name, report)``.

    Raises:
        see :func:`run_simulation`.
    """
    sim = run_simulation(exe, inputs, target)
    return sim.outputs, sim.report


def build_report(exe: Executable, target: Target, timed: TimedRun, sram: SramUse) -> tuple[SimReport, Roofline]:
    """The report of a timed run (keys in :mod:`corefold.sim.report`) and the roofline's
    terms. O(I + S + H W)."""
    w, h = target.width, target.height
    macs = vector_ops = 0.0
    instructions = 0
    for p in exe.programs:
        instructions += len(p.instructions)
        for ins in p.instructions:
            if isinstance(ins, Compute):
                op = exe.ops[ins.op]
                if op.unit_kind == "matrix":
                    macs += op.work
                elif op.unit_kind == "vector":
                    vector_ops += op.work
                vector_ops += op.activation_work
    compulsory = sum(exe.regions[io.region].nbytes for io in (*exe.inputs, *exe.outputs))
    bound = roofline(macs, vector_ops, compulsory, target)
    links = np.zeros((h, w, 4), dtype=np.int64)
    noc = 0
    for nbytes, route, _what in timed.transfers:
        noc += nbytes * len(route)
        for x, y, d in route:
            links[y, x, DIRECTION_INDEX[d]] += nbytes
    latency = timed.run_end - timed.run_start
    tl = timed.timeline
    busy = tl.busy_seconds(len(timed.engine.resources))
    per_kind: dict[str, float] = {k: 0.0 for k in target.units}
    for (_core, _name), r in timed.machine.units.items():
        per_kind[timed.engine.resources[r].kind] += busy[r]
    cores = len(target.usable_cores)
    util = {k: (per_kind[k] / (cores * target.units[k].count * latency) if latency > 0 else 0.0) for k in per_kind}
    peaks = [0] * (w * h)
    for (x, y), v in sram.peak.items():
        peaks[y * w + x] = int(v)
    return SimReport(
        latency_s=float(latency), roofline_s=float(bound.seconds), load_s=float(timed.load_end),
        sram_peak_bytes=peaks, sram_capacity_bytes=int(target.sram_bytes), noc_bytes=int(noc),
        link_bytes=links.tolist(), dram_bytes=int(timed.dram_bytes), host_bytes=int(timed.host_bytes),
        instructions=instructions, utilisation=util), bound
