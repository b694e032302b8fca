"""Indexed reads and writes: GatherElements, GatherND, ScatterElements (and the old
Scatter), ScatterND, TensorScatter and OneHot.

Indices are data here (never constants the shape depends on), so every output shape comes
from the input shapes alone. Kernels are NumPy advanced indexing, O(indices + output);
a scatter with a reduction uses the unbuffered ``ufunc.at`` so that repeated indices all
count, in index order as ONNX specifies. Negative indices count from the end; an index
outside the axis raises ``ValueError`` (ONNX Runtime fails the same way).
"""

from __future__ import annotations

import numpy as np

from corefold.ops.facets import DMA, first_input_range, norm_axis
from corefold.ops.registry import op
from corefold.ops.schema import AS_IS, FLOAT, MOVEMENT, NONE, UNKNOWN, Quant, SplitAxis

#: output values are input 0's: the same scale, computed on the integers
_GATHERED = Quant(MOVEMENT, first_input_range, integer="layout")
#: output values are input 0's or the updates': one scale for data, updates and output
#: (the tie takes the union of their calibrated ranges, so a reduction cannot overflow it);
#: computed in float between its DequantizeLinear and QuantizeLinear
_SCATTERED = Quant(MOVEMENT, None, ties_inputs=True)


def _normalised(idx: np.ndarray, size: int, what: str) -> np.ndarray:
    idx = np.asarray(idx).astype(np.int64, copy=False)
    if idx.size and (idx.min() < -size or idx.max() >= size):
        raise ValueError(f"{what}: an index is outside [-{size}, {size - 1}]")
    return np.where(idx < 0, idx + size, idx)


def _grid(shape, axis: int, idx: np.ndarray) -> tuple:
    """The index tuple that reads ``idx`` along ``axis`` and position elsewhere."""
    grids = list(np.ogrid[tuple(slice(0, n) for n in shape)])
    grids[axis] = idx
    return tuple(grids)


def _check_fits(data_shape, idx_shape, axis: int, what: str) -> None:
    if len(idx_shape) != len(data_shape):
        raise ValueError(f"{what}: indices rank {len(idx_shape)} != data rank {len(data_shape)}")
    for a, (d, i) in enumerate(zip(data_shape, idx_shape, strict=True)):
        if a != axis and i > d:
            raise ValueError(f"{what}: indices dimension {a} ({i}) exceeds the data's ({d})")


# -- GatherElements ----------------------------------------------------------------------------------
def _gather_elements_infer(attrs, ins, consts):
    (data, dt), (idx, _) = ins[0], ins[1]
    axis = norm_axis(int(attrs.get("axis", 0)), len(data))
    _check_fits(data, idx, axis, "GatherElements")
    return [(tuple(idx), dt)]


def _gather_elements_split(attrs, ins, outs, consts):
    """Any axis but the gathered one, where data and indices have the same size."""
    data, idx = ins[0][0], ins[1][0]
    axis = norm_axis(int(attrs.get("axis", 0)), len(data))
    return [SplitAxis("batch" if a == 0 else f"axis{a}", idx[a], ((a, 1), (a, 1)), (a, 1))
            for a in range(len(idx)) if a != axis and idx[a] >= 2 and idx[a] == data[a]], False


@op("GatherElements", normalise=AS_IS, infer=_gather_elements_infer, cost=DMA, split=_gather_elements_split,
    quant=_GATHERED, param_inputs=(1,))
def gather_elements(attrs, inputs):
    """``out[i, j, k] = data[indices[i, j, k], j, k]`` for ``axis`` 0 (and likewise for
    any axis); the output has the indices' shape."""
    data, indices = inputs
    axis = norm_axis(int(attrs.get("axis", 0)), data.ndim)
    _check_fits(data.shape, indices.shape, axis, "GatherElements")
    idx = _normalised(indices, data.shape[axis], "GatherElements")
    return [data[_grid(idx.shape, axis, idx)]]


# -- GatherND -----------------------------------------------------------------------------------------
def _gather_nd_shape(data, idx, b: int):
    m = idx[-1]
    if len(idx) < 1 or b >= min(len(data), len(idx)) or m > len(data) - b or tuple(data[:b]) != tuple(idx[:b]):
        raise ValueError(f"data {list(data)} and indices {list(idx)} do not fit batch_dims {b}")
    return tuple(idx[:-1]) + tuple(data[b + m:])


def _gather_nd_infer(attrs, ins, consts):
    (data, dt), (idx, _) = ins[0], ins[1]
    return [(_gather_nd_shape(data, idx, int(attrs.get("batch_dims", 0))), dt)]


def _gather_nd_split(attrs, ins, outs, consts):
    """The batch dimensions (shared by data, indices and output)."""
    b = int(attrs.get("batch_dims", 0))
    out = outs[0][0]
    return [SplitAxis("batch" if a == 0 else f"axis{a}", out[a], ((a, 1), (a, 1)), (a, 1))
            for a in range(b) if out[a] >= 2], True


