"""Time simulator: compute, device-to-host and host-to-device streams.

Each node runs on its stream (:func:`corefold.passes.memory.program.stream_of`); streams
take their nodes in issue order (the stable topological order) and run one at a time, and
the three streams run concurrently::

    start(n) = max(free(stream(n)), max over data and control predecessors p of end(p))
    end(n)   = start(n) + duration(n);   free(stream(n)) = end(n)

Durations: compute nodes take the cost model's time (:func:`corefold.cost.op_cost`, a
roofline on ``kind = "gpu"`` targets); a SwapOut or SwapIn of ``b`` bytes takes
``launch + b / host_link`` (:meth:`~corefold.target.model.Device.host_transfer_seconds`;
``b / host_link_gbps`` on targets without a device). The makespan is the latest end; the
compute stream's *stall* is the makespan minus its busy time. O(V + E).
"""

from __future__ import annotations

from dataclasses import dataclass

from corefold.cost import op_cost
from corefold.ir import Node
from corefold.passes.memory.program import COMPUTE, D2H, H2D, Program
from corefold.target import Target


def copy_seconds(nbytes: float, target: Target) -> float:
    """Seconds to move ``nbytes`` between device and host on ``target``."""
    if target.device is not None:
        return target.device.host_transfer_seconds(nbytes)
    return float(nbytes) / target.host_link_bytes_per_s


def node_seconds(node: Node, stream: str, target: Target) -> float:
    """Duration of ``node`` on its stream."""
    if stream == COMPUTE:
        return op_cost(node, target).compute_seconds
    return copy_seconds(sum(v.nbytes for v in node.inputs if v is not None), target)


@dataclass
class Schedule:
    """Start and end time of every node, and per-stream totals (seconds).

    Attributes:
        start, end: node -> time.
        makespan: the latest end.
        busy: stream -> summed durations of its nodes.
    """

    start: dict[Node, float]
    end: dict[Node, float]
    makespan: float
    busy: dict[str, float]

    @property
    def stall(self) -> float:
        """Time the compute stream is idle, waiting for copies (makespan - compute busy)."""
        return max(0.0, self.makespan - self.busy[COMPUTE])


def simulate(program: Program, target: Target, durations: dict[Node, float] | None = None) -> Schedule:
    """Run ``program`` on the three streams (see the module doc).

    Args:
        program: the graph as the device runs it.
        target: gives compute times and the host link.
        durations: node -> seconds, to override the cost model (tests, what-ifs).
    """
    free = {COMPUTE: 0.0, D2H: 0.0, H2D: 0.0}
    busy = {COMPUTE: 0.0, D2H: 0.0, H2D: 0.0}
    start: dict[Node, float] = {}
    end: dict[Node, float] = {}
    for node in program.order:
        stream = program.stream[node]
        d = durations[node] if durations is not None and node in durations else node_seconds(node, stream, target)
        t = free[stream]
        for p in node.predecessors():
            t = max(t, end[p])
        start[node] = t
        end[node] = t + d
        free[stream] = t + d
        busy[stream] += d
    return Schedule(start, end, max(end.values(), default=0.0), busy)
