"""Convolutions through explicit patches: Col2Im and DeformConv.

Col2Im adds each block column back into the image, one strided slice per block tap
(O(N * C * blocks * taps)). DeformConv samples, for every kernel tap, the input at the
tap's position plus its learned offset (bilinear, zero outside the image), scales it by
the optional mask, and multiplies the gathered columns by the weights as grouped Conv's
im2col does: O(N * C * K * P) gathers and O(N * M * Cg * K * P) multiply-adds for K kernel
taps and P output positions.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from corefold.ops.facets import DMA, matrix, prod
from corefold.ops.registry import op
from corefold.ops.schema import AS_IS, COMPUTE, FLOAT, Quant, SplitAxis


def _ints(a) -> list[int]:
    return [int(v) for v in np.asarray(a).reshape(-1)]


# -- Col2Im -----------------------------------------------------------------------------------------
def _col2im_geometry(attrs, image, block):
    k = len(image)
    dil = list(attrs.get("dilations") or [1] * k)
    pads = list(attrs.get("pads") or [0] * (2 * k))
    strides = list(attrs.get("strides") or [1] * k)
    counts = [(image[i] + pads[i] + pads[i + k] - (dil[i] * (block[i] - 1) + 1)) // strides[i] + 1 for i in range(k)]
    return dil, pads, strides, counts


def _col2im_infer(attrs, ins, consts):
    (x, dt) = ins[0]
    if consts[1] is None or consts[2] is None:
        raise ValueError("image_shape and block_shape must be constants at import")
    image, block = _ints(consts[1]), _ints(consts[2])
    _, _, _, counts = _col2im_geometry(attrs, image, block)
    bsize = prod(block)
    if len(x) != 3 or x[1] % bsize or x[2] != prod(counts):
        raise ValueError(f"input {list(x)} does not fit image {image}, block {block} ({prod(counts)} blocks)")
    return [((x[0], x[1] // bsize) + tuple(image), dt)]


def _col2im_split(attrs, ins, outs, consts):
    """Batch, then channel (each channel's columns are contiguous in axis 1)."""
    x = ins[0][0]
    n, c = outs[0][0][0], outs[0][0][1]
    axes = []
    if n >= 2:
        axes.append(SplitAxis("batch", n, ((0, 1), None, None), (0, 1)))
    if c >= 2:
        axes.append(SplitAxis("channel", c, ((1, x[1] // c), None, None), (1, 1)))
    return axes, True


@op("Col2Im", normalise=AS_IS, infer=_col2im_infer, cost=DMA, split=_col2im_split,
    quant=Quant(COMPUTE), param_inputs=(1, 2))
def col2im(attrs, inputs):
    """Rearrange ``(N, C * prod(block_shape), L)`` columns into ``(N, C, *image_shape)``,
    adding overlapping values (``dilations``, ``pads``, ``strides`` as in Conv)."""
    x, image, block = inputs[0], _ints(inputs[1]), _ints(inputs[2])
    k = len(image)
    dil, pads, strides, counts = _col2im_geometry(attrs, image, block)
    n, cb, _ = x.shape
    c = cb // prod(block)
    cols = x.reshape((n, c) + tuple(block) + tuple(counts))
    padded = np.zeros((n, c) + tuple(image[i] + pads[i] + pads[i + k] for i in range(k)), x.dtype)
    for tap in itertools.product(*(range(b) for b in block)):
        dst = tuple(slice(t * d, t * d + (m - 1) * s + 1, s) for t, d, m, s in zip(tap, dil, counts, strides, strict=True))
        padded[(slice(None), slice(None)) + dst] += cols[(slice(None), slice(None)) + tap]
    crop = tuple(slice(pads[i], pads[i] + image[i]) for i in range(k))
    return [np.ascontiguousarray(padded[(slice(None), slice(None)) + crop])]


# -- DeformConv --------------------------------------------------------------------------------------
def _deform_geometry(attrs, x, w):
    k = len(x) - 2
    kernel = list(attrs.get("kernel_shape") or w[2:])
    dil = list(attrs.get("dilations") or [1] * k)
    pads = list(attrs.get("pads") or [0] * (2 * k))
    strides = list(attrs.get("strides") or [1] * k)
    outs = [(x[2 + i] + pads[i] + pads[i + k] - (dil[i] * (kernel[i] - 1) + 1)) // strides[i] + 1 for i in range(k)]
    return kernel, dil, pads, strides, outs


def _deform_infer(attrs, ins, consts):
    (x, dt), (w, _), (off, _) = ins[0], ins[1], ins[2]
    kernel, _, _, _, outs = _deform_geometry(attrs, x, w)
    og = int(attrs.get("offset_group", 1))
    group = int(attrs.get("group", 1))
    if x[1] != w[1] * group or tuple(off) != (x[0], og * prod(kernel) * len(kernel)) + tuple(outs):
        raise ValueError(f"X {list(x)}, W {list(w)} and offset {list(off)} do not fit DeformConv")
    return [((x[0], w[0]) + tuple(outs), dt)]


def _deform_split(attrs, ins, outs, consts):
    """Batch (input, offsets and mask with it), then output channels (weights and bias)."""
    n, m = outs[0][0][0], outs[0][0][1]
    count = len(ins)
    axes = []
    if n >= 2:
        axes.append(SplitAxis("batch", n, tuple((0, 1) if i in (0, 2, 4) and ins[i] is not None else None
                                                for i in range(count)), (0, 1)))
    if int(attrs.get("group", 1)) == 1 and m >= 2:
        axes.append(SplitAxis("out_channels", m, tuple((0, 1) if i in (1, 3) and ins[i] is not None else None
                                                       for i in range(count)), (1, 1)))
    return axes, True


def _bilinear(xg: np.ndarray, pos: list[np.ndarray]) -> np.ndarray:
    """Values of ``xg (N, G, Cg, *S)`` at the real positions ``pos`` (each ``(N, G, *P)``),
    bilinear (multilinear) with zeros outside: ``(N, G, Cg, *P)``."""
    spatial = xg.shape[3:]
    nn = np.arange(xg.shape[0]).reshape((-1,) + (1,) * (pos[0].ndim - 1))
    gg = np.arange(xg.shape[1]).reshape((1, -1) + (1,) * (pos[0].ndim - 2))
    out = 0.0
    base = [np.floor(p) for p in pos]
    for corner in itertools.product((0, 1), repeat=len(pos)):
        weight = None
        idx, valid = [], None
        for b, p, c, d in zip(base, pos, corner, spatial, strict=True):
            i = b + c
            wgt = 1 - np.abs(p - i)
            ok = (i >= 0) & (i <= d - 1)
            valid = ok if valid is None else valid & ok
            weight = wgt if weight is None else weight * wgt
            idx.append(np.clip(i, 0, d - 1).astype(np.int64))
        vals = xg[(nn, gg, slice(None)) + tuple(idx)]  # (N, G, *P, Cg)
        out = out + np.where(valid, weight, 0.0)[..., None] * vals
    return np.moveaxis(out, -1, 2)


@op("DeformConv", normalise=AS_IS, infer=_deform_infer, split=_deform_split, quant=Quant(FLOAT), param_inputs=(2, 4),
    cost=matrix(lambda attrs, ins, outs: prod(outs[0][0]) * prod(ins[1][0][1:])))
def deform_conv(attrs, inputs):
    """Deformable convolution (opset 19): ``X (N, C, *S)``, ``W (M, C/group, *K)``, ``offset
    (N, offset_group * prod(K) * k, *out)`` (per tap, per axis), optional ``B (M)`` and ``mask
    (N, offset_group * prod(K), *out)``."""
    x, w, offset = inputs[0], inputs[1], inputs[2]
    b = inputs[3] if len(inputs) > 3 and inputs[3] is not None else None
    mask = inputs[4] if len(inputs) > 4 and inputs[4] is not None else None
    kernel, dil, pads, strides, outs = _deform_geometry(attrs, x.shape, w.shape)
    k = len(kernel)
    n, c = x.shape[:2]
    m = w.shape[0]
    group, og = int(attrs.get("group", 1)), int(attrs.get("offset_group", 1))
    taps = list(itertools.product(*(range(kk) for kk in kernel)))
    off = offset.astype(np.float64).reshape((n, og, len(taps), k) + tuple(outs))
    msk = None if mask is None else mask.astype(np.float64).reshape((n, og, len(taps)) + tuple(outs))
    xg = x.astype(np.float64).reshape((n, og, c // og) + x.shape[2:])
    cols = np.empty((n, c, len(taps)) + tuple(outs), np.float64)
    grids = np.meshgrid(*(np.arange(o) for o in outs), indexing="ij")
    for t, tap in enumerate(taps):
        pos = [(grids[i] * strides[i] - pads[i] + tap[i] * dil[i])[None, None] + off[:, :, t, i] for i in range(k)]
        v = _bilinear(xg, pos)  # (N, og, C/og, *out)
        if msk is not None:
            v = v * msk[:, :, t][:, :, None]
        cols[:, :, t] = v.reshape((n, c) + tuple(outs))
    p = math.prod(outs)
    cg, mg = c // group, m // group
    colm = cols.reshape(n, group, cg * len(taps), p)
    wm = w.astype(np.float64).reshape(group, mg, cg * len(taps))
    y = np.matmul(wm[None], colm).reshape((n, m) + tuple(outs))
    if b is not None:
        y = y + b.astype(np.float64).reshape((1, m) + (1,) * k)
    return [y.astype(x.dtype)]
