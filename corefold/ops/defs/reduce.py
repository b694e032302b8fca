"""Reductions (opset-18+ form: ``axes`` is an optional int64 input) and ArgMax/ArgMin.

O(elements). With no axes, every axis is reduced unless ``noop_with_empty_axes=1``,
which returns the input unchanged.
"""

from __future__ import annotations

import numpy as np

from corefold.ops.facets import NONNEG, nonneg_if_data_inputs_are, split_any, vector_in
from corefold.ops.registry import op
from corefold.ops.schema import AS_IS, COMPUTE, FLOAT, Quant


# -- facets ------------------------------------------------------------------------------------------
def _reduce_axes(attrs, shape, consts) -> set[int]:
    rank = len(shape)
    axes_c = consts[1] if len(consts) > 1 else None
    axes = [int(a) for a in np.ravel(axes_c)] if axes_c is not None else []
    if not axes:
        return set() if attrs.get("noop_with_empty_axes", 0) else set(range(rank))
    return {a + rank if a < 0 else a for a in axes}


def _reduce_infer(attrs, ins, consts):
    x, dt = ins[0]
    if len(ins) > 1 and ins[1] is not None and (len(consts) < 2 or consts[1] is None):
        raise ValueError("the 'axes' input is not a constant")
    axes = _reduce_axes(attrs, x, consts)
    keep = attrs.get("keepdims", 1)
    return [(tuple((1 if i in axes else d) for i, d in enumerate(x) if keep or i not in axes), dt)]


def _reduce_split(attrs, ins, outs, consts):
    """Any dimension the reduction keeps (only with keepdims, where input and output axes
    line up), the cheapest first; the axes input is read whole."""
    x = ins[0][0]
    red = _reduce_axes(attrs, x, consts)
    if not attrs.get("keepdims", 1) and red:
        return [], False
    return split_any(lambda a, rank: red, whole=(1,))(attrs, ins, outs, consts)


def _reduce_normalise(imp, n) -> None:
    """``axes`` became an input at opset 13 for ReduceSum, at 18 for the others."""
    if imp.opset < (13 if n.op == "ReduceSum" else 18) and "axes" in n.attrs:
        while len(n.inputs) < 2:
            n.inputs.append(None)
        n.inputs[1] = imp.const(np.asarray(n.attrs.pop("axes"), dtype=np.int64), f"{n.name}_axes")
    imp.emit(n.op, n.inputs, n.attrs, n.outputs, n.name)


_NONNEG_IN = nonneg_if_data_inputs_are([0])
_REDUCE_QUANT = {"ReduceMean": Quant(COMPUTE, _NONNEG_IN), "ReduceMax": Quant(FLOAT, _NONNEG_IN),
                 "ReduceMin": Quant(FLOAT, _NONNEG_IN), "ReduceSum": Quant(FLOAT, _NONNEG_IN),
                 "ReduceL2": Quant(FLOAT, NONNEG), "ReduceSumSquare": Quant(FLOAT, NONNEG),
                 "ReduceL1": Quant(FLOAT, NONNEG)}


def _arg_infer(attrs, ins, consts):
    x, _ = ins[0]
    axis = attrs.get("axis", 0)
    axis = axis + len(x) if axis < 0 else axis
    keep = attrs.get("keepdims", 1)
    return [(tuple((1 if i == axis else d) for i, d in enumerate(x) if keep or i != axis), np.dtype("int64"))]


def _arg_split(attrs, ins, outs, consts):
    if not attrs.get("keepdims", 1):
        return [], False
    return split_any(lambda a, rank: {int(a.get("axis", 0)) % rank})(attrs, ins, outs, consts)


