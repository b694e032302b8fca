"""Activation functions, elementwise, O(elements); results keep the input dtype.

Every one infers its output as its input, runs on the vector unit (operations per element
as below), splits along any dimension, and has the range rule of SPEC M5 §1 where one
is known.
"""

from __future__ import annotations

import numpy as np
import scipy.special

from corefold.ops.facets import NONNEG, fixed_range, same, split_any, vector
from corefold.ops.registry import op
from corefold.ops.schema import AS_IS, COMPUTE, FLOAT, Interval, Quant


def _act(per_element: float = 1.0, quant: Quant | None = None, normalise=AS_IS, params=()):
    """The facets every activation shares."""
    quant = quant or Quant(FLOAT)
    return dict(normalise=normalise, infer=same, cost=vector(per_element), split=split_any(whole=params),
                quant=quant, param_inputs=tuple(params))


def _const_scalar(c) -> float | None:
    if c is None or np.size(c) != 1:
        return None
    return float(np.asarray(c, dtype=np.float64).reshape(-1)[0])


def _clip_range(attrs, rngs, consts):
    """[min, max] of the bounds; a missing lower bound keeps the input's."""
    lo = _const_scalar(consts[1]) if len(consts) > 1 else None
    hi = _const_scalar(consts[2]) if len(consts) > 2 else None
    lo = lo if lo is not None else attrs.get("min")
    hi = hi if hi is not None else attrs.get("max")
    if lo is None and rngs and rngs[0] is not None and rngs[0].lo is not None:
        lo = rngs[0].lo
    return Interval(None if lo is None else float(lo), None if hi is None else float(hi))


def _clip_normalise(imp, n):
    """Opset < 11: ``min`` and ``max`` attributes become inputs 1 and 2."""
    if imp.opset < 11:
        dt = n.inputs[0].dtype
        for attr, index in (("min", 1), ("max", 2)):
            if attr in n.attrs:
                value = n.attrs.pop(attr)
                while len(n.inputs) <= index:
                    n.inputs.append(None)
                n.inputs[index] = imp.const(np.asarray(value, dtype=dt), f"{n.name}_{attr}")
    imp.emit(n.op, n.inputs, n.attrs, n.outputs, n.name)


def _prelu_normalise(imp, n):
    """Opset < 7: a 1-D slope of size C is per channel (axis 1), not NumPy-aligned."""
    x, slope = n.inputs[0], n.inputs[1]
    if imp.opset < 7 and len(slope.shape) == 1 and slope.shape[0] > 1 and len(x.shape) > 2:
        shape = imp.const(np.array([slope.shape[0]] + [1] * (len(x.shape) - 2), np.int64), f"{n.name}_slope_shape")
        (n.inputs[1],) = imp.emit("Reshape", [slope, shape], {}, [None], f"{n.name}_slope")
    imp.emit(n.op, n.inputs, n.attrs, n.outputs, n.name)


def narrow_float(dtype: np.dtype) -> bool:
    """float16, bfloat16, float8, float6 and float4 (ml_dtypes' are kind 'V', like int4)."""
    return dtype == np.float16 or dtype.name.startswith(("bfloat16", "float8", "float6", "float4"))


def _widened(kernel):
    """Run ``kernel`` in float32 on floats narrower than float32 (float16, bfloat16, float8)
    and round the result once, as ONNX Runtime computes half-precision activations; scipy's
    special functions have no half-precision loops at all."""

    def run(attrs, inputs):
        x = inputs[0]
        if narrow_float(x.dtype):
            ys = kernel(attrs, [x.astype(np.float32)] + list(inputs[1:]))
            return [np.asarray(y).astype(x.dtype) for y in ys]
        return [np.asarray(y).astype(x.dtype, copy=False) for y in kernel(attrs, inputs)]

    run.__name__, run.__doc__ = kernel.__name__, kernel.__doc__
    return run


def _f(x: np.ndarray, v: float):
    """``v`` as a scalar of ``x``'s dtype, so float32 stays float32."""
    return x.dtype.type(v)


