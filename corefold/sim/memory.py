"""SRAM over simulated time: every buffer's lifetime, the peak per core, and the two checks.

Lifetimes follow ``corefold.backend.executable``: a weight buffer is live from load to the
end; an activation buffer from the moment the first instruction of its core that accesses
it starts (a :class:`Recv` into it: is posted) until every such instruction completed (a :class:`Send` from it: until its data arrived). An instruction
accesses the buffers of its operands on its own core: a Compute its inputs and outputs, a
DmaLoad its destination, a DmaStore its source, a Copy both, a Send its source, a Recv its
destination.

Checked at every simulated time, on every core (an :class:`SramError`, an internal error,
names the core, the buffers and the time):

* the live buffers fit: ``sum of nbytes <= target.sram_bytes`` (``sram_peak_bytes`` is the
  largest such sum);
* no two live buffers share an address (otherwise one would overwrite the other).

One sweep per core over allocation and release events (releases first at equal times),
with the live address ranges kept sorted: O(B log B) for B buffers, plus O(I) to collect
the accesses of I instructions.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from corefold.backend.executable import (
    Compute,
    Copy,
    Core,
    DmaLoad,
    DmaStore,
    Executable,
    Recv,
    Send,
)
from corefold.errors import InternalError
from corefold.sim.timed import TimedRun


class SramError(InternalError):
    """A core's live buffers exceed its SRAM or overlap in address at some simulated time."""


@dataclass
class SramUse:
    """SRAM in use per core.

    Attributes:
        peak: core -> the largest sum of live buffer bytes (weights included).
        curves: core -> ``(times, bytes)``: bytes in use from each time on (a step function).
        lifetimes: buffer id -> ``(live from, live until)`` in seconds.
    """

    peak: dict[Core, int]
    curves: dict[Core, tuple[np.ndarray, np.ndarray]]
    lifetimes: dict[int, tuple[float, float]]


def accessed_buffers(ins) -> list[int]:
    """The buffer ids an instruction accesses on its own core (module docstring)."""
    if isinstance(ins, Compute):
        return [v.ref for v in ins.inputs if v is not None] + [v.ref for v in ins.outputs]
    if isinstance(ins, DmaLoad):
        return [ins.dst.ref]
    if isinstance(ins, (DmaStore, Send)):
        return [ins.src.ref]
    if isinstance(ins, Copy):
        return [ins.src.ref, ins.dst.ref]
    if isinstance(ins, Recv):
        return [ins.dst.ref]
    return []


def sram_use(exe: Executable, run: TimedRun, capacity: int) -> SramUse:
    """Lifetimes, per-core peaks and curves; both checks of the module docstring.

    Raises:
        SramError: a core's live buffers exceed ``capacity`` or overlap in address, or a
            buffer lies outside the SRAM or is accessed from another core.
    """
    end_of_time = max(run.run_end, run.timeline.makespan)
    first: dict[int, float] = {}
    last: dict[int, float] = {}
    for c, p in enumerate(exe.programs):
        for j, ins in enumerate(p.instructions):
            refs = accessed_buffers(ins)
            if not refs:
                continue
            s, f = run.start(c, j), run.finish(c, j)
            for b in refs:
                buf = exe.buffers[b]
                if buf.core != p.core:
                    raise SramError(f"core {p.core} instruction {j} accesses buffer '{buf.name}' of core {buf.core}")
                if s < first.get(b, float("inf")):
                    first[b] = s
                if f > last.get(b, -1.0):
                    last[b] = f
    lifetimes: dict[int, tuple[float, float]] = {}
    by_core: dict[Core, list[int]] = {}
    for b in exe.buffers:
        if b.offset < 0 or b.end > capacity:
            raise SramError(f"buffer '{b.name}' of core {b.core} lies at [{b.offset}, {b.end}), outside the "
                            f"{capacity} bytes of SRAM")
        if b.kind == "weight":
            lifetimes[b.id] = (0.0, end_of_time)
        elif b.id in first:
            lifetimes[b.id] = (first[b.id], last[b.id])
        else:
            continue  # never accessed: never live
        by_core.setdefault(b.core, []).append(b.id)
    peak: dict[Core, int] = {}
    curves: dict[Core, tuple[np.ndarray, np.ndarray]] = {}
    for core, ids in by_core.items():
        events = []
        for b in ids:
            s, e = lifetimes[b]
            events.append((s, 1, b))
            # releases sort before allocations at equal times; a buffer live for no time
            # at all is allocated and released in place
            events.append((e, 0 if e > s else 2, b))
        events.sort()
        live: list[tuple[int, int, int]] = []  # (offset, end, id), sorted, pairwise disjoint
        used = 0
        best = 0
        times, values = [], []
        for t, is_alloc, b in events:  # is_alloc: 1 allocates, 0 and 2 release
            buf = exe.buffers[b]
            key = (buf.offset, buf.end, b)
            if is_alloc != 1:
                live.pop(bisect.bisect_left(live, key))
                used -= buf.nbytes
            else:
                i = bisect.bisect_left(live, key)
                for k in (i - 1, i):
                    if 0 <= k < len(live) and live[k][0] < buf.end and buf.offset < live[k][1]:
                        other = exe.buffers[live[k][2]]
                        raise SramError(f"core {core}: buffers '{buf.name}' [{buf.offset}, {buf.end}) and "
                                        f"'{other.name}' [{other.offset}, {other.end}) are live at once at "
                                        f"t = {t * 1e6:.3f} us")
                live.insert(i, key)
                used += buf.nbytes
                if used > capacity:
                    raise SramError(f"core {core}: {used} bytes of buffers live at t = {t * 1e6:.3f} us, "
                                    f"above its {capacity} bytes of SRAM")
                best = max(best, used)
            if times and times[-1] == t:
                values[-1] = used
            else:
                times.append(t)
                values.append(used)
        peak[core] = best
        curves[core] = (np.asarray(times), np.asarray(values, dtype=np.int64))
    return SramUse(peak, curves, lifetimes)
