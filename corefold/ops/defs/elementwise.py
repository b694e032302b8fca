"""Broadcasting elementwise arithmetic, comparison and logic (NumPy broadcasting = ONNX's).

Each kernel is O(output elements). Results keep the input dtype as ONNX requires (NumPy
would promote e.g. ``float32 ** int64`` to float64). Integer Div truncates toward zero
and Mod follows ``fmod`` like ONNX Runtime.
"""

from __future__ import annotations

import functools

import numpy as np

from corefold.ops.facets import (
    NONNEG,
    broadcast,
    nonneg_if_data_inputs_are,
    same,
    split_any,
    variadic_vector,
    vector,
)
from corefold.ops.registry import op
from corefold.ops.schema import AS_IS, COMPUTE, FLOAT, UNKNOWN, Interval, Quant


def legacy_broadcast(imp, n) -> None:
    """Opset < 7: ``broadcast=1`` with ``axis`` aligns B with A starting at ``axis``;
    reshape B so that NumPy broadcasting means the same."""
    broadcast_attr = n.attrs.pop("broadcast", 0)
    axis = n.attrs.pop("axis", None)
    if broadcast_attr and axis is not None:
        a, b = n.inputs[0], n.inputs[1]
        axis = axis + len(a.shape) if axis < 0 else axis
        trailing = len(a.shape) - axis - len(b.shape)
        if trailing > 0:
            shape = imp.const(np.array(list(b.shape) + [1] * trailing, np.int64), f"{n.name}_bshape")
            (b2,) = imp.emit("Reshape", [b, shape], {}, [None], f"{n.name}_broadcast")
            n.inputs[1] = b2
    imp.emit(n.op, n.inputs, n.attrs, n.outputs, n.name)


ALL_NONNEG = nonneg_if_data_inputs_are(None)


def _elementwise(per_element=1.0, quant=None, dtype=None, normalise=legacy_broadcast, variadic=False):
    quant = quant or Quant(FLOAT)
    return dict(normalise=normalise, infer=broadcast(dtype), cost=variadic_vector() if variadic else vector(per_element),
                split=split_any(), quant=quant, param_inputs=())


def _max_range(attrs, rngs, consts):
    """Max with any non-negative input is non-negative."""
    known = [r for r in rngs if r is not None]
    if any(r.non_negative for r in known):
        return Interval(max(r.lo for r in known if r.lo is not None), None)
    return UNKNOWN


def _same_dtype(y, like: np.ndarray) -> np.ndarray:
    y = np.asarray(y)
    return y if y.dtype == like.dtype else y.astype(like.dtype)


def _binary(op_type: str, fn, **facets):
    @op(op_type, **facets)
    def run(attrs, inputs):
        return [_same_dtype(fn(inputs[0], inputs[1]), inputs[0])]

    run.__name__ = op_type.lower()
    run.__doc__ = f"ONNX {op_type} with broadcasting."
    return run


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.issubdtype(a.dtype, np.integer):
        q = np.abs(a) // np.abs(b)
        return np.where((a < 0) != (b < 0), -q, q)
    return np.divide(a, b)


