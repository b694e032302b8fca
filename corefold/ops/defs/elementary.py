"""Elementwise math beyond arithmetic: trigonometric and hyperbolic functions, IsNaN and
IsInf, bitwise operators and BitShift, the activations Mish, Swish, Celu, ThresholdedRelu
and Shrink, Hardmax, and Det.

Every elementwise kernel is one NumPy ufunc pass, O(elements), and keeps the input dtype
(a scalar attribute is cast to it first, so float16 stays float16). Hardmax is O(elements)
(one argmax along the axis); Det is O(batch * n^3) by LU factorisation (LAPACK).
"""

from __future__ import annotations

import numpy as np
import scipy.special

from corefold.ops.defs.elemtypes import is_float
from corefold.ops.facets import (
    NONNEG,
    broadcast,
    norm_axis,
    prod,
    reduced_axis_attr,
    same,
    split_any,
    vector,
)
from corefold.ops.registry import op
from corefold.ops.schema import AS_IS, COMPUTE, FLOAT, Cost, Interval, Quant, SplitAxis


def _unary_facets(per_element: float = 1.0, quant: Quant | None = None, infer=same, normalise=AS_IS):
    return dict(normalise=normalise, infer=infer, cost=vector(per_element), split=split_any(),
                quant=quant or Quant(FLOAT), param_inputs=())


def _f(x: np.ndarray, v: float):
    """``v`` as a scalar of ``x``'s dtype."""
    return x.dtype.type(v)


def _in_float(fn, x: np.ndarray) -> np.ndarray:
    """``fn(x)`` computed in float32 for the ml_dtypes float types (bfloat16, float8),
    whose ufunc coverage is partial, then rounded back; NumPy types run as they are."""
    if x.dtype.kind == "f":
        return np.asarray(fn(x)).astype(x.dtype, copy=False)  # scipy's float16 gives float64
    return fn(x.astype(np.float32)).astype(x.dtype)


# -- trigonometric and hyperbolic ------------------------------------------------------------------
def _trig(op_type: str, fn, quant: Quant | None = None) -> None:
    @op(op_type, **_unary_facets(10, quant))
    def run(attrs, inputs):
        return [_in_float(fn, inputs[0])]

    run.__name__ = op_type.lower()
    run.__doc__ = f"ONNX {op_type}, elementwise, O(elements)."


_UNIT = Quant(FLOAT, lambda attrs, rngs, consts: Interval(-1.0, 1.0))
for _name, _fn, _q in (("Sin", np.sin, _UNIT), ("Cos", np.cos, _UNIT), ("Tan", np.tan, None),
                       ("Asin", np.arcsin, None), ("Acos", np.arccos, None), ("Atan", np.arctan, None),
                       ("Sinh", np.sinh, None), ("Cosh", np.cosh, None), ("Asinh", np.arcsinh, None),
                       ("Acosh", np.arccosh, None), ("Atanh", np.arctanh, None)):
    _trig(_name, _fn, _q)


# -- predicates ------------------------------------------------------------------------------------
def _bool_like(attrs, ins, consts):
    return [(ins[0][0], np.dtype(bool))]


@op("IsNaN", **_unary_facets(infer=_bool_like))
def is_nan(attrs, inputs):
    """True where the input is NaN (any float type)."""
    x = inputs[0]
    return [np.isnan(x if x.dtype.kind == "f" else x.astype(np.float32))]


@op("IsInf", **_unary_facets(infer=_bool_like))
def is_inf(attrs, inputs):
    """True where the input is +inf (``detect_positive``, default 1) or -inf
    (``detect_negative``, default 1)."""
    x = inputs[0]
    x = x if x.dtype.kind == "f" else x.astype(np.float32)
    pos, neg = attrs.get("detect_positive", 1), attrs.get("detect_negative", 1)
    if pos and neg:
        return [np.isinf(x)]
    if pos:
        return [np.isposinf(x)]
    if neg:
        return [np.isneginf(x)]
    return [np.zeros(x.shape, bool)]


