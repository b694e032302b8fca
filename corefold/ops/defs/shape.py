"""Shape and data-movement kernels: Shape, Gather, Concat, Slice, Split, Reshape, Flatten,
Transpose, Squeeze, Unsqueeze, Expand, Pad, Cast, Identity, Dropout, Constant,
ConstantOfShape, Range, Tile.

Conventions (see :mod:`corefold.executor.registry`): opset-21 semantics, inputs never
modified, dtype-valued attributes (``Cast.to``) are NumPy dtype names.

A *fill* is an array whose strides are all zero (``np.broadcast_to`` of one value): the
importer keeps ConstantOfShape results and other single-value constants in that form so
that a 400 MB weight costs a few bytes. Every kernel here maps fills to fills without
materialising them, which also lets the importer infer shapes by running these kernels on
fill dummies. All kernels are O(output size) NumPy, views where NumPy allows.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from corefold.errors import UnsupportedOpError
from corefold.ops.arrays import fill, fill_value, is_fill
from corefold.ops.facets import (
    BY_KERNEL,
    DMA,
    FREE,
    ByKernel,
    first_input_range,
    nonneg_if_data_inputs_are,
    reduced_axis_attr,
    split_any,
    vector,
)
from corefold.ops.registry import op
from corefold.ops.schema import (
    AS_IS,
    COMPUTE,
    FLOAT,
    MOVEMENT,
    NONE,
    UNKNOWN,
    Quant,
    SplitAxis,
)

_fill_value = fill_value
_NONNEG_IN = nonneg_if_data_inputs_are([0])
#: a rearrangement of input 0's values: shares its scale, runs on the integers
_MOVE = Quant(MOVEMENT, _NONNEG_IN, integer="layout")


def _facets(infer=BY_KERNEL, cost=DMA, split=NONE, quant=_MOVE, params=(), normalise=AS_IS):
    return dict(normalise=normalise, infer=infer, cost=cost, split=split, quant=quant, param_inputs=tuple(params))


def attr_to_input(imp, n, attr: str, index: int, dtype) -> None:
    """Move attribute ``attr`` (if present) to input ``index`` as a constant (opset changes
    that turned attributes into inputs)."""
    if attr in n.attrs:
        value = n.attrs.pop(attr)
        while len(n.inputs) <= index:
            n.inputs.append(None)
        n.inputs[index] = imp.const(np.asarray(value, dtype=dtype), f"{n.name}_{attr}")


def _emit(imp, n) -> None:
    imp.emit(n.op, n.inputs, n.attrs, n.outputs, n.name)


def _constant_normalise(imp, n) -> None:
    a = n.attrs
    if "value" in a:
        data = np.asarray(a["value"])
    elif "value_float" in a:
        data = np.array(a["value_float"], np.float32)
    elif "value_floats" in a:
        data = np.array(a["value_floats"], np.float32)
    elif "value_int" in a:
        data = np.array(a["value_int"], np.int64)
    elif "value_ints" in a:
        data = np.array(a["value_ints"], np.int64)
    else:
        raise UnsupportedOpError(f"node '{n.name}' (Constant): only tensor, float(s) and int(s) values are supported")
    imp.emit("Constant", [], {"value": data}, n.outputs, n.name)


def _squeeze_normalise(imp, n) -> None:
    if imp.opset < 13:
        attr_to_input(imp, n, "axes", 1, "int64")
    _emit(imp, n)


def _slice_normalise(imp, n) -> None:
    if imp.opset < 10:
        attr_to_input(imp, n, "starts", 1, "int64")
        attr_to_input(imp, n, "ends", 2, "int64")
        attr_to_input(imp, n, "axes", 3, "int64")
    _emit(imp, n)


def _split_normalise(imp, n) -> None:
    """Always give the sizes explicitly as input 1 (old attr, num_outputs, or equal parts)."""
    if imp.opset < 13:
        attr_to_input(imp, n, "split", 1, "int64")
    x = n.inputs[0]
    axis = n.attrs.get("axis", 0)
    if n.input(1) is None:
        dim = x.shape[axis]
        parts = n.attrs.pop("num_outputs", len(n.outputs))
        chunk = -(-dim // parts)
        sizes = [min(chunk, max(dim - i * chunk, 0)) for i in range(parts)]
        while len(n.inputs) < 2:
            n.inputs.append(None)
        n.inputs[1] = imp.const(np.array(sizes, np.int64), f"{n.name}_split")
    n.attrs.pop("num_outputs", None)
    _emit(imp, n)


def _pad_normalise(imp, n) -> None:
    if imp.opset < 11:
        dt = n.inputs[0].dtype
        if "paddings" in n.attrs:
            n.attrs["pads"] = n.attrs.pop("paddings")
        attr_to_input(imp, n, "pads", 1, "int64")
        attr_to_input(imp, n, "value", 2, dt)
    _emit(imp, n)


def _dropout_normalise(imp, n) -> None:
    n.attrs.pop("is_test", None)
    if imp.opset < 12:
        attr_to_input(imp, n, "ratio", 1, "float32")
    mask = n.outputs[1] if len(n.outputs) > 1 else None
    if imp.opset < 10 and mask and imp.is_used(mask):
        # opset < 10: the mask "is not filled" in test mode; ONNX Runtime gives zeros of the
        # input's type, and so do we (a constant fill).
        x = n.inputs[0]
        imp.emit("Dropout", n.inputs, n.attrs, n.outputs[:1], n.name)
        imp.bind_const(mask, fill(np.zeros((), x.dtype), x.shape))
        return
    _emit(imp, n)


def _pad_range(attrs, rngs, consts):
    """Non-negative data padded with a non-negative value (or by reflection) stays so."""
    value = consts[2] if len(consts) > 2 else None
    value = 0.0 if value is None or np.size(value) == 0 else float(np.asarray(value).reshape(-1)[0])
    mode = attrs.get("mode", "constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    src = rngs[0] if rngs else None
    if src is not None and src.non_negative and (mode != "constant" or value >= 0):
        return _NONNEG_IN(attrs, rngs, consts)
    return UNKNOWN


def _transpose_split(attrs, ins, outs, consts):
    """Batch, then height (any axis is valid for a transpose)."""
    x = ins[0][0]
    rank = len(x)
    perm = list(attrs.get("perm", range(rank)[::-1]))
    out = []
    for a in [0, 2] + [a for a in range(rank) if a not in (0, 2)]:
        if a < rank and x[a] >= 2:
            name = ("batch", "channel", "height", "width")[a] if rank == 4 else ("batch" if a == 0 else f"axis{a}")
            out.append(SplitAxis(f"input {name}", x[a], ((a, 1),), (perm.index(a), 1)))
    return out, True


def _axis(axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise ValueError(f"axis {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def _ints(a: np.ndarray | None) -> list[int]:
    return [] if a is None else [int(x) for x in np.asarray(a).reshape(-1)]


def _reshaped(x: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    if is_fill(x) or x.size == 0:
        return fill(_fill_value(x), shape) if x.size else np.empty(shape, x.dtype)
    return x.reshape(shape)


@op("Identity", **_facets(cost=FREE))
def identity(attrs, inputs):
    return [inputs[0]]


@op("Dropout", **_facets(cost=FREE, quant=Quant(MOVEMENT, _NONNEG_IN), params=(1, 2), normalise=_dropout_normalise))
def dropout(attrs, inputs):
    """Dropout: at inference (``training_mode`` absent or false, or ratio 0) the input
    unchanged and a mask of ones; in training mode ``y = mask * x / (1 - ratio)`` with
    ``mask = u >= ratio``, ``u`` uniform in [0, 1) from NumPy's ``RandomState(seed)``
    (``seed`` attribute, 0 when absent), the generator ONNX's own reference uses, so a
    seeded model gives the same mask every run. O(elements)."""
    x = inputs[0]
    ratio_in = inputs[1] if len(inputs) > 1 else None
    training = inputs[2] if len(inputs) > 2 else None
    ratio = 0.5 if ratio_in is None else float(np.asarray(ratio_in).reshape(-1)[0])
    if training is None or not bool(np.asarray(training).reshape(-1)[0]) or ratio == 0:
        return [x, fill(np.True_, x.shape)]
    if not 0 <= ratio < 1:
        raise ValueError(f"Dropout: ratio {ratio} is not in [0, 1)")
    rng = np.random.RandomState(int(attrs.get("seed", 0)) % 2**32)
    mask = rng.uniform(0.0, 1.0, x.shape) >= ratio
    y = (mask * x * (1 / (1 - ratio))).astype(x.dtype, copy=False)
    return [y, mask]


@op("Shape", **_facets(cost=FREE, quant=Quant(FLOAT)))
def shape(attrs, inputs):
    dims = np.array(inputs[0].shape, dtype=np.int64)
    r = len(dims)
    start = attrs.get("start", 0)
    end = attrs.get("end", r)
    start = min(max(start + r if start < 0 else start, 0), r)
    end = min(max(end + r if end < 0 else end, 0), r)
    return [dims[start:end].copy()]


@op("Constant", **_facets(cost=FREE, quant=Quant(FLOAT), normalise=_constant_normalise))
def constant(attrs, inputs):
    return [np.asarray(attrs["value"])]


@op("ConstantOfShape", **_facets(ByKernel((0,)), quant=Quant(FLOAT), params=(0,)))
def constant_of_shape(attrs, inputs):
    value = attrs.get("value")
    if value is None:
        value = np.zeros((1,), np.float32)
    return [fill(np.asarray(value), _ints(inputs[0]))]


#: float8 types whose Cast saturates by default (``saturate=1``)
_FLOAT8 = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")


def _to_e8m0(x: np.ndarray, saturate: bool, round_mode: str) -> np.ndarray:
    """float8 E8M0 (a power of two, exponent only) from the float32 bits: round the mantissa
    away ``up``, ``down`` or to ``nearest`` (ties up); NaN and Inf give NaN; with ``saturate``
    the largest exponent does not round up to NaN. O(elements)."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32)
    exponent = ((bits >> 23) & 0xFF).astype(np.uint16)
    special = exponent == 0xFF
    if round_mode == "nearest":
        g = (bits & 0x400000) > 0
        rest = (bits & 0x3FFFFF) > 0
        up = g & (rest | (exponent > 0))
    elif round_mode == "up":
        up = (bits & 0x7FFFFF) > 0
    elif round_mode == "down":
        up = np.zeros(bits.shape, bool)
    else:
        raise ValueError(f"Cast: unknown round_mode {round_mode!r}")
    up &= ~special
    if saturate:
        up &= exponent != 0xFE
    out = np.where(special, 0xFF, exponent + up).astype(np.uint8)
    return out.view(np.dtype("float8_e8m0fnu"))


