"""Timing analysis (SPEC M2 §2) and the seed's candidate rule (SPEC M2 §3).

TAT (tensor arrival time) of a node is when its outputs are ready; TRT (tensor required
time) when it needs its inputs; the timing slack of input ``i`` of node ``n`` is
``TTS(n, i) = TRT(n) - TAT(producer of i)``. One pass over a worklist, as the seed gives
it [001 §134-139]: graph inputs and constants arrive at 0; ``Q`` starts as the nodes whose
inputs are all known (sources); take ``q`` out of ``Q`` (first in, first out); every
successor input ``s`` of ``q`` gets ``TAT(s) = TAT(q)``; once every input of the node
``n`` owning ``s`` is known, ``TRT(n) = max TAT(inputs)``, ``TTS(i) = TRT(n) - TAT(i)``,
``TAT(n) = TRT(n) + delay(n)``, and ``n`` joins ``Q``. Control edges count as inputs
without slack. A source node also takes its delay (the seed sets its TAT to 0).

The seed's times assume every node runs as soon as its inputs are ready (unbounded
parallelism). With ``order`` given (one compute stream, as on a GPU), node ``k`` of the
order also waits for node ``k - 1``: the same pass with those extra control inputs gives
the serial times, where TRT is the start time on the stream. O(V + E).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Callable, Sequence

from corefold.errors import InternalError
from corefold.ir import Graph, Node, Value


@dataclass
class Timing:
    """The result of :func:`timing_analysis` (seconds).

    Attributes:
        tat: node -> when its outputs are ready.
        trt: node -> when it needs its inputs (its start).
        tts: (node, input index) -> timing slack of that input.
    """

    tat: dict[Node, float]
    trt: dict[Node, float]
    tts: dict[tuple[Node, int], float]

    def value_tat(self, v: Value) -> float:
        """When ``v`` is ready: its producer's TAT, 0 for graph inputs and constants."""
        return self.tat[v.producer] if v.producer is not None else 0.0


def timing_analysis(graph: Graph, delay: Callable[[Node], float] | dict[Node, float],
                    order: Sequence[Node] | None = None) -> Timing:
    """TAT, TRT and TTS of every node and input (see the module doc).

    Args:
        graph: the graph.
        delay: node -> seconds (a dict or a function).
        order: a topological order of all nodes to serialise them on one stream, or None
            for the seed's unbounded parallelism.

    Raises:
        InternalError: a node was never reached (the graph has a cycle).
    """
    get_delay = delay.__getitem__ if isinstance(delay, dict) else delay
    nodes = graph.nodes
    serial_pred: dict[Node, Node] = {}
    if order is not None:
        for prev, n in zip(order, list(order)[1:], strict=False):
            serial_pred[n] = prev
    preds: dict[Node, list[Node]] = {}
    pending: dict[Node, int] = {}
    for n in nodes:
        ps = n.predecessors()
        if n in serial_pred and serial_pred[n] not in ps:
            ps = ps + [serial_pred[n]]
        preds[n] = ps
        pending[n] = len(ps)
    succs: dict[Node, list[Node]] = {n: [] for n in nodes}
    for n, ps in preds.items():
        for p in ps:
            succs[p].append(n)
    tat: dict[Node, float] = {}
    trt: dict[Node, float] = {}
    tts: dict[tuple[Node, int], float] = {}
    arrived: dict[Node, float] = {}  # latest TAT seen at each node's inputs

    def finish(n: Node) -> None:
        trt[n] = arrived.get(n, 0.0)
        for i, v in enumerate(n.inputs):
            if v is not None:
                tts[(n, i)] = trt[n] - (tat[v.producer] if v.producer is not None else 0.0)
        tat[n] = trt[n] + float(get_delay(n))

    queue: deque[Node] = deque()
    for n in nodes:
        if pending[n] == 0:
            finish(n)
            queue.append(n)
    while queue:
        q = queue.popleft()
        for n in succs[q]:
            arrived[n] = max(arrived.get(n, 0.0), tat[q])
            pending[n] -= 1
            if pending[n] == 0:
                finish(n)
                queue.append(n)
    if len(tat) != len(nodes):
        stuck = next(n for n in nodes if n not in tat)
        raise InternalError(f"timing analysis did not reach node '{stuck.name}' (cycle?)")
    return Timing(tat, trt, tts)


def select_candidates(graph: Graph, timing: Timing, th_tts: float, th_size: int, max_count: int,
                      movable: Callable[[Value], bool] = lambda v: True) -> list[tuple[Node, int, Value]]:
    """The seed's insertion points [001 §127-132]: inputs ``(node, index, value)`` with
    ``TTS > th_tts`` and ``bytes > th_size`` (and ``movable(value)``); when more than
    ``max_count``, the ``max_count`` largest (stable: graph order among equal sizes).
    O(E log E)."""
    si = []
    for n in graph.nodes:
        for i, v in enumerate(n.inputs):
            if v is None or v.is_constant or not movable(v):
                continue
            if timing.tts.get((n, i), 0.0) > th_tts and v.nbytes > th_size:
                si.append((n, i, v))
    if len(si) > max_count:
        si = sorted(si, key=lambda c: -c[2].nbytes)[:max_count]
    return si
