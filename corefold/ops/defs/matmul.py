"""Gemm and MatMul on NumPy's BLAS-backed matmul. O(M * N * K) multiply-adds.

Each has a ``wide_kernel`` (:func:`widened`): float32 operands multiplied and summed in
float64 and rounded to float32 once, so that a product cut into row or column pieces
equals the whole bit for bit, whatever blocking BLAS picks for each shape on this CPU;
the chip simulator and the integer runner use it (about 2x the time of the float32 BLAS
call, so the float executor does not).

An operand that is one value broadcast (the importer's single-value constants) makes every
output row (or column) the same: that product is computed as a row sum times the value,
O((M + N) * K), instead of packing a dense copy of the fill for BLAS (see
``_conv_fill`` in conv.py for why identical rows matter).
"""

from __future__ import annotations

import numpy as np

from corefold.errors import UnsupportedOpError
from corefold.ops.arrays import widen_float32
from corefold.ops.facets import matrix, prod
from corefold.ops.registry import define, op
from corefold.ops.schema import AS_IS, COMPUTE, Kernel, OpDef, Quant, SplitAxis
from corefold.ops.spatial import is_fill, packed


# -- facets ------------------------------------------------------------------------------------------
def _gemm_infer(attrs, ins, consts):
    (a, dt), (b, _) = ins[0], ins[1]
    if len(a) != 2 or len(b) != 2:
        raise ValueError(f"Gemm needs 2-D inputs, got {list(a)} and {list(b)}")
    m, k = (a[1], a[0]) if attrs.get("transA", 0) else a
    k2, n = (b[1], b[0]) if attrs.get("transB", 0) else b
    if k != k2:
        raise ValueError(f"inner dimensions differ: {k} and {k2}")
    return [((m, n), dt)]


def matmul_infer(attrs, ins, consts):
    """MatMul's output shape (NumPy matmul rules) and dtype (input 0's)."""
    (a, dt), (b, _) = ins[0], ins[1]
    a2 = (1,) + tuple(a) if len(a) == 1 else tuple(a)
    b2 = tuple(b) + (1,) if len(b) == 1 else tuple(b)
    if a2[-1] != b2[-2]:
        raise ValueError(f"inner dimensions differ: {list(a)} @ {list(b)}")
    batch = tuple(np.broadcast_shapes(a2[:-2], b2[:-2]))
    out = batch + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return [(out, dt)]


def _gemm_macs(attrs, ins, outs):
    a = ins[0][0]
    return prod(outs[0][0]) * int(a[0] if attrs.get("transA", 0) else a[-1])


def _matmul_macs(attrs, ins, outs):
    return prod(outs[0][0]) * int(ins[0][0][-1])


def _gemm_split(attrs, ins, outs, consts):
    """Rows (batch), then output columns, then the inner dimension with partial sums."""
    a, b = ins[0][0], ins[1][0]
    c = ins[2][0] if len(ins) > 2 and ins[2] is not None else None
    ta, tb = int(attrs.get("transA", 0)), int(attrs.get("transB", 0))
    m, k = (a[1], a[0]) if ta else (a[0], a[1])
    nn = b[0] if tb else b[1]

    def c_axis(out_axis: int, extent: int):
        if c is None:
            return ()
        ca = out_axis - (2 - len(c))
        return ((ca, 1),) if ca >= 0 and c[ca] == extent else (None,)

    axes = []
    if m >= 2:
        axes.append(SplitAxis("batch", m, ((1 if ta else 0, 1), None) + c_axis(0, m), (0, 1)))
    if nn >= 2:
        axes.append(SplitAxis("out_channels", nn, (None, (0 if tb else 1, 1)) + c_axis(1, nn), (1, 1)))
    if k >= 2:
        axes.append(SplitAxis("in_channels", k, ((0 if ta else 1, 1), (1 if tb else 0, 1))
                              + ((None,) if c is not None else ()), None, reduce=True))
    return axes, True