def cast_to(x: np.ndarray, to: np.dtype, saturate: bool = True, round_mode: str = "up") -> np.ndarray:
    """ONNX Cast of ``x`` to ``to``: NumPy conversion, except that float8 targets saturate
    to their largest finite value (NaN stays NaN) unless ``saturate`` is false, and float8
    E8M0 rounds by ``round_mode``. O(elements)."""
    to = np.dtype(to)
    if to.name in _FLOAT8 and saturate:
        import ml_dtypes

        info = ml_dtypes.finfo(to)
        wide = x if x.dtype in (np.float32, np.float64) else x.astype(np.float32)
        return np.clip(wide, float(info.min), float(info.max)).astype(to)
    if to.name == "float8_e8m0fnu":
        return _to_e8m0(x.astype(np.float32), saturate, round_mode)
    return x.astype(to)


@op("Cast", **_facets(split=split_any(), quant=Quant(FLOAT)))
def cast(attrs, inputs):
    """Cast to ``to`` (a NumPy dtype name), with ``saturate`` (float8, default 1) and
    ``round_mode`` (E8M0, default ``up``)."""
    x, to = inputs[0], np.dtype(attrs["to"])
    saturate = bool(attrs.get("saturate", 1))
    mode = attrs.get("round_mode", "up")
    if is_fill(x):
        return [fill(cast_to(_fill_value(x).reshape(1), to, saturate, mode), x.shape)]
    return [cast_to(x, to, saturate, mode)]


