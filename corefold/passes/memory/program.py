"""The device program a graph describes: streams, steps, storages and their uses.

A GPU-like device runs a graph on three in-order streams: ``compute`` (every operator,
including compress and decompress), ``d2h`` (``corefold.memory::SwapOut``, device to host)
and ``h2d`` (``SwapIn``, host to device). The *compute order* is the graph's stable
topological order restricted to compute nodes; the compute node at position ``i`` is
*step* ``i``.

Memory is held by *storages*. A value is its own storage unless its producer only
reinterprets its first input (a *view*: ONNX Reshape, Flatten, Squeeze, Unsqueeze,
Identity, or any node with ``meta["view"]``, whose every output is a view), or writes an
input in place
(``meta["inplace"] = [[output, input], ...]``, e.g. a fused optimizer step); then it shares
the storage of that input. A storage's bytes are its root value's; its uses are the uses
of all its members. SwapOut outputs live in host memory; every other storage is on the
device. Graph inputs and constants (and their views) are *resident*: held by the caller
for the whole run and never moved.

Building a :class:`Program` is O(V + E) after the topological sort.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from corefold.ir import Graph, Node, Value
from corefold.ir.domains import MEMORY_DOMAIN

#: ONNX operators whose output is a view of their first input (no kernel, no new memory).
VIEW_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})

#: Stream names, and the memory-domain operators that run on the copy streams.
COMPUTE, D2H, H2D = "compute", "d2h", "h2d"
COPY_STREAMS = {"SwapOut": D2H, "SwapIn": H2D}


def stream_of(node: Node) -> str:
    """The stream that runs ``node``: d2h (SwapOut), h2d (SwapIn) or compute."""
    if node.domain == MEMORY_DOMAIN:
        return COPY_STREAMS.get(node.op_type, COMPUTE)
    return COMPUTE


def is_view(node: Node) -> bool:
    """Whether ``node``'s outputs are views of its first input's storage."""
    if node.domain == MEMORY_DOMAIN:
        return False
    return bool(node.meta.get("view")) or (not node.domain and node.op_type in VIEW_OPS)


def storage_parent(node: Node, index: int) -> Value | None:
    """The input whose storage output ``index`` of ``node`` shares, or None (new storage)."""
    if is_view(node) and node.inputs and node.inputs[0] is not None:
        return node.inputs[0]
    for out, inp in node.meta.get("inplace", ()):
        if out == index and inp < len(node.inputs) and node.inputs[inp] is not None:
            return node.inputs[inp]
    return None


@dataclass(eq=False)
class Storage:
    """One device allocation: a root value and the values that alias it.

    Attributes:
        root: the value that allocates it (a node output, graph input or constant).
        members: the root and every view or in-place output of it, in graph order.
        nbytes: its size (the root's bytes).
        resident: a graph input or constant (live the whole run, never moved).
        host: a SwapOut output (host memory, not counted on the device).
        output: a member is a graph output (live to the end of the run).
    """

    root: Value
    members: list[Value] = field(default_factory=list)
    nbytes: int = 0
    resident: bool = False
    host: bool = False
    output: bool = False

    def uses(self) -> list[tuple[Node, int, Value]]:
        """(node, input index, member read) for every read of any member, views included."""
        return [(u.node, u.index, m) for m in self.members for u in m.uses()]


@dataclass
class Program:
    """A graph seen as the device runs it.

    Attributes:
        graph: the graph.
        order: every node in stable topological order (the issue order of all streams).
        compute: the compute nodes in that order; ``step[n]`` is a compute node's position.
        stream: node -> stream name.
        storages: root value -> its :class:`Storage`, in graph order.
        storage_of: id(value) -> the storage it belongs to.
    """

    graph: Graph
    order: list[Node]
    compute: list[Node]
    step: dict[Node, int]
    stream: dict[Node, str]
    storages: dict[Value, Storage]
    storage_of: dict[int, Storage]

    @property
    def num_steps(self) -> int:
        return len(self.compute)

    def resident_bytes(self) -> int:
        """Bytes of graph inputs and constants (with their views) held all run long."""
        return sum(s.nbytes for s in self.storages.values() if s.resident)


def build_program(graph: Graph) -> Program:
    """The :class:`Program` of ``graph`` (O(V + E) after an O((V + E) log V) sort).

    Raises:
        ValueError: the graph has a cycle, or a value has no static shape.
    """
    order = graph.topological_order()
    stream = {n: stream_of(n) for n in order}
    compute = [n for n in order if stream[n] == COMPUTE]
    step = {n: i for i, n in enumerate(compute)}
    storages: dict[Value, Storage] = {}
    storage_of: dict[int, Storage] = {}

    def new(v: Value, resident: bool = False, host: bool = False) -> None:
        s = Storage(v, [v], v.nbytes, resident, host)
        storages[v] = s
        storage_of[id(v)] = s

    for v in graph.inputs:
        new(v, resident=True)
    for v in graph.constants.values():
        new(v, resident=True)
    for n in order:
        for i, v in enumerate(n.outputs):
            parent = storage_parent(n, i)
            if parent is not None and id(parent) in storage_of:
                s = storage_of[id(parent)]
                s.members.append(v)
                storage_of[id(v)] = s
            else:
                new(v, host=(n.domain == MEMORY_DOMAIN and n.op_type == "SwapOut"))
    for v in graph.outputs:
        storage_of[id(v)].output = True
    return Program(graph, order, compute, step, stream, storages, storage_of)
