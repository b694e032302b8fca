"""Operator splitting (SPEC M3 §7): cut every operator until its data fits a core.

An operator *touches* ``bytes(o) = sum of its distinct inputs' bytes (activations and
weights) + its outputs' bytes``; it fits when ``bytes(o) <= T`` with
``T = target.core_memory_threshold`` (SRAM minus the reserved buffer). For an operator
that does not fit, the pass takes, among its rule's split axes (rules.py), the first in
preference order (or the one needing the fewest pieces, for "other" operators) on which
some ``k`` makes the largest piece fit, with the smallest such ``k`` (an operator whose
first input is the join of a cut takes that cut's axis when it fits, so that each piece
reads its own pieces of the join rather than all of them); the pieces cover
balanced unit ranges ``[floor(j E / k), floor((j + 1) E / k))``. If no single axis can
fit, it halves along the axis whose halves touch the fewest bytes and looks at the halves
again. A convolution or pooling over an image too large for a core, which no cut of its
rule that reduces nothing makes fit (each output-channel piece still reads every input
row), is cut into bands of output rows instead (:mod:`.rows`). Each piece is the same
operator type on slices of the data: constants are sliced directly, activations by
``Slice``; outputs are joined by ``Concat`` on the split axis, or added by ``Sum`` when
the split is over a reduced dimension (input channels). An operator that would need more
than :data:`MAX_PIECES` pieces is refused.

The inserted ``Slice`` and ``Concat`` are data moves between DRAM regions (meta
``split_join``) and, like shape-only views (Reshape, Flatten, ...), are not required to
fit; everything else, including the ``Sum`` of partial results, is. Cutting on batch or
output channels gives bit-identical outputs; input-channel partial sums only reassociate
floating-point additions. In the backend's tiling of a quantized model (``exact``; one
with a QuantizeLinear or a DequantizeLinear, :func:`holds_quantization`), a float32
operator cut over a reduced dimension keeps its partial results in float64 and their
``Sum`` rounds once to float32 (never in a graph exported as ONNX, whose MatMul has one
type): its result usually reaches a QuantizeLinear, where a reassociated ulp can become a
step, and the chip simulator, which computes an op in the wider of its operands' and its
output's float types, then rounds as the integer runner does on the whole operator (whose
float products also sum in float64, ``OpDef.blocking_free_kernel``). The int8 BERT on 128
KiB cores was 1-2 steps off the integer execution with float32 partial sums.

Cost: O(#pieces) node creations per split; O(V * pieces) total.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from corefold.errors import CapacityError, CorefoldError
from corefold.ir import Graph, Node, Value
from corefold.ir.shapes import infer_node
from corefold.passes.split.rules import SplitAxis, candidate_axes, has_rule, is_view
from corefold.pipeline import CompileContext, Equivalence, PassResult
from corefold.settings import SettingsError
from corefold.target import Target

JOIN_META = "split_join"
#: Compute pieces one operator may be cut into; beyond, the threshold is refused as too
#: small for the model (a 1 KiB core would cut a 64-channel 56 x 56 convolution into
#: some 200,000 pieces of one row, one input and one output channel)
MAX_PIECES = 4096
#: Node meta of a fused float activation (set by the backend's tile step): the pieces of a
#: cut keep it, and a cut over a reduced dimension moves it onto the ``Sum`` that joins them.
ACTIVATION_META = "activation"
#: the dtype of a quantized model's float32 partial results (module docstring)
WIDE = np.dtype(np.float64)


@dataclass
class SplitResult:
    """What :func:`split_graph` did: ``splits`` maps each original node name that was cut
    to the number of compute pieces it became; ``modified`` is True iff any was cut."""

    graph: Graph
    modified: bool
    splits: dict[str, int] = field(default_factory=dict)


def touched_bytes(node: Node) -> int:
    """Bytes of the node's distinct inputs (activations and weights) and outputs."""
    seen: set[int] = set()
    total = 0
    for v in node.inputs:
        if v is not None and id(v) not in seen:
            seen.add(id(v))
            total += v.nbytes
    return total + sum(v.nbytes for v in node.outputs)