@op("Reshape", **_facets(ByKernel((1,)), cost=FREE, params=(1,)))
def reshape(attrs, inputs):
    x, target = inputs[0], _ints(inputs[1])
    allowzero = attrs.get("allowzero", 0)
    out = []
    for i, d in enumerate(target):
        if d == 0 and not allowzero:
            if i >= x.ndim:
                raise ValueError(f"Reshape: 0 at position {i} but the input has rank {x.ndim}")
            d = x.shape[i]
        out.append(d)
    if out.count(-1) > 1:
        raise ValueError("Reshape: more than one -1 in the target shape")
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1], dtype=np.int64))
        if known == 0 or x.size % known:
            raise ValueError(f"Reshape: cannot reshape {list(x.shape)} to {target}")
        out[out.index(-1)] = x.size // known
    if int(np.prod(out, dtype=np.int64)) != x.size:
        raise ValueError(f"Reshape: cannot reshape {list(x.shape)} to {target}")
    return [_reshaped(x, out)]


@op("Flatten", **_facets(cost=FREE))
def flatten(attrs, inputs):
    x = inputs[0]
    axis = attrs.get("axis", 1)
    axis = axis + x.ndim if axis < 0 else axis
    outer = int(np.prod(x.shape[:axis], dtype=np.int64))
    inner = int(np.prod(x.shape[axis:], dtype=np.int64))
    return [_reshaped(x, (outer, inner))]


