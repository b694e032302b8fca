"""Steps 4 and 5 of lowering for one global order: plan SRAM, route, emit and pack an
executable (:func:`emit_executable`), check its instruction memory and NoC buffers
(:func:`check_resources`), and time it on the whole chip (:func:`assemble_into`). A
lowering's trials each end here; :mod:`.lower` keeps the fastest.

``settings`` below is a :class:`~corefold.backend.lower.LowerSettings` (its
``relay_chips`` and ``dram_interleave``).
"""

from __future__ import annotations

import numpy as np

from corefold.backend.executable import Executable, Op, target_fingerprint
from corefold.backend.instructions import Compute
from corefold.backend.lgraph import LoweredGraph
from corefold.backend.place import Clustering
from corefold.errors import CompileError
from corefold.target import Target


def run_latency(run) -> float:
    return float(run.run_end - run.run_start)



def assemble_into(built: dict, errors: dict, runs: dict, kind: str, lg: LoweredGraph, cl: Clustering, core_of: list,
           position: list[int], target: Target, settings, timed: bool, shared: bool = False) -> int:
    """Emit the executable of ``position``; with ``timed``, time it into ``runs[kind]``
    (even when it then fails the resource check: the timing stands without it). Into
    ``built[kind]`` as ``(latency, executable)`` if it passes the check, else its
    :class:`CompileError` into ``errors[kind]``. Returns how many instructions it emitted
    (0 when the emit failed): what emitting and timing it cost, about 0.1 ms each on the
    machine of ``LowerSettings.trial_budget``."""
    try:
        exe = emit_executable(lg, cl, core_of, position, target, settings, shared)
    except CompileError as exc:
        errors[kind] = exc
        return 0
    emitted = sum(len(p.instructions) for p in exe.programs)
    latency = 0.0
    if timed:
        from corefold.sim.timed import time_executable

        runs[kind] = (exe, time_executable(exe, target))
        latency = run_latency(runs[kind][1])
    try:
        check_resources(exe, target)
    except CompileError as exc:
        errors[kind] = exc
        return emitted
    built[kind] = (latency, exe)
    return emitted



def arrival_times(lg: LoweredGraph, cl: Clustering, exe: Executable, run) -> np.ndarray:
    """Each task's end in the timed ``run`` of ``exe`` (from the run's start), the
    clustering's estimate for tasks without a compute instruction. O(instructions)."""
    end = np.array(cl.end, dtype=np.float64)
    task_of_op = [i for i, task in enumerate(lg.tasks) if task.op is not None]
    for c, program in enumerate(exe.programs):
        for j, ins in enumerate(program.instructions):
            if isinstance(ins, Compute):
                end[task_of_op[ins.op]] = run.finish(c, j) - run.run_start
    return end



def emit_executable(lg: LoweredGraph, cl: Clustering, core_of: list, position: list[int], target: Target,
          settings, shared: bool = False) -> Executable:
    """Steps 4 and 5 for one global order ``position``: plan SRAM, route, emit, pack
    (``shared``: see :class:`~corefold.backend.plan.Planner`)."""
    from corefold.backend.emit import emit, lay_out_memory
    from corefold.backend.plan import Planner

    io_core = min(set(core_of) or {target.host_router},
                  key=lambda c: (abs(c[0] - target.host_router[0]) + abs(c[1] - target.host_router[1]), c[1], c[0]))
    several = target.chips_x * target.chips_y > 1
    plan = Planner(lg, core_of, position, io_core, target.core_memory_threshold, target.sram_bytes,
                   shared, target.chip_of if several and settings.relay_chips else None).run()
    lay_out_memory(plan, target)
    ops: list[Op] = []
    task_ops: list[int | None] = []
    for task in lg.tasks:
        if task.op is None:
            task_ops.append(None)
        else:
            task_ops.append(len(ops))
            ops.append(task.op)
    programs, buffers, weights, regions, inputs, outputs = emit(plan, lg, target, task_ops,
                                                                [task.seconds for task in lg.tasks],
                                                                settings.dram_interleave,
                                                                cl.vector_copies if cl is not None else True)
    return Executable(target_fingerprint(target), programs, buffers, weights, regions, inputs, outputs, ops)



def check_resources(exe: Executable, target: Target) -> None:
    """The instruction memory and NoC buffers of every core.

    Raises:
        CompileError: a core's encoded program exceeds its instruction memory, or it
            receives from more cores than its NoC buffers hold streams for.
    """
    from corefold.backend.cfx import program_bytes
    from corefold.backend.executable import Recv

    for p in exe.programs:
        size = program_bytes(p)
        if size > target.instruction_bytes:
            raise CompileError("instruction memory", f"core ({p.core[0]},{p.core[1]})", size,
                               target.instruction_bytes, f"{len(p.instructions)} instructions")
        sources = {ins.src_core for ins in p.instructions if isinstance(ins, Recv)}
        need = len(sources) * target.noc_stream_buffer_bytes
        if need > target.noc_buffer_bytes:
            raise CompileError("NoC buffers", f"core ({p.core[0]},{p.core[1]})", need, target.noc_buffer_bytes,
                               f"receives from {len(sources)} cores")
