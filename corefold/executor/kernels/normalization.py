"""BatchNormalization (inference), InstanceNormalization, LRN, LayerNormalization, Softmax,
LogSoftmax. All O(elements)."""

from __future__ import annotations

import numpy as np

from corefold.errors import UnsupportedOpError
from corefold.executor.registry import kernel


def _channel_shape(x: np.ndarray) -> tuple[int, ...]:
    """Shape that broadcasts a per-channel (axis 1) vector over ``x``."""
    return (-1,) + (1,) * (x.ndim - 2)


@kernel("BatchNormalization")
def batch_normalization(attrs, inputs):
    """Inference form: ``(x - mean) / sqrt(var + epsilon) * scale + B`` per channel (axis 1).

    Raises:
        UnsupportedOpError: ``training_mode=1``.
    """
    if attrs.get("training_mode", 0):
        raise UnsupportedOpError("BatchNormalization: training_mode=1 is not supported (inference only)")
    x, scale, bias, mean, var = inputs[:5]
    eps = x.dtype.type(attrs.get("epsilon", 1e-5))
    a = (scale / np.sqrt(var + eps)).astype(x.dtype, copy=False)
    b = (bias - mean * a).astype(x.dtype, copy=False)
    y = x * a.reshape(_channel_shape(x))
    y += b.reshape(_channel_shape(x))
    return [y]


@kernel("InstanceNormalization")
def instance_normalization(attrs, inputs):
    """Normalise each (sample, channel) over its spatial axes, then per-channel scale and bias."""
    x, scale, bias = inputs
    eps = x.dtype.type(attrs.get("epsilon", 1e-5))
    axes = tuple(range(2, x.ndim))
    d = x - x.mean(axis=axes, keepdims=True, dtype=x.dtype)
    var = np.mean(d * d, axis=axes, keepdims=True, dtype=x.dtype)
    y = d * (scale.reshape(_channel_shape(x)) / np.sqrt(var + eps))
    y += bias.reshape(_channel_shape(x))
    return [y]


@kernel("LRN")
def lrn(attrs, inputs):
    """Local response normalisation across channels:
    ``x / (bias + alpha / size * sum of squares over the channel window) ** beta``.
    The window of channel c is ``[c - floor((size-1)/2), c + ceil((size-1)/2)]``; O(elements * size).
    """
    x = inputs[0]
    if "size" not in attrs:
        raise UnsupportedOpError("LRN: missing required attribute 'size'")
    size = int(attrs["size"])
    alpha = x.dtype.type(attrs.get("alpha", 1e-4))
    beta = x.dtype.type(attrs.get("beta", 0.75))
    bias = x.dtype.type(attrs.get("bias", 1.0))
    c = x.shape[1]
    before = (size - 1) // 2
    sq = x * x
    acc = np.zeros_like(sq)
    for off in range(-before, size - before):
        lo, hi = max(0, -off), min(c, c - off)  # channels whose window includes c + off
        if lo < hi:
            acc[:, lo:hi] += sq[:, lo + off:hi + off]
    acc *= alpha / x.dtype.type(size)
    acc += bias
    return [x / acc ** beta]


@kernel("Softmax")
def softmax(attrs, inputs):
    """Opset-13 Softmax: along one ``axis`` (default -1)."""
    x = inputs[0]
    axis = int(attrs.get("axis", -1))
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    e /= e.sum(axis=axis, keepdims=True)
    return [e]


@kernel("LogSoftmax")
def log_softmax(attrs, inputs):
    """Opset-13 LogSoftmax: along one ``axis`` (default -1)."""
    x = inputs[0]
    axis = int(attrs.get("axis", -1))
    d = x - x.max(axis=axis, keepdims=True)
    return [d - np.log(np.exp(d).sum(axis=axis, keepdims=True))]


@kernel("LayerNormalization")
def layer_normalization(attrs, inputs):
    """Normalise over axes ``[axis, rank)``; outputs Y, Mean and InvStdDev (reduced axes kept as 1)."""
    x, scale = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    axis = int(attrs.get("axis", -1))
    if axis < 0:
        axis += x.ndim
    eps = attrs.get("epsilon", 1e-5)
    stash = np.float64 if attrs.get("stash_type", 1) == 11 else np.float32
    axes = tuple(range(axis, x.ndim))
    xs = x.astype(stash, copy=False)
    mean = xs.mean(axis=axes, keepdims=True)
    d = xs - mean
    inv = 1 / np.sqrt(np.mean(d * d, axis=axes, keepdims=True) + stash(eps))
    y = (d * inv).astype(x.dtype, copy=False) * scale
    if bias is not None:
        y += bias
    return [y, mean.astype(stash, copy=False), inv.astype(stash, copy=False)]