# -- bitwise ---------------------------------------------------------------------------------------
def _bitwise(op_type: str, fn) -> None:
    @op(op_type, normalise=AS_IS, infer=broadcast(), cost=vector(1), split=split_any(), quant=Quant(FLOAT),
        param_inputs=())
    def run(attrs, inputs):
        return [fn(inputs[0], inputs[1])]

    run.__name__ = op_type.lower()
    run.__doc__ = f"ONNX {op_type} on integers with broadcasting, O(elements)."


_bitwise("BitwiseAnd", np.bitwise_and)
_bitwise("BitwiseOr", np.bitwise_or)
_bitwise("BitwiseXor", np.bitwise_xor)


@op("BitwiseNot", **_unary_facets())
def bitwise_not(attrs, inputs):
    return [np.invert(inputs[0])]


@op("BitShift", normalise=AS_IS, infer=broadcast(), cost=vector(1), split=split_any(), quant=Quant(FLOAT),
    param_inputs=())
def bit_shift(attrs, inputs):
    """Integers shifted by the (broadcast) amounts, ``direction`` LEFT or RIGHT (signed
    types from opset 28: a right shift fills with the sign bit). A shift by the width or
    more gives 0, or -1 for a right shift of a negative value, as NumPy's saturating shift.
    """
    x, y = inputs
    width = x.dtype.itemsize * 8
    direction = attrs.get("direction", "")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    if direction not in ("LEFT", "RIGHT"):
        raise ValueError(f"BitShift: direction must be LEFT or RIGHT, got {direction!r}")
    y = y.astype(x.dtype, copy=False)
    big = y >= width
    if direction == "LEFT":
        out = np.where(big, x.dtype.type(0), np.left_shift(x, np.where(big, x.dtype.type(0), y)))
    else:
        # shifting by width - 1 leaves only the sign bit's fill: 0, or -1 for signed negatives
        out = np.right_shift(x, np.minimum(y, x.dtype.type(width - 1)))
        if x.dtype.kind == "u":
            out = np.where(big, x.dtype.type(0), out)
    return [out.astype(x.dtype, copy=False)]


# -- activations -----------------------------------------------------------------------------------
def _thresholded_range(attrs, rngs, consts):
    return NONNEG(attrs, rngs, consts) if attrs.get("alpha", 1.0) >= 0 else Interval(None, None)


@op("Mish", **_unary_facets(12, Quant(COMPUTE)))
def mish(attrs, inputs):
    """``x * tanh(softplus(x))``."""
    def fn(x):
        return x * np.tanh(np.logaddexp(_f(x, 0), x))
    return [_in_float(fn, inputs[0])]


@op("Swish", **_unary_facets(10, Quant(COMPUTE)))
def swish(attrs, inputs):
    """``x * sigmoid(alpha * x)`` (opset 24; ``alpha`` default 1.0)."""
    alpha = attrs.get("alpha", 1.0)

    def fn(x):
        return x * scipy.special.expit(x * _f(x, alpha))
    return [_in_float(fn, inputs[0])]


