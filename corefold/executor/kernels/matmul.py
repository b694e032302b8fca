"""Gemm and MatMul on NumPy's BLAS-backed matmul. O(M * N * K) multiply-adds.

An operand that is one value broadcast (the importer's single-value constants) makes every
output row (or column) the same: that product is computed as a row sum times the value,
O((M + N) * K), instead of packing a dense copy of the fill for BLAS (see
``_conv_fill`` in conv.py for why identical rows matter).
"""

from __future__ import annotations

import numpy as np

from corefold.errors import UnsupportedOpError
from corefold.executor.kernels.spatial import is_fill, packed
from corefold.executor.registry import kernel


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


@kernel("Gemm")
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


@kernel("MatMul")
def matmul(attrs, inputs):
    """NumPy ``matmul`` semantics, which are ONNX's (batched, broadcast, 1-D promotion)."""
    a, b = inputs[0], inputs[1]
    if a.ndim >= 2 and b.ndim >= 2:
        return [_product(a, b)]
    return [np.matmul(packed(a), packed(b))]
