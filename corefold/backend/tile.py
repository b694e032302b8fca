"""Step 1 of lowering, *Tile*: a private copy of the graph whose every operator fits a core.

1. :func:`copy_graph`: lowering never changes the caller's graph.
   :func:`~corefold.backend.qdq.drop_identities` then removes what computes its input unchanged: a Dropout at
   inference whose mask nobody reads, an Identity, and in a QDQ model a QuantizeLinear of
   a DequantizeLinear with the same scale, zero point and type (ONNX Runtime's
   ``EliminateDropout``, ``EliminateIdentity`` and ``DoubleQDQPairsRemover``). In a float
   model, :func:`~corefold.passes.fold.fold_batchnorm` folds into each convolution the
   BatchNormalization and per-channel Mul, Add, Sub or Div after it (its ``ConvBNFusion``,
   ``ConvMulFusion`` and ``ConvAddFusion``), and into each BatchNormalization the Mul, Add,
   Sub or Div after it, and makes each Sum of two inputs an Add (:func:`~corefold.passes.fold.fold`;
   a QDQ model is folded by the quantizer, before calibrating).
2. :func:`~corefold.backend.qdq.dequantize_after_moves` turns a Concat or Slice of dequantized weights into the
   DequantizeLinear of the moved integer weights; then, in quantized QDQ models only,
   :func:`fuse_integer`: every pattern ``DequantizeLinear ->
   op [-> Relu] -> QuantizeLinear`` that :class:`~corefold.passes.quantize.integer.IntegerRunner`
   computes in integers becomes one node of domain :data:`INTEGER_DOMAIN` on the integer
   tensors, its quantization in ``meta["quant"]`` (a :class:`QuantOp`); the weight
   DequantizeLinear nodes it consumed disappear; a fused Concat whose inputs share its
   output's quantization (corefold's quantizer ties them) is the plain Concat on the
   integers, a view (:func:`moves_integers`). A fused node that does not fit a core is
   cut here, along the split pass's axes (``choose_split``), slicing per-channel scales
   with their weights; a Conv, MatMul or Gemm cut over its reduced dimension becomes int32
   partial accumulators and one fused ``Sum`` that requantizes them (:class:`_Partial`,
   exact); any other pattern that could only be cut over a reduced dimension is left in
   float QDQ form.
   :func:`~corefold.backend.qdq.fold_dequantized_weights` then (in any graph) turns the DequantizeLinear of every
   weight that an operator left in float reads into a float constant.
3. :func:`~corefold.backend.activations.fuse_float_activations`: a float activation (Relu, SiLU, HardSwish, Sigmoid,
   Tanh) that alone reads a Conv, Gemm, MatMul, Add or BatchNormalization becomes part of
   that node (``meta[ACTIVATION_META]``), which the cuts below keep.
4. :func:`corefold.passes.split.split_graph` cuts every other operator (M3 §7).

Complexity: O(V + E) for the copy and the fusion, plus the split pass's O(V * pieces).
"""

from __future__ import annotations

import numpy as np

from corefold.backend.activations import fuse_float_activations
from corefold.backend.executable import QuantOp, QuantTensor
from corefold.backend.parallel import MIN_ROWS
from corefold.backend.qdq import (
    const_of,
    dequantize_after_moves,
    dq_params,
    drop_identities,
    fold_dequantized_weights,
    is_quantized,
    quant_tensor,
    remove_dead,
)
from corefold.errors import CapacityError, CompileError, InternalError
from corefold.ir import Graph, Node, Value
from corefold.passes.fold import fold
from corefold.passes.split import split_graph
from corefold.passes.split.rows import bands_to_fit, cut_rows
from corefold.passes.split.rules import candidate_axes
from corefold.passes.split.split import (
    ACTIVATION_META,
    JOIN_META,
    MAX_PIECES,
    choose_split,
    constant_slice,
    holds_quantization,
    touched_bytes,
)
from corefold.target import Target

#: Domain of the fused integer nodes (never exported: they exist only inside lowering).
INTEGER_DOMAIN = "corefold.int"


