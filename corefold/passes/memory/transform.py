"""Rewrite a graph with its evictions: reduction and restore nodes, control edges, order.

For each :class:`~corefold.passes.memory.evictions.Eviction` of a storage with root ``r``:

* swap: ``SwapOut(r) -> r.host`` and, per later cluster ``j``, ``SwapIn(r.host) -> r.host.inJ``;
* compress: ``Compress(r) -> r.F[, r.scale]`` and ``Decompress(r.F[, r.scale]) -> r.rJ``;
* both: ``Compress``, ``SwapOut`` of its outputs, and per cluster ``SwapIn`` then
  ``Decompress``;

all in domain ``corefold.memory`` (kernels: ``corefold.ops.defs.memory``). Reads of
cluster ``j`` take the restored value, or a replay of the view chain from it when they
read a view of ``r``. Control edges (SPEC M2 §5): ``SwapOut =>`` the first node of the
release step (serialization), the last node of the trigger step ``=> SwapIn`` (prefetch),
and with ``serialize_restores`` the first reader of the previous restore ``=>`` the next
restore when that reader comes earlier than the next restore's.

File order: per compute step ``k`` of the original order, the decompressions and replayed
views for step ``k``, the step's node, the compressions after it, then the copies issued
after it in booking order (so each copy stream takes its copies in the planned order);
then a stable topological sort. Every new edge points from an earlier group to a later
one, so the graph stays acyclic. O(V + E + inserted nodes).
"""

from __future__ import annotations

import numpy as np

from corefold.ir import Graph, Node, Value
from corefold.ir.domains import MEMORY_DOMAIN
from corefold.passes.memory.evictions import BOTH, COMPRESS, SWAP, Eviction
from corefold.passes.memory.program import Program


class _Builder:
    """Nodes to insert, grouped by the compute step they go with."""

    def __init__(self, graph: Graph, program: Program):
        self.graph = graph
        self.program = program
        n = program.num_steps
        self.pre: list[list[Node]] = [[] for _ in range(n)]
        self.post: list[list[Node]] = [[] for _ in range(n)]
        self.copies: list[list[tuple[float, int, Node]]] = [[] for _ in range(n)]
        self.release: list[tuple[Node, int]] = []
        self.prefetch: list[tuple[Node, int]] = []
        self.restores: list[tuple[int, float, Node, int]] = []  # (trigger, slot start, SwapIn, first read)

    def node(self, op: str, inputs: list[Value], outputs: list[tuple], attrs: dict, name: str,
             meta: dict, domain: str = MEMORY_DOMAIN) -> Node:
        """A new node whose outputs are ``(name, like, dtype, shape)``: named after ``name``
        (made unique), typed as ``like`` unless ``dtype``/``shape`` say otherwise."""
        n = self.graph.make_node(op, inputs, attrs, num_outputs=len(outputs), name=name,
                                 output_names=[o[0] for o in outputs], domain=domain)
        for v, (_, like, dtype, shape) in zip(n.outputs, outputs, strict=True):
            v.shape = like.shape if shape is None else shape
            v.dtype = like.dtype if dtype is None else np.dtype(dtype)
        n.meta.update(meta)
        return n

    def copy(self, anchor: int, start: float, node: Node) -> None:
        self.copies[anchor].append((start, len(self.graph), node))


def apply_evictions(graph: Graph, program: Program, evictions: list[Eviction],
                    serialize_restores: bool = False) -> dict[str, int]:
    """Rewrite ``graph`` (whose :class:`~corefold.passes.memory.program.Program` is
    ``program``, built before any change) in place.

    Returns counts: reductions, restores, nodes added, and the bytes swapped out and
    compressed (once per reduction).
    """
    b = _Builder(graph, program)
    stats = {"reductions": 0, "restores": 0, "swapped_bytes": 0, "compressed_bytes": 0}
    for ev in evictions:
        _build(b, ev, stats)
    order: list[Node] = []
    first: list[Node] = []
    last: list[Node] = []
    for k, node in enumerate(program.compute):
        group = b.pre[k] + [node] + b.post[k]
        first.append(group[0])
        last.append(group[-1])
        order += group
        order += [c for _, _, c in sorted(b.copies[k], key=lambda t: (t[0], t[1]))]
    graph.reorder(order)
    for x, s in b.release:
        graph.add_control_edge(x, first[s])
    released: dict[int, list[Node]] = {}
    for x, s in b.release:
        released.setdefault(s, []).append(x)
    for node, q in b.prefetch:
        graph.add_control_edge(last[q], node)
        for x in released.get(q + 1, []):  # so the restore may count from step q + 1
            if x not in node.predecessors():
                graph.add_control_edge(x, node)
    if serialize_restores:
        ordered = sorted(b.restores, key=lambda r: (r[0], r[1]))
        for (_, _, _, first_prev), (_, _, restore, first_read) in zip(ordered, ordered[1:], strict=False):
            if first_prev < first_read:
                graph.add_control_edge(first[first_prev], restore)
    graph.sort()
    stats["nodes_added"] = len(graph) - len(program.order)
    return stats


