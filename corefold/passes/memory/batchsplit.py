"""Batch splitting: lower the memory floor by cutting the neediest operators into pieces.

The floor (:func:`~corefold.passes.memory.memsim.floor_bytes`) is what the neediest single
operator reads and writes on top of the resident bytes; no swap or compression plan goes
below it. Cutting that operator along its batch (rows) into ``k`` pieces, as chunked
cross-entropy or split convolution backward do, lowers it. One operator cannot be cut
alone: its full-size inputs and outputs would still exist. So the pass cuts a *region*:
starting at the floor's operator, every producer and reader of a *large* storage (at least
a quarter of the largest one the operator touches, graph outputs excepted) joins, until
closed; an earlier region's joins and slices stay outside (a new region slices the one's
output and joins what the other reads). Inside the region
no large value exists whole: each is ``k`` separate pieces (storages the planner can swap
one by one). At the region's edge, inputs from outside are cut by ``Slice`` (a view on
axis 0) and outputs read outside are joined: ``Concat`` for split values, a running
``Add`` for partial sums (weight gradients, a sum over the split axis), and for an NLL
loss the summed per-piece losses divided by the summed weights.

The pieces are real nodes with their real shapes: the cost model times them, the memory
simulators count them. The file order runs piece by piece through each *group* of region
operators (a maximal run that needs no joined value of itself), so one piece's
intermediates die before the next piece starts; a group is placed where its first
operator was, after the outside nodes it needs.

Values: the pieces compute the same numbers as the whole operator for every row-wise or
element-wise operator (bit-exact); joined partial sums reassociate floating-point
additions: for a sum of ``n`` terms (split or not), the result differs from the exact sum
by at most ``gamma_n * sum |terms|`` in any order (``gamma_n = n u / (1 - n u)``, ``u`` the
unit roundoff), so two orders differ by at most twice that.

Cost: a region is found in O(V + E); a split adds O(k * region) nodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from corefold.ir import Graph, Node, Value
from corefold.passes.memory.memsim import floor_bytes
from corefold.passes.memory.program import Program, build_program
from corefold.passes.memory.splitrules import NLL, PARTIAL, SPLIT, Cut, State, cut_of

#: Storages at least this fraction of the largest one the floor's operator touches are cut.
LARGE_FRACTION = 0.25

#: Piece counts tried, smallest first.
PIECE_COUNTS = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)


class SplitRefused(Exception):
    """The region around an operator cannot be cut (the message says why)."""


@dataclass
class Region:
    """Operators cut together, their cuts, and the common unit count of every cut axis.

    Attributes:
        ops: the operators, in the program's order.
        cuts: operator -> :class:`~corefold.passes.memory.splitrules.Cut`.
        states: id(value) -> :class:`State` for every region output.
        units: the gcd of every cut axis's length (a piece covers whole units).
        groups: the runs of ``ops`` cut piece by piece (see the module doc).
        hoist: per group, the outside nodes placed before it.
    """

    ops: list[Node]
    cuts: dict[Node, Cut]
    states: dict[int, State]
    units: int
    groups: list[list[Node]] = field(default_factory=list)
    hoist: list[list[Node]] = field(default_factory=list)


def _is_join(node: Node) -> bool:
    return node.meta.get("batch_split") == "join" and node.op_type == "Concat"


def find_region(program: Program, seed: Node) -> Region:
    """The region to cut around compute node ``seed``. O(V + E).

    Raises:
        SplitRefused: an operator of the region has no rule, a large value would stay
            whole, a control edge is in the way, or nothing is large.
    """
    def large_touched(node: Node, floor: int) -> list:
        out = []
        for v in list(node.inputs) + list(node.outputs):
            if v is None:
                continue
            s = program.storage_of[id(v)]
            if not s.resident and not s.host and not s.output and s.nbytes >= floor:
                out.append(s)
        return out

    sizes = [program.storage_of[id(v)].nbytes for v in list(seed.inputs) + list(seed.outputs)
             if v is not None and not program.storage_of[id(v)].resident]
    if not sizes:
        raise SplitRefused(f"'{seed.name}' touches no activation")
    floor = max(1, int(max(sizes) * LARGE_FRACTION))
    todo, seen_s, ops = list(large_touched(seed, floor)), {}, {seed}
    while todo:
        s = todo.pop()
        if id(s) in seen_s:
            continue
        seen_s[id(s)] = s
        # an earlier cut's joins and slices stay outside: a join's whole output is sliced
        # here, a slice reads this region's output joined
        nodes = []
        for m in s.members:
            if m.producer is not None and m.producer.meta.get("batch_split") == "slice":
                continue  # an earlier slice (a view) and what reads it
            if m.producer is not None and not _is_join(m.producer):
                nodes.append(m.producer)
            nodes += [u.node for u in m.uses() if u.node.meta.get("batch_split") != "slice"]
        for n in nodes:
            if n not in ops:
                ops.add(n)
                todo.extend(large_touched(n, floor))
    pos = {n: i for i, n in enumerate(program.order)}
    order = sorted(ops, key=pos.__getitem__)
    large = {id(m) for s in seen_s.values() for m in s.members}
    # the batch: the leading dimension of the largest activation the seed touches
    biggest = max((v for v in list(seed.inputs) + list(seed.outputs)
                   if v is not None and v.shape and not program.storage_of[id(v)].resident),
                  key=lambda v: v.nbytes, default=None)
    batch = int(biggest.shape[0]) if biggest is not None else None
    cuts: dict[Node, Cut] = {}
    states: dict[int, State] = {}
    lengths: list[int] = []
    for n in order:
        if n.control_preds or n.control_succs:
            raise SplitRefused(f"'{n.name}' has control edges")
        # a joined value (partial sum, loss) is read whole, like an outside one
        ins = [states.get(id(v)) if v is not None else None for v in n.inputs]
        ins = [st if st is not None and st.kind == SPLIT else None for st in ins]
        cut = cut_of(n, ins, batch)
        if cut is None:
            raise SplitRefused(f"no batch-split rule for '{n.name}' ({n.op_type})")
        for v, a, st in zip(n.inputs, cut.inputs, ins, strict=True):
            if a is not None:
                lengths.append(v.shape[a])
            elif st is not None and id(v) in large:
                raise SplitRefused(f"'{n.name}' ({n.op_type}) would read '{v.name}' whole")
        for v, st in zip(n.outputs, cut.outputs, strict=True):
            states[id(v)] = st
            if st.kind == SPLIT:
                lengths.append(v.shape[st.axis])
            elif id(v) in large:
                raise SplitRefused(f"'{v.name}' of '{n.name}' ({n.op_type}) cannot be cut")
        cuts[n] = cut
    units = math.gcd(*lengths) if lengths else 0
    if units < 2:
        raise SplitRefused(f"the cut axes around '{seed.name}' have no common unit count above 1")
    region = Region(order, cuts, states, units)
    _group(program, region, pos)
    return region


def _group(program: Program, region: Region, pos: dict[Node, int]) -> None:
    """Fill ``region.groups`` and ``region.hoist``: a new group starts at an operator that
    reads a joined value of the current group, or needs an outside node that depends on
    the current group. O(V + E)."""
    inside = set(region.ops)
    group_of: dict[Node, int] = {}
    for n in region.ops:
        cur = len(region.groups) - 1
        new = cur < 0
        if not new:
            start = pos[region.groups[cur][0]]
            for v, a in zip(n.inputs, region.cuts[n].inputs, strict=True):
                p = v.producer if v is not None else None
                if p in inside and group_of[p] == cur and (a is None or region.states[id(v)].kind != SPLIT):
                    new = True
            stack = [p for p in n.predecessors() if p not in inside and pos[p] > start]
            seen = set(stack)
            while stack and not new:
                m = stack.pop()
                for p in m.predecessors():
                    if p in inside:
                        new = new or group_of[p] == cur
                    elif p not in seen and pos[p] > start:
                        seen.add(p)
                        stack.append(p)
        if new:
            region.groups.append([])
        region.groups[-1].append(n)
        group_of[n] = len(region.groups) - 1
    for grp in region.groups:
        start = pos[grp[0]]
        need: set[Node] = set()
        stack = [p for n in grp for p in n.predecessors() if p not in inside and pos[p] > start]
        while stack:
            m = stack.pop()
            if m in need:
                continue
            need.add(m)
            stack.extend(p for p in m.predecessors() if p not in inside and pos[p] > start)
        region.hoist.append(sorted(need, key=pos.__getitem__))


def _bounds(units: int, k: int) -> list[int]:
    return [j * units // k for j in range(k + 1)]


def _piece_shape(shape: tuple, axis: int, units: int, lo: int, hi: int) -> tuple:
    per = shape[axis] // units
    return tuple(d if i != axis else (hi - lo) * per for i, d in enumerate(shape))


def _meta(src: Node, extra: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in src.meta.items() if k in ("phase",)}
    meta.update(extra)
    return meta


class _Builder:
    """Creates the nodes of one split (see :func:`split_region`)."""

    def __init__(self, graph: Graph, region: Region, k: int):
        self.g, self.r, self.k = graph, region, k
        self.b = _bounds(region.units, k)
        self.aten = any("aten" in n.meta for n in region.ops)
        self.slices: dict[tuple[int, int, int], Value] = {}
        self.pieces: dict[int, list[Value]] = {}
        self.acc: dict[int, Value] = {}  # running sums of partial / NLL outputs
        self.nodes: list[Node] = []
        self.issued: set[str] = set()

    def name(self, base: str) -> str:
        """A value name unused in the graph (add_node claims it)."""
        name, i = base, 0
        while self.g.has_name(name) or name in self.issued:
            i += 1
            name = f"{base}_{i}"
        self.issued.add(name)
        return name

    def add(self, node: Node) -> Node:
        self.g.add_node(node)
        self.nodes.append(node)
        return node

    def const(self, name: str, data) -> Value:
        return self.g.add_constant(name, np.asarray(data, dtype=np.int64))

    def slice(self, v: Value, axis: int, j: int, src: Node) -> Value:
        key = (id(v), axis, j)
        if key not in self.slices:
            lo, hi = self.b[j], self.b[j + 1]
            per = v.shape[axis] // self.r.units
            s, e = lo * per, hi * per
            out = Value(self.name(f"{v.name}_b{j}"), _piece_shape(v.shape, axis, self.r.units, lo, hi), v.dtype)
            node = Node("Slice", [v, self.const(f"{v.name}_b{j}_s", [s]), self.const(f"{v.name}_b{j}_e", [e]),
                                  self.const(f"{v.name}_b{j}_a", [axis])], [out], name=f"{v.name}_slice{j}")
            node.meta = _meta(src, {"view": axis == 0, "batch_split": "slice"})
            if self.aten:
                node.meta.update({"aten": "aten.slice.Tensor", "args": [{"t": 0}, axis, s, e]})
            self.add(node)
            self.slices[key] = out
        return self.slices[key]

    def binary(self, op: str, a: Value, b: Value, src: Node, out: Value | None = None) -> Value:
        out = out or Value(self.name(f"{a.name}_{op.lower()}"), a.shape, a.dtype)
        node = Node(op, [a, b], [out], name=f"{out.name}_{op.lower()}")
        node.meta = _meta(src, {"batch_split": "join"})
        if self.aten:
            node.meta.update({"aten": f"aten.{op.lower()}.Tensor", "args": [{"t": 0}, {"t": 1}]})
        self.add(node)
        return out

    def piece(self, n: Node, inputs: list[Value | None], j: int, whole: dict[int, Value]) -> None:
        cut, lo, hi = self.r.cuts[n], self.b[j], self.b[j + 1]
        ins: list[Value | None] = []
        for v, a in zip(inputs, cut.inputs, strict=True):
            if v is None:
                ins.append(None)
            elif a is not None:
                ins.append(self.pieces[id(v)][j] if id(v) in self.pieces else self.slice(v, a, j, n))
            else:
                ins.append(whole.get(id(v), v))
        outs = []
        for v, st in zip(n.outputs, cut.outputs, strict=True):
            shape = _piece_shape(v.shape, st.axis, self.r.units, lo, hi) if st.kind == SPLIT else v.shape
            outs.append(Value(self.name(f"{v.name}_b{j}"), shape, v.dtype))
        meta = dict(n.meta)
        args = list(meta.get("args", []))
        for i, a in cut.args.items():
            args[i] = a
        if n.op_type == "Reshape" and not n.domain:
            shape = list(outs[0].shape)
            ins[1] = self.const(f"{n.name}_b{j}_shape", shape)
            if len(args) > 1:
                args[1] = shape
        if "args" in meta:
            meta["args"] = args
        meta["batch_split"] = {"of": n.name, "piece": j, "pieces": self.k}
        node = Node(n.op_type, ins, outs, dict(n.attrs), name=f"{n.name}_b{j}", domain=n.domain)
        node.meta = meta
        self.add(node)
        for v, st, o in zip(n.outputs, cut.outputs, outs, strict=True):
            if st.kind == SPLIT:
                self.pieces.setdefault(id(v), []).append(o)
            elif st.kind in (PARTIAL, NLL):
                prev = self.acc.get(id(v))
                self.acc[id(v)] = o if prev is None else self.binary("Add", prev, o, n)


def split_region(graph: Graph, program: Program, region: Region, k: int) -> list[dict]:
    """Cut ``region`` (found on ``program``, the program of ``graph``) into ``k`` pieces, in
    place. Returns one record per cut operator. O(V + E + k * region).

    Raises:
        SplitRefused: ``k`` exceeds the region's unit count.
    """
    if not 2 <= k <= region.units:
        raise SplitRefused(f"{k} pieces for {region.units} units")
    inside = set(region.ops)
    outs = [v for n in region.ops for v in n.outputs]
    graph_outs = set(graph.outputs)
    needed = {id(v) for v in outs if v in graph_outs or any(u.node not in inside for u in v.uses())}
    for n in region.ops:  # region readers of a joined value
        for v, a in zip(n.inputs, region.cuts[n].inputs, strict=True):
            if v is not None and id(v) in region.states and (a is None or region.states[id(v)].kind != SPLIT):
                needed.add(id(v))
    inputs = {n: list(n.inputs) for n in region.ops}  # removing a node detaches them
    holds = {}
    for v in outs:
        holds[id(v)] = Value(f"{v.name}__hold", v.shape, v.dtype)
        graph.replace_all_uses(v, holds[id(v)])
    for n in reversed(region.ops):
        graph.remove_node(n)
    build = _Builder(graph, region, k)
    per_group: list[list[Node]] = []
    whole: dict[int, Value] = {}
    for grp in region.groups:
        first = len(build.nodes)
        for j in range(k):
            for n in grp:
                build.piece(n, inputs[n], j, whole)
        for n in grp:
            cut = region.cuts[n]
            for v, st in zip(n.outputs, cut.outputs, strict=True):
                if id(v) not in needed:
                    continue
                if st.kind == SPLIT:
                    node = Node("Concat", build.pieces[id(v)], [v], {"axis": st.axis}, name=f"{v.name}_join")
                    node.meta = _meta(n, {"batch_split": "join"})
                    if build.aten:
                        node.meta.update({"aten": "aten.cat.default",
                                          "args": [[{"t": i} for i in range(k)], st.axis]})
                    build.add(node)
                elif st.kind == NLL and st.axis == 0 and cut.reduction == 1:
                    tw = build.acc[id(n.outputs[1])]
                    build.binary("Div", build.acc[id(v)], tw, n, out=v)
                else:
                    node = Node("Identity", [build.acc[id(v)]], [v], name=f"{v.name}_join")
                    node.meta = _meta(n, {"batch_split": "join", "view": True})
                    if build.aten:
                        node.meta.update({"aten": "aten.alias.default", "args": [{"t": 0}]})
                    build.add(node)
                whole[id(v)] = v
        per_group.append(build.nodes[first:])
    for v in outs:
        graph.replace_all_uses(holds[id(v)], v)
    _reorder(graph, program, region, per_group)
    return [{"op": n.name, "op_type": n.op_type, "pieces": k} for n in region.ops]


def _reorder(graph: Graph, program: Program, region: Region, per_group: list[list[Node]]) -> None:
    """File order: the original order with each group's pieces where its first operator
    was, after the outside nodes it needs; then a stable topological sort. O((V + E) log V)."""
    inside = set(region.ops)
    start = {grp[0]: i for i, grp in enumerate(region.groups)}
    done: set[Node] = set()
    order: list[Node] = []
    for n in program.order:
        if n in inside:
            if n in start:
                gi = start[n]
                for m in region.hoist[gi]:
                    if m not in done:
                        done.add(m)
                        order.append(m)
                order.extend(per_group[gi])
            continue
        if n not in done:
            done.add(n)
            order.append(n)
    present = set(graph.nodes)
    order = [n for n in order if n in present]
    rest = [n for n in graph.nodes if n not in set(order)]
    graph.reorder(order + rest)
    graph.sort()


def split_for_budget(graph: Graph, budget: int, max_pieces: int = 64, goal: float = 0.5,
                     max_regions: int = 8) -> tuple[list[dict], list[str]]:
    """Cut regions of ``graph`` (in place) until its floor is at most ``goal * budget``,
    each with the fewest pieces (from :data:`PIECE_COUNTS`, at most ``max_pieces``) that
    reach it, or else the count that lowers the floor most.

    Returns (records of the cut operators, reasons a region could not be cut). Each
    trial cuts a copy: O(trials * (V + E)).
    """
    from corefold.passes.memory.memory_pass import clone_graph

    records: list[dict] = []
    refused: list[str] = []
    target = int(budget * goal)
    for _ in range(max_regions):
        program = build_program(graph)
        floor, step = floor_bytes(program)
        if floor <= target or not program.compute:
            break
        seed = program.compute[step]
        try:
            region = find_region(program, seed)
        except SplitRefused as exc:
            refused.append(str(exc))
            break
        best: tuple[int, int] | None = None
        for k in PIECE_COUNTS:
            if k > min(max_pieces, region.units):
                break
            trial = clone_graph(graph)
            tp = build_program(trial)
            try:
                split_region(trial, tp, find_region(tp, tp.compute[step]), k)
            except SplitRefused as exc:
                refused.append(str(exc))
                break
            f, _ = floor_bytes(build_program(trial))
            if best is None or f < best[0]:
                best = (f, k)
            if f <= target:
                break
        if best is None or best[0] >= floor:
            refused.append(f"cutting the region around '{seed.name}' does not lower the floor")
            break
        records.extend(split_region(graph, program, region, best[1]))
    return records, refused
