"""Resize (opset 21: inputs X, roi, scales, sizes): nearest, linear and cubic.

All three modes are separable, so the resize is applied one axis at a time: for each
resized axis the output coordinates are mapped back to input coordinates
(``coordinate_transformation_mode``) and the axis is gathered (nearest) or blended from
2 (linear) or 4 (cubic) gathered neighbours. Coordinates are computed in float32 in the
same operation order as ONNX Runtime so that nearest-neighbour ties round identically.
O(output elements * taps) per resized axis.
"""

from __future__ import annotations

import math

import numpy as np

from corefold.errors import UnsupportedOpError
from corefold.ops.facets import nonneg_if_data_inputs_are, prod, split_leading
from corefold.ops.registry import define, op
from corefold.ops.schema import COMPUTE, NONE, Cost, OpDef, Quant
from corefold.ops.spatial import attr_ints, attr_str

f32 = np.float32


# -- facets ------------------------------------------------------------------------------------------
def _resize_infer(attrs, ins, consts):
    x, dt = ins[0]
    r = len(x)

    def const(i):
        if len(ins) <= i or ins[i] is None:
            return None
        if consts[i] is None:
            raise ValueError(f"input {i} (roi/scales/sizes) is not a constant")
        return consts[i] if consts[i].size else None

    scales, sizes = const(2), const(3)
    axes = attrs.get("axes")
    axes = [a + r if a < 0 else a for a in axes] if axes else list(range(r))
    out = list(x)
    if sizes is not None:
        sizes = [int(s) for s in sizes.reshape(-1)]
        policy = attr_str(attrs, "keep_aspect_ratio_policy", "stretch")
        if policy == "stretch":
            for a, s in zip(axes, sizes, strict=False):
                out[a] = s
        else:
            ratios = [s / x[a] for a, s in zip(axes, sizes, strict=False)]
            sc = min(ratios) if policy == "not_larger" else max(ratios)
            for a in axes:
                out[a] = int(math.floor(sc * x[a] + 0.5))
    elif scales is not None:
        roi = const(1)
        crop = attr_str(attrs, "coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize" and roi is not None
        for j, (a, s) in enumerate(zip(axes, scales.reshape(-1), strict=False)):
            extent = float(roi.reshape(-1)[j + len(axes)] - roi.reshape(-1)[j]) if crop else 1.0
            out[a] = int(math.floor(x[a] * extent * float(s)))
    else:
        raise ValueError("neither scales nor sizes is given")
    return [(tuple(out), dt)]


def _resize_normalise(imp, n) -> None:
    """Upsample and Resize-10 are Resize with asymmetric coordinates and floor rounding;
    Resize-11/13's empty roi/scales placeholders become missing inputs."""
    if n.op == "Upsample" or imp.opset < 11:
        mode = attr_str(n.attrs, "mode", "nearest")
        if "scales" in n.attrs:  # Upsample-7/8
            scales = imp.const(np.array(n.attrs["scales"], np.float32), f"{n.name}_scales")
        else:
            scales = n.input(1)
        attrs = {"mode": "linear" if mode in ("linear", "bilinear") else mode,
                 "coordinate_transformation_mode": "asymmetric"}
        if attrs["mode"] == "nearest":
            attrs["nearest_mode"] = "floor"
        imp.emit("Resize", [n.inputs[0], None, scales], attrs, n.outputs, n.name)
        return
    ins = list(n.inputs)
    for i in (1, 2, 3):
        v = ins[i] if i < len(ins) else None
        if v is not None and v.is_constant and v.const.size == 0:
            ins[i] = None
    imp.emit(n.op, ins, n.attrs, n.outputs, n.name)


_RESIZE_COST = Cost("vector", lambda attrs, ins, outs: prod(outs[0][0]) * (1 if attr_str(attrs, "mode", "nearest") == "nearest" else 8))
RESIZE = dict(normalise=_resize_normalise, infer=_resize_infer, cost=_RESIZE_COST, split=split_leading(2),
              quant=Quant(COMPUTE, nonneg_if_data_inputs_are([0]), integer="layout"), param_inputs=(1, 2, 3))


def _output_geometry(attrs, x, scales, sizes) -> tuple[list[int], list[float]]:
    """Output size and (float32) scale per axis of ``x``."""
    rank = x.ndim
    axes = [a % rank for a in attr_ints(attrs, "axes", list(range(rank)))]
    out, scale = list(x.shape), [f32(1.0)] * rank
    if sizes is not None and np.size(sizes) > 0:
        sizes = [int(s) for s in np.ravel(sizes)]
        if len(sizes) != len(axes):
            raise UnsupportedOpError(f"Resize: sizes {sizes} do not match axes {axes}")
        policy = attr_str(attrs, "keep_aspect_ratio_policy", "stretch")
        ratios = [f32(s) / f32(x.shape[a]) for s, a in zip(sizes, axes, strict=True)]
        if policy == "stretch":
            for a, s, r in zip(axes, sizes, ratios, strict=True):
                out[a], scale[a] = s, r
        elif policy in ("not_larger", "not_smaller"):
            r = min(ratios) if policy == "not_larger" else max(ratios)
            for a in axes:
                out[a] = int(np.floor(f32(x.shape[a]) * r + f32(0.5)))
                scale[a] = r
        else:
            raise UnsupportedOpError(f"Resize: unknown keep_aspect_ratio_policy '{policy}'")
    elif scales is not None and np.size(scales) > 0:
        sc = [f32(s) for s in np.ravel(scales)]
        if len(sc) != len(axes):
            raise UnsupportedOpError(f"Resize: scales {sc} do not match axes {axes}")
        for a, s in zip(axes, sc, strict=True):
            if s <= 0:
                raise UnsupportedOpError(f"Resize: scale {s} is not positive")
            out[a], scale[a] = int(f32(x.shape[a]) * s), s
    else:
        raise UnsupportedOpError("Resize: neither scales nor sizes is given")
    return out, scale


def _source_coords(mode: str, n: int, m: int, s, roi: tuple[float, float] | None) -> np.ndarray:
    """Input coordinate (float32) of each of the ``m`` output positions along an axis of length ``n``."""
    xr = np.arange(m, dtype=f32)
    if mode == "half_pixel":
        return (xr + f32(0.5)) / s - f32(0.5)
    if mode == "half_pixel_symmetric":
        adjustment = f32(m) / (s * f32(n))
        offset = f32(n) / f32(2) * (f32(1) - adjustment)
        return offset + (xr + f32(0.5)) / s - f32(0.5)
    if mode == "pytorch_half_pixel":
        return (xr + f32(0.5)) / s - f32(0.5) if m > 1 else np.zeros(m, f32)
    if mode == "align_corners":
        return xr * f32(n - 1) / f32(m - 1) if m > 1 else np.zeros(m, f32)
    if mode == "asymmetric":
        return xr / s
    if mode == "tf_crop_and_resize":
        start, end = f32(roi[0]), f32(roi[1])
        if m > 1:
            return start * f32(n - 1) + xr * (end - start) * f32(n - 1) / f32(m - 1)
        return np.full(m, f32(0.5) * (start + end) * f32(n - 1), f32)
    raise UnsupportedOpError(f"Resize: unknown coordinate_transformation_mode '{mode}'")


def _nearest_index(x: np.ndarray, mode: str) -> np.ndarray:
    if mode == "round_prefer_floor":
        i = np.ceil(x - f32(0.5))
    elif mode == "round_prefer_ceil":
        i = np.floor(x + f32(0.5))
    elif mode == "floor":
        i = np.floor(x)
    elif mode == "ceil":
        i = np.ceil(x)
    else:
        raise UnsupportedOpError(f"Resize: unknown nearest_mode '{mode}'")
    return i.astype(np.int64)


def _along(w: np.ndarray, axis: int, ndim: int) -> np.ndarray:
    shape = [1] * ndim
    shape[axis] = -1
    return w.reshape(shape)


def _cubic_weights(t: np.ndarray, a: float) -> np.ndarray:
    """Weights ``(m, 4)`` of taps at offsets -1, 0, 1, 2 from ``floor(x)``, ``t = x - floor(x)``."""
    a = f32(a)
    d = np.stack([t + 1, t, 1 - t, 2 - t], axis=1).astype(f32)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, far).astype(f32)


