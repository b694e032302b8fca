"""Gemm and MatMul on NumPy's BLAS-backed matmul. O(M * N * K) multiply-adds.

An operand that is one value broadcast (the importer's single-value constants) makes every
output row (or column) the same: that product is computed as a row sum times the value,
O((M + N) * K), instead of packing a dense copy of the fill for BLAS (see
``_conv_fill`` in conv.py for why identical rows matter).
"""

from __future__ import annotations

import numpy as np

from corefold.errors import UnsupportedOpError
from corefold.ops.facets import matrix, prod
from corefold.ops.registry import op
from corefold.ops.schema import AS_IS, COMPUTE, Quant, SplitAxis
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


def _matmul_infer(attrs, ins, consts):
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


def _matmul_split(attrs, ins, outs, consts):
    """Batch dimensions and rows of A, then output columns, then the inner dimension (only
    for a 2-D B, the weight case)."""
    a, b = ins[0][0], ins[1][0]
    out = outs[0][0]
    if len(b) != 2 or len(a) < 2:
        return [], True
    r = len(out)
    axes = []
    for ax in range(r - 1):
        if out[ax] >= 2:
            axes.append(SplitAxis("batch" if ax == 0 else f"axis{ax}", out[ax], ((ax, 1), None), (ax, 1)))
    if out[-1] >= 2:
        axes.append(SplitAxis("out_channels", out[-1], (None, (1, 1)), (r - 1, 1)))
    if a[-1] >= 2:
        axes.append(SplitAxis("in_channels", a[-1], ((len(a) - 1, 1), (0, 1)), None, reduce=True))
    return axes, True


def _gemm_normalise(imp, n) -> None:
    """Opset < 7's ``broadcast`` attribute: C already broadcasts in NumPy's sense."""
    n.attrs.pop("broadcast", None)
    imp.emit(n.op, n.inputs, n.attrs, n.outputs, n.name)


GEMM = dict(normalise=_gemm_normalise, infer=_gemm_infer, cost=matrix(_gemm_macs), split=_gemm_split,
            quant=Quant(COMPUTE, integer="linear", weights={1: lambda attrs, shape: 0 if attrs.get("transB", 0) else 1},
                        bias=2, fuses_activation=True),
            param_inputs=())
MATMUL = dict(normalise=AS_IS, infer=_matmul_infer, cost=matrix(_matmul_macs), split=_matmul_split,
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
    return np.matmul(packed(a), packed(b))


@op("Gemm", **GEMM)
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


@op("MatMul", **MATMUL)
def matmul(attrs, inputs):
    """NumPy ``matmul`` semantics, which are ONNX's (batched, broadcast, 1-D promotion)."""
    a, b = inputs[0], inputs[1]
    if a.ndim >= 2 and b.ndim >= 2:
        return [_product(a, b)]
    return [np.matmul(packed(a), packed(b))]