@op("Transpose", **_facets(split=_transpose_split))
def transpose(attrs, inputs):
    x = inputs[0]
    perm = attrs.get("perm")
    perm = list(range(x.ndim))[::-1] if perm is None else [int(p) for p in perm]
    return [np.transpose(x, perm)]


@op("Squeeze", **_facets(ByKernel((1,)), cost=FREE, params=(1,), normalise=_squeeze_normalise))
def squeeze(attrs, inputs):
    x = inputs[0]
    axes_in = inputs[1] if len(inputs) > 1 else None
    if axes_in is None:
        axes = [i for i, d in enumerate(x.shape) if d == 1]
    else:
        axes = sorted({_axis(a, x.ndim) for a in _ints(axes_in)})
        for a in axes:
            if x.shape[a] != 1:
                raise ValueError(f"Squeeze: axis {a} has size {x.shape[a]}, not 1")
    return [_reshaped(x, [d for i, d in enumerate(x.shape) if i not in axes])]


@op("Unsqueeze", **_facets(ByKernel((1,)), cost=FREE, params=(1,), normalise=_squeeze_normalise))
def unsqueeze(attrs, inputs):
    x = inputs[0]
    rank = x.ndim + len(_ints(inputs[1]))
    axes = sorted({_axis(a, rank) for a in _ints(inputs[1])})
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return [_reshaped(x, shape)]


@op("Expand", **_facets(ByKernel((1,)), params=(1,)))
def expand(attrs, inputs):
    x = inputs[0]
    shape = np.broadcast_shapes(x.shape, tuple(_ints(inputs[1])))
    return [np.broadcast_to(x, shape)]


@op("Concat", **_facets(split=split_any(reduced_axis_attr("axis", 0)),
                        quant=Quant(COMPUTE, nonneg_if_data_inputs_are(None), integer="layout", ties_inputs=True)))
def concat(attrs, inputs):
    xs = [x for x in inputs if x is not None]
    axis = _axis(attrs["axis"], xs[0].ndim)
    if all(is_fill(x) or x.size <= 1 for x in xs) and sum(x.size for x in xs) > 1:
        vals = {_fill_value(x).item() for x in xs if x.size}
        if len(vals) == 1:
            shape = list(xs[0].shape)
            shape[axis] = sum(x.shape[axis] for x in xs)
            dtype = np.result_type(*xs)
            return [fill(np.asarray(next(iter(vals)), dtype), shape)]
    return [np.concatenate(xs, axis=axis)]