def _antialias_weights(mode: str, ratio: np.ndarray, offsets: np.ndarray, scale: float, a: float) -> np.ndarray:
    """Weights ``(m, taps)`` of the linear (triangle) or cubic filter stretched by
    ``1 / scale`` for downsampling, at tap offsets ``offsets`` from ``floor(x)``."""
    d = np.abs((offsets[None, :] - ratio[:, None]) * scale)
    if mode == "linear":
        return np.clip(1 - d, 0, 1)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def _antialias_axis(y: np.ndarray, axis: int, x: np.ndarray, mode: str, scale: float, attrs) -> np.ndarray:
    """Antialiased linear/cubic downsampling along ``axis`` (ONNX ``antialias=1``): the
    filter's support grows to ``2 / scale`` (linear) or ``4 / scale`` (cubic) taps around
    each source coordinate, weights normalised to sum 1, edge taps clamped (or dropped with
    ``exclude_outside``). O(output elements x taps)."""
    n = y.shape[axis]
    radius = 1 if mode == "linear" else 2
    start = int(np.floor(-radius / scale)) + 1
    offsets = np.arange(start, 2 - start, dtype=np.float64)
    xd = x.astype(np.float64)
    base = np.floor(xd)
    ratio = xd - base
    whole = ratio == 0  # the reference takes ratio in (0, 1]: an integer coordinate is 1 past floor(x) - 1
    base[whole] -= 1
    ratio[whole] = 1.0
    w = _antialias_weights(mode, ratio, offsets, scale, float(attrs.get("cubic_coeff_a", -0.75)))
    w /= w.sum(axis=1, keepdims=True)
    taps = base.astype(np.int64)[:, None] + offsets.astype(np.int64)[None, :]
    if attrs.get("exclude_outside", 0):
        w = np.where((taps >= 0) & (taps < n), w, 0.0)
        w /= w.sum(axis=1, keepdims=True)
    taps = np.clip(taps, 0, n - 1)
    out = None
    for j in range(taps.shape[1]):
        term = np.take(y, taps[:, j], axis=axis) * _along(w[:, j].astype(y.dtype), axis, y.ndim)
        out = term if out is None else out + term
    return out


