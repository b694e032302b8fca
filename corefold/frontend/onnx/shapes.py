"""Static shape and dtype inference, one function per operator (opset-21 semantics).

Data-movement ops (Reshape, Slice, Concat, ...) are not here: the importer infers them by
running their kernels on stride-0 dummies, which costs O(rank). The functions here cover
the compute ops, whose kernels would do real work. Each takes the node's attributes, the
input shapes and dtypes and the input constants (``None`` where not constant) and returns
``[(shape, dtype), ...]`` for the outputs. They raise ValueError with a short reason; the
importer turns it into a ShapeError naming the node.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

Shape = tuple[int, ...]
In = Sequence["tuple[Shape, np.dtype] | None"]
Consts = Sequence["np.ndarray | None"]
ShapeFn = Callable[[dict[str, Any], In, Consts], list[tuple[Shape, np.dtype]]]

SHAPE_FUNCTIONS: dict[str, ShapeFn] = {}


def _register(*ops: str):
    def deco(fn: ShapeFn) -> ShapeFn:
        for op in ops:
            SHAPE_FUNCTIONS[op] = fn
        return fn
    return deco


@_register("Relu", "Sigmoid", "HardSigmoid", "HardSwish", "LeakyRelu", "Tanh", "Erf", "Sqrt",
           "Clip", "Softmax", "LogSoftmax", "LRN", "BatchNormalization", "InstanceNormalization",
           "Neg", "Abs", "Exp", "Log", "Ceil", "Floor", "Round", "Sign", "Reciprocal", "Elu", "Selu",
           "Softplus", "Softsign", "Gelu", "Not")
def _unary(attrs, ins, consts):
    return [ins[0]]


def _broadcast_shape(ins) -> Shape:
    shapes = [s for s, _ in (i for i in ins if i is not None)]
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ValueError(f"shapes {[list(s) for s in shapes]} do not broadcast") from None


@_register("Add", "Sub", "Mul", "Div", "Pow", "Sum", "Mod", "PRelu", "Max", "Min", "Mean")
def _broadcast(attrs, ins, consts):
    return [(_broadcast_shape(ins), ins[0][1])]


@_register("Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "And", "Or", "Xor")
def _compare(attrs, ins, consts):
    return [(_broadcast_shape(ins), np.dtype("bool"))]


@_register("Where")
def _where(attrs, ins, consts):
    return [(_broadcast_shape(ins), ins[1][1])]


@_register("ArgMax", "ArgMin")
def _arg_reduce(attrs, ins, consts):
    x, _ = ins[0]
    axis = attrs.get("axis", 0)
    axis = axis + len(x) if axis < 0 else axis
    keep = attrs.get("keepdims", 1)
    out = tuple((1 if i == axis else d) for i, d in enumerate(x) if keep or i != axis)
    return [(out, np.dtype("int64"))]


def _conv_like(attrs, x: Shape, kernel: Sequence[int], *, ceil: bool = False) -> list[int]:
    n = len(x) - 2
    strides = attrs.get("strides", [1] * n)
    dil = attrs.get("dilations", [1] * n)
    pads = attrs.get("pads", [0] * (2 * n))
    out = []
    for i in range(n):
        eff = (kernel[i] - 1) * dil[i] + 1
        span = x[2 + i] + pads[i] + pads[i + n] - eff
        if ceil:
            o = -(-span // strides[i]) + 1
            if (o - 1) * strides[i] >= x[2 + i] + pads[i]:  # last window starts in the padding
                o -= 1
        else:
            o = span // strides[i] + 1
        if o <= 0:
            raise ValueError(f"spatial output size {o} <= 0 for input {list(x)}")
        out.append(o)
    return out


@_register("Conv")
def _conv(attrs, ins, consts):
    (x, dt), (w, _) = ins[0], ins[1]
    if len(x) < 3 or len(w) != len(x):
        raise ValueError(f"input {list(x)} and weight {list(w)} do not fit a convolution")
    kernel = attrs.get("kernel_shape", list(w[2:]))
    if x[1] != w[1] * attrs.get("group", 1):
        raise ValueError(f"input channels {x[1]} != weight channels {w[1]} x group {attrs.get('group', 1)}")
    return [((x[0], w[0], *_conv_like(attrs, x, kernel)), dt)]


@_register("ConvTranspose")
def _conv_transpose(attrs, ins, consts):
    (x, dt), (w, _) = ins[0], ins[1]
    n = len(x) - 2
    kernel = attrs.get("kernel_shape", list(w[2:]))
    strides = attrs.get("strides", [1] * n)
    dil = attrs.get("dilations", [1] * n)
    pads = attrs.get("pads", [0] * (2 * n))
    opad = attrs.get("output_padding", [0] * n)
    out = [strides[i] * (x[2 + i] - 1) + opad[i] + (kernel[i] - 1) * dil[i] + 1 - pads[i] - pads[i + n]
           for i in range(n)]
    return [((x[0], w[1] * attrs.get("group", 1), *out), dt)]


@_register("MaxPool", "AveragePool")
def _pool(attrs, ins, consts):
    x, dt = ins[0]
    out = (x[0], x[1], *_conv_like(attrs, x, attrs["kernel_shape"], ceil=bool(attrs.get("ceil_mode", 0))))
    return [(out, dt), (out, np.dtype("int64"))]


@_register("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(attrs, ins, consts):
    x, dt = ins[0]
    return [((x[0], x[1]) + (1,) * (len(x) - 2), dt)]


@_register("Gemm")
def _gemm(attrs, ins, consts):
    (a, dt), (b, _) = ins[0], ins[1]
    if len(a) != 2 or len(b) != 2:
        raise ValueError(f"Gemm needs 2-D inputs, got {list(a)} and {list(b)}")
    m, k = (a[1], a[0]) if attrs.get("transA", 0) else a
    k2, n = (b[1], b[0]) if attrs.get("transB", 0) else b
    if k != k2:
        raise ValueError(f"inner dimensions differ: {k} and {k2}")
    return [((m, n), dt)]


@_register("MatMul")
def _matmul(attrs, ins, consts):
    (a, dt), (b, _) = ins[0], ins[1]
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise ValueError(f"inner dimensions differ: {list(a)} @ {list(b)}")
    batch = tuple(np.broadcast_shapes(a2[:-2], b2[:-2]))
    out = batch + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return [(out, dt)]


@_register("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
           "ReduceSumSquare")
def _reduce(attrs, ins, consts):
    x, dt = ins[0]
    axes_c = consts[1] if len(consts) > 1 else None
    if len(ins) > 1 and ins[1] is not None and axes_c is None:
        raise ValueError("the 'axes' input is not a constant")
    axes = [int(a) for a in axes_c.reshape(-1)] if axes_c is not None else []
    if not axes:
        if attrs.get("noop_with_empty_axes", 0):
            return [(x, dt)]
        axes = list(range(len(x)))
    axes = {a + len(x) if a < 0 else a for a in axes}
    keep = attrs.get("keepdims", 1)
    out = tuple((1 if i in axes else d) for i, d in enumerate(x) if keep or i not in axes)
    return [(out, dt)]


@_register("LayerNormalization")
def _layer_norm(attrs, ins, consts):
    x, dt = ins[0]
    axis = attrs.get("axis", -1)
    axis = axis + len(x) if axis < 0 else axis
    stat = tuple(x[:axis]) + (1,) * (len(x) - axis)
    stash = np.dtype("float32") if attrs.get("stash_type", 1) == 1 else dt
    return [(x, dt), (stat, stash), (stat, stash)]


@_register("Resize")
def _resize(attrs, ins, consts):
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
        policy = attrs.get("keep_aspect_ratio_policy", "stretch")
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
        crop = attrs.get("coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize" and roi is not None
        for j, (a, s) in enumerate(zip(axes, scales.reshape(-1), strict=False)):
            extent = float(roi.reshape(-1)[j + len(axes)] - roi.reshape(-1)[j]) if crop else 1.0
            out[a] = int(math.floor(x[a] * extent * float(s)))
    else:
        raise ValueError("neither scales nor sizes is given")
    return [(tuple(out), dt)]


@_register("QuantizeLinear")
def _quantize(attrs, ins, consts):
    x, _ = ins[0]
    if len(ins) > 2 and ins[2] is not None:
        dt = ins[2][1]
    else:
        dt = np.dtype(attrs.get("output_dtype", "uint8"))
    return [(x, dt)]


@_register("DequantizeLinear")
def _dequantize(attrs, ins, consts):
    x, _ = ins[0]
    return [(x, ins[1][1])]
