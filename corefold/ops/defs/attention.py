"""Attention (opsets 23-25) and RotaryEmbedding (opset 23).

Attention: ``Y = softmax(softcap(Q K^T * scale) + bias) V`` per head, as ONNX's function
body computes it: Q and K are each multiplied by ``sqrt(scale)`` (default scale
``1/sqrt(head size)``); Q, K and V are ``(B, heads, S, D)`` or, 3-D, ``(B, S, heads * D)``
with ``q_num_heads`` and ``kv_num_heads``; ``past_key``/``past_value`` are prepended to K and
V (the outputs ``present_key``/``present_value``); with fewer KV heads than query heads each
KV head serves a group of consecutive query heads (grouped-query attention). The bias adds
``attn_mask`` (additive, or boolean with True meaning attend; a mask shorter than the keys
is padded with "masked"), the causal mask of ``is_causal`` (bottom-right aligned: query
``i`` sees keys ``j <= i + past length``), the sliding window of ``left_window_size`` /
``right_window_size`` (opset 25) and the padding of ``nonpad_kv_seqlen`` (opset 24). A row
with every key masked gives zeros. ``qk_matmul_output`` is the scaled product (mode 0), with
softcap (1), with bias (2) or after softmax (3). ``softmax_precision`` names the float type
the softmax runs in. O(B * heads * Sq * Skv * (Dk + Dv)), two batched matrix products.

RotaryEmbedding rotates the first ``rotary_embedding_dim`` (default all) features of each
head by the angles of ``cos_cache``/``sin_cache`` (rows picked by ``position_ids``), the two
halves or (``interleaved``) the even and odd features as real and imaginary parts. O(elements).
"""

from __future__ import annotations

import numpy as np

from corefold.ops.defs.elemtypes import attr_dtype
from corefold.ops.facets import matrix, vector
from corefold.ops.registry import op
from corefold.ops.schema import AS_IS, FLOAT, Quant, SplitAxis


def _arg(inputs, i):
    return inputs[i] if len(inputs) > i and inputs[i] is not None else None


# -- shapes -----------------------------------------------------------------------------------------
def _heads(attrs, q, k, v) -> tuple[int, int, int, int, int, int]:
    """(batch, q heads, kv heads, Sq, Skv, Dv) of the inputs' shapes."""
    if len(q) == 4:
        if not len(k) == len(v) == 4:
            raise ValueError("Q, K and V must all be 3-D or all 4-D")
        return q[0], q[1], k[1], q[2], k[2], v[3]
    if not (len(q) == len(k) == len(v) == 3):
        raise ValueError("Q, K and V must all be 3-D or all 4-D")
    hq, hkv = attrs.get("q_num_heads"), attrs.get("kv_num_heads")
    if hq is None or hkv is None:
        raise ValueError("3-D inputs need q_num_heads and kv_num_heads")
    hq, hkv = int(hq), int(hkv)
    if q[2] % hq or k[2] % hkv or v[2] % hkv:
        raise ValueError(f"hidden sizes {q[2]}, {k[2]}, {v[2]} not divisible by {hq} / {hkv} heads")
    return q[0], hq, hkv, q[1], k[1], v[2] // hkv


def _attention_infer(attrs, ins, consts):
    (q, dt), (k, _), (v, vdt) = ins[0], ins[1], ins[2]
    b, hq, hkv, sq, skv, dv = _heads(attrs, q, k, v)
    if hq % hkv:
        raise ValueError(f"{hq} query heads are not a multiple of {hkv} key/value heads")
    past = ins[4][0][2] if len(ins) > 4 and ins[4] is not None else 0
    dk = q[3] if len(q) == 4 else q[2] // hq
    total = past + skv
    y = (b, hq, sq, dv) if len(q) == 4 else (b, sq, hq * dv)
    return [(y, dt), ((b, hkv, total, dk), dt), ((b, hkv, total, dv), vdt), ((b, hq, sq, total), dt)]


def _attention_macs(attrs, ins, outs):
    """Q K^T and the weighted sum of V, from the inputs' shapes: a node may list Y alone
    among its outputs (ONNX's own cases do)."""
    q, k, v = ins[0][0], ins[1][0], ins[2][0]
    b, hq, _, sq, skv, dv = _heads(attrs, q, k, v)
    past = ins[4][0][2] if len(ins) > 4 and ins[4] is not None else 0
    dk = q[3] if len(q) == 4 else q[2] // hq
    return b * hq * sq * (past + skv) * (dk + dv)