def _reduce(op_type: str, fn):
    @op(op_type, normalise=_reduce_normalise, infer=_reduce_infer, cost=vector_in(), split=_reduce_split,
        quant=_REDUCE_QUANT.get(op_type, Quant(FLOAT)), param_inputs=(1,))
    def run(attrs, inputs):
        x = inputs[0]
        axes = inputs[1] if len(inputs) > 1 and inputs[1] is not None else None
        keepdims = bool(attrs.get("keepdims", 1))
        if axes is None or np.size(axes) == 0:
            if attrs.get("noop_with_empty_axes", 0):
                return [x.copy()]
            ax = None
        else:
            ax = tuple(int(a) % max(x.ndim, 1) for a in np.ravel(axes))
        if x.size == 0 and op_type in _EMPTY_IDENTITY:
            return [_empty_reduction(op_type, x, ax, keepdims)]
        y = np.asarray(fn(x, axis=ax, keepdims=keepdims))
        return [y.astype(x.dtype, copy=False)]

    run.__name__ = op_type.lower()
    run.__doc__ = f"ONNX {op_type} over the given axes (keepdims, noop_with_empty_axes)."
    return run


#: the value a reduction gives over an empty set (ONNX: the operation's identity)
_EMPTY_IDENTITY = {"ReduceMax": "-inf", "ReduceMin": "inf", "ReduceLogSumExp": "-inf", "ReduceLogSum": "-inf"}


def _empty_reduction(op_type: str, x: np.ndarray, axis, keepdims: bool) -> np.ndarray:
    """A reduction over zero elements: -inf for max (the type's lowest for integers, False
    for booleans), +inf for min, log(0) = -inf for the log reductions."""
    shape = np.sum(np.zeros(x.shape, np.int8), axis=axis, keepdims=keepdims).shape
    low = _EMPTY_IDENTITY[op_type] == "-inf"
    if x.dtype == np.bool_:
        value = not low
    elif np.issubdtype(x.dtype, np.integer):
        info = np.iinfo(x.dtype)
        value = info.min if low else info.max
    else:
        value = -np.inf if low else np.inf
    return np.full(shape, value, dtype=x.dtype)


def _mean(x, axis, keepdims):
    return np.mean(x, axis=axis, keepdims=keepdims, dtype=x.dtype if np.issubdtype(x.dtype, np.floating) else None)


reduce_mean = _reduce("ReduceMean", _mean)
reduce_sum = _reduce("ReduceSum", np.sum)
reduce_max = _reduce("ReduceMax", np.max)
reduce_min = _reduce("ReduceMin", np.min)
reduce_prod = _reduce("ReduceProd", np.prod)
reduce_sum_square = _reduce("ReduceSumSquare", lambda x, axis, keepdims: np.sum(x * x, axis=axis, keepdims=keepdims))
reduce_l1 = _reduce("ReduceL1", lambda x, axis, keepdims: np.sum(np.abs(x), axis=axis, keepdims=keepdims))
reduce_l2 = _reduce("ReduceL2", lambda x, axis, keepdims: np.sqrt(np.sum(x * x, axis=axis, keepdims=keepdims)))
reduce_log_sum = _reduce("ReduceLogSum", lambda x, axis, keepdims: np.log(np.sum(x, axis=axis, keepdims=keepdims)))


def _log_sum_exp(x, axis, keepdims):
    """log(sum(exp(x))) computed stably around the maximum (finite maxima only)."""
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, np.zeros((), x.dtype))
    y = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return y if keepdims else np.squeeze(y, axis=axis)


reduce_log_sum_exp = _reduce("ReduceLogSumExp", _log_sum_exp)


def _arg(op_type: str, fn):
    @op(op_type, normalise=AS_IS, infer=_arg_infer, cost=vector_in(), split=_arg_split, quant=Quant(FLOAT),
        param_inputs=())
    def run(attrs, inputs):
        x = inputs[0]
        axis = int(attrs.get("axis", 0)) % x.ndim
        if attrs.get("select_last_index", 0):
            flipped = np.flip(x, axis=axis)
            y = x.shape[axis] - 1 - fn(flipped, axis=axis)
        else:
            y = fn(x, axis=axis)
        if attrs.get("keepdims", 1):
            y = np.expand_dims(y, axis)
        return [np.asarray(y, dtype=np.int64)]

    run.__name__ = op_type.lower()
    run.__doc__ = f"ONNX {op_type} along ``axis`` (keepdims, select_last_index)."
    return run


arg_max = _arg("ArgMax", np.argmax)
arg_min = _arg("ArgMin", np.argmin)