def _build(b: _Builder, ev: Eviction, stats: dict[str, int]) -> None:
    st, u = ev.storage, ev.uses
    r = st.root
    base = r.name
    lo1 = u.lo(ev.gaps[0])
    meta = {"memory": "reduce", "of": base}
    stats["reductions"] += 1
    reduced: list[Value] = [r]
    if ev.mode in (COMPRESS, BOTH):
        fmt = ev.fmt
        outs = [(f"{base}.{fmt.name}", r, fmt.dtype, None)]
        if fmt.scale_max:
            outs.append((f"{base}.scale", r, "float32", ()))
        c = b.node("Compress", [r], outs, {"format": fmt.name}, f"compress_{base}", meta)
        b.post[lo1].append(c)
        reduced = list(c.outputs)
        stats["compressed_bytes"] += st.nbytes
    host: list[Value] = reduced
    if ev.mode in (SWAP, BOTH):
        x = b.node("SwapOut", list(reduced), [(f"{v.name}.host", v, None, None) for v in reduced], {},
                   f"swap_out_{base}", meta)
        host = list(x.outputs)
        low = lo1 if ev.mode == BOTH else int(u.points[0])
        anchor = max(low, min(ev.swap_anchor, ev.release - 1, min(ev.triggers)))
        b.copy(anchor, ev.swap_slot[0], x)
        b.release.append((x, ev.release))
        stats["swapped_bytes"] += sum(v.nbytes for v in reduced)
    # every read, with its cluster, and each view's source, taken before anything is rewired
    reads = [(node, index, member) for node, index, member in st.uses() if node in b.program.step]
    parent_of = {id(m): m.producer.inputs[0] for m in st.members[1:]}
    for j, gap in enumerate(ev.gaps):
        first = u.hi(gap)
        rmeta = {"memory": "restore", "of": base}
        back = reduced
        if ev.mode in (SWAP, BOTH):
            s_in = b.node("SwapIn", host, [(f"{v.name}.in{j + 1}", v, None, None) for v in host], {},
                          f"swap_in_{base}_{j + 1}", rmeta)
            back = list(s_in.outputs)
            q = ev.triggers[j]
            b.copy(q, ev.restore_slots[j][0], s_in)
            b.prefetch.append((s_in, q))
            b.restores.append((q, ev.restore_slots[j][0], s_in, first))
        full = back[0]
        if ev.mode in (COMPRESS, BOTH):
            d = b.node("Decompress", back, [(f"{base}.r{j + 1}", r, None, None)],
                       {"format": ev.fmt.name, "to": r.dtype.name}, f"decompress_{base}_{j + 1}", rmeta)
            b.pre[first].append(d)
            full = d.outputs[0]
        stats["restores"] += 1
        _rewire_cluster(b, ev, j, full, first, reads, parent_of)


def _rewire_cluster(b: _Builder, ev: Eviction, j: int, full: Value, first: int, reads: list,
                    parent_of: dict[int, Value]) -> None:
    """Point the reads of the cluster after evicted gap ``j`` (steps ``first..last``) at
    ``full``. A read of a view takes a replay of the view chain from ``full`` (the replays go
    with the cluster's first step), unless the view's own node is in the cluster: it is
    rewired itself, so its output already views ``full``."""
    program, st = b.program, ev.storage
    last = ev.uses.cluster_last(ev.gaps, j + 1)
    rebuilt: dict[int, Value] = {id(st.root): full}

    def in_cluster(node) -> bool:
        k = program.step.get(node)
        return k is not None and first <= k <= last

    def rebuild(m: Value) -> Value:
        if id(m) not in rebuilt:
            node = m.producer
            if in_cluster(node):
                rebuilt[id(m)] = m
            else:
                parent = rebuild(parent_of[id(m)])
                clone = b.node(node.op_type, [parent] + list(node.inputs[1:]), [(f"{m.name}.r{j + 1}", m, None, None)],
                               dict(node.attrs), f"{node.name}_r{j + 1}", node.meta, domain=node.domain)
                b.pre[first].append(clone)
                rebuilt[id(m)] = clone.outputs[0]
        return rebuilt[id(m)]

    for node, index, member in reads:
        if in_cluster(node):
            node.replace_input(index, rebuild(member))
