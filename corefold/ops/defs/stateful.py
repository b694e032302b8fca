"""Sequence mixers with a carried state (opset 27): CausalConvWithState and LinearAttention.

CausalConvWithState is a depthwise causal 1-D convolution over ``past_state`` followed by
the input, one multiply-add per kernel tap: O(B * C * L * k). LinearAttention is the
recurrence of linear attention with its update rules (linear, gated, delta, gated_delta),
a loop over the T steps, each a few batched products over the ``(d_k, d_v)`` state:
O(B * H * T * d_k * d_v). Both compute in float32 and round to the input type, as ONNX's
function bodies do.
"""

from __future__ import annotations

import numpy as np
import scipy.special

from corefold.ops.facets import matrix, prod
from corefold.ops.registry import op
from corefold.ops.schema import AS_IS, FLOAT, Cost, Quant, SplitAxis


def _s(attrs, name, default):
    v = attrs.get(name, default)
    return v.decode() if isinstance(v, bytes) else str(v)


def _batch_split(state_inputs: tuple[int, ...]):
    """The batch: every input with a batch axis cut on it (weights read whole)."""
    def rule(attrs, ins, outs, consts):
        b = ins[0][0][0]
        if b < 2:
            return [], False
        cut = tuple((0, 1) if t is not None and i in state_inputs else None for i, t in enumerate(ins))
        return [SplitAxis("batch", b, cut, (0, 1))], False
    return rule


# -- CausalConvWithState ---------------------------------------------------------------------------
def _causal_conv_infer(attrs, ins, consts):
    (x, dt), (w, _) = ins[0], ins[1]
    if len(x) != 3 or len(w) != 3 or w[0] != x[1] or w[1] != 1:
        raise ValueError(f"input {list(x)} and weight {list(w)} do not fit a depthwise causal convolution")
    _activation(attrs)
    return [(x, dt), ((x[0], x[1], w[2] - 1), dt)]


def _activation(attrs) -> str:
    act = _s(attrs, "activation", "none")
    if act not in ("none", "silu", "swish"):
        raise ValueError(f"unknown activation {act!r}")
    return act


@op("CausalConvWithState", normalise=AS_IS, infer=_causal_conv_infer, split=_batch_split((0, 3)), quant=Quant(FLOAT),
    param_inputs=(), cost=Cost("vector", lambda attrs, ins, outs: 2 * prod(outs[0][0]) * ins[1][0][2]))
def causal_conv_with_state(attrs, inputs):
    """``(B, C, L)`` input, ``(C, 1, k)`` weight, optional bias ``(C)`` and past state ``(B, C,
    k - 1)`` (zeros by default): the depthwise convolution of the state followed by the
    input, optionally through SiLU; the new state is the last ``k - 1`` positions."""
    x, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
    past = inputs[3] if len(inputs) > 3 and inputs[3] is not None else None
    b, c, length = x.shape
    k = w.shape[2]
    pad = np.zeros((b, c, k - 1), x.dtype) if past is None else past
    padded = np.concatenate([pad, x], axis=2)
    wf = w.astype(np.float32)
    acc = np.zeros((b, c, length), np.float32)
    for t in range(k):
        acc += wf[None, :, 0, t, None] * padded[:, :, t:t + length].astype(np.float32)
    if bias is not None:
        acc += bias.astype(np.float32)[None, :, None]
    y = acc.astype(x.dtype)
    if _activation(attrs) != "none":
        yf = y.astype(np.float32)
        y = (yf * scipy.special.expit(yf)).astype(x.dtype)
    return [y, np.ascontiguousarray(padded[:, :, padded.shape[2] - (k - 1):])]


# -- LinearAttention -------------------------------------------------------------------------------------
_RULES = ("linear", "gated", "delta", "gated_delta")


def _heads(attrs) -> tuple[int, int]:
    hq, hkv = int(attrs["q_num_heads"]), int(attrs["kv_num_heads"])
    if hq <= 0 or hkv <= 0 or hq % hkv:
        raise ValueError(f"q_num_heads {hq} must be a positive multiple of kv_num_heads {hkv}")
    return hq, hkv