def _gather_split(attrs, ins, outs, consts):
    """Any data axis other than the gathered one (an embedding table's hidden axis, a
    batch): each piece gathers the same indices from its slab of the data; the indices are
    read whole. O(rank)."""
    data, idx = ins[0][0], ins[1][0]
    rank, r_idx = len(data), len(idx)
    axis = _axis(attrs.get("axis", 0), rank)
    axes = []
    for d in range(rank):
        if d == axis or data[d] < 2:
            continue
        out_axis = d if d < axis else d + r_idx - 1
        axes.append(SplitAxis(f"axis{d}", data[d], ((d, 1), None), (out_axis, 1)))
    return axes, False


@op("Gather", **_facets(quant=Quant(MOVEMENT, first_input_range, integer="layout"), params=(1,),
                        split=_gather_split))
def gather(attrs, inputs):
    x, idx = inputs[0], np.asarray(inputs[1])
    axis = _axis(attrs.get("axis", 0), x.ndim)
    n = x.shape[axis]
    if idx.size and (idx.min() < -n or idx.max() >= n):
        raise ValueError(f"Gather: index out of range for axis {axis} of size {n}")
    shape = x.shape[:axis] + idx.shape + x.shape[axis + 1:]
    if is_fill(x):
        return [fill(_fill_value(x), shape)]
    return [np.take(x, np.where(idx < 0, idx + n, idx), axis=axis)]


def _slice_bounds(start: int, end: int, step: int, dim: int) -> slice:
    """ONNX Slice clamping for one axis, as a Python slice that means the same."""
    if step == 0:
        raise ValueError("Slice: step 0")
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        start = min(max(start, 0), dim)
        end = min(max(end, 0), dim)
        return slice(start, end, step)
    if dim == 0:
        return slice(0, 0, 1)
    start = min(max(start, 0), dim - 1)
    end = min(max(end, -1), dim - 1)
    return slice(start, None if end < 0 else end, step)


def _slice_split(attrs, ins, outs, consts):
    """Any axis the slice leaves whole: not listed in ``axes``, or start 0 (or at most
    -dim), end at least dim and step 1, so every piece's clamped slice is again the whole
    piece. Never an axis it cuts or reverses. O(rank). No candidates while the starts,
    ends, axes or steps are not constants."""
    shape = ins[0][0]
    rank = len(shape)
    if any(consts[i] is None for i in (1, 2) if i < len(consts)) or any(
            ins[i] is not None and consts[i] is None for i in (3, 4) if i < len(ins)):
        return [], False
    starts, ends = _ints(consts[1]), _ints(consts[2])
    axes = _ints(consts[3]) if len(consts) > 3 and consts[3] is not None else list(range(len(starts)))
    steps = _ints(consts[4]) if len(consts) > 4 and consts[4] is not None else [1] * len(starts)
    cut = set()
    for s, e, a, st in zip(starts, ends, axes, steps, strict=False):
        a = _axis(a, rank)
        if not (st == 1 and (s == 0 or s <= -shape[a]) and e >= shape[a]):
            cut.add(a)
    return split_any(lambda attrs, r: cut, whole=(1, 2, 3, 4))(attrs, ins, outs, consts)


@op("Slice", **_facets(ByKernel((1, 2, 3, 4)), split=_slice_split, params=(1, 2, 3, 4), normalise=_slice_normalise))
def slice_(attrs, inputs):
    x = inputs[0]
    starts, ends = _ints(inputs[1]), _ints(inputs[2])
    axes = _ints(inputs[3]) if len(inputs) > 3 and inputs[3] is not None else list(range(len(starts)))
    steps = _ints(inputs[4]) if len(inputs) > 4 and inputs[4] is not None else [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ValueError("Slice: starts, ends, axes and steps differ in length")
    index = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps, strict=False):
        a = _axis(a, x.ndim)
        index[a] = _slice_bounds(s, e, st, x.shape[a])
    return [x[tuple(index)]]


