"""Split rules: along which dimensions an operator may be cut into same-type pieces.

A rule turns a node into candidate :class:`SplitAxis` es, in the seed's order of preference
(SPEC M3 §7): conv, fully connected and depthwise conv split the batch first, then output
channels (weights split on their output channels), then input channels with the partial
results added by ``Sum``; pooling and resize split batch or channel, never the height and
width they reduce over; transpose splits batch then height (any axis is valid); every
other operator splits any dimension it does not reduce over, the cheapest first.

A split axis counts ``extent`` *units*; a piece covering units ``[s, e)`` reads
``[s * scale, e * scale)`` on input ``i``'s axis ``inputs[i] = (axis, scale)`` (``None``:
the whole input) and writes the same range of its output axis. With ``reduce``, every
piece writes a full-size partial output and the pieces are added.
"""

from __future__ import annotations

from dataclasses import dataclass

from corefold.ir import Node

#: Operators that only reinterpret a shape: they move no data, so they always fit.
VIEW_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout", "Shape", "Constant"})

UNARY_OPS = frozenset({
    "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Exp", "Log", "Neg", "Abs", "Sqrt", "Clip", "Erf", "HardSigmoid",
    "HardSwish", "Reciprocal", "Not", "Cast", "Elu", "Selu", "Softplus", "Softsign", "Floor", "Ceil", "Round",
    "Sign", "Sin", "Cos", "QuantizeLinear", "DequantizeLinear", "PRelu", "Mish", "Gelu",
})
BROADCAST_OPS = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Where", "Equal",
                           "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Mod"})
POOL_OPS = frozenset({"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool", "GlobalLpPool"})


#: Operators with a split rule (besides UNARY_OPS and BROADCAST_OPS).
RULE_OPS = frozenset({"Conv", "Gemm", "MatMul", "Resize", "Transpose", "Softmax", "LogSoftmax", "Hardmax",
                      "Concat", "LRN", "BatchNormalization", "InstanceNormalization", "LayerNormalization"}
                     | POOL_OPS | UNARY_OPS | BROADCAST_OPS)


@dataclass(frozen=True)
class SplitAxis:
    """One way to cut a node: see the module docstring."""

    name: str
    extent: int
    inputs: tuple[tuple[int, int] | None, ...]
    output: tuple[int, int] | None
    reduce: bool = False
    scales_group: bool = False  # grouped conv: the piece's ``group`` is its unit count


def _same_axis(node: Node, axis: int, name: str) -> SplitAxis | None:
    """Every input whose dimension (right-aligned, NumPy broadcasting) matches the output's
    on ``axis`` is cut there; broadcast inputs are read whole."""
    out = node.outputs[0].shape
    rank = len(out)
    if out[axis] < 2:
        return None
    ins: list[tuple[int, int] | None] = []
    for v in node.inputs:
        if v is None or v.shape is None:
            ins.append(None)
            continue
        a = axis - (rank - len(v.shape))
        ins.append((a, 1) if a >= 0 and v.shape[a] == out[axis] else None)
    return SplitAxis(name, out[axis], tuple(ins), (axis, 1))


def _dim_name(axis: int, rank: int) -> str:
    if rank == 4:
        return ("batch", "channel", "height", "width")[axis]
    return "batch" if axis == 0 else f"axis{axis}"


