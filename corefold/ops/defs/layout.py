"""Rearrangements: DepthToSpace, SpaceToDepth, CenterCropPad and ReverseSequence.

Each moves (or drops, or zero-fills) values of its first input and nothing else, so the
quantizer treats it as data movement sharing the input's scale, and the integer runner
runs it on the integers. DepthToSpace and SpaceToDepth are one reshape-transpose-reshape,
CenterCropPad one slice copy, ReverseSequence one gather along the time axis: O(elements).
"""

from __future__ import annotations

import numpy as np

from corefold.ops.facets import DMA, first_input_range, norm_axis, split_any
from corefold.ops.registry import op
from corefold.ops.schema import AS_IS, MOVEMENT, Interval, Quant, SplitAxis

_MOVE = Quant(MOVEMENT, first_input_range, integer="layout")


def _mode(attrs) -> str:
    mode = attrs.get("mode", "DCR")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if mode not in ("DCR", "CRD"):
        raise ValueError(f"mode must be DCR or CRD, got {mode!r}")
    return mode


def _blocksize(attrs) -> int:
    if "blocksize" not in attrs:
        raise ValueError("missing required attribute 'blocksize'")
    b = int(attrs["blocksize"])
    if b < 1:
        raise ValueError(f"blocksize {b} < 1")
    return b


