"""Operators on quantized integers: ConvInteger, MatMulInteger, QLinearConv, QLinearMatMul
and DynamicQuantizeLinear.

The integer products are computed exactly: the zero-point-shifted operands go through the
float64 Conv and MatMul kernels, whose sums of integer products stay exact below 2^53
(a 3x3x512 u8 x s8 convolution sums to at most 2^31). QLinear* then requantize as ONNX
Runtime does: ``y = saturate(round_half_even(float32(acc) * m) + y_zero_point)`` with the
float32 multiplier ``m = a_scale * b_scale / y_scale`` (per output channel or column when
the weight scale is). Work is that of the float operator: O(MACs).

These operators are already quantized, so the quantizer leaves them alone (role float);
scales and zero points are parameter inputs.
"""

from __future__ import annotations

import numpy as np

from corefold.ops.defs.conv import conv, conv_infer
from corefold.ops.defs.elemtypes import is_float
from corefold.ops.defs.matmul import matmul_infer
from corefold.ops.defs.quant import saturate_cast
from corefold.ops.facets import matrix, prod, vector_in
from corefold.ops.registry import op
from corefold.ops.schema import AS_IS, FLOAT, NONE, Quant, SplitAxis
from corefold.ops.spatial import spatial_pads_normalise


def _zp(a, dtype=np.float64):
    return np.zeros((), dtype) if a is None else np.asarray(a).astype(dtype)


def _shifted(x: np.ndarray, zp) -> np.ndarray:
    """``x - zp`` exactly, in float64 (float8 operands: their values)."""
    return x.astype(np.float64) - _zp(zp)


def _requantize(acc: np.ndarray, mult: np.ndarray, y_zp: np.ndarray) -> np.ndarray:
    """``saturate(rint(float32(acc) * mult) + y_zp)`` in ``y_zp``'s type (ONNX Runtime's
    float32 requantization); float8 outputs take ``acc * mult`` saturated."""
    y = acc.astype(np.float32) * mult.astype(np.float32)
    out = y_zp.dtype
    if is_float(out):
        return saturate_cast(y, out)
    info = np.iinfo(out)
    return np.clip(np.rint(y) + y_zp.astype(np.float32), info.min, info.max).astype(out)


# -- convolutions -------------------------------------------------------------------------------------
def _weight_normalise(index: int):
    """Explicit pads, with the kernel size read from the weight at input ``index``."""
    def normalise(imp, n):
        if "kernel_shape" not in n.attrs:
            n.attrs["kernel_shape"] = [int(d) for d in n.inputs[index].shape[2:]]
        spatial_pads_normalise(imp, n)
    return normalise


def _channel_column(a, m: int, ndim: int) -> np.ndarray:
    """A per-output-channel vector (or scalar) shaped to broadcast over ``(N, M, ...)``."""
    a = np.asarray(a)
    if a.size > 1:
        if a.size != m:
            raise ValueError(f"per-channel parameter of size {a.size} for {m} output channels")
        return a.reshape((1, m) + (1,) * (ndim - 2))
    return a.reshape(())


def _conv_integer(attrs, x, x_zp, w, w_zp) -> np.ndarray:
    """The exact integer convolution of the shifted operands, as float64."""
    m = w.shape[0]
    wd = w.astype(np.float64) - (_channel_column(w_zp, m, w.ndim).reshape((m,) + (1,) * (w.ndim - 1))
                                 if w_zp is not None and np.size(w_zp) > 1 else _zp(w_zp))
    return conv(attrs, [_shifted(x, x_zp), wd])[0]


def _qconv_infer(attrs, ins, consts):
    (shape, _), = conv_infer(attrs, [ins[0], ins[3]], consts)
    return [(shape, ins[7][1] if len(ins) > 7 and ins[7] is not None else ins[0][1])]


def _conv_integer_infer(attrs, ins, consts):
    (shape, _), = conv_infer(attrs, [ins[0], ins[1]], consts)
    return [(shape, np.dtype("int32"))]


def _qconv_macs(w_index: int):
    return lambda attrs, ins, outs: prod(outs[0][0]) * prod(ins[w_index][0][1:])