def _nd_index(data_shape, indices: np.ndarray, b: int, what: str) -> tuple:
    """The advanced-index tuple of GatherND / ScatterND: batch positions, then the last
    axis of ``indices`` naming the next ``m`` axes of the data."""
    m = indices.shape[-1]
    lead = indices.shape[:-1]
    tup = []
    for a in range(b):
        shape = [1] * len(lead)
        shape[a] = data_shape[a]
        tup.append(np.arange(data_shape[a]).reshape(shape))
    for j in range(m):
        tup.append(_normalised(indices[..., j], data_shape[b + j], what))
    return tuple(tup)


@op("GatherND", normalise=AS_IS, infer=_gather_nd_infer, cost=DMA, split=_gather_nd_split, quant=_GATHERED,
    param_inputs=(1,))
def gather_nd(attrs, inputs):
    """Slices of ``data`` named by the last axis of ``indices`` (after ``batch_dims``
    shared leading axes); output ``indices.shape[:-1] + data.shape[batch_dims + m:]``."""
    data, indices = inputs
    b = int(attrs.get("batch_dims", 0))
    _gather_nd_shape(data.shape, indices.shape, b)
    return [np.ascontiguousarray(data[_nd_index(data.shape, np.asarray(indices), b, "GatherND")])]


# -- scatters ------------------------------------------------------------------------------------------
_REDUCE = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _reduction(attrs) -> str:
    r = attrs.get("reduction", "none")
    r = r.decode() if isinstance(r, bytes) else str(r)
    if r != "none" and r not in _REDUCE:
        raise ValueError(f"unknown reduction {r!r}")
    return r


def _scatter_into(data: np.ndarray, where: tuple, updates: np.ndarray, reduction: str) -> np.ndarray:
    out = np.array(data, copy=True)
    updates = np.asarray(updates).astype(out.dtype, copy=False)
    if reduction == "none":
        out[where] = updates
    else:
        _REDUCE[reduction].at(out, where, updates)
    return out


def _scatter_split(attrs, ins, outs, consts):
    """Any axis but the scattered one where data, indices and updates agree."""
    data, idx = ins[0][0], ins[1][0]
    axis = norm_axis(int(attrs.get("axis", 0)), len(data))
    return [SplitAxis("batch" if a == 0 else f"axis{a}", data[a], ((a, 1), (a, 1), (a, 1)), (a, 1))
            for a in range(len(data)) if a != axis and data[a] >= 2 and idx[a] == data[a]], False


def _scatter_elements_infer(attrs, ins, consts):
    (data, _dt), (idx, _), (upd, _) = ins[0], ins[1], ins[2]
    axis = norm_axis(int(attrs.get("axis", 0)), len(data))
    _check_fits(data, idx, axis, "ScatterElements")
    if tuple(upd) != tuple(idx):
        raise ValueError(f"updates {list(upd)} and indices {list(idx)} differ")
    _reduction(attrs)
    return [ins[0]]


def _scatter_normalise(imp, n) -> None:
    """The old Scatter (opsets 9-10) is ScatterElements without a reduction."""
    imp.emit("ScatterElements", n.inputs, n.attrs, n.outputs, n.name)


_SCATTER_FACETS = dict(infer=_scatter_elements_infer, cost=DMA, split=_scatter_split, quant=_SCATTERED,
                       param_inputs=(1,))


@op("ScatterElements", normalise=AS_IS, **_SCATTER_FACETS)
def scatter_elements(attrs, inputs):
    """A copy of ``data`` with ``updates`` written at ``indices`` along ``axis``
    (``out[indices[i, j], j] = updates[i, j]`` for axis 0), or combined by ``reduction``
    add, mul, max or min."""
    data, indices, updates = inputs
    axis = norm_axis(int(attrs.get("axis", 0)), data.ndim)
    _check_fits(data.shape, indices.shape, axis, "ScatterElements")
    idx = _normalised(indices, data.shape[axis], "ScatterElements")
    return [_scatter_into(data, _grid(idx.shape, axis, idx), updates, _reduction(attrs))]


@op("Scatter", normalise=_scatter_normalise, **_SCATTER_FACETS)
def scatter(attrs, inputs):
    """Opsets 9-10's name for ScatterElements (the importer renames it)."""
    return scatter_elements(attrs, inputs)


def _scatter_nd_infer(attrs, ins, consts):
    (data, _dt), (idx, _), (upd, _) = ins[0], ins[1], ins[2]
    m = idx[-1]
    want = tuple(idx[:-1]) + tuple(data[m:])
    if m > len(data) or tuple(upd) != want:
        raise ValueError(f"updates {list(upd)} must have shape {list(want)} for data {list(data)} "
                         f"and indices {list(idx)}")
    _reduction(attrs)
    return [ins[0]]


@op("ScatterND", normalise=AS_IS, infer=_scatter_nd_infer, cost=DMA, split=NONE, quant=_SCATTERED,
    param_inputs=(1,))
def scatter_nd(attrs, inputs):
    """A copy of ``data`` with the slices named by the last axis of ``indices`` replaced
    by (or, with ``reduction``, combined with) ``updates``."""
    data, indices, updates = inputs
    where = _nd_index(data.shape, np.asarray(indices), 0, "ScatterND")
    return [_scatter_into(data, where, updates, _reduction(attrs))]