def matmul_split(attrs, ins, outs, consts):
    """Batch dimensions (an attention's batch and heads), rows of A, then output columns,
    then the inner dimension with partial sums. A batch axis cuts each operand that has
    it at full size and reads whole an operand that broadcasts over it (size 1 or absent,
    as a 2-D weight B). O(rank). No axes for a 1-D operand."""
    a, b = ins[0][0], ins[1][0]
    out = outs[0][0]
    if len(a) < 2 or len(b) < 2:
        return [], True
    r = len(out)

    def batch_map(shape, ax):
        i = ax - (r - len(shape))
        return (i, 1) if i >= 0 and shape[i] == out[ax] else None

    axes = []
    for ax in range(r - 2):
        if out[ax] >= 2:
            axes.append(SplitAxis("batch" if ax == 0 else f"axis{ax}", out[ax], (batch_map(a, ax), batch_map(b, ax)),
                                  (ax, 1)))
    if out[-2] >= 2:
        axes.append(SplitAxis("batch" if r == 2 else f"axis{r - 2}", out[-2], ((len(a) - 2, 1), None), (r - 2, 1)))
    if out[-1] >= 2:
        axes.append(SplitAxis("out_channels", out[-1], (None, (len(b) - 1, 1)), (r - 1, 1)))
    if a[-1] >= 2:
        axes.append(SplitAxis("in_channels", a[-1], ((len(a) - 1, 1), (len(b) - 2, 1)), None, reduce=True))
    return axes, True


def _gemm_normalise(imp, n) -> None:
    """Opset < 7's ``broadcast`` attribute: C already broadcasts in NumPy's sense."""
    n.attrs.pop("broadcast", None)
    imp.emit(n.op, n.inputs, n.attrs, n.outputs, n.name)


GEMM = dict(normalise=_gemm_normalise, infer=_gemm_infer, cost=matrix(_gemm_macs), split=_gemm_split,
            quant=Quant(COMPUTE, integer="linear", weights={1: lambda attrs, shape: 0 if attrs.get("transB", 0) else 1},
                        bias=2, fuses_activation=True),
            param_inputs=())
MATMUL = dict(normalise=AS_IS, infer=matmul_infer, cost=matrix(_matmul_macs), split=matmul_split,
              quant=Quant(COMPUTE, integer="linear", weights={1: lambda attrs, shape: len(shape) - 1},
                          fuses_activation=True),
              param_inputs=())