def candidate_axes(node: Node) -> tuple[list[SplitAxis], bool]:
    """The split axes of ``node`` in preference order, and whether preference (True) or
    the fewest pieces (False, "cheapest") picks among those that fit. An empty list means
    no rule applies to the operator."""
    op = node.op_type
    if not node.outputs or node.outputs[0].shape is None:
        return [], True
    rank = len(node.outputs[0].shape)
    if op == "Conv":
        return _conv_axes(node), True
    if op == "Gemm":
        return _gemm_axes(node), True
    if op == "MatMul":
        return _matmul_axes(node), True
    if op in POOL_OPS or op == "Resize":
        axes = [_same_axis(node, a, _dim_name(a, rank)) for a in (0, 1) if a < rank]
        if op == "Resize":
            # roi / scales / sizes are 1-D per-axis tables, never cut
            axes = [SplitAxis(s.name, s.extent, (s.inputs[0],) + (None,) * (len(s.inputs) - 1), s.output)
                    for s in axes if s is not None]
        return [a for a in axes if a is not None], True
    if op == "Transpose":
        perm = list(node.attrs.get("perm", range(rank)[::-1]))
        x = node.inputs[0].shape
        out = []
        for a in [0, 2] + [a for a in range(rank) if a not in (0, 2)]:
            if a < rank and x[a] >= 2:
                out.append(SplitAxis(f"input {_dim_name(a, rank)}", x[a], ((a, 1),), (perm.index(a), 1)))
        return out, True
    reduced: set[int] = set()
    if op in ("Softmax", "LogSoftmax", "Hardmax"):
        reduced = {int(node.attrs.get("axis", -1)) % rank}
    elif op == "Concat":
        reduced = {int(node.attrs["axis"]) % rank}
    elif op == "LRN":
        reduced = {1}
    elif op in ("BatchNormalization", "InstanceNormalization"):
        reduced = {a for a in range(rank) if a >= 2} if op == "InstanceNormalization" else set()
    elif op in ("LayerNormalization",):
        first = int(node.attrs.get("axis", -1)) % rank
        reduced = set(range(first, rank))
    elif op not in UNARY_OPS and op not in BROADCAST_OPS:
        return [], False
    axes = []
    for a in range(rank):
        if a in reduced:
            continue
        ax = _same_axis(node, a, _dim_name(a, rank))
        if ax is not None:
            axes.append(ax)
    if op == "BatchNormalization":  # per-channel tables are cut with the channel, else read whole
        axes = [SplitAxis(s.name, s.extent, (s.inputs[0],) + tuple((0, 1) if s.output == (1, 1) else None
                                                                   for _ in s.inputs[1:]), s.output)
                for s in axes]
    return axes, False


def _conv_axes(node: Node) -> list[SplitAxis]:
    x, w = node.inputs[0], node.inputs[1]
    has_bias = len(node.inputs) > 2 and node.inputs[2] is not None
    n, c = x.shape[0], x.shape[1]
    m = w.shape[0]
    group = int(node.attrs.get("group", 1))
    extra = (None,) if has_bias else ()
    axes = []
    if n >= 2:
        axes.append(SplitAxis("batch", n, ((0, 1), None) + extra, (0, 1)))
    if group == 1:
        if m >= 2:
            axes.append(SplitAxis("out_channels", m, (None, (0, 1)) + ((0, 1),) * has_bias, (1, 1)))
        if c >= 2:
            axes.append(SplitAxis("in_channels", c, ((1, 1), (1, 1)) + extra, None, reduce=True))
    elif group >= 2:
        cg, mg = c // group, m // group
        axes.append(SplitAxis("groups", group, ((1, cg), (0, mg)) + ((0, mg),) * has_bias, (1, mg),
                              scales_group=True))
    return axes


def _gemm_axes(node: Node) -> list[SplitAxis]:
    a, b = node.inputs[0], node.inputs[1]
    c = node.inputs[2] if len(node.inputs) > 2 else None
    ta, tb = int(node.attrs.get("transA", 0)), int(node.attrs.get("transB", 0))
    m, k = (a.shape[1], a.shape[0]) if ta else (a.shape[0], a.shape[1])
    nn = b.shape[0] if tb else b.shape[1]

    def c_axis(out_axis: int, extent: int):
        if c is None:
            return ()
        cs = c.shape
        ca = out_axis - (2 - len(cs))
        return ((ca, 1),) if ca >= 0 and cs[ca] == extent else (None,)

    axes = []
    if m >= 2:
        axes.append(SplitAxis("batch", m, ((1 if ta else 0, 1), None) + c_axis(0, m), (0, 1)))
    if nn >= 2:
        axes.append(SplitAxis("out_channels", nn, (None, (0 if tb else 1, 1)) + c_axis(1, nn), (1, 1)))
    if k >= 2:
        axes.append(SplitAxis("in_channels", k, ((0 if ta else 1, 1), (1 if tb else 0, 1))
                              + ((None,) if c is not None else ()), None, reduce=True))
    return axes


def _matmul_axes(node: Node) -> list[SplitAxis]:
    a, b = node.inputs[0], node.inputs[1]
    out = node.outputs[0].shape
    if len(b.shape) != 2 or len(a.shape) < 2:
        return []
    r = len(out)
    axes = []
    for ax in range(r - 1):  # batch dimensions and rows of A
        if out[ax] >= 2:
            axes.append(SplitAxis("batch" if ax == 0 else f"axis{ax}", out[ax], ((ax, 1), None), (ax, 1)))
    if out[-1] >= 2:
        axes.append(SplitAxis("out_channels", out[-1], (None, (1, 1)), (r - 1, 1)))
    if a.shape[-1] >= 2:
        axes.append(SplitAxis("in_channels", a.shape[-1], ((len(a.shape) - 1, 1), (0, 1)), None, reduce=True))
    return axes
