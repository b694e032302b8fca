"""Weight rounding that minimises the layer's output error (GPTQ), instead of rounding to nearest.

For a weight ``W`` (rows = output channels, columns = the K inputs of one output, i.e. the
im2col patch of a Conv) applied to calibration inputs ``X`` (K x samples), the layer error of
integer weights ``Q`` with per-row scales ``s`` is

    E(Q) = || (W - s Q) X ||^2 = tr( (W - s Q) H (W - s Q)^T ),  H = X X^T.

GPTQ (Frantar et al., 2023) rounds one column at a time and spreads its rounding error
over the columns not yet rounded, weighted by the inverse Hessian's Cholesky factor, so the
remaining columns compensate it. ``H`` is accumulated over the calibration stream (K x K per
weight, never the activations themselves). Cost: O(M K^2) per weight plus O(K^2) per
calibration patch row; weights with more than ``max_columns`` inputs, or grouped convs,
keep nearest rounding. The scales (per channel, from the seed's rule) are unchanged: only
which integer each weight gets changes.
"""

from __future__ import annotations

import numpy as np

from corefold.ir import Graph, Node
from corefold.passes.quantize.params import QuantParams


def _patches(node: Node, x: np.ndarray) -> np.ndarray | None:
    """Rows = one input vector of the op's dot products (samples x K), or None if unsupported."""
    if node.op_type in ("MatMul", "Gemm"):
        if node.op_type == "Gemm" and node.attrs.get("transA", 0):
            x = np.swapaxes(x, -1, -2)
        return x.reshape(-1, x.shape[-1])
    if node.op_type == "Conv" and int(node.attrs.get("group", 1)) == 1:
        if node.attrs.get("auto_pad", "NOTSET") not in ("NOTSET", b"NOTSET", "VALID", b"VALID"):
            return None
        from numpy.lib.stride_tricks import sliding_window_view

        w = node.inputs[1].const
        nd = x.ndim - 2
        k = [int(d) for d in w.shape[2:]]
        strides = list(node.attrs.get("strides", [1] * nd))
        dil = list(node.attrs.get("dilations", [1] * nd))
        pads = list(node.attrs.get("pads", [0] * 2 * nd))
        xp = np.pad(x, [(0, 0), (0, 0)] + [(pads[i], pads[i + nd]) for i in range(nd)])
        span = [dil[i] * (k[i] - 1) + 1 for i in range(nd)]
        win = sliding_window_view(xp, span, axis=tuple(range(2, 2 + nd)))
        win = win[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides)
                  + tuple(slice(None, None, d) for d in dil)]
        # n c o... k... -> (n o...) x (c k...)
        perm = [0] + list(range(2, 2 + nd)) + [1] + list(range(2 + nd, 2 + 2 * nd))
        return win.transpose(perm).reshape(-1, x.shape[1] * int(np.prod(k)))
    return None


def weight_matrix(node: Node, w: np.ndarray) -> np.ndarray:
    """The weight as rows = outputs, columns = inputs matching :func:`_patches`."""
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


class HessianSet:
    """Streaming ``H = sum x x^T`` for the inputs of the weights GPTQ can round.

    ``requests`` maps an input tensor name to the (weight name, node) pairs reading it.
    """

    def __init__(self, graph: Graph, weights: dict[str, int | None], max_columns: int = 2048):
        self.nodes: dict[str, Node] = {}
        self.inputs: dict[str, str] = {}
        for node in graph.nodes:
            if node.op_type not in ("Conv", "MatMul", "Gemm") or len(node.inputs) < 2:
                continue
            x, w = node.inputs[0], node.inputs[1]
            if w is None or w.name not in weights or x is None or x.const is not None or w.const.ndim != (
                    4 if node.op_type == "Conv" else 2) or w.name in self.nodes:
                continue
            if node.op_type == "Conv" and int(node.attrs.get("group", 1)) != 1:
                continue
            k = int(np.prod(w.const.shape[1:])) if node.op_type == "Conv" else weight_matrix(node, w.const).shape[1]
            if k > max_columns or len(w.consumers()) != 1:
                continue
            self.nodes[w.name] = node
            self.inputs[w.name] = x.name
        self.h: dict[str, np.ndarray] = {}

    @property
    def tensor_names(self) -> list[str]:
        return sorted(set(self.inputs.values()))

    def add(self, values: dict[str, np.ndarray]) -> None:
        """Update every H from one batch's input tensors (by name)."""
        done: dict[tuple[str, str], np.ndarray] = {}
        for w, node in self.nodes.items():
            x = values.get(self.inputs[w])
            if x is None:
                continue
            key = (self.inputs[w], node.op_type if node.op_type != "Conv" else f"conv{id(node)}")
            if key not in done:
                p = _patches(node, np.asarray(x, np.float64))
                done[key] = p.T @ p if p is not None else None
            if done[key] is not None:
                self.h[w] = self.h.get(w, 0.0) + done[key]


def gptq_integers(w: np.ndarray, h: np.ndarray, scale: np.ndarray, qmin: int, qmax: int,
                  damp: float = 0.01) -> np.ndarray:
    """Integers for ``w`` (M x K) with per-row ``scale`` minimising ``tr(E H E^T)`` greedily."""
    w = np.array(w, dtype=np.float64)
    h = np.array(h, dtype=np.float64)
    k = w.shape[1]
    dead = np.diag(h) == 0
    h[dead, dead] = 1.0
    w[:, dead] = 0.0
    h += damp * float(np.mean(np.diag(h))) * np.eye(k)
    try:
        hinv = np.linalg.cholesky(np.linalg.inv(h)).T
    except np.linalg.LinAlgError:
        return np.clip(np.rint(w / scale[:, None]), qmin, qmax)
    q = np.empty_like(w)
    s = np.broadcast_to(np.asarray(scale, np.float64).reshape(-1), (w.shape[0],))
    for j in range(k):
        col = w[:, j]
        qj = np.clip(np.rint(col / s), qmin, qmax)
        q[:, j] = qj
        err = (col - qj * s) / hinv[j, j]
        w[:, j + 1:] -= np.outer(err, hinv[j, j + 1:])
    return q


def _layer_error(w: np.ndarray, q: np.ndarray, scale: np.ndarray, h: np.ndarray) -> float:
    e = w - q * scale[:, None]
    return float(np.sum((e @ h) * e))


def gptq_round(hessians: HessianSet, consts: dict[str, np.ndarray], plan: dict[str, QuantParams]) -> dict[str, np.ndarray]:
    """GPTQ integers (int64, the weight's shape) for every weight with a Hessian in ``plan``.

    A result is kept only if its layer error ``tr(E H E^T)`` is below nearest rounding's.
    """
    out = {}
    for w, node in hessians.nodes.items():
        if w not in plan or w not in hessians.h:
            continue
        p = plan[w]
        const = consts[w]
        mat = weight_matrix(node, const).astype(np.float64)
        scale = np.asarray(p.onnx_scale, np.float64).reshape(-1)
        if scale.size == 1:
            scale = np.full(mat.shape[0], scale[0])
        elif scale.size != mat.shape[0]:
            continue  # per-channel axis is not the output rows
        h = hessians.h[w]
        q = gptq_integers(mat, h, scale, p.qmin, p.qmax)
        nearest = np.clip(np.rint(mat / scale[:, None]), p.qmin, p.qmax)

        if _layer_error(mat, q, scale, h) < _layer_error(mat, nearest, scale, h):
            out[w] = _from_matrix(node, q, const.shape).astype(np.int64)
    return out
