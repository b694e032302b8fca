"""Activation functions, elementwise, O(elements); results keep the input dtype."""

from __future__ import annotations

import numpy as np
import scipy.special

from corefold.executor.registry import kernel


def _f(x: np.ndarray, v: float):
    """``v`` as a scalar of ``x``'s dtype, so float32 stays float32."""
    return x.dtype.type(v)


@kernel("Relu")
def relu(attrs, inputs):
    x = inputs[0]
    return [np.maximum(x, _f(x, 0))]


@kernel("Clip")
def clip(attrs, inputs):
    """Clip to ``[min, max]``; the bounds are optional scalar inputs (opset 11+) or, from
    older models, attributes."""
    x = inputs[0]
    lo = inputs[1] if len(inputs) > 1 and inputs[1] is not None else attrs.get("min")
    hi = inputs[2] if len(inputs) > 2 and inputs[2] is not None else attrs.get("max")
    y = x
    if lo is not None:
        y = np.maximum(y, np.asarray(lo, dtype=x.dtype))
    if hi is not None:
        y = np.minimum(y, np.asarray(hi, dtype=x.dtype))
    return [y if y is not x else x.copy()]


@kernel("Sigmoid")
def sigmoid(attrs, inputs):
    return [scipy.special.expit(inputs[0])]


@kernel("HardSigmoid")
def hard_sigmoid(attrs, inputs):
    """``max(0, min(1, alpha * x + beta))``, alpha 0.2 and beta 0.5 by default."""
    x = inputs[0]
    y = x * _f(x, attrs.get("alpha", 0.2)) + _f(x, attrs.get("beta", 0.5))
    return [np.clip(y, _f(x, 0), _f(x, 1), out=y)]


@kernel("HardSwish")
def hard_swish(attrs, inputs):
    """``x * max(0, min(1, x / 6 + 0.5))``."""
    x = inputs[0]
    y = x * _f(x, 1 / 6) + _f(x, 0.5)
    np.clip(y, _f(x, 0), _f(x, 1), out=y)
    y *= x
    return [y]


@kernel("LeakyRelu")
def leaky_relu(attrs, inputs):
    x = inputs[0]
    return [np.where(x >= 0, x, x * _f(x, attrs.get("alpha", 0.01)))]


@kernel("PRelu")
def prelu(attrs, inputs):
    """Leaky ReLU with a slope tensor broadcast to ``x``."""
    x, slope = inputs
    return [np.where(x >= 0, x, x * slope).astype(x.dtype, copy=False)]


@kernel("Elu")
def elu(attrs, inputs):
    x = inputs[0]
    return [np.where(x >= 0, x, _f(x, attrs.get("alpha", 1.0)) * np.expm1(x))]


@kernel("Selu")
def selu(attrs, inputs):
    x = inputs[0]
    alpha = _f(x, attrs.get("alpha", 1.67326319217681884765625))
    gamma = _f(x, attrs.get("gamma", 1.05070102214813232421875))
    return [gamma * np.where(x > 0, x, alpha * np.expm1(x))]


@kernel("Softplus")
def softplus(attrs, inputs):
    x = inputs[0]
    return [np.logaddexp(_f(x, 0), x)]


@kernel("Softsign")
def softsign(attrs, inputs):
    x = inputs[0]
    return [x / (_f(x, 1) + np.abs(x))]


@kernel("Tanh")
def tanh(attrs, inputs):
    return [np.tanh(inputs[0])]


@kernel("Erf")
def erf(attrs, inputs):
    return [scipy.special.erf(inputs[0])]


@kernel("Gelu")
def gelu(attrs, inputs):
    """Gelu (opset 20): exact ``x * Phi(x)``, or the tanh approximation."""
    x = inputs[0]
    if attrs.get("approximate", "none") in ("tanh", b"tanh"):
        inner = _f(x, np.sqrt(2 / np.pi)) * (x + _f(x, 0.044715) * x * x * x)
        return [_f(x, 0.5) * x * (_f(x, 1) + np.tanh(inner))]
    return [_f(x, 0.5) * x * (_f(x, 1) + scipy.special.erf(x * _f(x, 1 / np.sqrt(2))))]
