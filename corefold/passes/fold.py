"""Fold an inference BatchNormalization, and the per-channel scales and shifts after it, into
the convolution before it.

``Conv(x, W, B) -> BatchNormalization(scale, bias, mean, var, epsilon)`` computes, per output
channel ``c``, ``s[c] * (conv(x, W)[c] + B[c] - mean[c]) + bias[c]`` with ``s = scale /
sqrt(var + epsilon)``: the same as one convolution with weights ``W[c] * s[c]`` and bias
``(B[c] - mean[c]) * s[c] + bias[c]``. So does any chain of nodes that each compute ``k * x
+ d`` per channel (a BatchNormalization in inference mode; a Mul, Add, Sub or Div by a
constant that broadcasts along the channels alone, Sub and Div with ``x`` first), each the
only reader of the one before. Exporters from Caffe2 and older PyTorch leave them apart (the
onnx package's ShuffleNet: 49 Conv -> BatchNormalization pairs; Inception v2 69 chains
``Conv -> BatchNormalization -> Mul -> Add``; DenseNet-121 59 of those and 62
``BatchNormalization -> Mul -> Add`` on concatenated features, whose Mul and Add fold into the
normalisation's scale and bias); ONNX Runtime folds them when it loads a model (its
``ConvBNFusion``, ``ConvMulFusion``, ``ConvAddFusion``), and its quantization
pre-processing does so before calibrating. Folded, the chip runs one operator instead of a
matrix operator and up to three vector operators with buffers between them, and a quantizer
sees one output range instead of several.

The new constants are computed in float64 and stored in the head's dtype, so the outputs
change by rounding alone (a few units in the last place of float32 per element: the fold
reassociates the products; the pass is :data:`EQUIVALENCE`-close).

The head is a Conv of constant float weights (and bias), or an inference BatchNormalization
of constant float parameters; the chain stops at a value that a graph output or two readers
take (a chain that ends in a graph output folds, and the head's output takes its name).
Everything else is left as it is. O(nodes + weights) time and memory.

:func:`sums_as_adds` makes each Sum of two inputs an Add (the same IEEE sum), and
:func:`fold` runs both: the quantizer before calibrating (``QuantizeSettings.fold``), the
backend's tile step on a float model, and ``corefold compile`` first on a float model. The
quantizer then makes each normalisation left a depthwise 1 x 1 convolution
(:func:`normalisations_as_convs`), which has an integer kernel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from corefold.ir import Graph, Node
from corefold.pipeline import CompileContext, Equivalence, PassResult

#: Folding changes each output by rounding alone (float32: relative to the output's scale).
EQUIVALENCE = Equivalence("close", rtol=1e-5, atol=0.0)


def _per_channel(v, channels: int, rank: int, dtype) -> np.ndarray | None:
    """The constant ``v`` as a float64 vector of ``channels`` entries when it broadcasts onto
    an output of ``rank`` axes (N, C, ...) along C alone (a scalar, or ``(C, 1, 1)``, ``(1, C,
    1, 1)``... on a rank-4 output), else None. O(C)."""
    if v is None or not v.is_constant or v.const.dtype != dtype or v.const.ndim > rank:
        return None
    shape = (1,) * (rank - v.const.ndim) + v.const.shape
    if shape[0] != 1 or any(d != 1 for d in shape[2:]) or shape[1] not in (1, channels):
        return None
    return np.broadcast_to(v.const.reshape(-1).astype(np.float64), (channels,))


def _affine(node: Node, x, channels: int, rank: int, dtype) -> tuple[np.ndarray, np.ndarray] | None:
    """``(k, d)`` with ``node(x) == k * x + d`` per channel, when ``node`` is an inference
    BatchNormalization of ``x`` or a Mul, Add, Sub or Div of ``x`` and a per-channel constant
    (:func:`_per_channel`; Sub and Div with ``x`` first) and both are finite (no division
    by zero, no variance below ``-epsilon``), else None. O(C)."""
    step = _affine_step(node, x, channels, rank, dtype)
    if step is None or not (np.isfinite(step[0]).all() and np.isfinite(step[1]).all()):
        return None
    return step


def _affine_step(node: Node, x, channels: int, rank: int, dtype) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`_affine` before the finiteness check. O(C)."""
    if node.domain or len(node.outputs) != 1:
        return None
    ins = node.inputs
    if node.op_type == "BatchNormalization":
        if len(ins) != 5 or ins[0] is not x or node.attrs.get("training_mode", 0):
            return None
        if any(v is None or not v.is_constant or v.const.shape != (channels,) or v.const.dtype != dtype
               for v in ins[1:]):
            return None
        scale, bias, mean, var = (v.const.astype(np.float64) for v in ins[1:])
        spread = var + float(node.attrs.get("epsilon", 1e-5))
        if (spread <= 0).any():
            return None
        k = scale / np.sqrt(spread)
        return k, bias - mean * k
    if node.op_type not in ("Mul", "Add", "Sub", "Div") or len(ins) != 2 or ins[0] is ins[1]:
        return None
    if ins[0] is not x and (node.op_type in ("Sub", "Div") or ins[1] is not x):
        return None
    c = _per_channel(ins[1] if ins[0] is x else ins[0], channels, rank, dtype)
    if c is None:
        return None
    one, zero = np.ones(channels), np.zeros(channels)
    if node.op_type == "Div":
        return (np.divide(1.0, c, out=np.full(channels, np.inf), where=c != 0), zero)
    return {"Mul": (c, zero), "Add": (one, c), "Sub": (one, -c)}[node.op_type]