def _conv_like_split(x_index: int, w_index: int, per_channel: tuple[int, ...]):
    """Batch, then output channels (the weight, its per-channel parameters and the bias cut
    with them); every other input read whole."""
    def rule(attrs, ins, outs, consts):
        x, w = ins[x_index][0], ins[w_index][0]
        n = len(ins)
        axes = []
        if x[0] >= 2:
            axes.append(SplitAxis("batch", x[0], tuple((0, 1) if i == x_index else None for i in range(n)), (0, 1)))
        if int(attrs.get("group", 1)) == 1 and w[0] >= 2:
            cut = tuple((0, 1) if i == w_index or (i in per_channel and ins[i] is not None and prod(ins[i][0]) > 1)
                        else None for i in range(n))
            axes.append(SplitAxis("out_channels", w[0], cut, (1, 1)))
        return axes, True
    return rule


@op("ConvInteger", normalise=_weight_normalise(1), infer=_conv_integer_infer, cost=matrix(_qconv_macs(1)),
    split=_conv_like_split(0, 1, (3,)), quant=Quant(FLOAT), param_inputs=(2, 3))
def conv_integer(attrs, inputs):
    """``Conv(x - x_zero_point, w - w_zero_point)`` in int32 (zero points per tensor, the
    weight's also per output channel)."""
    x, w = inputs[0], inputs[1]
    x_zp = inputs[2] if len(inputs) > 2 else None
    w_zp = inputs[3] if len(inputs) > 3 else None
    return [np.rint(_conv_integer(attrs, x, x_zp, w, w_zp)).astype(np.int32)]


@op("QLinearConv", normalise=_weight_normalise(3), infer=_qconv_infer, cost=matrix(_qconv_macs(3)),
    split=_conv_like_split(0, 3, (4, 5, 8)), quant=Quant(FLOAT), param_inputs=(1, 2, 4, 5, 6, 7))
def qlinear_conv(attrs, inputs):
    """Quantized Conv: ``x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale,
    y_zero_point[, B]`` with an int32 bias B at scale ``x_scale * w_scale``."""
    x, xs, xzp, w, ws, wzp, ys, yzp = inputs[:8]
    b = inputs[8] if len(inputs) > 8 else None
    acc = _conv_integer(attrs, x, xzp, w, wzp)
    m = w.shape[0]
    if b is not None:
        acc = acc + np.asarray(b).astype(np.float64).reshape((1, m) + (1,) * (acc.ndim - 2))
    mult = (np.float32(np.asarray(xs).reshape(())) * _channel_column(np.asarray(ws, np.float32), m, acc.ndim)
            / np.float32(np.asarray(ys).reshape(())))
    return [_requantize(acc, mult, _zp(yzp, x.dtype if yzp is None else np.asarray(yzp).dtype))]


# -- matrix products ---------------------------------------------------------------------------------------
def _column(a, b_shape) -> np.ndarray:
    """A per-column (last axis of B) vector or a scalar, to broadcast over the product."""
    a = np.asarray(a)
    return a.reshape(-1) if a.size > 1 else a.reshape(())


def _row(a, a_shape) -> np.ndarray:
    """A per-row (axis -2 of A) vector or a scalar, to broadcast over A."""
    a = np.asarray(a)
    return a.reshape(-1, 1) if a.size > 1 and len(a_shape) >= 2 else a.reshape(())


def _matmul_integer_infer(attrs, ins, consts):
    (shape, _), = matmul_infer(attrs, ins[:2], consts)
    return [(shape, np.dtype("int32"))]


def _qmatmul_infer(attrs, ins, consts):
    (shape, _), = matmul_infer(attrs, [ins[0], ins[3]], consts)
    return [(shape, ins[7][1])]


def _matmul_like_split(a_index: int, b_index: int, per_row: tuple[int, ...], per_col: tuple[int, ...]):
    """The batch and row axes of A (B read whole), then B's columns (with per-column
    parameters); never the inner dimension, which the requantization needs whole."""
    def rule(attrs, ins, outs, consts):
        a, b = ins[a_index][0], ins[b_index][0]
        out = outs[0][0]
        n = len(ins)
        if len(a) < 2 or len(b) != 2:
            return [], True
        axes = []
        for ax in range(len(out) - 1):
            if out[ax] >= 2:
                cut = tuple((ax, 1) if i == a_index else
                            ((0, 1) if ax == len(out) - 2 and i in per_row and ins[i] is not None and prod(ins[i][0]) > 1
                             else None) for i in range(n))
                axes.append(SplitAxis("batch" if ax == 0 else f"axis{ax}", out[ax], cut, (ax, 1)))
        if out[-1] >= 2:
            cut = tuple((1, 1) if i == b_index else
                        ((0, 1) if i in per_col and ins[i] is not None and prod(ins[i][0]) > 1 else None)
                        for i in range(n))
            axes.append(SplitAxis("out_channels", out[-1], cut, (len(out) - 1, 1)))
        return axes, True
    return rule


