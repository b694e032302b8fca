"""Resampling at computed positions: GridSample, AffineGrid, RoiAlign and MaxRoiPool.

Each kernel computes all sample positions and interpolation weights as arrays and loops
only over interpolation taps (2 per axis for linear, 4 for cubic, the sampling grid of a
RoiAlign bin, the cells of a MaxRoiPool bin), each tap one gather over every output
position and channel: O(output * taps). Coordinates and weights are float64, results
keep the input dtype.
"""

from __future__ import annotations

import itertools

import numpy as np

from corefold.ops.facets import prod
from corefold.ops.registry import op
from corefold.ops.schema import AS_IS, COMPUTE, FLOAT, MOVEMENT, NONE, Cost, Quant, SplitAxis


def _s(attrs, name: str, default: str) -> str:
    v = attrs.get(name, default)
    return v.decode() if isinstance(v, bytes) else str(v)


# -- GridSample -----------------------------------------------------------------------------------
def _reflect(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Reflect ``x`` at the borders ``lo``, ``hi`` until it lies between them."""
    rng = hi - lo
    if rng <= 0:
        return np.full_like(x, lo)
    below, above = x < lo, x > hi
    dx = np.where(below, lo - x, x - hi)
    n = np.floor(dx / rng)
    r = dx - n * rng
    even = (n % 2) == 0
    return np.where(below, np.where(even, lo + r, hi - r), np.where(above, np.where(even, hi - r, lo + r), x))


def _cubic(t: np.ndarray) -> list[np.ndarray]:
    """Keys cubic convolution weights (alpha -0.75) of taps -1, 0, 1, 2 at offset ``t``."""
    a = -0.75
    w = []
    for d in (t + 1, t, 1 - t, 2 - t):
        d = np.abs(d)
        w.append(np.where(d <= 1, ((a + 2) * d - (a + 3)) * d * d + 1, ((a * d - 5 * a) * d + 8 * a) * d - 4 * a))
    return w


def _grid_mode(attrs) -> str:
    mode = _s(attrs, "mode", "linear")
    return {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)


def _grid_normalise(imp, n) -> None:
    """Opset 16's mode names bilinear and bicubic are opset 20's linear and cubic."""
    if "mode" in n.attrs:
        n.attrs["mode"] = _grid_mode(n.attrs)
    imp.emit(n.op, n.inputs, n.attrs, n.outputs, n.name)


def _grid_infer(attrs, ins, consts):
    (x, dt), (g, _) = ins[0], ins[1]
    k = len(x) - 2
    if len(g) != k + 2 or g[-1] != k or g[0] != x[0]:
        raise ValueError(f"grid {list(g)} does not fit input {list(x)}")
    return [((x[0], x[1]) + tuple(g[1:-1]), dt)]


def _grid_split(attrs, ins, outs, consts):
    """Batch (input and grid), then channel (input only)."""
    x = ins[0][0]
    axes = []
    if x[0] >= 2:
        axes.append(SplitAxis("batch", x[0], ((0, 1), (0, 1)), (0, 1)))
    if x[1] >= 2:
        axes.append(SplitAxis("channel", x[1], ((1, 1), None), (1, 1)))
    return axes, True


def _grid_taps(attrs):
    return {"nearest": 1, "linear": 2, "cubic": 4}.get(_grid_mode(attrs), 2)


@op("GridSample", normalise=_grid_normalise, infer=_grid_infer, split=_grid_split, param_inputs=(1,),
    quant=Quant(COMPUTE), cost=Cost("vector", lambda attrs, ins, outs: prod(outs[0][0]) * 2
                                     * _grid_taps(attrs) ** (len(ins[0][0]) - 2)))
def grid_sample(attrs, inputs):
    """Sample ``X (N, C, *S)`` at the normalised positions of ``grid (N, *out, k)`` (last axis
    ordered x, y, z: the spatial axes backwards). ``mode`` nearest (round half to even),
    linear or cubic; ``padding_mode`` zeros, border or reflection; ``align_corners`` maps
    -1 and 1 to the corner pixels' centres instead of their outer edges (opsets 16-22)."""
    x, grid = inputs[0], inputs[1]
    mode, padding = _grid_mode(attrs), _s(attrs, "padding_mode", "zeros")
    align = bool(attrs.get("align_corners", 0))
    dims = x.shape[2:]
    k = len(dims)
    out_shape = grid.shape[1:-1]
    per_axis = []  # per spatial axis: list of (index array, weight array or None)
    for i, d in enumerate(dims):
        g = grid[..., k - 1 - i].astype(np.float32)
        c = (g + 1) / 2 * (d - 1) if align else ((g + 1) * d - 1) / 2
        c = c.astype(np.float64)
        lo, hi = (0.0, d - 1.0) if align else (-0.5, d - 0.5)
        if mode == "nearest":
            c = np.rint(c)
        if padding == "border" and mode != "cubic":
            # NOTE: cubic clamps each tap, not the position (ONNX Runtime and PyTorch do; ONNX's
            # node cases do not cover cubic with border padding)
            c = np.where((c < lo) | (c > hi), np.clip(c, 0, d - 1), c)
        elif padding == "reflection":
            c = _reflect(c, lo, hi)
        if mode == "nearest":
            per_axis.append([(c.astype(np.int64), None)])
            continue
        base = np.floor(c)
        t = c - base
        if mode == "linear":
            per_axis.append([(base.astype(np.int64), 1 - t), (base.astype(np.int64) + 1, t)])
        elif mode == "cubic":
            w = _cubic(t)
            per_axis.append([(base.astype(np.int64) + off, w[j]) for j, off in enumerate((-1, 0, 1, 2))])
        else:
            raise ValueError(f"GridSample: unknown mode {mode!r}")
    y = np.zeros((x.shape[0],) + tuple(out_shape) + (x.shape[1],), np.float64)
    batch = np.arange(x.shape[0]).reshape((-1,) + (1,) * len(out_shape))
    for combo in itertools.product(*per_axis):
        idx, weight, valid = [], None, None
        for (ix, w), d in zip(combo, dims, strict=True):
            if padding == "zeros":
                ok = (ix >= 0) & (ix < d)
                valid = ok if valid is None else valid & ok
                ix = np.clip(ix, 0, d - 1)
            elif padding == "border":
                ix = np.clip(ix, 0, d - 1)
            else:
                lo, hi = (0.0, d - 1.0) if align else (-0.5, d - 0.5)
                ix = np.clip(_reflect(ix.astype(np.float64), lo, hi).astype(np.int64), 0, d - 1)
            idx.append(ix)
            if w is not None:
                weight = w if weight is None else weight * w
        vals = x[(batch, slice(None)) + tuple(idx)].astype(np.float64)  # (N, *out, C)
        if weight is not None:
            vals = vals * weight[..., None]
        if valid is not None:
            vals = np.where(valid[..., None], vals, 0.0)
        y += vals
    return [np.ascontiguousarray(np.moveaxis(y, -1, 1)).astype(x.dtype)]


# -- AffineGrid ------------------------------------------------------------------------------------
def _affine_infer(attrs, ins, consts):
    (theta, dt) = ins[0]
    if consts[1] is None:
        raise ValueError("size is not a constant at import")
    size = [int(s) for s in np.asarray(consts[1]).reshape(-1)]
    k = len(size) - 2
    if k not in (2, 3) or tuple(theta) != (size[0], k, k + 1):
        raise ValueError(f"theta {list(theta)} does not fit size {size}")
    return [(tuple([size[0]] + size[2:] + [k]), dt)]


# never split: the batch is also in ``size``
@op("AffineGrid", normalise=AS_IS, infer=_affine_infer, split=NONE, quant=Quant(FLOAT), param_inputs=(1,),
    cost=Cost("vector", lambda attrs, ins, outs: prod(outs[0][0]) * 4))
def affine_grid(attrs, inputs):
    """The sampling grid ``(N, *spatial, k)`` of the affine maps ``theta (N, k, k+1)`` over a
    regular grid of ``size`` (N, C, *spatial) in [-1, 1] (pixel centres, or corners with
    ``align_corners``), as GridSample reads it (x first)."""
    theta, size = inputs[0], [int(s) for s in np.asarray(inputs[1]).reshape(-1)]
    spatial = size[2:]
    align = bool(attrs.get("align_corners", 0))
    axes = []
    for d in spatial:
        if align:
            axes.append(np.linspace(-1.0, 1.0, d) if d > 1 else np.zeros(1))
        else:
            axes.append((np.arange(d) * 2.0 + 1.0) / d - 1.0)
    mesh = np.meshgrid(*axes, indexing="ij")  # per spatial axis, outermost first
    coords = np.stack(list(mesh[::-1]) + [np.ones(tuple(spatial))], axis=-1)  # x, y(, z), 1
    flat = coords.reshape(-1, len(spatial) + 1)
    grid = np.einsum("nij,pj->npi", theta.astype(np.float64), flat)
    return [grid.reshape([size[0]] + spatial + [len(spatial)]).astype(theta.dtype)]


# -- RoiAlign ----------------------------------------------------------------------------------------
def _roi_normalise(imp, n) -> None:
    """Opset 10 had no ``coordinate_transformation_mode``: its sampling is
    output_half_pixel; opset 16's default is half_pixel."""
    if imp.opset < 16:
        n.attrs.setdefault("coordinate_transformation_mode", "output_half_pixel")
    imp.emit(n.op, n.inputs, n.attrs, n.outputs, n.name)


def _roi_infer(attrs, ins, consts):
    (x, dt), (rois, _), (idx, _) = ins[0], ins[1], ins[2]
    if len(x) != 4 or len(rois) != 2 or rois[1] != 4 or tuple(idx) != (rois[0],):
        raise ValueError(f"X {list(x)}, rois {list(rois)} and batch_indices {list(idx)} do not fit RoiAlign")
    return [((rois[0], x[1], int(attrs.get("output_height", 1)), int(attrs.get("output_width", 1))), dt)]


def _roi_split(attrs, ins, outs, consts):
    """The regions (with their boxes and batch indices), then the channels."""
    r, c = outs[0][0][0], outs[0][0][1]
    axes = []
    if r >= 2:
        axes.append(SplitAxis("rois", r, (None, (0, 1), (0, 1)), (0, 1)))
    if c >= 2:
        axes.append(SplitAxis("channel", c, ((1, 1), None, None), (1, 1)))
    return axes, True


@op("RoiAlign", normalise=_roi_normalise, infer=_roi_infer, split=_roi_split,
    quant=Quant(COMPUTE), param_inputs=(1, 2),
    cost=Cost("vector", lambda attrs, ins, outs: prod(outs[0][0]) * 16))
def roi_align(attrs, inputs):
    """Average (``mode`` avg) or max of bilinear samples on a regular grid in each of the
    ``output_height x output_width`` bins of each region ``rois[r] = (x1, y1, x2, y2)`` (times
    ``spatial_scale``, minus half a pixel with the half_pixel mode) of image
    ``batch_indices[r]``; ``sampling_ratio`` samples per bin axis, or ``ceil(bin size)``.
    Max mode takes, as ONNX and ONNX Runtime do, the largest weighted corner value."""
    x, rois, bidx = inputs[0], np.asarray(inputs[1], np.float64), np.asarray(inputs[2]).astype(np.int64)
    _, c, h, w = x.shape
    ph, pw = int(attrs.get("output_height", 1)), int(attrs.get("output_width", 1))
    ratio = int(attrs.get("sampling_ratio", 0))
    scale = float(attrs.get("spatial_scale", 1.0))
    half = _s(attrs, "coordinate_transformation_mode", "half_pixel") == "half_pixel"
    mode = _s(attrs, "mode", "avg").lower()
    off = 0.5 if half else 0.0
    x1, y1, x2, y2 = (rois[:, i] * scale - off for i in range(4))
    rw, rh = x2 - x1, y2 - y1
    if not half:
        rw, rh = np.maximum(rw, 1.0), np.maximum(rh, 1.0)
    bh, bw = rh / ph, rw / pw
    gh = np.full(len(rois), ratio) if ratio > 0 else np.ceil(rh / ph).astype(np.int64)
    gw = np.full(len(rois), ratio) if ratio > 0 else np.ceil(rw / pw).astype(np.int64)
    count = np.maximum(gh * gw, 1).astype(np.float64)
    r = len(rois)
    acc = np.zeros((r, ph, pw, c), np.float64)
    seen = np.zeros((r, 1, 1, 1), bool)
    pys, pxs = np.arange(ph)[None, :, None], np.arange(pw)[None, None, :]
    xf = x.astype(np.float64)
    for iy in range(int(gh.max(initial=0))):
        for ix in range(int(gw.max(initial=0))):
            live = ((iy < gh) & (ix < gw))[:, None, None]  # (R, 1, 1)
            yy = y1[:, None, None] + pys * bh[:, None, None] + (iy + 0.5) * bh[:, None, None] / np.maximum(gh, 1)[:, None, None]
            xx = x1[:, None, None] + pxs * bw[:, None, None] + (ix + 0.5) * bw[:, None, None] / np.maximum(gw, 1)[:, None, None]
            yy, xx = np.broadcast_arrays(yy, xx)
            inside = (yy >= -1.0) & (yy <= h) & (xx >= -1.0) & (xx <= w)
            yy, xx = np.maximum(yy, 0.0), np.maximum(xx, 0.0)
            y0, x0 = np.floor(yy).astype(np.int64), np.floor(xx).astype(np.int64)
            ytop, xtop = y0 >= h - 1, x0 >= w - 1
            y0, x0 = np.where(ytop, h - 1, y0), np.where(xtop, w - 1, x0)
            yy, xx = np.where(ytop, y0, yy), np.where(xtop, x0, xx)
            y1i, x1i = np.where(ytop, y0, y0 + 1), np.where(xtop, x0, x0 + 1)
            ly, lx = yy - y0, xx - x0
            hy, hx = 1 - ly, 1 - lx
            b = bidx[:, None, None]
            corners = [(y0, x0, hy * hx), (y0, x1i, hy * lx), (y1i, x0, ly * hx), (y1i, x1i, ly * lx)]
            vals = [xf[b, :, yc, xc] * np.where(inside, wt, 0.0)[..., None] for yc, xc, wt in corners]  # (R, PH, PW, C)
            if mode == "avg":
                acc += np.where(live[..., None], vals[0] + vals[1] + vals[2] + vals[3], 0.0)
            elif mode == "max":
                v = np.maximum(np.maximum(vals[0], vals[1]), np.maximum(vals[2], vals[3]))
                acc = np.where(live[..., None], np.where(seen, np.maximum(acc, v), v), acc)
                seen = seen | live[..., None]
            else:
                raise ValueError(f"RoiAlign: unknown mode {mode!r}")
    if mode == "avg":
        acc /= count[:, None, None, None]
    return [np.ascontiguousarray(acc.transpose(0, 3, 1, 2)).astype(x.dtype)]


# -- MaxRoiPool --------------------------------------------------------------------------------------
def _max_roi_infer(attrs, ins, consts):
    (x, dt), (rois, _) = ins[0], ins[1]
    if len(rois) != 2 or rois[1] != 5:
        raise ValueError(f"rois {list(rois)} must be (num_rois, 5)")
    ph, pw = attrs["pooled_shape"]
    return [((rois[0], x[1], int(ph), int(pw)), dt)]


@op("MaxRoiPool", normalise=AS_IS, infer=_max_roi_infer, split=NONE, quant=Quant(MOVEMENT, None), param_inputs=(1,),
    cost=Cost("vector", lambda attrs, ins, outs: prod(outs[0][0]) * 4))
def max_roi_pool(attrs, inputs):
    """Max over each of the ``pooled_shape`` bins of each region ``rois[r] = (batch, x1, y1,
    x2, y2)`` (coordinates times ``spatial_scale``, rounded; Caffe's integer bins; an empty
    bin gives 0)."""
    x, rois = inputs[0], np.asarray(inputs[1], np.float64)
    _, c, h, w = x.shape
    ph, pw = (int(v) for v in attrs["pooled_shape"])
    scale = float(attrs.get("spatial_scale", 1.0))
    b = rois[:, 0].astype(np.int64)
    # C's round: halves away from zero (NumPy's rounds them to even)
    x1, y1, x2, y2 = (np.trunc(rois[:, i] * scale + np.copysign(0.5, rois[:, i])).astype(np.int64) for i in range(1, 5))
    rh, rw = np.maximum(y2 - y1 + 1, 1), np.maximum(x2 - x1 + 1, 1)
    bh, bw = rh / ph, rw / pw
    hs = np.clip(np.floor(np.arange(ph)[None, :] * bh[:, None]).astype(np.int64) + y1[:, None], 0, h)
    he = np.clip(np.ceil((np.arange(ph)[None, :] + 1) * bh[:, None]).astype(np.int64) + y1[:, None], 0, h)
    ws = np.clip(np.floor(np.arange(pw)[None, :] * bw[:, None]).astype(np.int64) + x1[:, None], 0, w)
    we = np.clip(np.ceil((np.arange(pw)[None, :] + 1) * bw[:, None]).astype(np.int64) + x1[:, None], 0, w)
    low = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    acc = np.full((len(rois), ph, pw, c), low, np.float64)
    for dy in range(int((he - hs).max(initial=0))):
        for dx in range(int((we - ws).max(initial=0))):
            yy, xx = hs[:, :, None] + dy, ws[:, None, :] + dx
            ok = (yy < he[:, :, None]) & (xx < we[:, None, :])
            v = x[b[:, None, None], :, np.minimum(yy, h - 1), np.minimum(xx, w - 1)]
            acc = np.where(ok[..., None], np.maximum(acc, v), acc)
    acc = np.where(np.isneginf(acc), 0.0, acc)
    return [np.ascontiguousarray(acc.transpose(0, 3, 1, 2)).astype(x.dtype)]
