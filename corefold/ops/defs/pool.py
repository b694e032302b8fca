"""MaxPool (with its Indices output), AveragePool, LpPool, GlobalAveragePool, GlobalMaxPool,
GlobalLpPool and MaxUnpool.

The padded input is reduced separably, one spatial axis at a time, by a loop over that
axis's kernel taps, each step one vectorised ``np.maximum``/``np.add`` of a strided slice
(far faster than reducing the trailing axes of a window view at once).
O(N * C * P * sum(kernel)) for P output positions.

AveragePool divides by the number of taps inside the input (``count_include_pad=0``) or
inside input plus explicit pads (``count_include_pad=1``); taps in the extra tail read by
``ceil_mode`` never count, as in ONNX Runtime. LpPool sums ``|x|^p`` the same way (pads add
0) and takes the p-th root.

MaxPool's Indices output (the flat index of each maximum in the whole input, row-major, or
column-major over the spatial axes with ``storage_order=1``; the first maximum in window
order on ties) is one loop over the ``prod(kernel)`` taps, O(N * C * P * prod(kernel)); it
is computed only for nodes that carry ``storage_order`` (the importer sets it exactly when
Indices is used). MaxUnpool scatters values to the indices MaxPool gave, O(input + output).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from corefold.errors import UnsupportedOpError
from corefold.ops.facets import (
    DMA,
    first_input_range,
    nonneg_if_data_inputs_are,
    prod,
    split_leading,
    vector_in,
)
from corefold.ops.registry import op
from corefold.ops.schema import AS_IS, COMPUTE, FLOAT, MOVEMENT, NONE, Cost, Interval, Quant
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


_POOL_SPLIT = split_leading(2)


def _pool(quant, normalise=spatial_pads_normalise, infer=_pool_infer, cost=_WINDOW_COST, split=_POOL_SPLIT):
    return dict(normalise=normalise, infer=infer, cost=cost, split=split, quant=quant, param_inputs=())


def _max_pool_normalise(imp, n) -> None:
    """Explicit pads; the Indices output is kept (with an explicit ``storage_order``, which
    tells the kernel to compute it) only when something reads it."""
    if len(n.outputs) > 1 and n.outputs[1] and imp.is_used(n.outputs[1]):
        n.attrs["storage_order"] = int(n.attrs.get("storage_order", 0))
    else:
        n.outputs = n.outputs[:1]
        n.attrs.pop("storage_order", None)
    spatial_pads_normalise(imp, n)


def _max_pool_split(attrs, ins, outs, consts):
    """Batch or channel, as every pool; never with Indices, which count from the whole
    input's start."""
    if "storage_order" in attrs:
        return [], True
    return _POOL_SPLIT(attrs, ins, outs, consts)


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


def _lowest(dtype: np.dtype):
    return -np.inf if dtype.kind == "f" or dtype.kind == "V" else np.iinfo(dtype).min


def _max_indices(x: np.ndarray, y: np.ndarray, kernel_shape, strides, dilations, begins, outs,
                 storage_order: int) -> np.ndarray:
    """The flat index into ``x`` of the first tap of each window equal to its maximum ``y``."""
    k = len(kernel_shape)
    spatial = x.shape[2:]
    if storage_order:  # column-major over the spatial axes
        sp_strides = [int(np.prod(spatial[:i], dtype=np.int64)) for i in range(k)]
    else:
        sp_strides = [int(np.prod(spatial[i + 1:], dtype=np.int64)) for i in range(k)]
    plane = int(np.prod(spatial, dtype=np.int64))
    base = (np.arange(x.shape[0] * x.shape[1], dtype=np.int64) * plane).reshape(x.shape[:2] + (1,) * k)
    found = np.zeros(y.shape, bool)
    idx = np.full(y.shape, -1, np.int64)
    for tap in itertools.product(*(range(kk) for kk in kernel_shape)):
        # input coordinate of this tap for every output position, per axis
        coords = [np.arange(o) * s - b + t * d for o, s, b, t, d in zip(outs, strides, begins, tap, dilations, strict=True)]
        valid = None
        flat = base
        for i, c in enumerate(coords):
            shape = [1] * k
            shape[i] = len(c)
            ok = ((c >= 0) & (c < spatial[i])).reshape(shape)
            valid = ok if valid is None else valid & ok
            flat = flat + (np.clip(c, 0, spatial[i] - 1) * sp_strides[i]).reshape(shape)
        sel = tuple(slice(None) for _ in range(2)) + tuple(np.ix_(*[np.clip(c, 0, n - 1) for c, n in zip(coords, spatial, strict=True)]))
        hit = (x[sel] == y) & valid & ~found
        idx = np.where(hit, flat, idx)
        found |= hit
    return idx


@op("MaxPool", **_pool(Quant(MOVEMENT, _NONNEG_IN, integer="layout"), normalise=_max_pool_normalise,
                       split=_max_pool_split))
