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

from typing import Any, Sequence

import numpy as np

from corefold.executor.registry import kernel


def is_fill(a: np.ndarray) -> bool:
    """True if ``a`` holds one value broadcast over all its elements (all strides zero)."""
    return a.size > 1 and all(s == 0 for s in a.strides)


def fill(value: np.ndarray | np.generic, shape: Sequence[int], dtype: Any = None) -> np.ndarray:
    """A read-only stride-0 array of ``shape`` holding the single value ``value``."""
    v = np.asarray(value).reshape(-1)[:1].reshape(())
    if dtype is not None:
        v = v.astype(dtype)
    return np.broadcast_to(v, tuple(int(d) for d in shape))


def _fill_value(a: np.ndarray) -> np.ndarray:
    return a.reshape(-1)[:1] if a.size == 1 else a[(0,) * a.ndim]


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


@kernel("Identity")
def identity(attrs, inputs):
    return [inputs[0]]


@kernel("Dropout")
def dropout(attrs, inputs):
    """Inference dropout: the input unchanged and a mask of ones (training_mode must be 0)."""
    x = inputs[0]
    training = inputs[2] if len(inputs) > 2 else None
    if training is not None and bool(np.asarray(training).reshape(-1)[0]):
        raise ValueError("Dropout with training_mode=1 is not supported (inference only)")
    return [x, fill(np.True_, x.shape)]


@kernel("Shape")
def shape(attrs, inputs):
    dims = np.array(inputs[0].shape, dtype=np.int64)
    r = len(dims)
    start = attrs.get("start", 0)
    end = attrs.get("end", r)
    start = min(max(start + r if start < 0 else start, 0), r)
    end = min(max(end + r if end < 0 else end, 0), r)
    return [dims[start:end].copy()]


@kernel("Constant")
def constant(attrs, inputs):
    return [np.asarray(attrs["value"])]


@kernel("ConstantOfShape")
def constant_of_shape(attrs, inputs):
    value = attrs.get("value")
    if value is None:
        value = np.zeros((1,), np.float32)
    return [fill(np.asarray(value), _ints(inputs[0]))]


@kernel("Cast")
def cast(attrs, inputs):
    x, to = inputs[0], np.dtype(attrs["to"])
    if is_fill(x):
        return [fill(_fill_value(x), x.shape, to)]
    return [x.astype(to)]


@kernel("Reshape")
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


@kernel("Flatten")
def flatten(attrs, inputs):
    x = inputs[0]
    axis = attrs.get("axis", 1)
    axis = axis + x.ndim if axis < 0 else axis
    outer = int(np.prod(x.shape[:axis], dtype=np.int64))
    inner = int(np.prod(x.shape[axis:], dtype=np.int64))
    return [_reshaped(x, (outer, inner))]


@kernel("Transpose")
def transpose(attrs, inputs):
    x = inputs[0]
    perm = attrs.get("perm")
    perm = list(range(x.ndim))[::-1] if perm is None else [int(p) for p in perm]
    return [np.transpose(x, perm)]


@kernel("Squeeze")
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


@kernel("Unsqueeze")
def unsqueeze(attrs, inputs):
    x = inputs[0]
    rank = x.ndim + len(_ints(inputs[1]))
    axes = sorted({_axis(a, rank) for a in _ints(inputs[1])})
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return [_reshaped(x, shape)]


@kernel("Expand")
def expand(attrs, inputs):
    x = inputs[0]
    shape = np.broadcast_shapes(x.shape, tuple(_ints(inputs[1])))
    return [np.broadcast_to(x, shape)]


@kernel("Concat")
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


@kernel("Gather")
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


@kernel("Slice")
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


@kernel("Split")
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


@kernel("Pad")
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


@kernel("Tile")
def tile(attrs, inputs):
    x, reps = inputs[0], _ints(inputs[1])
    if len(reps) != x.ndim or min(reps, default=1) < 0:
        raise ValueError(f"Tile: repeats {reps} do not fit rank {x.ndim}")
    if is_fill(x):
        return [fill(_fill_value(x), [d * r for d, r in zip(x.shape, reps, strict=True)])]
    return [np.tile(x, reps)]


@kernel("Range")
def range_(attrs, inputs):
    start, limit, delta = (np.asarray(v).reshape(()) for v in inputs[:3])
    n = max(int(np.ceil((limit - start) / delta)), 0)
    return [(start + np.arange(n, dtype=np.result_type(start)) * delta).astype(start.dtype)]