def _matmul_macs(a_index: int):
    return lambda attrs, ins, outs: prod(outs[0][0]) * int(ins[a_index][0][-1])


def _integer_product(a, a_zp, b, b_zp) -> np.ndarray:
    ad = a.astype(np.float64) - (_row(a_zp, a.shape) if a_zp is not None else 0.0)
    bd = b.astype(np.float64) - (_column(b_zp, b.shape) if b_zp is not None else 0.0)
    return np.matmul(ad, bd)


@op("MatMulInteger", normalise=AS_IS, infer=_matmul_integer_infer, cost=matrix(_matmul_macs(0)),
    split=_matmul_like_split(0, 1, (2,), (3,)), quant=Quant(FLOAT), param_inputs=(2, 3))
def matmul_integer(attrs, inputs):
    """``(A - a_zero_point) @ (B - b_zero_point)`` in int32; A's zero point per tensor or
    per row, B's per tensor or per column."""
    a, b = inputs[0], inputs[1]
    a_zp = inputs[2] if len(inputs) > 2 else None
    b_zp = inputs[3] if len(inputs) > 3 else None
    return [np.rint(_integer_product(a, a_zp, b, b_zp)).astype(np.int32)]


@op("QLinearMatMul", normalise=AS_IS, infer=_qmatmul_infer, cost=matrix(_matmul_macs(0)),
    split=_matmul_like_split(0, 3, (1, 2), (4, 5)), quant=Quant(FLOAT), param_inputs=(1, 2, 4, 5, 6, 7))
def qlinear_matmul(attrs, inputs):
    """Quantized MatMul: ``a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale,
    y_zero_point``; 8-bit integers, or float8 (opset 21) whose zero points are 0."""
    a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp = inputs[:8]
    acc = _integer_product(a, a_zp if not is_float(a.dtype) else None, b, b_zp if not is_float(b.dtype) else None)
    mult = (np.asarray(a_s, np.float32).reshape(()) if np.size(a_s) == 1 else _row(np.asarray(a_s, np.float32), a.shape))
    mult = mult * _column(np.asarray(b_s, np.float32), b.shape) / np.asarray(y_s, np.float32).reshape(())
    y_zp = np.asarray(y_zp)
    if is_float(y_zp.dtype):
        return [saturate_cast(acc.astype(np.float32) * mult, y_zp.dtype)]
    return [_requantize(acc, mult, y_zp)]


# -- dynamic quantization ----------------------------------------------------------------------------------
def _dql_infer(attrs, ins, consts):
    shape, _ = ins[0]
    return [(shape, np.dtype("uint8")), ((), np.dtype("float32")), ((), np.dtype("uint8"))]


@op("DynamicQuantizeLinear", normalise=AS_IS, infer=_dql_infer, cost=vector_in(4), split=NONE, quant=Quant(FLOAT),
    param_inputs=())
def dynamic_quantize_linear(attrs, inputs):
    """uint8 quantization with the range of the data itself (widened to hold 0):
    ``scale = (max - min) / 255``, ``zero_point = saturate(rint(-min / scale))``,
    ``y = saturate(rint(x / scale) + zero_point)``, all in float32. O(elements)."""
    x = np.asarray(inputs[0], np.float32)
    hi = np.float32(max(0.0, float(x.max()))) if x.size else np.float32(0)
    lo = np.float32(min(0.0, float(x.min()))) if x.size else np.float32(0)
    scale = np.float32(1.0) if hi == lo else np.float32((hi - lo) / np.float32(255))
    zp = np.rint(np.clip(np.float32(0) - lo / scale, 0, 255))
    y = np.clip(np.rint(x / scale) + zp, 0, 255).astype(np.uint8)
    return [y, np.array(scale, np.float32), np.array(zp, np.uint8)]