def copy_graph(graph: Graph) -> Graph:
    """A structural copy: new values and nodes (names, attrs, meta, control edges kept);
    constant arrays are shared, never written. O(V + E)."""
    g = Graph(graph.name)
    g.opset = graph.opset
    g.metadata = dict(graph.metadata)
    vmap: dict[int, Value] = {}
    for v in graph.inputs:
        vmap[id(v)] = g.add_input(v.name, v.shape, v.dtype)
    for name, v in graph.constants.items():
        c = g.add_constant(name, v.const)
        if c.name != name:
            raise InternalError(f"copy of constant '{name}' was renamed '{c.name}'")
        vmap[id(v)] = c
    nmap: dict[Node, Node] = {}
    for n in graph.nodes:
        outs = [Value(o.name, o.shape, o.dtype) for o in n.outputs]
        m = Node(n.op_type, [vmap[id(v)] if v is not None else None for v in n.inputs], outs, dict(n.attrs),
                 name=n.name, domain=n.domain)
        m.meta = dict(n.meta)
        g.add_node(m)
        for o, c in zip(n.outputs, outs, strict=True):
            vmap[id(o)] = c
        nmap[n] = m
    for n in graph.nodes:
        for p in n.control_preds:
            g.add_control_edge(nmap[p], nmap[n])
    g.outputs = [vmap[id(v)] for v in graph.outputs]
    return g


def fuse_integer(graph: Graph, threshold: int) -> int:
    """Fuse the integer patterns of a QDQ graph in place (module docstring); return how many.

    Raises:
        UnsupportedOpError: never for a pattern; patterns that cannot be fused stay float.
    """
    from corefold.passes.quantize.integer import IntegerRunner

    runner = IntegerRunner(graph)
    fused = 0
    outputs = set(map(id, graph.outputs))
    for q, (src, act) in list(runner.plan.items()):
        ins: list[Value | None] = []
        qins: list[QuantTensor | None] = []
        ok = True
        for v in src.inputs:
            if v is None:
                ins.append(None)
                qins.append(None)
            elif np.issubdtype(v.dtype, np.floating):
                qt = dq_params(v.producer)
                if qt is None:
                    ok = False
                    break
                ins.append(v.producer.inputs[0])
                qins.append(qt)
            else:
                ins.append(v)
                qins.append(None)
        out_scale = const_of(q.inputs[1])
        zp_v = q.inputs[2] if len(q.inputs) > 2 else None
        if not ok or out_scale is None or np.asarray(out_scale).ndim or (zp_v is not None and const_of(zp_v) is None):
            continue
        out_dtype = q.outputs[0].dtype
        quant = QuantOp(tuple(qins), quant_tensor(out_scale, const_of(zp_v), None, out_dtype),
                        act.kind if act is not None else None)
        y = q.outputs[0]
        probe = Node(src.op_type, ins, [Value("probe", y.shape, y.dtype)], dict(src.attrs))
        fits = touched_bytes(probe) <= threshold
        if not fits:
            try:
                fits = not choose_split(probe, threshold)[0].reduce or reducible(src.op_type, src.attrs, quant)
            except CapacityError:
                fits = False
            fits = fits or bands_to_fit(probe, threshold) is not None
        probe.detach_inputs()
        if not fits:
            continue  # NOTE: only a cut over a reduced dimension, which it has no exact form of, would fit
        tmp = Value("__fused", y.shape, y.dtype)
        graph.replace_all_uses(y, tmp)
        outputs = set(map(id, graph.outputs))  # y, if it was one, is now tmp
        for n in [q, *(reversed(act.nodes) if act is not None else ()), src]:
            if n.graph is graph and all(not o.uses() and id(o) not in outputs for o in n.outputs):
                graph.remove_node(n)
        if moves_integers(src.op_type, quant, (ins[0].shape, y.shape) if ins and ins[0] is not None else None):
            # NOTE: its requantization is the identity: the plain operator on the integers,
            # which build() makes a view (the copies become the transfers to its readers)
            node = Node(src.op_type, ins, [y], dict(src.attrs), name=src.name + "_int")
        else:
            node = Node(src.op_type, ins, [y], dict(src.attrs), name=src.name + "_int", domain=INTEGER_DOMAIN)
            node.meta["quant"] = quant
        graph.add_node(node)
        graph.replace_all_uses(tmp, y)
        outputs = set(map(id, graph.outputs))
        fused += 1
    remove_dead(graph)
    order = graph.topological_order()
    graph.reorder(order)
    fused_nodes = [n for n in graph.nodes if n.domain == INTEGER_DOMAIN]
    for n in fused_nodes:
        _cut_fused(graph, n, threshold)
    graph.sort()
    return fused


