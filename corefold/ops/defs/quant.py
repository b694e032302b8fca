"""QuantizeLinear / DequantizeLinear (ONNX opsets 10-25): per-tensor, per-axis and blocked.

``QuantizeLinear``: ``y = saturate(round_half_even(x / y_scale) + y_zero_point)`` in the
zero point's type (when absent: ``output_dtype``, else uint8); ``DequantizeLinear``:
``y = (x - x_zero_point) * x_scale`` in ``output_dtype`` (opset 23), else the scale's type.

The scale (and zero point) is a scalar (per tensor), a 1-D tensor along ``axis`` (per
axis), or, with ``block_size`` B > 0 (opset 21, blocked quantization), a tensor of the
input's rank whose ``axis`` dimension is ``ceil(n / B)``: element ``i`` along ``axis`` uses
block ``i // B``. Integer types are int2/uint2 to int16/uint16 (sub-byte ones are ml_dtypes');
float8 types round to nearest even and, with ``saturate`` (default 1), clip to their finite
range; float4/float6 always saturate. ``precision`` (opset 23) names the float type
``x / y_scale`` is computed in (default float32). All O(elements).
"""

from __future__ import annotations

import numpy as np

from corefold.ops.defs.elemtypes import attr_dtype, is_float
from corefold.ops.facets import norm_axis, vector
from corefold.ops.registry import op
from corefold.ops.schema import FLOAT, Quant, SplitAxis


# -- facets ------------------------------------------------------------------------------------------
def _quantized_dtype(attrs, zp_dtype) -> np.dtype:
    if zp_dtype is not None:
        return np.dtype(zp_dtype)
    out = attrs.get("output_dtype")
    return attr_dtype(out, "uint8")


def _quantize_infer(attrs, ins, consts):
    x, _ = ins[0]
    _scale_layout(x, ins[1][0], attrs)
    zp = ins[2][1] if len(ins) > 2 and ins[2] is not None else None
    return [(x, _quantized_dtype(attrs, zp))]


def _dequantize_infer(attrs, ins, consts):
    _scale_layout(ins[0][0], ins[1][0], attrs)
    return [(ins[0][0], attr_dtype(attrs.get("output_dtype"), ins[1][1]))]


def _quantize_normalise(imp, n) -> None:
    if n.attrs.get("output_dtype") in (0, None):
        n.attrs.pop("output_dtype", None)
    imp.emit(n.op, n.inputs, n.attrs, n.outputs, n.name)


def _dequantize_normalise(imp, n) -> None:
    if n.attrs.get("output_dtype") in (0, None):
        n.attrs.pop("output_dtype", None)
    imp.emit(n.op, n.inputs, n.attrs, n.outputs, n.name)


def _qdq_split(attrs, ins, outs, consts):
    """Any axis but the quantization axis; a blocked scale (and zero point) of the input's
    rank is cut with the input, a per-tensor or per-axis one read whole."""
    x, s = ins[0][0], ins[1][0]
    rank = len(x)
    if rank == 0:
        return [], False
    axis = norm_axis(int(attrs.get("axis", 1)), rank) if len(s) else -1
    blocked = len(s) == rank and rank > 1
    axes = []
    for a in range(rank):
        if a == axis or x[a] < 2:
            continue
        cut = (a, 1) if blocked else None
        axes.append(SplitAxis("batch" if a == 0 else f"axis{a}", x[a],
                              ((a, 1), cut) + ((cut,) if len(ins) > 2 and ins[2] is not None else ()), (a, 1)))
    return axes, False


def _qdq(cost, normalise, infer):
    return dict(normalise=normalise, infer=infer, cost=vector(cost), split=_qdq_split,
                quant=Quant(FLOAT), param_inputs=(1, 2), foldable=False)


# -- helpers ----------------------------------------------------------------------------------------
_INT_RANGES = {"int2": (-2, 1), "uint2": (0, 3), "int4": (-8, 7), "uint4": (0, 15)}


def _int_range(dtype: np.dtype) -> tuple[int, int]:
    if dtype.name in _INT_RANGES:
        return _INT_RANGES[dtype.name]
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _is_integer(dtype: np.dtype) -> bool:
    return dtype.kind in "iu" or dtype.name in _INT_RANGES