# -- DepthToSpace / SpaceToDepth ---------------------------------------------------------------------
def _d2s_infer(attrs, ins, consts):
    (n, c, h, w), dt = ins[0]
    b = _blocksize(attrs)
    _mode(attrs)
    if c % (b * b):
        raise ValueError(f"channels {c} not divisible by blocksize^2 = {b * b}")
    return [((n, c // (b * b), h * b, w * b), dt)]


def _s2d_infer(attrs, ins, consts):
    (n, c, h, w), dt = ins[0]
    b = _blocksize(attrs)
    _mode(attrs)
    if h % b or w % b:
        raise ValueError(f"height {h} and width {w} must be multiples of blocksize {b}")
    return [((n, c * b * b, h // b, w // b), dt)]


def _d2s_split(attrs, ins, outs, consts):
    """Batch, then input rows (each writes ``blocksize`` output rows)."""
    x = ins[0][0]
    b = int(attrs.get("blocksize", 1))
    axes = []
    if x[0] >= 2:
        axes.append(SplitAxis("batch", x[0], ((0, 1),), (0, 1)))
    if x[2] >= 2:
        axes.append(SplitAxis("height", x[2], ((2, 1),), (2, b)))
    return axes, True


def _s2d_split(attrs, ins, outs, consts):
    """Batch, then output rows (each reads ``blocksize`` input rows)."""
    y = outs[0][0]
    b = int(attrs.get("blocksize", 1))
    axes = []
    if y[0] >= 2:
        axes.append(SplitAxis("batch", y[0], ((0, 1),), (0, 1)))
    if y[2] >= 2:
        axes.append(SplitAxis("height", y[2], ((2, b),), (2, 1)))
    return axes, True


@op("DepthToSpace", normalise=AS_IS, infer=_d2s_infer, cost=DMA, split=_d2s_split, quant=_MOVE, param_inputs=())
def depth_to_space(attrs, inputs):
    """``(N, C, H, W)`` -> ``(N, C / b^2, H * b, W * b)``; ``mode`` DCR (depth-column-row,
    the default) or CRD reads the channel as (block row, block column, channel) or
    (channel, block row, block column)."""
    x = inputs[0]
    (n, c, h, w), b = x.shape, _blocksize(attrs)
    if _mode(attrs) == "DCR":
        y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return [y.reshape(n, c // (b * b), h * b, w * b)]


@op("SpaceToDepth", normalise=AS_IS, infer=_s2d_infer, cost=DMA, split=_s2d_split, quant=_MOVE, param_inputs=())
def space_to_depth(attrs, inputs):
    """``(N, C, H, W)`` -> ``(N, C * b^2, H / b, W / b)``, the inverse of DepthToSpace in
    the same ``mode`` (DCR default; CRD from opset 28)."""
    x = inputs[0]
    (n, c, h, w), b = x.shape, _blocksize(attrs)
    y = x.reshape(n, c, h // b, b, w // b, b)
    y = y.transpose(0, 3, 5, 1, 2, 4) if _mode(attrs) == "DCR" else y.transpose(0, 1, 3, 5, 2, 4)
    return [y.reshape(n, c * b * b, h // b, w // b)]


# -- CenterCropPad ------------------------------------------------------------------------------------
def _crop_pad_plan(shape, target, axes_attr) -> tuple[list[int], list[slice], list[slice]]:
    rank = len(shape)
    axes = [norm_axis(int(a), rank) for a in axes_attr] if axes_attr else list(range(rank))
    target = [int(t) for t in np.asarray(target).reshape(-1)]
    if len(target) != len(axes):
        raise ValueError(f"shape has {len(target)} values for {len(axes)} axes")
    out = list(shape)
    src = [slice(None)] * rank
    dst = [slice(None)] * rank
    for a, t in zip(axes, target, strict=True):
        d = shape[a]
        if t < 0:
            raise ValueError(f"negative target size {t}")
        out[a] = t
        if t < d:  # crop: the centre, one more element dropped at the end when odd
            off = (d - t) // 2
            src[a] = slice(off, off + t)
        elif t > d:  # pad: the input in the centre, one more zero at the end when odd
            off = (t - d) // 2
            dst[a] = slice(off, off + d)
    return out, src, dst


def _crop_pad_infer(attrs, ins, consts):
    shape, dt = ins[0]
    if consts[1] is None:
        raise ValueError("the target shape is not a constant at import")
    out, _, _ = _crop_pad_plan(shape, consts[1], attrs.get("axes"))
    return [(tuple(out), dt)]


def _crop_pad_split(attrs, ins, outs, consts):
    """Any axis not named by ``axes`` (a named axis' size is in the shape input, which a
    piece would read whole)."""
    def named(attrs, rank):
        return {norm_axis(int(a), rank) for a in attrs["axes"]} if attrs.get("axes") else set(range(rank))
    return split_any(named, whole=(1,))(attrs, ins, outs, consts)


def _crop_pad_range(attrs, rngs, consts) -> Interval:
    r = first_input_range(attrs, rngs, consts)
    if r.lo is None and r.hi is None:
        return r
    return Interval(None if r.lo is None else min(r.lo, 0.0), None if r.hi is None else max(r.hi, 0.0))


@op("CenterCropPad", normalise=AS_IS, infer=_crop_pad_infer, cost=DMA, split=_crop_pad_split,
    quant=Quant(MOVEMENT, _crop_pad_range, integer="layout"), param_inputs=(1,))
def center_crop_pad(attrs, inputs):
    """Crop or zero-pad each of ``axes`` (default all) around its centre to the sizes of
    input 1 (opset 18)."""
    x = inputs[0]
    out, src, dst = _crop_pad_plan(x.shape, inputs[1], attrs.get("axes"))
    y = np.zeros(out, x.dtype)
    y[tuple(dst)] = x[tuple(src)]
    return [y]


# -- ReverseSequence -----------------------------------------------------------------------------------
def _reverse_axes(attrs, rank: int) -> tuple[int, int]:
    b = norm_axis(int(attrs.get("batch_axis", 1)), rank)
    t = norm_axis(int(attrs.get("time_axis", 0)), rank)
    if b == t or rank < 2:
        raise ValueError("batch_axis and time_axis must be two different axes")
    return b, t


def _reverse_split(attrs, ins, outs, consts):
    """Batch (with its sequence lengths), then any axis but time."""
    x = ins[0][0]
    b, t = _reverse_axes(attrs, len(x))
    axes = []
    if x[b] >= 2:
        axes.append(SplitAxis("batch", x[b], ((b, 1), (0, 1)), (b, 1)))
    for a in range(len(x)):
        if a not in (b, t) and x[a] >= 2:
            axes.append(SplitAxis(f"axis{a}", x[a], ((a, 1), None), (a, 1)))
    return axes, True


def _reverse_infer(attrs, ins, consts):
    shape, dt = ins[0]
    b, _ = _reverse_axes(attrs, len(shape))
    if ins[1][0] != (shape[b],):
        raise ValueError(f"sequence_lens {list(ins[1][0])} does not match batch size {shape[b]}")
    return [ins[0]]


@op("ReverseSequence", normalise=AS_IS, infer=_reverse_infer, cost=DMA, split=_reverse_split,
    quant=Quant(MOVEMENT, first_input_range, integer="layout"), param_inputs=(1,))
def reverse_sequence(attrs, inputs):
    """Reverse the first ``sequence_lens[i]`` steps along ``time_axis`` of every batch
    entry ``i`` along ``batch_axis``; later steps stay in place."""
    x, lens = inputs[0], np.asarray(inputs[1]).astype(np.int64).reshape(-1)
    b, t = _reverse_axes(attrs, x.ndim)
    steps = np.arange(x.shape[t])
    src = np.where(steps[None, :] < lens[:, None], lens[:, None] - 1 - steps[None, :], steps[None, :])  # (B, T)
    if b > t:
        src = src.T
    shape = [1] * x.ndim
    shape[min(b, t)], shape[max(b, t)] = src.shape
    idx = np.broadcast_to(src.reshape(shape), x.shape)
    return [np.take_along_axis(x, idx, axis=t)]