#: Operators that only move elements and whose fused integer form becomes the plain
#: operator (a view: :mod:`corefold.backend.lgraph`) when its requantization is the identity.
#: Reshape and Flatten stay fused tasks: the int8 ResNet-18's Flatten, one task on one core,
#: gathers the pooled pieces for the classifier's pieces, which as a view each read every
#: pooled piece and bind the clustering's NoC-buffer rule (108.4 -> 112.1 us as a view; the
#: int8 MobileNetV3 34.8 -> 35.6).
MOVE_OPS = frozenset({"Concat"})


def moves_integers(op_type: str, quant: QuantOp, shapes: tuple | None = None) -> bool:
    """Whether the fused integer ``op_type`` with ``quant`` computes exactly the plain
    operator on its integer inputs: it only moves elements (:data:`MOVE_OPS`, or a Reshape
    from ``shapes[0]`` to ``shapes[1]`` that regroups only leading axes,
    :func:`~corefold.backend.boxes.kept_suffix`), no activation follows, and every
    quantized input has the output's scale, zero point and type (corefold's quantizer ties
    a Concat's inputs to its output: :mod:`corefold.passes.quantize.select`), so that
    ``rint((q - z) * s / s) + z == q``. The int8 SqueezeNet's fire modules then concatenate
    by sending each expand convolution's output band straight to the next squeeze's cores,
    with no vector pass and no extra hop: 40.6 -> 36.4 us. A channel shuffle's reshapes
    (``(1, C, H, W) -> (1, g, C / g, H, W)`` and back) become views, so that its row bands
    stay boxes and each is shuffled where it was computed (the onnx package's ShuffleNet in
    int8: see docs/backend.md). O(inputs + rank)."""
    from corefold.backend.boxes import kept_suffix

    qs = [q for q in quant.inputs if q is not None]
    moves = op_type in MOVE_OPS
    if op_type == "Reshape" and shapes is not None and None not in shapes:
        kept = kept_suffix(tuple(shapes[0]), tuple(shapes[1]))
        moves = kept is not None and kept[0] >= 1  # some leading axes regrouped, the rest kept
    return moves and quant.activation is None and bool(qs) and all(q == quant.output for q in qs)


def _slice_quant(qt: QuantTensor | None, rank: int, axis: int, s: int, e: int) -> QuantTensor | None:
    """A per-axis quantization cut with its tensor on ``axis`` (unchanged otherwise)."""
    if qt is None or qt.axis is None or qt.scale.ndim == 0 or qt.axis % rank != axis:
        return qt
    return QuantTensor(qt.scale[s:e], qt.zero_point[s:e], qt.axis, qt.dtype)


def _weight_bytes(node: Node) -> int:
    return sum(v.nbytes for v in dict.fromkeys(v for v in node.inputs if v is not None and v.is_constant))


def _weight_axis(node: Node):
    """The first split axis (preference order, never a reduced dimension) that cuts the
    node's weights, or None."""
    axes, _ = candidate_axes(node)
    for ax in axes:
        if not ax.reduce and any(m is not None and v is not None and v.is_constant
                                 for v, m in zip(node.inputs, ax.inputs, strict=False)):
            return ax
    return None