def _resize_axis(y: np.ndarray, axis: int, x: np.ndarray, mode: str, attrs, scale=None) -> np.ndarray:
    n = y.shape[axis]
    if scale is not None and scale < 1 and mode in ("linear", "cubic") and attrs.get("antialias", 0):
        return _antialias_axis(y, axis, x, mode, float(scale), attrs)
    if mode == "nearest":
        idx = np.clip(_nearest_index(x, attr_str(attrs, "nearest_mode", "round_prefer_floor")), 0, n - 1)
        return np.take(y, idx, axis=axis)
    if mode == "linear":
        xc = np.clip(x, f32(0), f32(n - 1))
        i0 = np.minimum(np.floor(xc).astype(np.int64), n - 1)
        i1 = np.minimum(i0 + 1, n - 1)
        w1 = _along((xc - i0.astype(f32)).astype(y.dtype), axis, y.ndim)
        y0 = np.take(y, i0, axis=axis)
        return y0 + (np.take(y, i1, axis=axis) - y0) * w1
    if mode == "cubic":
        i0 = np.floor(x).astype(np.int64)
        w = _cubic_weights(x - i0.astype(f32), attrs.get("cubic_coeff_a", -0.75))
        taps = i0[:, None] + np.arange(-1, 3)[None, :]
        if attrs.get("exclude_outside", 0):
            w = np.where((taps >= 0) & (taps < n), w, f32(0))
            w = w / w.sum(axis=1, keepdims=True)
        taps = np.clip(taps, 0, n - 1)
        out = None
        for j in range(4):
            term = np.take(y, taps[:, j], axis=axis) * _along(w[:, j].astype(y.dtype), axis, y.ndim)
            out = term if out is None else out + term
        return out
    raise UnsupportedOpError(f"Resize: unknown mode '{mode}'")


@op("Resize", **RESIZE)
def resize(attrs, inputs):
    """ONNX Resize, opset 21.

    Raises:
        UnsupportedOpError: an unknown mode, or missing scales and sizes.
    """
    x = inputs[0]
    roi = inputs[1] if len(inputs) > 1 else None
    scales = inputs[2] if len(inputs) > 2 else None
    sizes = inputs[3] if len(inputs) > 3 else None
    mode = attr_str(attrs, "mode", "nearest")
    ctm = attr_str(attrs, "coordinate_transformation_mode", "half_pixel")
    out, scale = _output_geometry(attrs, x, scales, sizes)
    rois = None
    if ctm == "tf_crop_and_resize":
        if roi is None or np.size(roi) == 0:
            raise UnsupportedOpError("Resize: tf_crop_and_resize needs the roi input")
        axes = [a % x.ndim for a in attr_ints(attrs, "axes", list(range(x.ndim)))]
        r = np.ravel(roi).astype(np.float32)
        k = len(axes)
        rois = {a: (0.0, 1.0) for a in range(x.ndim)}
        rois.update({a: (r[i], r[k + i]) for i, a in enumerate(axes)})
    y = x
    outside = None
    for axis in range(x.ndim):
        n, m = x.shape[axis], out[axis]
        coords = _source_coords(ctm, n, m, scale[axis], rois[axis] if rois else None)
        if m == n and np.array_equal(coords, np.arange(n, dtype=f32)):
            continue
        y = _resize_axis(y, axis, coords, mode, attrs, scale[axis])
        if rois is not None:
            bad = _along((coords < 0) | (coords > n - 1), axis, x.ndim)
            outside = bad if outside is None else (outside | bad)
    if outside is not None and outside.any():
        y = np.where(outside, y.dtype.type(attrs.get("extrapolation_value", 0.0)), y)
    return [y.copy() if y is x else y]


#: Upsample (deprecated at opset 10) is imported as Resize and never reaches the IR.
define(OpDef("Upsample", normalise=_resize_normalise, infer=NONE, kernel=NONE, cost=NONE, split=NONE, quant=NONE,
             param_inputs=(1,)))