def _scale_layout(x_shape, s_shape, attrs) -> None:
    """Check that the scale fits the input as per tensor, per axis or blocked.

    Raises:
        ValueError: it does not.
    """
    block = int(attrs.get("block_size", 0) or 0)
    if len(s_shape) == 0 or (len(s_shape) == 1 and s_shape[0] == 1 and not block):
        return
    axis = norm_axis(int(attrs.get("axis", 1)), len(x_shape))
    if not block:
        if len(s_shape) != 1 or s_shape[0] != x_shape[axis]:
            raise ValueError(f"a per-axis scale of shape {list(s_shape)} does not fit input {list(x_shape)} "
                             f"on axis {axis}")
        return
    want = list(x_shape)
    want[axis] = -(-x_shape[axis] // block)
    if list(s_shape) != want:
        raise ValueError(f"a blocked scale (block_size {block}) for input {list(x_shape)} on axis {axis} must "
                         f"have shape {want}, got {list(s_shape)}")


def _broadcastable(a: np.ndarray, x_shape, attrs) -> np.ndarray:
    """The scale or zero point reshaped (per axis) or repeated (blocked) to broadcast
    over the input."""
    a = np.asarray(a)
    block = int(attrs.get("block_size", 0) or 0)
    if a.ndim == 0 or (a.size == 1 and not block):
        return a.reshape(())
    axis = norm_axis(int(attrs.get("axis", 1)), len(x_shape))
    if not block:
        shape = [1] * len(x_shape)
        shape[axis] = a.shape[0]
        return a.reshape(shape)
    return np.repeat(a, block, axis=axis).take(np.arange(x_shape[axis]), axis=axis)


def saturate_cast(y: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``y`` rounded to a float8/4/6 type, clipped to its finite range (not NaN)."""
    import ml_dtypes

    info = ml_dtypes.finfo(dtype)
    hi = float(info.max)
    return np.where(np.isnan(y), y, np.clip(y, -hi, hi)).astype(dtype)


# -- kernels ----------------------------------------------------------------------------------------
@op("QuantizeLinear", **_qdq(3, _quantize_normalise, _quantize_infer))
def quantize_linear(attrs, inputs):
    """See the module docstring."""
    x, scale = inputs[0], inputs[1]
    zp = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
    out = _quantized_dtype(attrs, None if zp is None else zp.dtype)
    _scale_layout(x.shape, np.shape(scale), attrs)
    precision = attr_dtype(attrs.get("precision"), "float32")
    s = _broadcastable(np.asarray(scale), x.shape, attrs).astype(precision)
    y = x.astype(precision) / s
    if _is_integer(out):
        q = np.rint(y).astype(np.float64)
        if zp is not None:
            q = q + _broadcastable(np.asarray(zp).astype(np.int64), x.shape, attrs)
        lo, hi = _int_range(out)
        return [np.clip(q, lo, hi).astype(out)]
    if zp is not None and out.name.startswith(("float4", "float6")):
        y = y + _broadcastable(np.asarray(zp).astype(np.float32), x.shape, attrs)
    if int(attrs.get("saturate", 1)) or out.name.startswith(("float4", "float6")):
        return [saturate_cast(y.astype(np.float32), out)]
    return [y.astype(np.float32).astype(out)]


@op("DequantizeLinear", **_qdq(2, _dequantize_normalise, _dequantize_infer))
def dequantize_linear(attrs, inputs):
    """See the module docstring."""
    x, scale = inputs[0], inputs[1]
    zp = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
    _scale_layout(x.shape, np.shape(scale), attrs)
    scale = np.asarray(scale)
    out = attr_dtype(attrs.get("output_dtype"), scale.dtype if scale.dtype != np.float64 else np.float32)
    s = _broadcastable(scale, x.shape, attrs)
    if is_float(x.dtype):
        dx = x.astype(np.float32)  # float8/4 zero points are 0 by the spec
    else:
        xi = x.astype(np.int64)
        if zp is not None:
            xi = xi - _broadcastable(np.asarray(zp).astype(np.int64), x.shape, attrs)
        dx = xi.astype(np.float32)
    if s.dtype.kind != "f":
        s = s.astype(np.float32)  # a float8e8m0 scale (opset 25)
    return [(dx * s).astype(out)]
