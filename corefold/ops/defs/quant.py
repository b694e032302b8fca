"""QuantizeLinear / DequantizeLinear (ONNX opset 21, per-tensor and per-axis).

``QuantizeLinear``: ``y = saturate(round_half_even(x / y_scale) + y_zero_point)`` in the
zero point's type (when absent: ``output_dtype``, else uint8); ``DequantizeLinear``: ``y = (x - x_zero_point) *
x_scale``. A 1-D scale with ``axis`` scales slices along that axis. 4-bit types are the
ml_dtypes ``int4``/``uint4``. Blocked quantization (``block_size`` > 0) is not supported.
"""

from __future__ import annotations

import numpy as np

from corefold.errors import UnsupportedOpError
from corefold.ops.facets import split_any, vector
from corefold.ops.registry import op
from corefold.ops.schema import AS_IS, FLOAT, Quant


# -- facets ------------------------------------------------------------------------------------------
def _quantize_infer(attrs, ins, consts):
    x, _ = ins[0]
    if len(ins) > 2 and ins[2] is not None:
        dt = ins[2][1]
    else:
        dt = _dtype(attrs.get("output_dtype", "uint8"))
    return [(x, dt)]


def _dequantize_infer(attrs, ins, consts):
    return [(ins[0][0], ins[1][1])]


def _quantize_normalise(imp, n) -> None:
    if n.attrs.get("output_dtype") in (0, None):
        n.attrs.pop("output_dtype", None)
    imp.emit(n.op, n.inputs, n.attrs, n.outputs, n.name)


def _per_axis_reduced(attrs, rank):
    """A per-axis scale ties its axis: cut any other one."""
    return {int(attrs.get("axis", 1)) % rank}


def _qdq(cost, normalise, infer):
    return dict(normalise=normalise, infer=infer, cost=vector(cost), split=split_any(_per_axis_reduced, whole=(1, 2)),
                quant=Quant(FLOAT), param_inputs=(1, 2), foldable=False)


def _int_range(dtype: np.dtype) -> tuple[int, int]:
    if dtype.name in ("int4", "uint4"):
        return (-8, 7) if dtype.name == "int4" else (0, 15)
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _per_axis(a: np.ndarray, ndim: int, axis: int) -> np.ndarray:
    if a.ndim == 0 or a.size == 1 and ndim == 0:
        return a.reshape(())
    if a.ndim != 1:
        raise UnsupportedOpError(f"blocked quantization (scale of shape {list(a.shape)}) is not supported")
    shape = [1] * ndim
    shape[axis % ndim] = a.shape[0]
    return a.reshape(shape)


def _dtype(name) -> np.dtype:
    if str(name) in ("int4", "uint4"):
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, str(name)))
    return np.dtype(name)


@op("QuantizeLinear", **_qdq(3, _quantize_normalise, _quantize_infer))
def quantize_linear(attrs, inputs):
    x, scale = inputs[0], inputs[1]
    zp = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
    if zp is None:
        out = attrs.get("output_dtype")
        zp = np.zeros((), _dtype(out) if out not in (None, 0, "") else np.uint8)
    if attrs.get("block_size", 0):
        raise UnsupportedOpError("QuantizeLinear with block_size is not supported")
    axis = int(attrs.get("axis", 1))
    s = _per_axis(np.asarray(scale, dtype=np.float32), x.ndim, axis)
    z = _per_axis(np.asarray(zp).astype(np.int64), x.ndim, axis)
    q = np.rint(x.astype(np.float32) / s).astype(np.float64) + z
    lo, hi = _int_range(zp.dtype)
    return [np.clip(q, lo, hi).astype(zp.dtype)]


@op("DequantizeLinear", **_qdq(2, AS_IS, _dequantize_infer))
def dequantize_linear(attrs, inputs):
    x, scale = inputs[0], inputs[1]
    zp = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
    if attrs.get("block_size", 0):
        raise UnsupportedOpError("DequantizeLinear with block_size is not supported")
    axis = int(attrs.get("axis", 1))
    s = _per_axis(np.asarray(scale), x.ndim, axis)
    xi = x.astype(np.int64)
    if zp is not None:
        xi = xi - _per_axis(np.asarray(zp).astype(np.int64), x.ndim, axis)
    return [(xi.astype(np.float32) * s).astype(s.dtype if s.dtype != np.float64 else np.float32)]
