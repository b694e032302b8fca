"""MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool.

The padded input is reduced separably, one spatial axis at a time, by a loop over that
axis's kernel taps, each step one vectorised ``np.maximum``/``np.add`` of a strided slice
(far faster than reducing the trailing axes of a window view at once).
O(N * C * P * sum(kernel)) for P output positions.

AveragePool divides by the number of taps inside the input (``count_include_pad=0``) or
inside input plus explicit pads (``count_include_pad=1``); taps in the extra tail read by
``ceil_mode`` never count, as in ONNX Runtime.
"""

from __future__ import annotations

import math

import numpy as np

from corefold.errors import UnsupportedOpError
from corefold.ops.facets import nonneg_if_data_inputs_are, prod, split_leading, vector_in
from corefold.ops.registry import op
from corefold.ops.schema import AS_IS, COMPUTE, MOVEMENT, Cost, Quant
from corefold.ops.spatial import (
    attr_ints,
    attr_str,
    conv_geometry,
    out_sizes,
    pad_spatial,
    spatial_pads_normalise,
    tail_extra,
)


# -- facets ------------------------------------------------------------------------------------------
def _pool_infer(attrs, ins, consts):
    x, dt = ins[0]
    out = (x[0], x[1], *out_sizes(attrs, x, attrs["kernel_shape"], ceil=bool(attrs.get("ceil_mode", 0))))
    return [(out, dt), (out, np.dtype("int64"))]


def _global_infer(attrs, ins, consts):
    x, dt = ins[0]
    return [((x[0], x[1]) + (1,) * (len(x) - 2), dt)]


_NONNEG_IN = nonneg_if_data_inputs_are([0])
_WINDOW_COST = Cost("vector", lambda attrs, ins, outs: prod(outs[0][0]) * prod(attrs.get("kernel_shape", [1])))


def _pool(quant, normalise=spatial_pads_normalise, infer=_pool_infer, cost=_WINDOW_COST):
    return dict(normalise=normalise, infer=infer, cost=cost, split=split_leading(2), quant=quant, param_inputs=())


def _geometry(attrs: dict, x: np.ndarray, op: str):
    k = x.ndim - 2
    kernel_shape = attr_ints(attrs, "kernel_shape", None)
    if kernel_shape is None or len(kernel_shape) != k:
        raise UnsupportedOpError(f"{op}: kernel_shape {kernel_shape} does not fit input rank {x.ndim}")
    strides = attr_ints(attrs, "strides", [1] * k)
    dilations = attr_ints(attrs, "dilations", [1] * k)
    ceil_mode = bool(attrs.get("ceil_mode", 0))
    begins, ends, outs = conv_geometry(x.shape[2:], kernel_shape, strides, dilations, attr_ints(attrs, "pads", None),
                                       attr_str(attrs, "auto_pad", "NOTSET"), ceil_mode, op)
    extra = tail_extra(x.shape[2:], begins, ends, outs, kernel_shape, strides, dilations)
    return kernel_shape, strides, dilations, begins, ends, outs, extra


def _reduce_taps(xp: np.ndarray, kernel_shape, strides, dilations, outs, fn) -> np.ndarray:
    """Reduce every window of padded ``xp`` with the associative binary ufunc ``fn``.

    Separably, one spatial axis at a time (the max or sum over a box is the max or sum over
    its rows of the max or sum along each row), each axis by a loop over its taps: strided
    slices folded into an accumulator. O(N * C * P * sum(kernel)) instead of
    O(N * C * P * prod(kernel)).
    """
    y = xp
    lead = xp.ndim - len(kernel_shape)
    for axis, (kk, s, d, o) in enumerate(zip(kernel_shape, strides, dilations, outs, strict=True), start=lead):
        before = (slice(None),) * axis
        taps = [y[before + (slice(t * d, t * d + (o - 1) * s + 1, s),)] for t in range(kk)]
        acc = taps[0].copy()
        for t in taps[1:]:
            fn(acc, t, out=acc)
        y = acc
    return y


@op("MaxPool", **_pool(Quant(MOVEMENT, _NONNEG_IN, integer="layout")))
def max_pool(attrs, inputs):
    """ONNX MaxPool (first output only; ``storage_order`` only affects the indices)."""
    x = inputs[0]
    kernel_shape, strides, dilations, begins, ends, outs, extra = _geometry(attrs, x, "MaxPool")
    lowest = -np.inf if np.issubdtype(x.dtype, np.floating) else np.iinfo(x.dtype).min
    xp = pad_spatial(x, begins, [e + t for e, t in zip(ends, extra, strict=True)], lowest)
    return [_reduce_taps(xp, kernel_shape, strides, dilations, outs, np.maximum)]


def _tap_counts(n: int, begin: int, end: int, out: int, kk: int, s: int, d: int, include_pad: bool) -> np.ndarray:
    """Per output position along one axis: how many of its taps count toward the average."""
    pos = np.arange(out)[:, None] * s - begin + np.arange(kk)[None, :] * d  # input coordinate of each tap
    lo, hi = (-begin, n + end) if include_pad else (0, n)
    return ((pos >= lo) & (pos < hi)).sum(axis=1)


@op("AveragePool", **_pool(Quant(COMPUTE, _NONNEG_IN, integer="average")))
def average_pool(attrs, inputs):
    """ONNX AveragePool with ``count_include_pad`` and ``ceil_mode``."""
    x = inputs[0]
    kernel_shape, strides, dilations, begins, ends, outs, extra = _geometry(attrs, x, "AveragePool")
    include_pad = bool(attrs.get("count_include_pad", 0))
    xp = pad_spatial(x, begins, [e + t for e, t in zip(ends, extra, strict=True)], 0)
    y = _reduce_taps(xp, kernel_shape, strides, dilations, outs, np.add)
    counts = None
    for i, args in enumerate(zip(x.shape[2:], begins, ends, outs, kernel_shape, strides, dilations, strict=True)):
        c = _tap_counts(*args, include_pad)
        shape = [1] * len(outs)
        shape[i] = len(c)
        c = c.reshape(shape)
        counts = c if counts is None else counts * c
    if np.all(counts == math.prod(kernel_shape)):
        y *= y.dtype.type(1.0 / math.prod(kernel_shape))
    else:
        y /= counts.astype(y.dtype)
    return [y]


@op("GlobalAveragePool", **_pool(Quant(COMPUTE, _NONNEG_IN, integer="average"), AS_IS, _global_infer, vector_in()))
def global_average_pool(attrs, inputs):
    x = inputs[0]
    return [x.mean(axis=tuple(range(2, x.ndim)), keepdims=True, dtype=x.dtype)]


@op("GlobalMaxPool", **_pool(Quant(MOVEMENT, _NONNEG_IN, integer="layout"), AS_IS, _global_infer, vector_in()))
def global_max_pool(attrs, inputs):
    x = inputs[0]
    return [x.max(axis=tuple(range(2, x.ndim)), keepdims=True)]