def max_pool(attrs, inputs):
    """ONNX MaxPool; also the Indices output when ``storage_order`` is given (see the
    module docstring)."""
    x = inputs[0]
    kernel_shape, strides, dilations, begins, ends, outs, extra = _geometry(attrs, x, "MaxPool")
    xp = pad_spatial(x, begins, [e + t for e, t in zip(ends, extra, strict=True)], _lowest(x.dtype))
    y = _reduce_taps(xp, kernel_shape, strides, dilations, outs, np.maximum)
    if "storage_order" not in attrs:
        return [y]
    return [y, _max_indices(x, y, kernel_shape, strides, dilations, begins, outs, int(attrs["storage_order"]))]


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


@op("LpPool", **_pool(Quant(FLOAT), cost=Cost("vector", lambda attrs, ins, outs: 2 * prod(outs[0][0])
                                                * prod(attrs.get("kernel_shape", [1])))))
def lp_pool(attrs, inputs):
    """``(sum over the window of |x|^p) ^ (1/p)``, p (an int from opset 2) default 2;
    pads count as zeros."""
    x = inputs[0]
    p = attrs.get("p", 2)
    kernel_shape, strides, dilations, begins, ends, outs, extra = _geometry(attrs, x, "LpPool")
    a = np.abs(x)
    powered = a * a if p == 2 else a ** x.dtype.type(p)
    xp = pad_spatial(powered, begins, [e + t for e, t in zip(ends, extra, strict=True)], 0)
    y = _reduce_taps(xp, kernel_shape, strides, dilations, outs, np.add)
    return [np.sqrt(y) if p == 2 else y ** x.dtype.type(1.0 / p)]


@op("GlobalLpPool", **_pool(Quant(FLOAT), AS_IS, _global_infer, vector_in(2)))
def global_lp_pool(attrs, inputs):
    """``(sum over all spatial positions of |x|^p) ^ (1/p)``, p default 2."""
    x = inputs[0]
    p = attrs.get("p", 2)
    axes = tuple(range(2, x.ndim))
    a = np.abs(x)
    s = np.sum(a * a if p == 2 else a ** x.dtype.type(p), axis=axes, keepdims=True, dtype=x.dtype)
    return [np.sqrt(s) if p == 2 else s ** x.dtype.type(1.0 / p)]


def _unpool_shape(attrs, x) -> list[int]:
    kernel = list(attrs["kernel_shape"])
    k = len(kernel)
    strides = attrs.get("strides") or [1] * k
    pads = attrs.get("pads") or [0] * (2 * k)
    return [x[0], x[1]] + [(x[2 + i] - 1) * strides[i] - pads[i] - pads[i + k] + kernel[i] for i in range(k)]


def _unpool_infer(attrs, ins, consts):
    x, dt = ins[0]
    if ins[1][0] != x:
        raise ValueError(f"indices {list(ins[1][0])} and input {list(x)} differ in shape")
    if len(ins) > 2 and ins[2] is not None:
        if consts[2] is None:
            raise ValueError("output_shape is not a constant at import")
        out = [int(d) for d in np.asarray(consts[2]).reshape(-1)]
        if len(out) != len(x) or any(o < i for o, i in zip(out, _unpool_shape(attrs, x), strict=True)):
            raise ValueError(f"output_shape {out} is smaller than the unpooled shape {_unpool_shape(attrs, x)}")
        return [(tuple(out), dt)]
    return [(tuple(_unpool_shape(attrs, x)), dt)]


@op("MaxUnpool", normalise=AS_IS, infer=_unpool_infer, cost=DMA, split=NONE,
    quant=Quant(MOVEMENT, lambda attrs, rngs, consts: _with_zero(first_input_range(attrs, rngs, consts))),
    param_inputs=(1, 2))
def max_unpool(attrs, inputs):
    """Zeros of the unpooled shape ``(in - 1) * stride - pads + kernel`` with each input
    value at its flat index (as MaxPool's Indices give it); with ``output_shape`` that
    result sits at the start of a larger zero tensor (ONNX's reference semantics)."""
    x, indices = inputs[0], inputs[1]
    shape = _unpool_shape(attrs, x.shape)
    flat = np.zeros(int(np.prod(shape, dtype=np.int64)), x.dtype)
    idx = np.asarray(indices).astype(np.int64).reshape(-1)
    if idx.size and (idx.min() < 0 or idx.max() >= flat.size):
        raise ValueError(f"MaxUnpool: an index is outside the unpooled shape {shape}")
    flat[idx] = x.reshape(-1)
    y = flat.reshape(shape)
    if len(inputs) > 2 and inputs[2] is not None:
        out = np.zeros([int(d) for d in np.asarray(inputs[2]).reshape(-1)], x.dtype)
        out[tuple(slice(0, d) for d in shape)] = y
        y = out
    return [y]


def _with_zero(r):
    """An interval widened to hold 0 (the zeros an unpooling writes)."""
    if r.lo is None and r.hi is None:
        return r
    return Interval(None if r.lo is None else min(r.lo, 0.0), None if r.hi is None else max(r.hi, 0.0))