def _product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` for operands of rank >= 2, with the single-value shortcut."""
    if is_fill(b) and not is_fill(a):
        rows = a.sum(axis=-1, keepdims=True, dtype=a.dtype) * b.flat[0]
        shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
        return np.ascontiguousarray(np.broadcast_to(rows, shape))
    if is_fill(a) and not is_fill(b):
        cols = b.sum(axis=-2, keepdims=True, dtype=b.dtype) * a.flat[0]
        shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
        return np.ascontiguousarray(np.broadcast_to(cols, shape))
    if b.ndim == 2 and a.ndim > 2 and a.size:
        # one (rows x K) @ (K x N) product: NumPy runs a batched operand as one BLAS call per
        # matrix, re-reading b each time ([197, 1, 768] @ [768, 2304] in ViT's attention: 197
        # matrix-vector products, 10x slower)
        y = np.matmul(packed(a).reshape(-1, a.shape[-1]), packed(b))
        return y.reshape(a.shape[:-1] + (b.shape[-1],))
    return np.matmul(packed(a), packed(b))


def widened(kernel: Kernel) -> Kernel:
    """``kernel`` on float32 operands promoted to float64, its float64 outputs rounded to
    float32 once. A product of two float32 values is exact in float64, and summing K of
    them in any order differs by about K * 2**-53 relative, so the float32 result does not
    depend on the blocking (but in the rare tie within that distance of a rounding
    boundary). O(kernel + operand sizes) extra."""

    def wide(attrs, inputs):
        if not any(x is not None and x.dtype == np.float32 for x in inputs):
            return kernel(attrs, inputs)
        return [y.astype(np.float32) if y.dtype == np.float64 else y for y in kernel(attrs, widen_float32(inputs))]

    wide.__name__ = wide.__qualname__ = f"{kernel.__name__}_wide"
    return wide


def gemm(attrs, inputs):
    """``alpha * A' @ B' + beta * C`` with ``A'``/``B'`` optionally transposed, C broadcast."""
    a, b = inputs[0], inputs[1]
    c = inputs[2] if len(inputs) > 2 else None
    if a.ndim != 2 or b.ndim != 2:
        raise UnsupportedOpError(f"Gemm: inputs must be 2-D, got {list(a.shape)} and {list(b.shape)}")
    if attrs.get("transA", 0):
        a = a.T
    if attrs.get("transB", 0):
        b = b.T
    alpha = attrs.get("alpha", 1.0)
    beta = attrs.get("beta", 1.0)
    y = _product(a, b)
    if alpha != 1.0:
        y *= y.dtype.type(alpha)
    if c is not None and beta != 0.0:
        y += c if beta == 1.0 else c * c.dtype.type(beta)
    return [y]


def matmul(attrs, inputs):
    """NumPy ``matmul`` semantics, which are ONNX's (batched, broadcast, 1-D promotion)."""
    a, b = inputs[0], inputs[1]
    y = _product(a, b) if a.ndim >= 2 and b.ndim >= 2 else np.matmul(packed(a), packed(b))
    return [y.astype(a.dtype, copy=False)]  # ml_dtypes' bfloat16 matmul gives float32


define(OpDef("Gemm", kernel=gemm, wide_kernel=widened(gemm), **GEMM))
define(OpDef("MatMul", kernel=matmul, wide_kernel=widened(matmul), **MATMUL))


# -- Einsum ---------------------------------------------------------------------------------------------
def _einsum_terms(equation: str, shapes) -> tuple[list[str], str, dict[str, int], tuple[int, ...]]:
    """Parse ``equation`` against the input shapes: each input's letters (``...`` kept as
    ``.``), the output letters (implicit form: the letters used once, alphabetically, after
    the broadcast ``...`` dimensions), each letter's size and the ``...`` shape. O(letters).

    Raises:
        ValueError: the equation does not fit the shapes.
    """
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ValueError(f"equation {equation!r} has {len(terms)} operands, the node {len(shapes)} inputs")
    sizes: dict[str, int] = {}
    ell: tuple[int, ...] = ()
    parsed = []
    for term, shape in zip(terms, shapes, strict=True):
        t = term.replace("...", ".")
        n_ell = len(shape) - (len(t) - t.count("."))
        if t.count(".") > 1 or n_ell < 0 or ("." not in t and n_ell):
            raise ValueError(f"term {term!r} does not fit shape {list(shape)}")
        pos = 0
        for ch in t:
            if ch == ".":
                part = tuple(shape[pos:pos + n_ell])
                ell = tuple(np.broadcast_shapes(ell, part))
                pos += n_ell
                continue
            d = shape[pos]
            if ch in sizes and sizes[ch] != d and 1 not in (sizes[ch], d):
                raise ValueError(f"letter {ch!r} has sizes {sizes[ch]} and {d}")
            sizes[ch] = max(sizes.get(ch, d), d)
            pos += 1
        parsed.append(t)
    if arrow:
        out = rhs.replace("...", ".")
    else:
        once = sorted(ch for ch in sizes if lhs.count(ch) == 1)
        out = ("." if "." in "".join(parsed) else "") + "".join(once)
    return parsed, out, sizes, ell


def _einsum_shape(attrs, shapes):
    _, out, sizes, ell = _einsum_terms(str(attrs["equation"]), shapes)
    shape: list[int] = []
    for ch in out:
        shape.extend(ell if ch == "." else (sizes[ch],))
    return tuple(shape)


def _einsum_infer(attrs, ins, consts):
    return [(_einsum_shape(attrs, [t[0] for t in ins]), ins[0][1])]


def _einsum_macs(attrs, ins, outs):
    """One multiply-add per point of the full index space (every letter and ``...``)."""
    _, _, sizes, ell = _einsum_terms(str(attrs["equation"]), [t[0] for t in ins])
    return prod(list(sizes.values())) * prod(ell) * max(1, len(ins) - 1)


def _einsum_split(attrs, ins, outs, consts):
    """Any output letter (never a summed one, nor one repeated within an operand, a
    diagonal): each operand holding it is cut on its axis."""
    terms, out, sizes, _ = _einsum_terms(str(attrs["equation"]), [t[0] for t in ins])
    if "." in out or any("." in t for t in terms):
        return [], False
    axes = []
    for oa, ch in enumerate(out):
        if sizes[ch] < 2 or any(t.count(ch) > 1 for t in terms):
            continue
        cut = []
        for t, (shape, _) in zip(terms, ins, strict=True):
            cut.append((t.index(ch), 1) if ch in t and shape[t.index(ch)] == sizes[ch] else None)
        axes.append(SplitAxis("batch" if oa == 0 else f"axis{oa}", sizes[ch], tuple(cut), (oa, 1)))
    return axes, False


@op("Einsum", normalise=AS_IS, infer=_einsum_infer, cost=matrix(_einsum_macs), split=_einsum_split,
    quant=Quant(COMPUTE), param_inputs=())
def einsum(attrs, inputs):
    """NumPy ``einsum`` (ONNX's semantics, ``...`` broadcasting included), contracted in
    the cheapest order NumPy finds (BLAS for products); float16 and bfloat16 accumulate in
    float32. O(the contraction's MACs)."""
    eq = str(attrs["equation"]).replace(" ", "")
    xs = list(inputs)
    dt = xs[0].dtype
    low = dt.kind != "f" and dt.kind not in "iub" or dt == np.float16
    if low:
        xs = [x.astype(np.float32) for x in xs]
    y = np.einsum(eq, *xs, optimize=len(xs) > 1)
    return [np.asarray(y).astype(dt, copy=False)]