@op("Relu", **_act(1, Quant(COMPUTE, NONNEG, integer="layout")))
def relu(attrs, inputs):
    x = inputs[0]
    return [np.maximum(x, _f(x, 0))]


@op("Clip", **_act(2, Quant(COMPUTE, _clip_range), normalise=_clip_normalise, params=(1, 2)))
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


@op("Sigmoid", **_act(10, Quant(COMPUTE, fixed_range(0.0, 1.0))))
@_widened
def sigmoid(attrs, inputs):
    return [scipy.special.expit(inputs[0])]


@op("HardSigmoid", **_act(3, Quant(COMPUTE, fixed_range(0.0, 1.0))))
@_widened
def hard_sigmoid(attrs, inputs):
    """``max(0, min(1, alpha * x + beta))``, alpha 0.2 and beta 0.5 by default."""
    x = inputs[0]
    y = x * _f(x, attrs.get("alpha", 0.2)) + _f(x, attrs.get("beta", 0.5))
    return [np.clip(y, _f(x, 0), _f(x, 1), out=y)]


@op("HardSwish", **_act(4, Quant(COMPUTE)))
@_widened
def hard_swish(attrs, inputs):
    """``x * max(0, min(1, x / 6 + 0.5))``."""
    x = inputs[0]
    y = x * _f(x, 1 / 6) + _f(x, 0.5)
    np.clip(y, _f(x, 0), _f(x, 1), out=y)
    y *= x
    return [y]


@op("LeakyRelu", **_act(2, Quant(COMPUTE)))
@_widened
def leaky_relu(attrs, inputs):
    x = inputs[0]
    return [np.where(x >= 0, x, x * _f(x, attrs.get("alpha", 0.01)))]


@op("PRelu", **_act(1, Quant(FLOAT), normalise=_prelu_normalise))
def prelu(attrs, inputs):
    """Leaky ReLU with a slope tensor broadcast to ``x``."""
    x, slope = inputs
    return [np.where(x >= 0, x, x * slope).astype(x.dtype, copy=False)]


@op("Elu", **_act(1))
@_widened
def elu(attrs, inputs):
    x = inputs[0]
    return [np.where(x >= 0, x, _f(x, attrs.get("alpha", 1.0)) * np.expm1(x))]


@op("Selu", **_act(1))
@_widened
def selu(attrs, inputs):
    x = inputs[0]
    alpha = _f(x, attrs.get("alpha", 1.67326319217681884765625))
    gamma = _f(x, attrs.get("gamma", 1.05070102214813232421875))
    return [gamma * np.where(x > 0, x, alpha * np.expm1(x))]


@op("Softplus", **_act(1, Quant(FLOAT, NONNEG)))
@_widened
def softplus(attrs, inputs):
    x = inputs[0]
    return [np.logaddexp(_f(x, 0), x)]


@op("Softsign", **_act(1))
@_widened
def softsign(attrs, inputs):
    x = inputs[0]
    return [x / (_f(x, 1) + np.abs(x))]


@op("Tanh", **_act(10, Quant(COMPUTE)))
@_widened
def tanh(attrs, inputs):
    return [np.tanh(inputs[0])]


@op("Erf", **_act(10, Quant(COMPUTE)))
@_widened
def erf(attrs, inputs):
    return [scipy.special.erf(inputs[0])]


@op("Gelu", **_act(1, Quant(COMPUTE)))
@_widened
def gelu(attrs, inputs):
    """Gelu (opset 20): exact ``x * Phi(x)``, or the tanh approximation."""
    x = inputs[0]
    if attrs.get("approximate", "none") in ("tanh", b"tanh"):
        inner = _f(x, np.sqrt(2 / np.pi)) * (x + _f(x, 0.044715) * x * x * x)
        return [_f(x, 0.5) * x * (_f(x, 1) + np.tanh(inner))]
    return [_f(x, 0.5) * x * (_f(x, 1) + scipy.special.erf(x * _f(x, 1 / np.sqrt(2))))]