# -- TensorScatter ------------------------------------------------------------------------------------
def _tensor_scatter_infer(attrs, ins, consts):
    (cache, _dt), (upd, _) = ins[0], ins[1]
    axis = norm_axis(int(attrs.get("axis", -2)), len(cache))
    if axis == 0 or len(upd) != len(cache) or any(u != c for a, (u, c) in enumerate(zip(upd, cache, strict=True))
                                                  if a != axis) or upd[axis] > cache[axis]:
        raise ValueError(f"update {list(upd)} does not fit cache {list(cache)} on axis {axis}")
    return [ins[0]]


def _tensor_scatter_split(attrs, ins, outs, consts):
    """Batch (write positions cut with it), then any other axis but the written one."""
    cache = ins[0][0]
    axis = norm_axis(int(attrs.get("axis", -2)), len(cache))
    has_start = len(ins) > 2 and ins[2] is not None
    axes = []
    for a in range(len(cache)):
        if a != axis and cache[a] >= 2:
            start = ((0, 1) if a == 0 else None,) if has_start else ()
            axes.append(SplitAxis("batch" if a == 0 else f"axis{a}", cache[a], ((a, 1), (a, 1)) + start, (a, 1)))
    return axes, False


@op("TensorScatter", normalise=AS_IS, infer=_tensor_scatter_infer, cost=DMA, split=_tensor_scatter_split,
    quant=Quant(MOVEMENT, None, ties_inputs=True), param_inputs=(2,))
def tensor_scatter(attrs, inputs):
    """KV-cache update (opset 24): a copy of ``past_cache`` with ``update`` written along
    ``axis`` (default -2) from position ``write_indices[b]`` of each batch entry ``b``
    (default 0); ``mode`` circular wraps around the cache length, linear must fit."""
    cache, update = inputs[0], inputs[1]
    axis = norm_axis(int(attrs.get("axis", -2)), cache.ndim)
    mode = attrs.get("mode", "linear")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    n, s = cache.shape[axis], update.shape[axis]
    start = (np.zeros(cache.shape[0], np.int64) if len(inputs) < 3 or inputs[2] is None
             else np.asarray(inputs[2]).astype(np.int64).reshape(-1))
    pos = start[:, None] + np.arange(s)[None, :]  # (B, S)
    if mode == "circular":
        pos %= n
    elif mode != "linear":
        raise ValueError(f"TensorScatter: unknown mode {mode!r}")
    if pos.size and (pos.min() < 0 or pos.max() >= n):
        raise ValueError("TensorScatter: a write position is outside the cache")
    out = np.array(cache, copy=True)
    view = np.moveaxis(out, axis, 1)  # (B, N, ...): writes go through to ``out``
    view[np.arange(cache.shape[0])[:, None], pos] = np.moveaxis(update, axis, 1)
    return [out]


# -- OneHot ---------------------------------------------------------------------------------------------
def _depth(d) -> int:
    d = np.asarray(d).reshape(-1)
    if d.size != 1:
        raise ValueError("depth must hold one value")
    return int(d[0])


def _onehot_infer(attrs, ins, consts):
    (idx, _), (_vals, dt) = ins[0], ins[2]
    if consts[1] is None:
        raise ValueError("depth is not a constant at import")
    rank = len(idx) + 1
    axis = norm_axis(int(attrs.get("axis", -1)), rank)
    out = list(idx)
    out.insert(axis, _depth(consts[1]))
    return [(tuple(out), dt)]


def _onehot_split(attrs, ins, outs, consts):
    """Any axis of the indices (never the one-hot axis)."""
    idx = ins[0][0]
    rank = len(idx) + 1
    axis = norm_axis(int(attrs.get("axis", -1)), rank)
    axes = []
    for a in range(len(idx)):
        oa = a if a < axis else a + 1
        if idx[a] >= 2:
            axes.append(SplitAxis("batch" if a == 0 else f"axis{a}", idx[a], ((a, 1), None, None), (oa, 1)))
    return axes, False


@op("OneHot", normalise=AS_IS, infer=_onehot_infer, cost=DMA, split=_onehot_split,
    quant=Quant(FLOAT, lambda attrs, rngs, consts: UNKNOWN), param_inputs=(0, 1))
def one_hot(attrs, inputs):
    """``values[1]`` where the new ``axis`` equals the index, ``values[0]`` elsewhere;
    indices (any numeric type, truncated) in ``[-depth, depth)`` count negative ones from the
    end, others give a row of ``values[0]``."""
    indices, depth, values = inputs
    d = _depth(depth)
    idx = np.asarray(indices)
    idx = (np.trunc(idx) if idx.dtype.kind == "f" else idx).astype(np.int64)
    idx = np.where(idx < 0, idx + d, idx)
    axis = norm_axis(int(attrs.get("axis", -1)), idx.ndim + 1)
    shape = [1] * (idx.ndim + 1)
    shape[axis] = d
    hot = np.expand_dims(idx, axis) == np.arange(d).reshape(shape)
    off, on = np.asarray(values).reshape(-1)[:2]
    return [np.where(hot, on, off).astype(values.dtype, copy=False)]
