"""Gemm and MatMul on NumPy's BLAS-backed matmul. O(M * N * K) multiply-adds."""

from __future__ import annotations

import numpy as np

from corefold.errors import UnsupportedOpError
from corefold.executor.kernels.spatial import packed
from corefold.executor.registry import kernel


@kernel("Gemm")
def gemm(attrs, inputs):
    """``alpha * A' @ B' + beta * C`` with ``A'``/``B'`` optionally transposed, C broadcast."""
    a, b = packed(inputs[0]), packed(inputs[1])
    c = inputs[2] if len(inputs) > 2 else None
    if a.ndim != 2 or b.ndim != 2:
        raise UnsupportedOpError(f"Gemm: inputs must be 2-D, got {list(a.shape)} and {list(b.shape)}")
    if attrs.get("transA", 0):
        a = a.T
    if attrs.get("transB", 0):
        b = b.T
    alpha = attrs.get("alpha", 1.0)
    beta = attrs.get("beta", 1.0)
    y = np.matmul(a, b)
    if alpha != 1.0:
        y *= y.dtype.type(alpha)
    if c is not None and beta != 0.0:
        y += c if beta == 1.0 else c * c.dtype.type(beta)
    return [y]


@kernel("MatMul")
def matmul(attrs, inputs):
    """NumPy ``matmul`` semantics, which are ONNX's (batched, broadcast, 1-D promotion)."""
    return [np.matmul(packed(inputs[0]), packed(inputs[1]))]