def cut_weights(graph: Graph, max_weight: int) -> int:
    """Cut every operator whose weights exceed ``max_weight`` bytes along its weights'
    output axis into pieces of at most that much weight (resident weights then pack
    into the cores' SRAM around the activations); return how many were cut. O(pieces)."""
    cut = 0
    for node in list(graph.nodes):
        w = _weight_bytes(node)
        if w <= max_weight:
            continue
        ax = _weight_axis(node)
        if ax is None:
            continue
        k = min(ax.extent, -(-w // max_weight))
        if k >= 2:
            _cut(graph, node, threshold=None, forced=(ax, k))
            cut += 1
    return cut


def _cut_fused(graph: Graph, node: Node, threshold: int) -> None:
    """Cut a fused integer node to ``threshold`` bytes; at most :data:`MAX_PIECES` nodes
    (pieces, slices, sums) come of it.

    Raises:
        CompileError: SRAM, when the pieces would be more: a reduction cut whose int32
            partials do not fit either is cut again and again (a 96-channel 8 x 8 int8
            convolution at 3.5 KiB, a threshold ``lower`` retries with, made 250,000 nodes
            in 4 s), and such a threshold is too small for the operator anyway.
    """
    _cut(graph, node, threshold, limit=len(graph) + MAX_PIECES, origin=node.name)


def _cut(graph: Graph, node: Node, threshold: int | None, forced=None, limit: int | None = None,
         origin: str | None = None) -> None:
    """Cut a node (a fused integer node keeps its quantization, sliced with its tensors)
    until every piece fits ``threshold`` bytes (split rules of
    :mod:`corefold.passes.split.rules`), over a reduced dimension only when
    :func:`reducible` (:class:`_Partial`); ``forced`` gives the axis and piece count of the
    first cut instead; past ``limit`` nodes in the graph, an SRAM CompileError (see
    :func:`_cut_fused`; ``origin`` names the node cut). O(pieces)."""
    if forced is not None:
        ax, k = forced
    else:
        if touched_bytes(node) <= threshold:
            return
        if limit is not None and len(graph) > limit:
            raise CompileError("SRAM", "every core", touched_bytes(node), threshold,
                               f"integer node '{origin or node.name}' would need more than {MAX_PIECES} "
                               f"pieces to fit")
        bands = bands_to_fit(node, threshold)
        if bands is not None:
            join = cut_rows(graph, node, bands)
            for piece in [v.producer for v in join.inputs]:
                _cut(graph, piece, threshold, limit=limit, origin=origin)
            return
        try:
            ax, k = choose_split(node, threshold)
        except CapacityError as exc:
            raise CompileError("SRAM", "every core", touched_bytes(node), threshold, str(exc)) from None
        if ax.reduce and not reducible(node.op_type, node.attrs, node.meta.get("quant")):
            # NOTE: out of SRAM, not an unsupported operator: a smaller subgraph or a bigger
            # core may hold it (M1 splits on a CompileError; an UnsupportedOpError ended the compile)
            raise CompileError("SRAM", "every core", touched_bytes(node), threshold,
                               f"integer node '{node.name}' fits a core only cut over a reduced dimension, "
                               f"which its integers cannot be")
    quant: QuantOp | None = node.meta.get("quant")
    partial = _Partial(graph, node, quant) if ax.reduce and quant is not None else None
    pieces: list[Node] = []
    slices: dict[tuple[int, int, int, int], Value] = {}
    for j in range(k):
        s, e = j * ax.extent // k, (j + 1) * ax.extent // k
        ins: list[Value | None] = []
        qins: list[QuantTensor | None] = []
        qts = quant.inputs if quant is not None else (None,) * len(node.inputs)
        for i, (v, m, qt) in enumerate(zip(node.inputs, list(ax.inputs) + [None] * len(node.inputs), qts,
                                           strict=False)):
            if partial is not None and i >= 2:
                ins.append(partial.bias if j == 0 else None)  # the bias once, in the first piece
                qins.append(partial.bias_quant if j == 0 else None)
                continue
            if partial is not None:
                qt = partial.unit(qt)
            if v is None or m is None:
                ins.append(v)
                qins.append(qt)
                continue
            a, sc = m
            lo, hi = s * sc, e * sc
            qins.append(_slice_quant(qt, len(v.shape), a, lo, hi))
            if lo == 0 and hi == v.shape[a]:
                ins.append(v)
            elif v.is_constant:
                ins.append(constant_slice(graph, v, a, lo, hi))
            else:
                key = (id(v), a, lo, hi)
                if key not in slices:
                    consts = [graph.add_constant(f"{v.name}_slice_{w}", np.array([x], np.int64))
                              for w, x in (("starts", lo), ("ends", hi), ("axes", a))]
                    sl = graph.make_node("Slice", [v] + consts, name=f"{v.name}_slice")
                    sl.meta[JOIN_META] = True
                    out = sl.outputs[0]
                    out.shape = tuple(hi - lo if d == a else x for d, x in enumerate(v.shape))
                    out.dtype = v.dtype
                    slices[key] = out
                ins.append(slices[key])
        while partial is not None and ins[-1] is None:
            ins.pop()
            qins.pop()
        attrs = dict(node.attrs)
        if ax.scales_group:
            attrs["group"] = e - s
        o = node.outputs[0]
        piece = graph.make_node(node.op_type, ins, attrs, name=f"{node.name}_part{j}",
                                output_names=[f"{o.name}_part{j}"], domain=node.domain)
        if partial is not None:
            piece.outputs[0].dtype, piece.outputs[0].shape = np.dtype(np.int32), o.shape
            piece.meta["quant"] = QuantOp(tuple(qins), partial.accumulator_unit, None)
        else:
            oa, osc = ax.output
            piece.outputs[0].dtype = o.dtype
            piece.outputs[0].shape = tuple((e - s) * osc if d == oa else x for d, x in enumerate(o.shape))
            if quant is not None:
                piece.meta["quant"] = QuantOp(tuple(qins), quant.output, quant.activation)
            if node.meta.get(ACTIVATION_META):
                piece.meta[ACTIVATION_META] = node.meta[ACTIVATION_META]
        pieces.append(piece)
    o = node.outputs[0]
    hold = Value("__hold", o.shape, o.dtype)
    graph.replace_all_uses(o, hold)
    graph.remove_node(node)
    if partial is not None:
        join = Node("Sum", [p.outputs[0] for p in pieces], [o], name=f"{o.name}_sum", domain=INTEGER_DOMAIN)
        join.meta["quant"] = QuantOp((partial.accumulator,) * k, quant.output, quant.activation)
    else:
        join = Node("Concat", [p.outputs[0] for p in pieces], [o], {"axis": ax.output[0]},
                    name=f"{o.name}_concat")
        join.meta[JOIN_META] = True
    graph.add_node(join)
    graph.replace_all_uses(hold, o)
    if threshold is not None:
        for p in [*pieces, join] if partial is not None else pieces:
            _cut(graph, p, threshold, limit=limit, origin=origin)


#: Integer operators that can be cut over their reduced dimension (:class:`_Partial`).
REDUCIBLE = frozenset({"Conv", "MatMul", "Gemm"})


def reducible(op_type: str, attrs: dict, quant: QuantOp | None) -> bool:
    """Whether an integer operator can be cut over its reduced dimension exactly
    (:class:`_Partial`): a Conv of one group, a MatMul, or a Gemm with ``alpha`` = ``beta``
    = 1, both data inputs quantized. O(1)."""
    if quant is None or op_type not in REDUCIBLE or len(quant.inputs) < 2 or None in quant.inputs[:2]:
        return False
    if op_type == "Conv":
        return int(attrs.get("group", 1)) == 1
    if op_type == "Gemm":
        return float(attrs.get("alpha", 1.0)) == 1.0 and float(attrs.get("beta", 1.0)) == 1.0
    return True


class _Partial:
    """An integer linear operator cut over its reduced dimension (input channels, the
    inner dimension of a product), exactly as the integer runner computes it whole.

    Each piece computes its int32 partial accumulator ``sum (x - zx)(w - zw)`` over its
    slice: the same fused operator with unit scales (``M = 1 * 1 / 1``, so its rounding
    returns the integers unchanged), the first piece adding the bias as integers at the
    accumulator's scale (:func:`~corefold.passes.quantize.integer.bias_integers`). A fused
    ``Sum`` of the partials at that scale ``sx * sw`` (float64, per output channel, computed
    as the runner computes it) requantizes once with ``sx * sw / sy`` and the activation: the
    integers of the uncut operator, bit for bit (integer addition is associative). O(1) per
    piece, plus O(channels) for the bias.
    """

    def __init__(self, graph: Graph, node: Node, quant: QuantOp):
        from corefold.passes.quantize.integer import bias_integers

        qx, qw = quant.inputs[0], quant.inputs[1]
        sw = qw.scale.reshape(-1) if qw.axis is not None else qw.scale
        alpha = float(node.attrs.get("alpha", 1.0)) if node.op_type == "Gemm" else None
        mult = np.asarray(alpha * qx.scale * sw if alpha is not None else qx.scale * sw, np.float64)
        rank = len(node.outputs[0].shape)
        axis = 1 if node.op_type == "Conv" else rank - 1
        if mult.ndim:
            self.accumulator = QuantTensor(mult, np.zeros(mult.shape, np.int32), axis, "int32")
        else:
            self.accumulator = QuantTensor(mult, np.zeros((), np.int32), None, "int32")
        self.accumulator_unit = QuantTensor(np.ones((), np.float64), np.zeros((), np.int32), None, "int32")
        self.bias, self.bias_quant = None, None
        b = node.inputs[2] if len(node.inputs) > 2 else None
        if b is not None:
            qb = quant.inputs[2]
            if b.const is None:
                raise InternalError(f"integer node '{node.name}': its bias is not a constant")
            if qb is None:
                bi = bias_integers(np.asarray(b.const), mult)
            else:
                values = np.asarray(b.const).astype(np.int64) - qb.zero_point.astype(np.int64)
                bi = bias_integers(values, mult, qb.scale, qb.axis is not None)
            bi = np.broadcast_to(bi, mult.shape if mult.ndim else np.shape(bi)).reshape(-1)
            self.bias = graph.add_constant(f"{b.name}_acc", bi.astype(np.int32))
            self.bias_quant = QuantTensor(np.ones(bi.shape, np.float64), np.zeros(bi.shape, np.int32), 0, "int32")

    @staticmethod
    def unit(qt: QuantTensor | None) -> QuantTensor | None:
        """``qt`` with its scale 1 (same zero points and axis): a piece computes integers."""
        if qt is None:
            return None
        return QuantTensor(np.ones_like(qt.scale, dtype=np.float64), qt.zero_point, qt.axis, qt.dtype)


#: Weights of one operator piece, as a fraction of a core's SRAM (see :func:`tile`).
WEIGHT_PIECE = 0.25


def tile(graph: Graph, target: Target, threshold: int | None = None, pieces_per_core: float = 0.0,
         min_rows: int = MIN_ROWS, bands: bool = False, input_pieces: int = 0, slices: int = 0,
         floor_pieces: int | None = None, heavy_channels: bool = False) -> Graph:
    """Step 1: a copy of ``graph`` with integer patterns fused (QDQ models), every operator
    whose weights exceed ``WEIGHT_PIECE`` of a core's SRAM cut along its output channels
    (so that resident weights pack into the cores around the activations), with
    ``pieces_per_core`` > 0 every long operator cut so that the mesh has work
    (:mod:`corefold.backend.parallel`, row bands of at least ``min_rows`` rows; ``bands``: its
    banded pointwise tiling; ``input_pieces``: the fewest pieces of a graph input's reader;
    ``slices``: the weight slices of a band for cores packed by SRAM; ``floor_pieces``: the
    fewest pieces of a long operator with SRAM to spare, None for the module's default),
    then every
    operator cut until it touches at most
    ``threshold`` bytes (default ``target.core_memory_threshold``; the split pass).

    Raises:
        CompileError: an operator does not fit a core at any split (resource SRAM).
    """
    g = copy_graph(graph)
    if threshold is None:
        threshold = target.core_memory_threshold
    drop_identities(g)
    if not is_quantized(g):
        # NOTE: a float model only: in a QDQ model the fold would move the float values a
        # QuantizeLinear rounds, and the executable must match the integer runner exactly
        fold(g)
    dequantize_after_moves(g)
    exact = holds_quantization(g)  # before the fusion takes the QuantizeLinear nodes
    if is_quantized(g):
        fuse_integer(g, threshold)
    # NOTE: also without a QuantizeLinear: a range holding a float operator of a QDQ model
    # alone (the int8 BERT's intermediate MatMul, 1 MiB of dequantized weight) did not
    # compile on its own, since its weight was no constant the split pass could cut, while
    # a longer range did
    fold_dequantized_weights(g)
    fuse_float_activations(g)
    cut_weights(g, int(WEIGHT_PIECE * target.sram_bytes))
    g.sort()
    if pieces_per_core > 0:
        from corefold.backend.parallel import FLOOR_PIECES, cut_for_parallelism

        cut_for_parallelism(g, target, pieces_per_core, min_rows, bands, input_pieces, slices,
                            FLOOR_PIECES if floor_pieces is None else floor_pieces, heavy_channels)
    try:
        split_graph(g, target, threshold, exact=exact)
    except CapacityError as exc:
        raise CompileError("SRAM", "every core", _needed(exc), threshold, _culprit(exc)) from None
    return g


def _needed(exc: CapacityError) -> float:
    words = str(exc).split()
    for a, b in zip(words, words[1:], strict=False):
        if b == "bytes," and a.isdigit():
            return float(a)
    return float("nan")


def _culprit(exc: CapacityError) -> str:
    text = str(exc)
    return text.split(" touches ")[0] if " touches " in text else text


def cut_along(graph: Graph, node: Node, ax, k: int) -> Node:
    """Cut ``node`` into ``k`` pieces along split axis ``ax`` (never a reduced one), a
    fused integer node's quantization sliced with its tensors; return the Concat that
    takes over its output. O(k)."""
    out = node.outputs[0]
    _cut(graph, node, threshold=None, forced=(ax, k))
    return out.producer