def _chain(head: Node, channels: int, rank: int, dtype) -> tuple[list[Node], np.ndarray, np.ndarray]:
    """The per-channel affine nodes (:func:`_affine`) that follow ``head`` one after another,
    each the only reader of the one before, none a graph output but possibly the last, with
    the combined ``(k, d)``: the chain computes ``k * head(x) + d``. O(chain * C)."""
    k, d = np.ones(channels), np.zeros(channels)
    chain: list[Node] = []
    x = head.outputs[0]
    outputs = set(head.graph.outputs)
    while x not in outputs and len(x.uses()) == 1:
        step = _affine(x.uses()[0].node, x, channels, rank, dtype)
        if step is None:
            break
        k, d = step[0] * k, step[0] * d + step[1]
        chain.append(x.uses()[0].node)
        x = chain[-1].outputs[0]
    return chain, k, d


def _head(node: Node) -> tuple[int, int, np.dtype] | None:
    """``(channels, rank, dtype)`` of the output of ``node`` when a chain may fold into it: a
    Conv of constant float weights (and bias), or an inference BatchNormalization of constant
    float parameters (the onnx package's DenseNet-121 scales and shifts after the
    normalisation that opens each dense layer: ``BatchNormalization -> Mul -> Add``); else
    None. O(1)."""
    ins = node.inputs
    if node.domain or len(node.outputs) != 1 or node.graph is None:
        return None
    if node.op_type == "Conv":
        if ins[1] is None or not ins[1].is_constant or ins[1].const.dtype.kind != "f":
            return None
        bias = ins[2] if len(ins) > 2 else None
        if bias is not None and not (bias.is_constant and bias.const.dtype == ins[1].const.dtype):
            return None
        return ins[1].const.shape[0], ins[1].const.ndim, ins[1].const.dtype
    if node.op_type == "BatchNormalization" and len(ins) == 5 and not node.attrs.get("training_mode", 0):
        y = node.outputs[0]
        if y.shape is None or len(y.shape) < 2 or any(v is None or not v.is_constant for v in ins[1:]):
            return None
        dtype = ins[1].const.dtype
        if dtype.kind != "f" or any(v.const.shape != (y.shape[1],) or v.const.dtype != dtype for v in ins[1:]):
            return None
        return y.shape[1], len(y.shape), dtype
    return None


def _fold_into(graph: Graph, head: Node, k: np.ndarray, d: np.ndarray, last: Node) -> None:
    """``k * head(x) + d`` as ``head`` with new constants (a Conv's weights ``W[c] * k[c]``
    and bias ``k[c] * B[c] + d[c]``; a BatchNormalization's scale ``k * scale`` and bias ``k
    * bias + d``, computed in float64); its output takes ``last``'s name. O(weights)."""
    ins = head.inputs
    if head.op_type == "Conv":
        w = ins[1].const
        bias = ins[2] if len(ins) > 2 else None
        b = bias.const.astype(np.float64) if bias is not None else 0.0
        head.replace_input(1, graph.add_constant(
            f"{ins[1].name}_folded", (w.astype(np.float64) * k.reshape((-1,) + (1,) * (w.ndim - 1))).astype(w.dtype)))
        new_b = graph.add_constant(f"{last.name}_bias", (k * b + d).astype(w.dtype))
        if bias is not None:
            head.replace_input(2, new_b)
        else:
            head.set_inputs([*head.inputs, new_b])
    else:
        dtype = ins[1].const.dtype
        scale, bias = ins[1].const.astype(np.float64), ins[2].const.astype(np.float64)
        head.replace_input(1, graph.add_constant(f"{ins[1].name}_folded", (k * scale).astype(dtype)))
        head.replace_input(2, graph.add_constant(f"{last.name}_bias", (k * bias + d).astype(dtype)))
    graph.replace_all_uses(last.outputs[0], head.outputs[0])