def needs_fit(node: Node) -> bool:
    """False for shape-only views and the split pass's own joins, which move no core data."""
    return not is_view(node) and not node.meta.get(JOIN_META)


def _ranges(extent: int, k: int) -> list[tuple[int, int]]:
    return [(j * extent // k, (j + 1) * extent // k) for j in range(k)]


def piece_bytes(node: Node, ax: SplitAxis, units: int) -> int:
    """Bytes the largest piece of ``units`` units touches."""
    total = 0
    seen: set[int] = set()
    for v, m in zip(node.inputs, ax.inputs, strict=False):
        if v is None or id(v) in seen:
            continue
        seen.add(id(v))
        if m is None:
            total += v.nbytes
        else:
            total += v.nbytes * units * m[1] // v.shape[m[0]]
    for v in node.outputs:
        if ax.output is None:
            total += v.nbytes
        else:
            total += v.nbytes * units * ax.output[1] // v.shape[ax.output[0]]
    return total


def choose_split(node: Node, threshold: int, origin: str | None = None) -> tuple[SplitAxis, int]:
    """The axis and piece count for a node that does not fit (see the module docstring);
    ``origin`` names the model's node that ``node`` is a piece of, for errors.

    Raises:
        CapacityError: no rule for the operator, or no axis left to cut.
    """
    axes, by_preference = candidate_axes(node)
    size = touched_bytes(node)
    who = f"node '{origin or node.name}' ({node.op_type})"
    if origin and origin != node.name:
        who += f", piece '{node.name}',"
    if not axes:
        why = (f"there is no split rule for {node.op_type}" if not has_rule(node)
               else "no dimension is left to cut")
        raise CapacityError(f"{who} touches {size} bytes, above the core memory threshold of {threshold} "
                            f"bytes, and {why}")
    fitting: list[tuple[int, int, int, SplitAxis]] = []  # (key, rank, k, axis)
    for rank, ax in enumerate(axes):
        for k in range(2, ax.extent + 1):
            if piece_bytes(node, ax, -(-ax.extent // k)) <= threshold:
                fitting.append((rank if by_preference else k, rank, k, ax))
                break
    if fitting:
        joined = _joined_axis(node)
        for _, _, k, ax in fitting:
            if (joined is not None and not ax.reduce and ax.output is not None and ax.output[0] == joined
                    and ax.inputs and ax.inputs[0] is not None and ax.inputs[0][0] == joined):
                return ax, k  # each piece reads its own pieces of the join, not all of them
        _, _, k, ax = min(fitting, key=lambda t: (t[0], t[1]))
        return ax, k
    halves = [(piece_bytes(node, ax, -(-ax.extent // 2)), rank, ax) for rank, ax in enumerate(axes)]
    best_bytes, _, ax = min(halves, key=lambda t: (t[0], t[1]))
    if best_bytes >= size:
        raise CapacityError(f"{who} touches {size} bytes, above the core memory threshold of {threshold} "
                            f"bytes, at every split")
    return ax, 2


def _joined_axis(node: Node) -> int | None:
    """The axis of the cut whose join (a ``split_join`` Concat) makes the node's first
    input, or None. O(1)."""
    x = node.inputs[0] if node.inputs else None
    join = x.producer if x is not None else None
    if join is None or join.op_type != "Concat" or not join.meta.get(JOIN_META) or x.shape is None:
        return None
    return int(join.attrs.get("axis", 0)) % len(x.shape)


def constant_slice(graph: Graph, v: Value, axis: int, start: int, end: int) -> Value:
    """``v[start:end]`` on ``axis`` as a constant of ``graph``, one for all the pieces that
    read it (the split pass's and the backend's tile step's alike): the row bands of a
    convolution, each cut again on output channels, read the same weight slices (a new
    constant per band made the int8 Inception v1's weights 4.7x their size in the lowered
    graph, 32.8 MB instead of 7.0, and the clustering kept half the cores free for them).
    O(slice size) the first time, O(1) after.

    The slices made so far are kept in ``graph.caches`` (``(id(v), axis, start, end) ->
    (v, slice)``), so that they go with the graph: in a weak dictionary keyed by the graph,
    as before, each entry held its own key alive (a slice's uses lead back to the graph's
    nodes), and every tiled graph of every lowering stayed in memory until the process
    ended (about 190,000 objects per int8 SqueezeNet lowering, stop 51).
    """
    made = graph.caches.setdefault("constant_slices", {})
    key = (id(v), axis, start, end)
    hit = made.get(key)
    if hit is not None and hit[0] is v:
        return hit[1]
    idx = [slice(None)] * len(v.shape)
    idx[axis] = slice(start, end)
    out = graph.add_constant(f"{v.name}_{axis}_{start}_{end}", np.ascontiguousarray(v.const[tuple(idx)]))
    made[key] = (v, out)
    return out


class _Splitter:
    def __init__(self, graph: Graph, wide_partials: bool = False):
        self.graph = graph
        self.wide_partials = wide_partials
        self.slices: dict[tuple[int, int, int, int], Value] = {}
        self.replaced_constants: dict[str, None] = {}

    def slice_of(self, v: Value, axis: int, start: int, end: int) -> Value:
        """``v[start:end]`` on ``axis``: a new constant, or a (shared) ``Slice`` node."""
        if start == 0 and end == v.shape[axis]:
            return v
        key = (id(v), axis, start, end)
        if key in self.slices:
            return self.slices[key]
        g = self.graph
        if v.is_constant:
            out = constant_slice(g, v, axis, start, end)
        else:
            consts = [g.add_constant(f"{v.name}_slice_{what}", np.array([x], np.int64))
                      for what, x in (("starts", start), ("ends", end), ("axes", axis))]
            node = g.make_node("Slice", [v] + consts, name=f"{v.name}_slice")
            node.meta[JOIN_META] = True
            infer_node(node)
            out = node.outputs[0]
        self.slices[key] = out
        return out

    def split(self, node: Node, ax: SplitAxis, k: int) -> list[Node]:
        """Replace ``node`` by ``k`` pieces and their joins; return the new nodes."""
        g = self.graph
        count = len(g)
        pieces: list[Node] = []
        for j, (s, e) in enumerate(_ranges(ax.extent, k)):
            ins: list[Value | None] = []
            for i, (v, m) in enumerate(zip(node.inputs, ax.inputs, strict=False)):
                if v is None:
                    ins.append(None)
                elif m is None:
                    # a reduce split adds the bias / C term once, in the first piece
                    ins.append(None if ax.reduce and i >= 2 and j > 0 else v)
                else:
                    ins.append(self.slice_of(v, m[0], s * m[1], e * m[1]))
            while ins and ins[-1] is None:
                ins.pop()
            attrs = dict(node.attrs)
            if ax.scales_group:
                attrs["group"] = e - s
            if node.op_type == "Resize" and len(ins) > 3 and ins[3] is not None and ax.output is not None:
                sizes = ins[3].const.copy()
                sizes[ax.output[0]] = (e - s) * ax.output[1]
                ins[3] = g.add_constant(f"{ins[3].name}_{s}_{e}", sizes)
            names = [f"{o.name}_part{j}" for o in node.outputs]
            piece = g.make_node(node.op_type, ins, attrs, num_outputs=len(names), name=f"{node.name}_part{j}",
                                output_names=names, domain=node.domain)
            infer_node(piece)
            for po, o in zip(piece.outputs, node.outputs, strict=True):
                po.dtype = WIDE if ax.reduce and self.wide_partials and o.dtype == np.float32 else o.dtype
            if node.meta.get(ACTIVATION_META) and not ax.reduce:
                piece.meta[ACTIVATION_META] = node.meta[ACTIVATION_META]
            pieces.append(piece)
        # move the original outputs onto the joins, so value names and graph outputs stay
        ctrl_preds, ctrl_succs = list(node.control_preds), list(node.control_succs)
        for v in node.inputs:
            if v is not None and v.is_constant:
                self.replaced_constants[v.name] = None
        holds = []
        for o in node.outputs:
            holds.append(Value(f"{o.name}__hold", o.shape, o.dtype))
            g.replace_all_uses(o, holds[-1])
        g.remove_node(node)
        joins = []
        for oi, (o, hold) in enumerate(zip(node.outputs, holds, strict=False)):
            parts = [p.outputs[oi] for p in pieces]
            if ax.output is None:
                join = Node("Sum", parts, [o], name=f"{o.name}_sum")
                if node.meta.get(ACTIVATION_META):  # after the whole reduction, not on partial sums
                    join.meta[ACTIVATION_META] = node.meta[ACTIVATION_META]
            else:
                join = Node("Concat", parts, [o], {"axis": ax.output[0]}, name=f"{o.name}_concat")
                join.meta[JOIN_META] = True
            g.add_node(join)
            g.replace_all_uses(hold, o)
            joins.append(join)
        new = g.newest(len(g) - count + 1)  # the node itself is gone
        for p in ctrl_preds:
            for n in new:
                g.add_control_edge(p, n)
        for sc in ctrl_succs:
            for jn in joins:
                g.add_control_edge(jn, sc)
        return new


def split_graph(graph: Graph, target: Target | None, threshold: int | None = None,
                exact: bool = False) -> SplitResult:
    """Cut every operator of ``graph`` (in place) until each fits ``threshold`` bytes
    (default ``target.core_memory_threshold``; ``target`` may be None when ``threshold``
    is given); new nodes take their original's place in the file order. ``exact``: the
    float32 partial results of a cut over a reduced dimension are float64 (module
    docstring): the backend's tiling of a quantized model asks for it; a graph that is
    exported as ONNX must not (a MatMul of float32 operands has a float32 output there).

    Raises:
        CapacityError: an operator cannot fit at any split (naming it and its bytes).
        ValueError: neither ``target`` nor ``threshold``.
    """
    from corefold.passes.split.rows import bands_to_fit, cut_rows  # rows builds on this module

    if threshold is None and target is None:
        raise ValueError("split_graph needs a target or a threshold")
    limit = target.core_memory_threshold if threshold is None else threshold
    splitter = _Splitter(graph, wide_partials=exact)
    result = SplitResult(graph, False)
    origin: dict[Node, tuple[str, str]] = {}
    pieces: dict[str, int] = {}  # model node -> compute pieces it is in so far
    file_order = graph.topological_order()
    replaced: dict[Node, list[Node]] = {}
    work = list(reversed(file_order))
    while work:
        node = work.pop()
        if not needs_fit(node) or touched_bytes(node) <= limit:
            continue
        root = origin.get(node, (node.name, node.op_type))
        bands = bands_to_fit(node, limit)
        if bands is not None:
            count = len(graph)
            cut_rows(graph, node, bands)
            new = graph.newest(len(graph) - count + 1)
        else:
            ax, k = choose_split(node, limit, root[0])
            new = splitter.split(node, ax, k)
        pieces[root[0]] = pieces.get(root[0], 1) + sum(needs_fit(n) for n in new) - 1
        if pieces[root[0]] > MAX_PIECES:
            raise CapacityError(f"node '{root[0]}' ({root[1]}), piece '{node.name}', touches {touched_bytes(node)} "
                                f"bytes, above the core memory threshold of {limit} bytes, and the node would need "
                                f"more than {MAX_PIECES} pieces")
        for n in new:
            origin[n] = root
        replaced[node] = new
        work.extend(reversed(new))
        result.modified = True
    if not result.modified:
        return result

    def expand(n: Node) -> list[Node]:
        return [m for x in replaced[n] for m in expand(x)] if n in replaced else [n]

    graph.reorder([m for n in file_order for m in expand(n)])
    graph.sort()
    for n in graph.nodes:
        if n in origin and n.op_type == origin[n][1] and not n.meta.get(JOIN_META):
            name = origin[n][0]
            result.splits[name] = result.splits.get(name, 0) + 1
    _drop_replaced_constants(graph, splitter.replaced_constants)
    return result


def holds_quantization(graph: Graph) -> bool:
    """Whether ``graph`` is (part of) a quantized model: it holds a QuantizeLinear or a
    DequantizeLinear. O(V)."""
    return any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in graph.nodes)


def _drop_replaced_constants(graph: Graph, names: dict[str, None]) -> None:
    """Remove the weights that were replaced by their slices (and no other constant)."""
    keep = {v.name for n in graph.nodes for v in n.inputs if v is not None}
    doomed = [k for k in names if k in graph.constants and k not in keep]
    if doomed:
        # NOTE: Graph.remove_unused_constants would also drop constants the user left unused
        for k in doomed:
            graph.remove_constant(k)


@dataclass(frozen=True)
class SplitSettings:
    """Settings of operator splitting; ``--set NAME=VALUE`` reaches every one.

    Splitting has no effort trade-off, so every preset (``fast``, ``default``, ``strong``)
    is the same; the seed's threshold is "the memory size, or the memory size minus a
    buffer" [002 §89], which the target's ``sram_kib`` and ``sram_reserved_kib`` give.

    Attributes:
        threshold: bytes an operator may touch (distinct inputs, weights and outputs);
            None takes the target's core memory threshold (SRAM minus the reserved buffer).
    """

    threshold: int | None = None

    #: Field values that differ from the defaults, per preset (see corefold.settings).
    PRESETS: ClassVar[dict[str, dict]] = {"fast": {}, "strong": {}}

    def checked(self) -> "SplitSettings":
        """Return self after validation.

        Raises:
            SettingsError: a threshold that is not positive.
        """
        if self.threshold is not None and self.threshold <= 0:
            raise SettingsError(f"split setting threshold must be a positive number of bytes, got {self.threshold}")
        return self


class SplitPass:
    """SPEC M3 §7's operator splitting as a pipeline pass (:mod:`corefold.pipeline`).

    Reads ``ctx.target`` (for the default threshold) and its :class:`SplitSettings`;
    splits the graph in place. Batch, output-channel and row-band splits compute the same
    sums (row bands may take other BLAS blockings); input-channel splits add partial sums
    in another order, hence ``close`` (rtol 1e-5).
    The report names the threshold and the pieces per split operator.
    """

    name: ClassVar[str] = "split"
    settings_class: ClassVar[type] = SplitSettings
    equivalence = Equivalence("close", rtol=1e-5)

    def run(self, graph: Graph, ctx: CompileContext) -> PassResult:
        """Split ``graph``.

        Raises:
            CorefoldError: neither a threshold nor a target.
            SettingsError: a threshold that is not positive.
            CapacityError: an operator cannot fit at any split.
        """
        settings = ctx.settings_for(self).checked()
        if settings.threshold is None and ctx.target is None:
            raise CorefoldError("the split pass needs a target or a threshold")
        before = len(graph)
        res = split_graph(graph, ctx.target, settings.threshold)
        limit = ctx.target.core_memory_threshold if settings.threshold is None else settings.threshold
        return PassResult(graph, res.modified, {"threshold": limit, "splits": dict(res.splits),
                                                "nodes_before": before, "nodes_after": len(graph)})