def _linear_attention_infer(attrs, ins, consts):
    (q, dt), (k, _), (v, _) = ins[0], ins[1], ins[2]
    hq, hkv = _heads(attrs)
    if len(q) != 3 or len(k) != 3 or len(v) != 3:
        raise ValueError("query, key and value must be (B, T, heads * D)")
    dk, dv = q[2] // hq, v[2] // hkv
    state_dt = ins[3][1] if len(ins) > 3 and ins[3] is not None else dt
    return [((q[0], q[1], hq * dv), dt), ((q[0], hkv, dk, dv), state_dt)]


def _to_4d(x: np.ndarray, heads: int) -> np.ndarray:
    b, t, hd = x.shape
    return x.reshape(b, t, heads, hd // heads).transpose(0, 2, 1, 3).astype(np.float32)


def _la_macs(attrs, ins, outs):
    b, hkv, dk, dv = outs[1][0]
    hq, _ = _heads(attrs)
    t = ins[0][0][1]
    return b * t * (3 * hkv + hq) * dk * dv


@op("LinearAttention", normalise=AS_IS, infer=_linear_attention_infer, cost=matrix(_la_macs),
    split=_batch_split((0, 1, 2, 3, 4, 5)), quant=Quant(FLOAT), param_inputs=())
def linear_attention(attrs, inputs):
    """Linear attention with a ``(B, H_kv, d_k, d_v)`` state (opset 27): per step, the state
    decays by ``exp(decay)`` (gated rules), the value is replaced by ``beta * (v - S^T k)``
    (delta rules), ``S += k v^T``, and the output is ``scale * q S`` (each KV head's state
    read by its group of query heads; scale default ``1/sqrt(d_k)``)."""
    query, key, value = inputs[0], inputs[1], inputs[2]
    past = inputs[3] if len(inputs) > 3 and inputs[3] is not None else None
    decay = inputs[4] if len(inputs) > 4 and inputs[4] is not None else None
    beta = inputs[5] if len(inputs) > 5 and inputs[5] is not None else None
    rule = _s(attrs, "update_rule", "gated_delta")
    if rule not in _RULES:
        raise ValueError(f"LinearAttention: unknown update_rule {rule!r}")
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if gating != (decay is not None) or delta != (beta is not None):
        raise ValueError(f"LinearAttention: update_rule {rule!r} takes {'decay ' if gating else ''}"
                         f"{'beta' if delta else ''} and no other gate")
    hq, hkv = _heads(attrs)
    b, t, _ = query.shape
    q4, k4, v4 = _to_4d(query, hq), _to_4d(key, hkv), _to_4d(value, hkv)
    dk, dv = q4.shape[3], v4.shape[3]
    if decay is not None:
        decay4 = (decay.reshape(b, t, hkv, 1) if decay.shape[-1] == hkv else decay.reshape(b, t, hkv, dk))
        decay4 = decay4.transpose(0, 2, 1, 3).astype(np.float32)
    if beta is not None:
        beta4 = beta.reshape(b, t, beta.shape[-1], 1).transpose(0, 2, 1, 3).astype(np.float32)
    state = np.zeros((b, hkv, dk, dv), np.float32) if past is None else past.astype(np.float32)
    scale = float(attrs.get("scale", 0.0)) or 1.0 / np.sqrt(dk)
    group = hq // hkv
    out = np.empty((b, hq, t, dv), np.float32)
    for i in range(t):
        kt, vt = k4[:, :, i], v4[:, :, i]
        if gating:
            state = state * np.exp(decay4[:, :, i])[..., None]
        if delta:
            vt = beta4[:, :, i] * (vt - np.einsum("bhdm,bhd->bhm", state, kt))
        state = state + kt[..., :, None] * vt[..., None, :]
        read = state if group == 1 else np.repeat(state, group, axis=1)
        out[:, :, i] = np.float32(scale) * np.einsum("bhd,bhdm->bhm", q4[:, :, i], read)
    y = out.transpose(0, 2, 1, 3).reshape(b, t, hq * dv).astype(query.dtype)
    return [y, state.astype(query.dtype if past is None else past.dtype)]
