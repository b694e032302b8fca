"""Opset normalisation: every supported ONNX node, at any opset 6-22, as opset-21 nodes.

One normaliser per operator. Each reads an :class:`OnnxNode` (inputs already bound to IR
values, attributes already Python) and emits the equivalent opset-21 node(s) through
:meth:`Importer.emit <corefold.frontend.onnx.importer.Importer.emit>`. Attributes that
later opsets turned into inputs become constant inputs; ``auto_pad`` becomes explicit
``pads``; Softmax's old coerce-to-2D semantics become Flatten/Softmax/Reshape.
The full list is in docs/frontend-onnx.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from corefold.errors import UnsupportedOpError
from corefold.executor.kernels.shape import fill
from corefold.ir import Value

if TYPE_CHECKING:
    from corefold.frontend.onnx.importer import Importer


@dataclass
class OnnxNode:
    """An ONNX node being imported: IR input values, ONNX output names, Python attrs."""

    op: str
    name: str
    inputs: list[Value | None]
    outputs: list[str | None]
    attrs: dict[str, Any]

    def input(self, i: int) -> Value | None:
        return self.inputs[i] if i < len(self.inputs) else None


Normaliser = Callable[["Importer", OnnxNode], None]
NORMALISERS: dict[str, Normaliser] = {}


def _as_is(imp: "Importer", n: OnnxNode) -> None:
    imp.emit(n.op, n.inputs, n.attrs, n.outputs, n.name)


def _register(*ops: str):
    def deco(fn: Normaliser) -> Normaliser:
        for op in ops:
            NORMALISERS[op] = fn
        return fn
    return deco


# Ops whose opset-21 form reads every opset 6-22 model unchanged (extra inputs or attributes
# added by later opsets all default to the old behaviour).
for _op in ("MatMul", "Relu", "Sigmoid", "HardSigmoid", "HardSwish", "LeakyRelu", "Tanh",
            "Erf", "Sqrt", "Sum", "Concat", "GlobalAveragePool",
            "LRN", "Reshape", "Flatten", "Transpose", "Shape", "Gather", "ConstantOfShape",
            "Identity", "LayerNormalization", "DequantizeLinear", "Expand", "Range", "Cast", "Tile",
            # beyond the required set: ops the reference executor also runs
            "Abs", "Ceil", "Elu", "Exp", "Floor", "Gelu", "Log", "Neg", "Reciprocal", "Round",
            "Selu", "Sign", "Softplus", "Softsign", "Not", "Mod", "Max", "Min", "Mean",
            "Where", "ArgMax", "ArgMin", "InstanceNormalization", "GlobalMaxPool"):
    NORMALISERS[_op] = _as_is


@_register("Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor", "Equal", "Greater", "Less",
           "GreaterOrEqual", "LessOrEqual", "Gemm")
def _legacy_broadcast(imp: "Importer", n: OnnxNode) -> None:
    """Opset < 7: ``broadcast=1`` with ``axis`` aligns B with A starting at ``axis``;
    reshape B so that NumPy broadcasting means the same (Gemm's C already does)."""
    broadcast = n.attrs.pop("broadcast", 0)
    axis = n.attrs.pop("axis", None) if n.op != "Gemm" else None
    if broadcast and axis is not None and n.op != "Gemm":
        a, b = n.inputs[0], n.inputs[1]
        axis = axis + len(a.shape) if axis < 0 else axis
        trailing = len(a.shape) - axis - len(b.shape)
        if trailing > 0:
            shape = imp.const(np.array(list(b.shape) + [1] * trailing, np.int64), f"{n.name}_bshape")
            (b2,) = imp.emit("Reshape", [b, shape], {}, [None], f"{n.name}_broadcast")
            n.inputs[1] = b2
    _as_is(imp, n)


@_register("PRelu")
def _prelu(imp: "Importer", n: OnnxNode) -> None:
    """Opset < 7: a 1-D slope of size C is per channel (axis 1), not NumPy-aligned."""
    x, slope = n.inputs[0], n.inputs[1]
    if imp.opset < 7 and len(slope.shape) == 1 and slope.shape[0] > 1 and len(x.shape) > 2:
        shape = imp.const(np.array([slope.shape[0]] + [1] * (len(x.shape) - 2), np.int64), f"{n.name}_slope_shape")
        (n.inputs[1],) = imp.emit("Reshape", [slope, shape], {}, [None], f"{n.name}_slope")
    _as_is(imp, n)


def _attr_to_input(imp: "Importer", n: OnnxNode, attr: str, index: int, dtype: str) -> None:
    """Move attribute ``attr`` (if present) to input ``index`` as a constant."""
    if attr in n.attrs:
        value = n.attrs.pop(attr)
        while len(n.inputs) <= index:
            n.inputs.append(None)
        n.inputs[index] = imp.const(np.asarray(value, dtype=dtype), f"{n.name}_{attr}")


@_register("Constant")
def _constant(imp: "Importer", n: OnnxNode) -> None:
    a = n.attrs
    if "value" in a:
        data = np.asarray(a["value"])
    elif "value_float" in a:
        data = np.array(a["value_float"], np.float32)
    elif "value_floats" in a:
        data = np.array(a["value_floats"], np.float32)
    elif "value_int" in a:
        data = np.array(a["value_int"], np.int64)
    elif "value_ints" in a:
        data = np.array(a["value_ints"], np.int64)
    else:
        raise UnsupportedOpError(f"node '{n.name}' (Constant): only tensor, float(s) and int(s) values are supported")
    imp.emit("Constant", [], {"value": data}, n.outputs, n.name)


@_register("Clip")
def _clip(imp: "Importer", n: OnnxNode) -> None:
    if imp.opset < 11:
        dt = n.inputs[0].dtype
        _attr_to_input(imp, n, "min", 1, dt)
        _attr_to_input(imp, n, "max", 2, dt)
    _as_is(imp, n)


@_register("Squeeze", "Unsqueeze")
def _squeeze(imp: "Importer", n: OnnxNode) -> None:
    if imp.opset < 13:
        _attr_to_input(imp, n, "axes", 1, "int64")
    _as_is(imp, n)


@_register("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
           "ReduceSumSquare")
def _reduce(imp: "Importer", n: OnnxNode) -> None:
    # axes became an input at opset 13 for ReduceSum, at 18 for the others
    if imp.opset < (13 if n.op == "ReduceSum" else 18):
        _attr_to_input(imp, n, "axes", 1, "int64")
    _as_is(imp, n)


@_register("Slice")
def _slice(imp: "Importer", n: OnnxNode) -> None:
    if imp.opset < 10:
        _attr_to_input(imp, n, "starts", 1, "int64")
        _attr_to_input(imp, n, "ends", 2, "int64")
        _attr_to_input(imp, n, "axes", 3, "int64")
    _as_is(imp, n)


@_register("Split")
def _split(imp: "Importer", n: OnnxNode) -> None:
    """Always give the sizes explicitly as input 1 (old attr, num_outputs, or equal parts)."""
    if imp.opset < 13:
        _attr_to_input(imp, n, "split", 1, "int64")
    x = n.inputs[0]
    axis = n.attrs.get("axis", 0)
    if n.input(1) is None:
        dim = x.shape[axis]
        parts = n.attrs.pop("num_outputs", len(n.outputs))
        chunk = -(-dim // parts)
        sizes = [min(chunk, max(dim - i * chunk, 0)) for i in range(parts)]
        while len(n.inputs) < 2:
            n.inputs.append(None)
        n.inputs[1] = imp.const(np.array(sizes, np.int64), f"{n.name}_split")
    n.attrs.pop("num_outputs", None)
    _as_is(imp, n)


@_register("Pad")
def _pad(imp: "Importer", n: OnnxNode) -> None:
    if imp.opset < 11:
        dt = n.inputs[0].dtype
        if "paddings" in n.attrs:
            n.attrs["pads"] = n.attrs.pop("paddings")
        _attr_to_input(imp, n, "pads", 1, "int64")
        _attr_to_input(imp, n, "value", 2, dt)
    _as_is(imp, n)


@_register("Dropout")
def _dropout(imp: "Importer", n: OnnxNode) -> None:
    n.attrs.pop("is_test", None)
    if imp.opset < 12:
        _attr_to_input(imp, n, "ratio", 1, "float32")
    mask = n.outputs[1] if len(n.outputs) > 1 else None
    if imp.opset < 10 and mask and imp.is_used(mask):
        # opset < 10: the mask "is not filled" in test mode; ONNX Runtime gives zeros of the
        # input's type, and so do we (a constant fill).
        x = n.inputs[0]
        imp.emit("Dropout", n.inputs, n.attrs, n.outputs[:1], n.name)
        imp.bind_const(mask, fill(np.zeros((), x.dtype), x.shape))
        return
    _as_is(imp, n)


@_register("BatchNormalization")
def _batch_norm(imp: "Importer", n: OnnxNode) -> None:
    for k in ("consumed_inputs", "is_test"):
        n.attrs.pop(k, None)
    spatial = n.attrs.pop("spatial", 1)
    if not spatial and any(v is not None and len(v.shape) != 1 for v in n.inputs[1:]):
        raise UnsupportedOpError(f"node '{n.name}' (BatchNormalization): spatial=0 is not supported")
    if n.attrs.get("training_mode", 0):
        raise UnsupportedOpError(f"node '{n.name}' (BatchNormalization): training_mode=1 is not supported")
    n.attrs.pop("training_mode", None)
    for extra in n.outputs[1:]:
        if extra and imp.is_used(extra):
            raise UnsupportedOpError(f"node '{n.name}' (BatchNormalization): training outputs such as "
                                     f"'{extra}' are not supported")
    imp.emit("BatchNormalization", n.inputs, n.attrs, n.outputs[:1], n.name)


@_register("Softmax", "LogSoftmax")
def _softmax(imp: "Importer", n: OnnxNode) -> None:
    x = n.inputs[0]
    rank = len(x.shape)
    if imp.opset >= 13:
        _as_is(imp, n)
        return
    axis = n.attrs.get("axis", 1)
    axis = axis + rank if axis < 0 else axis
    if axis == rank - 1:
        imp.emit(n.op, [x], {"axis": -1}, n.outputs, n.name)
        return
    # opset < 13: softmax over the flattened dims [axis:], i.e. Flatten -> Softmax -> Reshape
    (flat,) = imp.emit("Flatten", [x], {"axis": axis}, [None], f"{n.name}_flatten")
    (soft,) = imp.emit(n.op, [flat], {"axis": -1}, [None], n.name)
    shape = imp.const(np.array(x.shape, np.int64), f"{n.name}_shape")
    imp.emit("Reshape", [soft, shape], {}, n.outputs, f"{n.name}_reshape")


def _spatial_pads(imp: "Importer", n: OnnxNode, kernel: list[int]) -> None:
    """Replace ``auto_pad`` by explicit ``pads`` (shapes are static at import)."""
    mode = n.attrs.pop("auto_pad", "NOTSET")
    if mode in ("NOTSET", ""):
        return
    x = n.inputs[0].shape
    k = len(x) - 2
    if mode == "VALID":
        n.attrs["pads"] = [0] * (2 * k)
        return
    if mode not in ("SAME_UPPER", "SAME_LOWER"):
        raise UnsupportedOpError(f"node '{n.name}' ({n.op}): auto_pad={mode} is not supported")
    strides = n.attrs.get("strides", [1] * k)
    dil = n.attrs.get("dilations", [1] * k)
    begin, end = [], []
    for i in range(k):
        out = -(-x[2 + i] // strides[i])
        total = max((out - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - x[2 + i], 0)
        small, big = total // 2, total - total // 2
        begin.append(small if mode == "SAME_UPPER" else big)
        end.append(big if mode == "SAME_UPPER" else small)
    n.attrs["pads"] = begin + end


@_register("Conv")
def _conv(imp: "Importer", n: OnnxNode) -> None:
    _spatial_pads(imp, n, n.attrs.get("kernel_shape", list(n.inputs[1].shape[2:])))
    _as_is(imp, n)


@_register("MaxPool", "AveragePool")
def _pool(imp: "Importer", n: OnnxNode) -> None:
    _spatial_pads(imp, n, n.attrs["kernel_shape"])
    _as_is(imp, n)


@_register("ConvTranspose")
def _conv_transpose(imp: "Importer", n: OnnxNode) -> None:
    """``output_shape`` and ``auto_pad`` become explicit ``pads`` (ONNX spec formula)."""
    x, w = n.inputs[0].shape, n.inputs[1].shape
    k = len(x) - 2
    mode = n.attrs.pop("auto_pad", "NOTSET")
    out_shape = n.attrs.pop("output_shape", None)
    if mode == "VALID":
        n.attrs["pads"] = [0] * (2 * k)
    elif out_shape is not None or mode in ("SAME_UPPER", "SAME_LOWER"):
        kernel = n.attrs.get("kernel_shape", list(w[2:]))
        strides = n.attrs.get("strides", [1] * k)
        dil = n.attrs.get("dilations", [1] * k)
        opad = n.attrs.get("output_padding", [0] * k)
        if out_shape is None:
            out_shape = [x[2 + i] * strides[i] for i in range(k)]
        out_shape = list(out_shape)[-k:]
        begin, end = [], []
        for i in range(k):
            total = strides[i] * (x[2 + i] - 1) + opad[i] + (kernel[i] - 1) * dil[i] + 1 - out_shape[i]
            if total < 0:
                raise UnsupportedOpError(f"node '{n.name}' (ConvTranspose): output_shape {out_shape} needs "
                                         "negative padding")
            if mode == "SAME_UPPER":
                begin.append(total // 2)
                end.append(total - total // 2)
            else:
                begin.append(total - total // 2)
                end.append(total // 2)
        n.attrs["pads"] = begin + end
    _as_is(imp, n)


@_register("Resize", "Upsample")
def _resize(imp: "Importer", n: OnnxNode) -> None:
    """Upsample and Resize-10 are Resize with asymmetric coordinates and floor rounding;
    Resize-11/13's empty roi/scales placeholders become missing inputs."""
    if n.op == "Upsample" or imp.opset < 11:
        mode = n.attrs.get("mode", "nearest")
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
    _as_is(imp, OnnxNode(n.op, n.name, ins, n.outputs, n.attrs))


@_register("QuantizeLinear")
def _quantize(imp: "Importer", n: OnnxNode) -> None:
    if n.attrs.get("output_dtype") in (0, None):
        n.attrs.pop("output_dtype", None)
    _as_is(imp, n)
