"""Fold an inference BatchNormalization into the convolution before it.

``Conv(x, W, B) -> BatchNormalization(scale, bias, mean, var, epsilon)`` computes, per output
channel ``c``, ``s[c] * (conv(x, W)[c] + B[c] - mean[c]) + bias[c]`` with ``s = scale /
sqrt(var + epsilon)``: the same as one convolution with weights ``W[c] * s[c]`` and bias
``(B[c] - mean[c]) * s[c] + bias[c]``. Exporters from Caffe2 and older PyTorch leave the two
apart (the onnx package's ShuffleNet and Inception v2: 49 and 69 of them); ONNX Runtime folds
them when it loads a model (its ``ConvBNFusion``), and its quantization pre-processing does so
before calibrating. Folded, the chip runs one matrix operator instead of a matrix and a vector
operator with a buffer between them, and a quantizer sees one output range instead of two.

The new constants are computed in float64 and stored in the convolution's dtype, so the
outputs change by rounding alone (a few units in the last place of float32 per element:
the fold reassociates the products; the pass is :data:`EQUIVALENCE`-close).

Folded only when the convolution's weights (and bias, if any) and the normalisation's four
inputs are constants of one float dtype, the convolution's output feeds the normalisation
alone and is not a graph output, and the normalisation is in inference mode (one output).
Every other pair is left as it is. O(weights) time and memory.
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
    an output of ``rank`` axes (N, C, ...) along C alone (a scalar, ``(C,)`` for a
    BatchNormalization's inputs aside, ``(C, 1, 1)``, ``(1, C, 1, 1)``...), else None. O(C)."""
    if v is None or not v.is_constant or v.const.dtype != dtype or v.const.ndim > rank:
        return None
    shape = (1,) * (rank - v.const.ndim) + v.const.shape
    if shape[0] != 1 or any(d != 1 for d in shape[2:]) or shape[1] not in (1, channels):
        return None
    return np.broadcast_to(v.const.reshape(-1).astype(np.float64), (channels,))


def _affine(node: Node, x, channels: int, rank: int, dtype) -> tuple[np.ndarray, np.ndarray] | None:
    """``(k, d)`` with ``node(x) == k * x + d`` per channel, when ``node`` is an inference
    BatchNormalization of ``x`` or a Mul, Add, Sub or Div of ``x`` and a per-channel constant
    (:func:`_per_channel`; Sub and Div with ``x`` first), else None. O(C)."""
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
        k = scale / np.sqrt(var + float(node.attrs.get("epsilon", 1e-5)))
        return k, bias - mean * k
    if node.op_type not in ("Mul", "Add", "Sub", "Div") or len(ins) != 2 or ins[0] is ins[1]:
        return None
    if ins[0] is not x and (node.op_type in ("Sub", "Div") or ins[1] is not x):
        return None
    c = _per_channel(ins[1] if ins[0] is x else ins[0], channels, rank, dtype)
    if c is None:
        return None
    one, zero = np.ones(channels), np.zeros(channels)
    return {"Mul": (c, zero), "Add": (one, c), "Sub": (one, -c), "Div": (1.0 / c, zero)}[node.op_type]


def _chain(conv: Node) -> tuple[list[Node], np.ndarray, np.ndarray]:
    """The per-channel affine nodes (:func:`_affine`) that follow ``conv`` one after another,
    each the only reader of the one before, none before the last a graph output, with the
    combined ``(k, d)``: the chain computes ``k * conv(x) + d``. O(chain * C)."""
    w = conv.inputs[1].const
    channels, rank = w.shape[0], w.ndim
    k, d = np.ones(channels), np.zeros(channels)
    chain: list[Node] = []
    x = conv.outputs[0]
    outputs = set(conv.graph.outputs)
    while x not in outputs and len(x.uses()) == 1:
        step = _affine(x.uses()[0].node, x, channels, rank, w.dtype)
        if step is None or x.uses()[0].node.outputs[0] in outputs:
            break
        k, d = step[0] * k, step[0] * d + step[1]
        chain.append(x.uses()[0].node)
        x = chain[-1].outputs[0]
    return chain, k, d


def _foldable_conv(conv: Node) -> bool:
    """A Conv of constant float weights (and bias), one output. O(1)."""
    ins = conv.inputs
    if conv.op_type != "Conv" or conv.domain or len(conv.outputs) != 1 or conv.graph is None:
        return False
    if ins[1] is None or not ins[1].is_constant or ins[1].const.dtype.kind != "f":
        return False
    bias = ins[2] if len(ins) > 2 else None
    return bias is None or (bias.is_constant and bias.const.dtype == ins[1].const.dtype)


def fold_batchnorm(graph: Graph) -> int:
    """Fold into each Conv of constant float weights the chain of per-channel affine nodes
    after it (a BatchNormalization in inference mode, a Mul, Add, Sub or Div by a per-channel
    constant: module docstring), in place; return how many nodes were folded. The chain's
    readers read the convolution, which takes new weight and bias constants (the old ones
    stay only while something else reads them). O(nodes + weights)."""
    folded = 0
    for conv in list(graph.nodes):
        if not _foldable_conv(conv):
            continue
        chain, k, d = _chain(conv)
        if not chain:
            continue
        w = conv.inputs[1].const
        bias = conv.inputs[2] if len(conv.inputs) > 2 else None
        b = bias.const.astype(np.float64) if bias is not None else 0.0
        new_w = graph.add_constant(f"{conv.inputs[1].name}_folded",
                                   (w.astype(np.float64) * k.reshape((-1,) + (1,) * (w.ndim - 1))).astype(w.dtype))
        new_b = graph.add_constant(f"{chain[-1].name}_bias", (k * b + d).astype(w.dtype))
        conv.replace_input(1, new_w)
        if len(conv.inputs) > 2:
            conv.replace_input(2, new_b)
        else:
            conv.set_inputs([*conv.inputs, new_b])
        graph.replace_all_uses(chain[-1].outputs[0], conv.outputs[0])
        for node in reversed(chain):
            graph.remove_node(node)
        folded += len(chain)
    if folded:
        graph.remove_unused_constants()
    return folded


@dataclass(frozen=True)
class FoldSettings:
    """No knobs: every foldable pair is folded."""

    PRESETS: ClassVar[dict] = {}


class FoldPass:
    """:func:`fold_batchnorm` as a pipeline pass (report: ``folded``, the pairs folded)."""

    name = "fold"
    settings_class = FoldSettings
    equivalence = EQUIVALENCE

    def run(self, graph: Graph, ctx: CompileContext) -> PassResult:
        folded = fold_batchnorm(graph)
        return PassResult(graph, folded > 0, {"folded": folded})