@op("Celu", **_unary_facets(4))
def celu(attrs, inputs):
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``, alpha default 1.0."""
    alpha = attrs.get("alpha", 1.0)

    def fn(x):
        a = _f(x, alpha)
        return np.maximum(x, _f(x, 0)) + np.minimum(_f(x, 0), a * np.expm1(x / a))
    return [_in_float(fn, inputs[0])]


@op("ThresholdedRelu", **_unary_facets(1, Quant(COMPUTE, _thresholded_range)))
def thresholded_relu(attrs, inputs):
    """``x`` where ``x > alpha`` (default 1.0), else 0."""
    x = inputs[0]
    alpha = attrs.get("alpha", 1.0)
    xs = x if x.dtype.kind == "f" else x.astype(np.float32)
    return [np.where(xs > xs.dtype.type(alpha), x, x.dtype.type(0))]


@op("Shrink", **_unary_facets(2))
def shrink(attrs, inputs):
    """``x - bias`` where ``x > lambd``, ``x + bias`` where ``x < -lambd``, else 0 (any
    numeric type; lambd 0.5 and bias 0 by default), computed in float64 and cast back."""
    x = inputs[0]
    lambd, bias = float(attrs.get("lambd", 0.5)), float(attrs.get("bias", 0.0))
    xf = x.astype(np.float64)
    y = np.where(xf < -lambd, xf + bias, np.where(xf > lambd, xf - bias, 0.0))
    return [y.astype(x.dtype)]


def _hardmax_normalise(imp, n) -> None:
    """Opset < 13: hardmax over the input coerced to 2-D at ``axis`` (default 1), i.e.
    Flatten -> Hardmax(axis=-1) -> Reshape."""
    x = n.inputs[0]
    rank = len(x.shape)
    if imp.opset >= 13:
        imp.emit(n.op, n.inputs, n.attrs, n.outputs, n.name)
        return
    axis = norm_axis(int(n.attrs.get("axis", 1)), rank)
    if axis == rank - 1:
        imp.emit(n.op, [x], {"axis": -1}, n.outputs, n.name)
        return
    (flat,) = imp.emit("Flatten", [x], {"axis": axis}, [None], f"{n.name}_flatten")
    (hard,) = imp.emit(n.op, [flat], {"axis": -1}, [None], n.name)
    shape = imp.const(np.array(x.shape, np.int64), f"{n.name}_shape")
    imp.emit("Reshape", [hard, shape], {}, n.outputs, f"{n.name}_reshape")


@op("Hardmax", normalise=_hardmax_normalise, infer=same, cost=vector(2), split=split_any(reduced_axis_attr()),
    quant=Quant(FLOAT, lambda attrs, rngs, consts: Interval(0.0, 1.0)), param_inputs=())
def hardmax(attrs, inputs):
    """1 at the first maximum along ``axis`` (opset 13, default -1), 0 elsewhere."""
    x = inputs[0]
    axis = norm_axis(int(attrs.get("axis", -1)), x.ndim)
    idx = np.expand_dims(np.argmax(x, axis=axis), axis)
    y = np.zeros(x.shape, x.dtype)
    np.put_along_axis(y, idx, x.dtype.type(1), axis=axis)
    return [y]


# -- linear algebra --------------------------------------------------------------------------------
def _det_infer(attrs, ins, consts):
    shape, dt = ins[0]
    if len(shape) < 2 or shape[-1] != shape[-2]:
        raise ValueError(f"Det needs square matrices in the last two axes, got {list(shape)}")
    return [(tuple(shape[:-2]), dt)]


def _det_split(attrs, ins, outs, consts):
    """Any batch dimension (never the matrix axes)."""
    out = outs[0][0]
    return [SplitAxis("batch" if a == 0 else f"axis{a}", out[a], ((a, 1),), (a, 1))
            for a in range(len(out)) if out[a] >= 2], False


@op("Det", normalise=AS_IS, infer=_det_infer, split=_det_split, quant=Quant(FLOAT), param_inputs=(),
    cost=Cost("vector", lambda attrs, ins, outs: prod(ins[0][0][:-2]) * ins[0][0][-1] ** 3))
def det(attrs, inputs):
    """Determinant of each square matrix in the last two axes; O(batch * n^3)."""
    x = inputs[0]
    if not is_float(x.dtype) or x.dtype.itemsize < 4:
        return [np.linalg.det(x.astype(np.float32)).astype(x.dtype)]
    return [np.asarray(np.linalg.det(x)).astype(x.dtype, copy=False)]


def _swiglu_infer(attrs, ins, consts):
    (a, dt), (b, _) = ins[0], ins[1]
    if tuple(a) != tuple(b):
        raise ValueError(f"SwiGLU inputs must have one shape, got {list(a)} and {list(b)}")
    return [(a, dt)]


@op("SwiGLU", normalise=AS_IS, infer=_swiglu_infer, cost=vector(12), split=split_any(), quant=Quant(COMPUTE),
    param_inputs=())
def swiglu(attrs, inputs):
    """``A * sigmoid(alpha * A) * B`` (opset 28; no broadcasting), the gate rounded to the
    input type before the products as ONNX's reference does."""
    a, b = inputs
    alpha = attrs.get("alpha", 1.0)
    if a.dtype.kind != "f":
        gate = scipy.special.expit(a.astype(np.float32) * np.float32(alpha)).astype(a.dtype)
    else:
        gate = scipy.special.expit(a * _f(a, alpha)).astype(a.dtype)
    return [(a * gate * b).astype(a.dtype)]