def _attention_split(attrs, ins, outs, consts):
    """The batch (every input with it cut, a mask only if it has a batch axis)."""
    b = ins[0][0][0]
    if b < 2:
        return [], True
    cut = []
    for i, t in enumerate(ins):
        if t is None:
            cut.append(None)
        elif i == 3:
            cut.append((0, 1) if len(t[0]) == 4 and t[0][0] == b else None)
        else:
            cut.append((0, 1))
    return [SplitAxis("batch", b, tuple(cut), (0, 1))], True


# -- kernels ----------------------------------------------------------------------------------------
def _to_4d(x: np.ndarray, heads: int) -> np.ndarray:
    b, s, hidden = x.shape
    return x.reshape(b, s, heads, hidden // heads).transpose(0, 2, 1, 3)


def _matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` in ``a``'s dtype (NumPy gives float32 for bfloat16 operands; rounding back
    after each product is what ONNX's function body does)."""
    return np.matmul(a, b).astype(a.dtype, copy=False)


def _softmax(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis; an all -inf row gives zeros, not NaN."""
    top = x.max(axis=-1, keepdims=True)
    top = np.where(np.isneginf(top), x.dtype.type(0), top)
    e = np.exp(x - top)
    s = e.sum(axis=-1, keepdims=True)
    return e / np.where(s == 0, x.dtype.type(1), s)


def _bias(attrs, mask, dt, sq: int, total: int, past: int, nonpad, batch: int) -> np.ndarray:
    """The additive bias: mask, causal, sliding window and padding (-inf where masked)."""
    neg = dt.type(-np.inf)
    bias = np.zeros((sq, total), dt)
    if mask is not None:
        mask = np.asarray(mask)
        pad = total - mask.shape[-1]
        if pad > 0:
            widths = [(0, 0)] * (mask.ndim - 1) + [(0, pad)]
            mask = np.pad(mask, widths, constant_values=False if mask.dtype == np.bool_ else -np.inf)
        add = np.where(mask, dt.type(0), neg) if mask.dtype == np.bool_ else mask.astype(dt)
        bias = bias + add
    # the frontier of query row i: the number of keys before its block
    if nonpad is not None and past == 0:
        offset = (np.asarray(nonpad).astype(np.int64).reshape(-1) - sq).reshape(batch, 1, 1, 1)
    else:
        offset = np.array(past).reshape(1, 1, 1, 1) if bias.ndim <= 4 else past
    rows = np.arange(sq).reshape(sq, 1)
    cols = np.arange(total).reshape(1, total)
    diff = rows + offset - cols  # query position minus key position
    allowed = np.ones(diff.shape, bool)
    if attrs.get("is_causal", 0):
        allowed &= diff >= 0
    left, right = int(attrs.get("left_window_size", -1)), int(attrs.get("right_window_size", -1))
    if left >= 0:
        allowed &= diff <= left
    if right >= 0:
        allowed &= -diff <= right
    if not allowed.all():
        bias = bias + np.where(allowed, dt.type(0), neg)
    if nonpad is not None:
        keep = cols < np.asarray(nonpad).astype(np.int64).reshape(-1, 1, 1, 1)
        bias = bias + np.where(keep, dt.type(0), neg)
    return bias


@op("Attention", normalise=AS_IS, infer=_attention_infer, cost=matrix(_attention_macs), split=_attention_split,
    quant=Quant(FLOAT), param_inputs=(3, 6))
def attention(attrs, inputs):
    """See the module docstring."""
    q, k, v = inputs[0], inputs[1], inputs[2]
    mask, past_k, past_v, nonpad = _arg(inputs, 3), _arg(inputs, 4), _arg(inputs, 5), _arg(inputs, 6)
    dt = q.dtype
    three_d = q.ndim == 3
    batch, hq, hkv, sq, skv, _ = _heads(attrs, q.shape, k.shape, v.shape)
    if three_d:
        q, k, v = _to_4d(q, hq), _to_4d(k, hkv), _to_4d(v, hkv)
    if (past_k is None) != (past_v is None):
        raise ValueError("Attention: past_key and past_value go together")
    present_k = k if past_k is None else np.concatenate([past_k, k], axis=2)
    present_v = v if past_v is None else np.concatenate([past_v, v], axis=2)
    past = 0 if past_k is None else past_k.shape[2]
    total = present_k.shape[2]
    scale = attrs.get("scale")
    scale = 1 / np.sqrt(q.shape[3]) if scale is None else float(scale)
    root = dt.type(np.sqrt(scale))
    kk, vv = present_k, present_v
    if hq != hkv:  # grouped-query attention: each KV head serves hq / hkv consecutive query heads
        kk, vv = np.repeat(kk, hq // hkv, axis=1), np.repeat(vv, hq // hkv, axis=1)
    scores = _matmul(q * root, np.swapaxes(kk * root, -1, -2))
    softcap = float(attrs.get("softcap", 0.0))
    if softcap > 0:
        scores = np.tanh(scores / dt.type(softcap)) * dt.type(softcap)
    bias = _bias(attrs, mask, dt, sq, total, past, nonpad, batch)
    biased = scores + bias
    mode = int(attrs.get("qk_matmul_output_mode", 0))
    precision = attrs.get("softmax_precision")
    probs = _softmax(biased.astype(attr_dtype(precision)) if precision else biased)
    masked_rows = np.isneginf(bias.max(axis=-1, keepdims=True))
    probs = np.where(masked_rows, probs.dtype.type(0), probs).astype(dt, copy=False)
    qk = {0: scores, 1: scores, 2: biased, 3: probs}.get(mode)
    if qk is None:
        raise ValueError(f"Attention: unknown qk_matmul_output_mode {mode}")
    y = _matmul(probs, vv)
    if three_d:
        y = y.transpose(0, 2, 1, 3).reshape(batch, sq, -1)
    qk = np.broadcast_to(qk, (batch, hq, sq, total)).astype(dt)
    return [np.ascontiguousarray(y), np.ascontiguousarray(present_k), np.ascontiguousarray(present_v), qk]


# -- RotaryEmbedding --------------------------------------------------------------------------------
def _rotary_infer(attrs, ins, consts):
    x, dt = ins[0]
    if len(x) == 3 and not attrs.get("num_heads"):
        raise ValueError("3-D input needs num_heads")
    if len(x) not in (3, 4):
        raise ValueError(f"input must be 3-D or 4-D, got {list(x)}")
    return [ins[0]]


def _rotary_split(attrs, ins, outs, consts):
    """The batch (position ids and per-batch caches with it)."""
    b = ins[0][0][0]
    if b < 2:
        return [], False
    cut = [(0, 1)]
    pos = len(ins) > 3 and ins[3] is not None
    for i in (1, 2):
        cut.append((0, 1) if not pos and len(ins[i][0]) == 3 and ins[i][0][0] == b else None)
    if pos:
        cut.append((0, 1))
    return [SplitAxis("batch", b, tuple(cut), (0, 1))], False


@op("RotaryEmbedding", normalise=AS_IS, infer=_rotary_infer, cost=vector(3), split=_rotary_split, quant=Quant(FLOAT),
    param_inputs=(3,))
def rotary_embedding(attrs, inputs):
    """See the module docstring."""
    x, cos, sin = inputs[0], inputs[1], inputs[2]
    pos = _arg(inputs, 3)
    shape = x.shape
    if x.ndim == 4:  # (B, H, S, D) -> (B, S, H, D)
        xs = x.transpose(0, 2, 1, 3)
    else:
        heads = int(attrs["num_heads"])
        xs = x.reshape(shape[0], shape[1], heads, shape[2] // heads)
    dim = int(attrs.get("rotary_embedding_dim", 0)) or xs.shape[3]
    half = dim // 2
    if pos is not None:
        cos, sin = cos[np.asarray(pos)], sin[np.asarray(pos)]
    if cos.shape[-1] != half or sin.shape[-1] != half:
        raise ValueError(f"RotaryEmbedding: caches of width {cos.shape[-1]} for rotary_embedding_dim {dim}")
    cos, sin = cos[:, :, None, :], sin[:, :, None, :]  # (B, S, 1, half)
    rot = xs[..., :dim]
    if attrs.get("interleaved", 0):
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
    else:
        x1, x2 = rot[..., :half], rot[..., half:]
    real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
    out = np.array(xs, copy=True)
    if attrs.get("interleaved", 0):
        out[..., 0:dim:2], out[..., 1:dim:2] = real, imag
    else:
        out[..., :half], out[..., half:dim] = real, imag
    out = out.transpose(0, 2, 1, 3) if x.ndim == 4 else out.reshape(shape)
    return [np.ascontiguousarray(out).astype(x.dtype, copy=False)]