add = _binary("Add", np.add, **_elementwise(quant=Quant(COMPUTE, ALL_NONNEG, integer="add", fuses_activation=True)))
sub = _binary("Sub", np.subtract, **_elementwise(quant=Quant(COMPUTE, integer="add")))
mul = _binary("Mul", np.multiply, **_elementwise(quant=Quant(COMPUTE, ALL_NONNEG, integer="mul")))
div = _binary("Div", _div, **_elementwise(quant=Quant(COMPUTE, ALL_NONNEG)))
def _pow(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """NumPy refuses integers to negative integer powers; ONNX Runtime computes them in
    double and truncates (2 ** -1 = 0.5 -> 0), and so does this."""
    if a.dtype.kind in "iu" and b.dtype.kind in "iu" and b.size and np.min(b) < 0:
        return np.power(a.astype(np.float64), b.astype(np.float64))
    return np.power(a, b)


pow_ = _binary("Pow", _pow, **_elementwise(8, quant=Quant(COMPUTE, nonneg_if_data_inputs_are([0]))))


def _variadic(op_type: str, fn, **facets):
    @op(op_type, **facets)
    def run(attrs, inputs):
        xs = [x for x in inputs if x is not None]
        y = functools.reduce(fn, xs[1:], xs[0])
        if len(xs) == 1:
            y = y.copy()
        return [_same_dtype(y, xs[0])]

    run.__name__ = op_type.lower()
    run.__doc__ = f"ONNX {op_type} over any number of broadcast inputs."
    return run


sum_ = _variadic("Sum", np.add, **_elementwise(quant=Quant(FLOAT, ALL_NONNEG, integer="sum"), normalise=AS_IS,
                                               variadic=True))
max_ = _variadic("Max", np.maximum, **_elementwise(quant=Quant(COMPUTE, _max_range), normalise=AS_IS, variadic=True))
min_ = _variadic("Min", np.minimum, **_elementwise(quant=Quant(COMPUTE, ALL_NONNEG), normalise=AS_IS, variadic=True))


@op("Mean", **_elementwise(quant=Quant(FLOAT, ALL_NONNEG), normalise=AS_IS, variadic=True))
def mean(attrs, inputs):
    """Elementwise mean of any number of broadcast inputs."""
    xs = [x for x in inputs if x is not None]
    y = functools.reduce(np.add, xs[1:], xs[0]) / xs[0].dtype.type(len(xs))
    return [_same_dtype(y, xs[0])]


@op("Mod", **_elementwise(normalise=AS_IS))
def mod(attrs, inputs):
    """``fmod=0``: result has the divisor's sign (integers); ``fmod=1``: C ``fmod``."""
    a, b = inputs
    if attrs.get("fmod", 0):
        return [_same_dtype(np.fmod(a, b), a)]
    return [_same_dtype(np.mod(a, b), a)]


def _unary(op_type: str, fn, per_element=1.0, quant=None):
    quant = quant or Quant(FLOAT)
    @op(op_type, normalise=AS_IS, infer=same, cost=vector(per_element), split=split_any(), quant=quant, param_inputs=())
    def run(attrs, inputs):
        return [_same_dtype(fn(inputs[0]), inputs[0])]

    run.__name__ = op_type.lower()
    run.__doc__ = f"ONNX {op_type}, elementwise."
    return run


sqrt = _unary("Sqrt", np.sqrt, 4, Quant(COMPUTE, NONNEG))
neg = _unary("Neg", np.negative)
exp = _unary("Exp", np.exp, 8, Quant(FLOAT, NONNEG))
log = _unary("Log", np.log, 8)
abs_ = _unary("Abs", np.abs, 1, Quant(FLOAT, NONNEG))
reciprocal = _unary("Reciprocal", np.reciprocal, 4)
floor = _unary("Floor", np.floor)
ceil = _unary("Ceil", np.ceil)
round_ = _unary("Round", np.round)  # half to even, like ONNX
sign = _unary("Sign", np.sign)


def _predicate(op_type: str, fn, normalise=legacy_broadcast):
    infer = same if op_type == "Not" else broadcast("bool")
    split = split_any()

    @op(op_type, normalise=normalise if op_type != "Not" else AS_IS, infer=infer, cost=vector(1), split=split,
        quant=Quant(FLOAT), param_inputs=())
    def run(attrs, inputs):
        return [np.asarray(fn(*inputs))]

    run.__name__ = op_type.lower()
    run.__doc__ = f"ONNX {op_type}, elementwise, boolean result."
    return run


equal = _predicate("Equal", np.equal)
less = _predicate("Less", np.less)
less_equal = _predicate("LessOrEqual", np.less_equal)
greater = _predicate("Greater", np.greater)
greater_equal = _predicate("GreaterOrEqual", np.greater_equal)
logical_and = _predicate("And", np.logical_and)
logical_or = _predicate("Or", np.logical_or)
logical_xor = _predicate("Xor", np.logical_xor)
logical_not = _predicate("Not", np.logical_not)


@op("Where", normalise=AS_IS, infer=broadcast(dtype_input=1), cost=vector(1), split=split_any(),
    quant=Quant(COMPUTE), param_inputs=(0,))
def where(attrs, inputs):
    """``cond ? x : y`` with broadcasting."""
    cond, x, y = inputs
    return [_same_dtype(np.where(cond, x, y), x)]