def fold_batchnorm(graph: Graph) -> int:
    """Fold into each Conv of constant float weights, and each inference BatchNormalization
    of constant parameters, the chain of per-channel affine nodes after it (a
    BatchNormalization in inference mode after a Conv, a Mul, Add, Sub or Div by a
    per-channel constant: module docstring), in place; return how many nodes were folded.
    The chain's readers read the head, which takes new constants (the old ones stay only
    while something else reads them). A chain that ends in a graph output folds too: the
    head's output then takes that output's name. O(nodes + weights)."""
    folded = 0
    for head in list(graph.nodes):
        if head.graph is None:  # folded into an earlier head
            continue
        shape = _head(head)
        if shape is None:
            continue
        chain, k, d = _chain(head, *shape)
        if not chain:
            continue
        last = chain[-1]
        name = last.outputs[0].name if last.outputs[0] in graph.outputs else None
        _fold_into(graph, head, k, d, last)
        for node in reversed(chain):
            graph.remove_node(node)
        if name is not None:
            graph.rename_value(head.outputs[0], name)
        folded += len(chain)
    if folded:
        graph.remove_unused_constants()
    return folded


def sums_as_adds(graph: Graph) -> int:
    """Make each Sum of exactly two inputs an Add of the same inputs, in place (its name, its
    output and its place kept); return how many. ``Sum(a, b)`` and ``Add(a, b)`` broadcast
    alike and compute the same IEEE sum, so the outputs do not change at all. Caffe2 writes
    a residual connection as a Sum (the onnx package's ResNet-50: 16, ShuffleNet: 13), and
    an Add is what the rest of corefold knows best: the quantizer's integer Add takes inputs
    of two scales (an integer Sum needs one), and a float Relu after an Add runs in it (the
    light ResNet-50 in int8 on the 8x8 ``npu``: 1296.4 -> 742.2 us, its residual additions
    no longer in float between a DequantizeLinear and a QuantizeLinear). O(nodes)."""
    count = 0
    for node in graph.nodes:
        if (node.op_type == "Sum" and not node.domain and len(node.inputs) == 2
                and all(v is not None for v in node.inputs)):
            node.op_type = "Add"
            count += 1
    return count


def normalisations_as_convs(graph: Graph) -> int:
    """Make each inference BatchNormalization of constant float parameters, on an input of
    three or more axes with its channels known, a depthwise convolution of 1 x 1 kernels
    (``group`` = channels, weight ``k[c]`` of shape ``(C, 1, 1...)``, bias ``d[c]``: the same
    ``k * x + d`` per channel, :func:`_affine`), in place (its name, its output and its place
    kept); return how many. What :func:`fold_batchnorm` cannot fold because no convolution
    comes before (DenseNet's normalisation of the concatenated features, a pre-activation
    block's) has no integer kernel: quantized, it runs in float between a DequantizeLinear and
    a QuantizeLinear, at four times the bytes. As a convolution it is a linear operator the
    quantizer gives per-channel weights (one integer each: exact up to the scale's rounding)
    and the integer runner, the backend and ONNX Runtime compute from the integers, with the
    Relu after it fused (the onnx package's DenseNet-121, 62 of them, in int8 on the 8x8
    ``npu``: 723.0 -> 360.0 us). Only the quantizer runs it: a float model keeps its
    normalisations, which the vector units compute from floats anyway. A step whose scale or
    shift is not finite stays. O(nodes + C)."""
    count = 0
    for node in graph.nodes:
        shape = _head(node) if node.op_type == "BatchNormalization" else None
        if shape is None:
            continue
        channels, rank, dtype = shape
        x = node.inputs[0]
        if rank < 3 or x.shape is None or len(x.shape) != rank or not isinstance(x.shape[1], int):
            continue
        step = _affine(node, x, channels, rank, dtype)
        if step is None:
            continue
        k, d = step
        w = graph.add_constant(f"{node.name}_weight", k.reshape((channels,) + (1,) * (rank - 1)).astype(dtype))
        b = graph.add_constant(f"{node.name}_bias", d.astype(dtype))
        node.op_type = "Conv"
        n = rank - 2
        node.attrs = {"group": channels, "kernel_shape": [1] * n, "strides": [1] * n, "pads": [0] * (2 * n),
                      "dilations": [1] * n}
        node.set_inputs([x, w, b])
        count += 1
    if count:
        graph.remove_unused_constants()
    return count


def fold(graph: Graph) -> dict[str, int]:
    """:func:`fold_batchnorm` and :func:`sums_as_adds` on ``graph`` in place; how many nodes
    each folded or rewrote (``folded``, ``sums_as_adds``). O(nodes + weights)."""
    return {"folded": fold_batchnorm(graph), "sums_as_adds": sums_as_adds(graph)}


@dataclass(frozen=True)
class FoldSettings:
    """No knobs: every foldable pair is folded."""

    PRESETS: ClassVar[dict] = {}


class FoldPass:
    """:func:`fold` as a pipeline pass (report: ``folded``, the nodes folded, and
    ``sums_as_adds``, the Sums made Adds)."""

    name: ClassVar[str] = "fold"
    settings_class: ClassVar[type] = FoldSettings
    equivalence: ClassVar[Equivalence] = EQUIVALENCE

    def run(self, graph: Graph, ctx: CompileContext) -> PassResult:
        report = fold(graph)
        return PassResult(graph, any(report.values()), report)
