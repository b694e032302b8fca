"""Stage 1: which tensors to quantize, and which share one parameter set.

Every float input and output of a node whose operator the table marks ``compute`` or
``movement`` (``corefold.ops``, facet ``quant``) is selected, except its parameter inputs
(shapes, indices, scales, sizes, bounds: facet ``param_inputs``, never quantized), and

* a pre-activation tensor whose only reader is ReLU / Clip(min >= 0) (the seed's fused
  conv + activation, SPEC M5 §1): only the activation's output is stored, so it is unsigned;
* with ``quantize_outputs`` False, the graph outputs (and the data movement feeding them).

Tensors *tied* together share one parameter set: the inputs and output of a Concat (one
scale for all, beyond the seed) and the output of a pure data movement op (Reshape,
Transpose, MaxPool, ...) with its input, so re-quantizing it is exact. A tensor read only by
Softmax is marked (``params`` may clip it below its maximum). O(V + E).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from corefold import ops
from corefold.ir import Graph, Node, Value
from corefold.passes.quantize.params import QuantizeError


def quant_of(node: Node) -> ops.Quant | None:
    """The table's quantization facet of ``node`` (None: the operator has none)."""
    q = ops.get(node.op_type, node.domain, where=f"node '{node.name}'").quant
    return q if isinstance(q, ops.Quant) else None


def quantizable(node: Node) -> bool:
    """Whether M5 quantizes around ``node`` (role compute or movement)."""
    q = quant_of(node)
    return q is not None and q.role in (ops.COMPUTE, ops.MOVEMENT)


def param_inputs(node: Node) -> tuple[int, ...]:
    """The inputs of ``node`` that carry shapes, indices or parameters (never quantized)."""
    p = ops.get(node.op_type, node.domain).param_inputs
    return p if isinstance(p, tuple) else ()


@dataclass
class Selection:
    """The tensors to quantize.

    ``activations``: non-constant float tensors (calibrated); ``weights``: constant name ->
    per-channel axis (or None); ``biases``: bias constant -> (activation, weight) whose
    scales multiply; ``groups``: tensor -> group representative (tied tensors share params).
    """

    activations: list[str] = field(default_factory=list)
    weights: dict[str, int | None] = field(default_factory=dict)
    biases: dict[str, tuple[str, str]] = field(default_factory=dict)
    groups: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    softmax_inputs: set[str] = field(default_factory=set)

    def members(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for t in self.activations:
            out.setdefault(self.groups.get(t, t), []).append(t)
        return out


def _is_float(v: Value | None) -> bool:
    return v is not None and np.issubdtype(v.dtype, np.floating)


def _fused_activation(v: Value, graph_outputs: set[Value]) -> Node | None:
    """The ReLU / Clip(min >= 0) that is ``v``'s only reader, if any."""
    if v in graph_outputs or v.producer is None:
        return None
    readers = v.consumers()
    q = quant_of(v.producer)
    if len(readers) != 1 or q is None or not q.fuses_activation:
        return None
    r = readers[0]
    if r.op_type == "Relu":
        return r
    if r.op_type == "Clip" and len(r.inputs) > 1 and r.inputs[1] is not None and r.inputs[1].const is not None:
        if float(np.asarray(r.inputs[1].const).reshape(-1)[0]) >= 0:
            return r
    return None


def select_tensors(graph: Graph, per_channel: bool = True, quantize_outputs: bool = False) -> Selection:
    """Which tensors to quantize and how they are tied (see the module docstring).

    With ``quantize_outputs`` False, graph outputs stay float: they leave the chip, so the
    producing op's int32 accumulator is dequantized (scaled) instead of being rounded to
    n bits first; everything the chip stores or computes on is still quantized.

    Raises:
        QuantizeError: nothing in the graph can be quantized.
    """
    sel = Selection()
    outs = set(graph.outputs)
    parent: dict[str, str] = {}

    def find(a: str) -> str:
        while parent.get(a, a) != a:
            parent[a] = parent.get(parent[a], parent[a])
            a = parent[a]
        return a

    def tie(a: str, b: str) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[rb] = ra

    acts: dict[str, None] = {}
    for node in graph.topological_order():
        if not quantizable(node):
            continue
        q = quant_of(node)
        params = param_inputs(node)
        for i, v in enumerate(node.inputs):
            if not _is_float(v) or i in params:
                continue
            if v.const is not None:
                if q.bias is not None and i == q.bias:
                    continue  # handled below once x and w are known
                axis_fn = q.weights.get(i)
                axis = axis_fn(node.attrs, v.const.shape) if (axis_fn and per_channel and v.const.ndim >= 2) else None
                if v.name in sel.weights and sel.weights[v.name] != axis:
                    axis = None  # read by two ops wanting different axes: per tensor
                sel.weights[v.name] = axis
            else:
                act = _fused_activation(v, outs)
                if act is not None and act in graph and node is act:
                    sel.skipped[v.name] = f"fused with its {act.op_type} '{act.name}'"
                    continue
                acts[v.name] = None
        for v in node.outputs:
            if not _is_float(v):
                continue
            act = _fused_activation(v, outs)
            if act is not None:
                sel.skipped[v.name] = f"fused with its {act.op_type} '{act.name}'"
                continue
            if v in outs and not quantize_outputs:
                sel.skipped[v.name] = "graph output: dequantized from the accumulator, not rounded to n bits"
                continue
            acts[v.name] = None
            if q.role == ops.MOVEMENT and _is_float(node.inputs[0]) and node.inputs[0].const is None:
                tie(node.inputs[0].name, v.name)
            if q.ties_inputs:
                for x in node.inputs:
                    if _is_float(x) and x.const is None:
                        tie(v.name, x.name)
    if not quantize_outputs:
        # a float output made by data movement from a quantized tensor would leave a lone DQ
        # before the move (ONNX Runtime's QDQ propagation mis-types such a pair): keep the
        # chain feeding the output float too
        for v in graph.outputs:
            while v.producer is not None and (quant_of(v.producer) or ops.Quant(ops.FLOAT)).role == ops.MOVEMENT:
                src = v.producer.inputs[0]
                if not _is_float(src) or src.const is not None or len(src.consumers()) != 1 or src in outs:
                    break
                sel.skipped[src.name] = f"moved unchanged into graph output '{v.name}'"
                v = src
    for name in list(acts):
        if name in sel.skipped:
            del acts[name]
    sel.activations = list(acts)
    by_name = {v.name: v for v in graph.values()}
    for t in sel.activations:
        readers = by_name[t].consumers()
        if readers and all(r.op_type == "Softmax" for r in readers) and by_name[t] not in outs:
            sel.softmax_inputs.add(t)
    for t in sel.activations:
        sel.groups[t] = find(t)
    for node in graph.nodes:
        q = quant_of(node)
        bi = q.bias if q is not None and quantizable(node) else None
        if bi is None or len(node.inputs) <= bi:
            continue
        b, x, w = node.inputs[bi], node.inputs[0], node.inputs[1]
        if (_is_float(b) and b.const is not None and b.const.ndim == 1 and x is not None and w is not None
                and x.name in acts and w.name in sel.weights and b.name not in sel.weights):
            sel.biases[b.name] = (x.name, w.name)
    if not sel.activations and not sel.weights:
        raise QuantizeError(f"model '{graph.name}' has nothing to quantize: no float tensor is read or "
                            f"written by a quantizable operator (Conv, MatMul, Gemm, Add, ...)")
    return sel


