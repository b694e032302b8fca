"""Broadcasting elementwise arithmetic, comparison and logic (NumPy broadcasting = ONNX's).

Each kernel is O(output elements). Results keep the input dtype as ONNX requires (NumPy
would promote e.g. ``float32 ** int64`` to float64). Integer Div truncates toward zero
and Mod follows ``fmod`` like ONNX Runtime.
"""

from __future__ import annotations

import functools

import numpy as np

from corefold.executor.registry import kernel


def _same_dtype(y, like: np.ndarray) -> np.ndarray:
    y = np.asarray(y)
    return y if y.dtype == like.dtype else y.astype(like.dtype)


def _binary(op_type: str, fn):
    @kernel(op_type)
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


add = _binary("Add", np.add)
sub = _binary("Sub", np.subtract)
mul = _binary("Mul", np.multiply)
div = _binary("Div", _div)
pow_ = _binary("Pow", np.power)


def _variadic(op_type: str, fn):
    @kernel(op_type)
    def run(attrs, inputs):
        xs = [x for x in inputs if x is not None]
        y = functools.reduce(fn, xs[1:], xs[0])
        if len(xs) == 1:
            y = y.copy()
        return [_same_dtype(y, xs[0])]

    run.__name__ = op_type.lower()
    run.__doc__ = f"ONNX {op_type} over any number of broadcast inputs."
    return run


sum_ = _variadic("Sum", np.add)
max_ = _variadic("Max", np.maximum)
min_ = _variadic("Min", np.minimum)


@kernel("Mean")
def mean(attrs, inputs):
    """Elementwise mean of any number of broadcast inputs."""
    xs = [x for x in inputs if x is not None]
    y = functools.reduce(np.add, xs[1:], xs[0]) / xs[0].dtype.type(len(xs))
    return [_same_dtype(y, xs[0])]


@kernel("Mod")
def mod(attrs, inputs):
    """``fmod=0``: result has the divisor's sign (integers); ``fmod=1``: C ``fmod``."""
    a, b = inputs
    if attrs.get("fmod", 0):
        return [_same_dtype(np.fmod(a, b), a)]
    return [_same_dtype(np.mod(a, b), a)]


def _unary(op_type: str, fn):
    @kernel(op_type)
    def run(attrs, inputs):
        return [_same_dtype(fn(inputs[0]), inputs[0])]

    run.__name__ = op_type.lower()
    run.__doc__ = f"ONNX {op_type}, elementwise."
    return run


sqrt = _unary("Sqrt", np.sqrt)
neg = _unary("Neg", np.negative)
exp = _unary("Exp", np.exp)
log = _unary("Log", np.log)
abs_ = _unary("Abs", np.abs)
reciprocal = _unary("Reciprocal", np.reciprocal)
floor = _unary("Floor", np.floor)
ceil = _unary("Ceil", np.ceil)
round_ = _unary("Round", np.round)  # half to even, like ONNX
sign = _unary("Sign", np.sign)


def _predicate(op_type: str, fn):
    @kernel(op_type)
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


@kernel("Where")
def where(attrs, inputs):
    """``cond ? x : y`` with broadcasting."""
    cond, x, y = inputs
    return [_same_dtype(np.where(cond, x, y), x)]
