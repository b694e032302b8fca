"""Reductions (opset-18+ form: ``axes`` is an optional int64 input) and ArgMax/ArgMin.

O(elements). With no axes, every axis is reduced unless ``noop_with_empty_axes=1``,
which returns the input unchanged.
"""

from __future__ import annotations

import numpy as np

from corefold.executor.registry import kernel


def _reduce(op_type: str, fn):
    @kernel(op_type)
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
        y = np.asarray(fn(x, axis=ax, keepdims=keepdims))
        return [y.astype(x.dtype, copy=False)]

    run.__name__ = op_type.lower()
    run.__doc__ = f"ONNX {op_type} over the given axes (keepdims, noop_with_empty_axes)."
    return run


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


def _arg(op_type: str, fn):
    @kernel(op_type)
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