@op("Split", **_facets(ByKernel((1,)), params=(1,), normalise=_split_normalise))
def split(attrs, inputs):
    """Split along ``axis`` by the ``split`` input (the importer always provides it), or into
    ``num_outputs`` parts of ceil(dim / n) (the last smaller)."""
    x = inputs[0]
    axis = _axis(attrs.get("axis", 0), x.ndim)
    dim = x.shape[axis]
    sizes = _ints(inputs[1]) if len(inputs) > 1 and inputs[1] is not None else None
    if sizes is None:
        n = attrs.get("num_outputs")
        if n is None:
            raise ValueError("Split needs a 'split' input or a 'num_outputs' attribute")
        chunk = -(-dim // n)
        sizes = [min(chunk, dim - i * chunk) for i in range(n)]
    if sum(sizes) != dim or min(sizes, default=0) < 0:
        raise ValueError(f"Split: sizes {sizes} do not add up to {dim}")
    bounds = np.cumsum([0] + sizes)
    out = []
    for b, e in zip(bounds[:-1], bounds[1:], strict=False):
        index = [slice(None)] * x.ndim
        index[axis] = slice(int(b), int(e))
        out.append(x[tuple(index)])
    return out


@op("Pad", **_facets(ByKernel((1, 3)), quant=Quant(COMPUTE, _pad_range, integer="layout"), params=(1, 2, 3),
                     normalise=_pad_normalise))
def pad(attrs, inputs):
    """Pad with modes constant, reflect, edge and wrap; negative pads crop."""
    x = inputs[0]
    pads = _ints(inputs[1])
    cval = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
    axes_in = inputs[3] if len(inputs) > 3 else None
    mode = attrs.get("mode", "constant")
    if isinstance(mode, bytes):
        mode = mode.decode()
    axes = [_axis(a, x.ndim) for a in _ints(axes_in)] if axes_in is not None else list(range(x.ndim))
    if len(pads) != 2 * len(axes):
        raise ValueError(f"Pad: {len(pads)} pads for {len(axes)} axes")
    before = [0] * x.ndim
    after = [0] * x.ndim
    for i, a in enumerate(axes):
        before[a], after[a] = pads[i], pads[i + len(axes)]
    # negative pads crop first
    crop = tuple(slice(max(-b, 0), x.shape[i] - max(-e, 0)) for i, (b, e) in enumerate(zip(before, after, strict=False)))
    x = x[crop]
    width = [(max(b, 0), max(e, 0)) for b, e in zip(before, after, strict=False)]
    value = np.zeros((), x.dtype) if cval is None or np.asarray(cval).size == 0 else np.asarray(cval).reshape(-1)[0].astype(x.dtype)
    shape = [d + b + e for d, (b, e) in zip(x.shape, width, strict=False)]
    if is_fill(x) and (mode != "constant" or _fill_value(x) == value or all(w == (0, 0) for w in width)):
        return [fill(_fill_value(x), shape)]
    if mode == "constant":
        return [np.pad(x, width, mode="constant", constant_values=value)]
    if mode in ("reflect", "edge", "wrap"):
        return [np.pad(x, width, mode=mode)]
    raise ValueError(f"Pad: unknown mode {mode!r}")


@op("Tile", **_facets(ByKernel((1,)), params=(1,)))
def tile(attrs, inputs):
    x, reps = inputs[0], _ints(inputs[1])
    if len(reps) != x.ndim or min(reps, default=1) < 0:
        raise ValueError(f"Tile: repeats {reps} do not fit rank {x.ndim}")
    if is_fill(x):
        return [fill(_fill_value(x), [d * r for d, r in zip(x.shape, reps, strict=True)])]
    return [np.tile(x, reps)]


_HALF = ("float16", "bfloat16")


@op("Range", **_facets(ByKernel((0, 1, 2)), cost=vector(1), quant=Quant(FLOAT), params=(0, 1, 2)))
def range_(attrs, inputs):
    """``start + i * delta`` for ``i < ceil((limit - start) / delta)``; float16 and bfloat16
    (opset 27 on) compute in float32 when ``stash_type`` is 1, its default."""
    start, limit, delta = (np.asarray(v).reshape(()) for v in inputs[:3])
    dtype = start.dtype
    if dtype.name in _HALF and int(attrs.get("stash_type", 1)) == 1:
        start, limit, delta = (v.astype(np.float32) for v in (start, limit, delta))
    n = max(int(np.ceil((limit - start) / delta)), 0)
    return [(start + np.arange(n, dtype=np.result_type(start)) * delta).astype(dtype)]
