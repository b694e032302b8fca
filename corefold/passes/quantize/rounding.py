"""Stage 5: weight rounding that minimises the layer's output error (GPTQ), instead of nearest.

For a weight ``W`` (rows = output channels, columns = the K inputs of one output, i.e. the
im2col patch of a Conv) applied to calibration inputs ``X`` (K x samples), the layer error of
integer weights ``Q`` with per-row scales ``s`` is

    E(Q) = || (W - s Q) X ||^2 = tr( (W - s Q) H (W - s Q)^T ),  H = X X^T.

GPTQ (Frantar et al., 2023) rounds one column at a time and spreads its rounding error
over the columns not yet rounded, weighted by the inverse Hessian's Cholesky factor, so the
remaining columns compensate it. ``H`` comes from calibration (``calibrate.HessianObserver``:
K x K per weight, never the activations themselves). The columns are processed in blocks of
``BLOCK``: inside a block the update touches only the block's columns, and the block's errors
reach the later columns in one matrix product (the paper's lazy batch update; the same
arithmetic, reassociated). Cost: O(2 K^3 / 3) for the factor of ``H^-1`` and O(M K^2) per
weight, with all but O(M K * BLOCK) of it in BLAS. The scales (per channel, from the seed's rule) are unchanged:
only which integer each weight gets changes.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from corefold.ir import Node
from corefold.passes.quantize.params import QuantParams

#: columns per lazy-update block
BLOCK = 64


def weight_matrix(node: Node, w: np.ndarray) -> np.ndarray:
    """The weight as rows = outputs, columns = inputs matching ``calibrate.patches``."""
    if node.op_type == "Conv":
        return w.reshape(w.shape[0], -1)
    if node.op_type == "Gemm":
        return w if node.attrs.get("transB", 0) else w.T
    return w.T  # MatMul [K, N]


def _from_matrix(node: Node, m: np.ndarray, shape: tuple) -> np.ndarray:
    if node.op_type == "Conv":
        return m.reshape(shape)
    if node.op_type == "Gemm" and node.attrs.get("transB", 0):
        return m
    return m.T


def inverse_cholesky_upper(h: np.ndarray) -> np.ndarray:
    """The upper Cholesky factor ``U`` of ``h^-1`` (``h^-1 = U^T U``) without forming ``h^-1``.

    With ``J`` the reversal permutation and ``J h J = L L^T``, ``U = J L^-1 J``: one Cholesky
    and one triangular inverse, O(2 K^3 / 3) instead of O(4 K^3 / 3) for inverse then
    Cholesky.

    Raises:
        np.linalg.LinAlgError: ``h`` is not positive definite.
    """
    from scipy.linalg import lapack

    rev = np.ascontiguousarray(h[::-1, ::-1])
    low, info = lapack.dpotrf(rev, lower=1, clean=1, overwrite_a=1)
    if info != 0:
        raise np.linalg.LinAlgError("not positive definite")
    inv, info = lapack.dtrtri(low, lower=1, overwrite_c=1)
    if info != 0:
        raise np.linalg.LinAlgError("singular factor")
    return np.ascontiguousarray(inv[::-1, ::-1])


def gptq_integers(w: np.ndarray, h: np.ndarray, scale: np.ndarray, qmin: int, qmax: int,
                  damp: float = 0.01, block: int = BLOCK) -> np.ndarray:
    """Integers for ``w`` (M x K) with per-row ``scale`` minimising ``tr(E H E^T)`` greedily.

    The factorisation is in float64; the column sweep in float32 (as the reference GPTQ).
    """
    w = np.array(w, dtype=np.float32)
    h = np.array(h, dtype=np.float64)
    k = w.shape[1]
    dead = np.diag(h) == 0
    h[dead, dead] = 1.0
    w[:, dead] = 0.0
    h[np.diag_indices(k)] += damp * float(np.mean(np.diag(h)))
    s = np.broadcast_to(np.asarray(scale, np.float32).reshape(-1), (w.shape[0],))[:, None]
    try:
        hinv = inverse_cholesky_upper(h).astype(np.float32)
    except np.linalg.LinAlgError:
        return np.clip(np.rint(w / s), qmin, qmax)
    # the sweep runs on the transpose (K x M), so a column of w is a contiguous row
    wt = np.ascontiguousarray(w.T)
    st = s[:, 0]
    qt = np.empty_like(wt)
    for i1 in range(0, k, block):
        i2 = min(i1 + block, k)
        wb = wt[i1:i2]  # a view: the in-block updates land in wt
        err = np.empty_like(wb)
        hb = hinv[i1:i2, i1:i2]
        for j in range(i2 - i1):
            col = wb[j]
            qj = np.clip(np.rint(col / st), qmin, qmax)
            qt[i1 + j] = qj
            e = (col - qj * st) / hb[j, j]
            err[j] = e
            wb[j + 1:] -= hb[j, j + 1:, None] * e
        if i2 < k:
            wt[i2:] -= hinv[i1:i2, i2:].T @ err
    return qt.T


def layer_error(w: np.ndarray, q: np.ndarray, scale: np.ndarray, h: np.ndarray) -> float:
    """``tr(E H E^T)`` with ``E = w - scale * q`` (rows scaled), in float32 BLAS. O(M K^2)."""
    e = (w - q * scale[:, None]).astype(np.float32)
    return float(np.sum((e @ h.astype(np.float32)) * e, dtype=np.float64))


def round_weights(plan: dict[str, QuantParams], nodes: dict[str, Node], hessians: dict[str, np.ndarray],
                  consts: dict[str, np.ndarray], cache: dict | None = None) -> dict[str, QuantParams]:
    """``plan`` with GPTQ integers for every weight of ``nodes`` that has a Hessian.

    A weight keeps nearest rounding when GPTQ's layer error ``tr(E H E^T)`` is not lower,
    or when its per-channel axis is not the output rows.
    ``cache`` (weight, bits, scales) -> integers spares mixed precision from rounding a
    weight twice at the same width.
    """
    out = dict(plan)
    cache = {} if cache is None else cache
    for w, node in nodes.items():
        p = plan.get(w)
        if p is None or w not in hessians:
            continue
        key = (w, p.bits, p.range_bits, np.asarray(p.k).tobytes())
        if key not in cache:
            cache[key] = _gptq_or_none(node, consts[w], p, hessians[w])
        if cache[key] is not None:
            out[w] = replace(p, integers=cache[key])
    return out


def _gptq_or_none(node: Node, const: np.ndarray, p: QuantParams, h: np.ndarray) -> np.ndarray | None:
    mat = weight_matrix(node, const).astype(np.float64)
    scale = np.asarray(p.onnx_scale, np.float64).reshape(-1)
    if scale.size == 1:
        scale = np.full(mat.shape[0], scale[0])
    elif scale.size != mat.shape[0]:
        return None  # per-channel axis is not the output rows
    q = gptq_integers(mat, h, scale, p.qmin, p.qmax)
    nearest = np.clip(np.rint(mat / scale[:, None]), p.qmin, p.qmax)
    if layer_error(mat, q, scale, h) < layer_error(mat, nearest, scale, h):
        return _from_matrix(node, q, const.shape).astype(np.int64)
    return None
