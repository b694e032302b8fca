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
from corefold.passes.quantize.params import QuantizeError, slice_axis


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

    def keep_float(self, names: set[str], reason: str) -> None:
        """Take activations ``names`` out of the selection (they stay float, ``reason`` in
        :attr:`skipped`). Their tied groups keep the other members, under a representative
        that is still selected; a bias whose input stays float stays float too. O(tensors)."""
        names = set(names) & set(self.activations)
        if not names:
            return
        for t in names:
            self.skipped[t] = reason
        self.activations = [t for t in self.activations if t not in names]
        self.softmax_inputs -= names
        alive = set(self.activations)
        rep: dict[str, str] = {}
        for t in self.activations:
            r = self.groups.get(t, t)
            rep.setdefault(r, r if r in alive else t)
        self.groups = {t: rep[self.groups.get(t, t)] for t in self.activations}
        self.biases = {b: xw for b, xw in self.biases.items() if xw[0] not in names}


def _is_float(v: Value | None) -> bool:
    return v is not None and np.issubdtype(v.dtype, np.floating)


#: elementwise operators an activation region may hold (beyond the seed's ReLU / Clip):
#: each output element depends on the same element of its data inputs, and constants broadcast
ELEMENTWISE = frozenset({"Relu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "LeakyRelu", "Tanh", "Erf", "Gelu",
                         "Elu", "Selu", "Celu", "Softplus", "Softsign", "Mish", "Add", "Sub", "Mul", "Div", "Pow",
                         "Sqrt", "Exp", "Abs", "Neg", "Max", "Min", "Identity"})
#: the largest activation region fused (SiLU is 2 nodes, an exported GELU 5)
MAX_REGION = 16


def _seed_activation(node: Node) -> bool:
    """ReLU, or Clip with a constant lower bound >= 0: the seed's fused activations (SPEC M5 §1)."""
    if node.op_type == "Relu":
        return True
    if node.op_type == "Clip" and len(node.inputs) > 1 and node.inputs[1] is not None \
            and node.inputs[1].const is not None:
        return float(np.asarray(node.inputs[1].const).reshape(-1)[0]) >= 0
    return False


def activation_region(v: Value, graph_outputs: set[Value], general: bool = True) -> tuple[list[Node], Value] | None:
    """The activation fused after ``v``'s producer, as (its nodes, the one tensor it stores).

    The seed's rule (``general`` False): ``v``'s only reader is a ReLU or a Clip with min >= 0,
    and the producer fuses activations (conv, matmul, gemm, add, normalisation). Beyond the
    seed (``general``): the largest set of :data:`ELEMENTWISE` nodes fed only by ``v``, each
    other and constants, with ``v``'s shape, from which exactly one tensor leaves (SiLU =
    Sigmoid + Mul, GELU, HardSwish, bias + activation...). Only that tensor is stored; ``v``
    and the tensors inside are the accumulator's float values on the vector unit.
    Returns None when there is no such region. O(region size * readers).
    """
    if v in graph_outputs or v.producer is None:
        return None
    q = quant_of(v.producer)
    if q is None or not q.fuses_activation:
        return None
    if not general:
        readers = v.consumers()
        if len(readers) == 1 and _seed_activation(readers[0]):
            return [readers[0]], readers[0].outputs[0]
        return None
    inside: set[Value] = {v}
    region: list[Node] = []
    grew = True
    while grew and len(region) < MAX_REGION:
        grew = False
        for t in list(inside):
            for n in t.consumers():
                if n in region or n.op_type not in ELEMENTWISE or len(n.outputs) != 1:
                    continue
                out = n.outputs[0]
                if not _is_float(out) or tuple(out.shape or ()) != tuple(v.shape or ()):
                    continue
                if all(x is None or x.const is not None or x in inside for x in n.inputs):
                    region.append(n)
                    inside.add(out)
                    grew = True
    members = set(region)
    leaving = [t for t in inside if t in graph_outputs or any(c not in members for c in t.consumers())]
    if len(leaving) != 1 or leaving[0] is v:
        # the seed's rule still applies where the general region does not
        return activation_region(v, graph_outputs, general=False)
    return region, leaving[0]


def select_tensors(graph: Graph, per_channel: bool = True, quantize_outputs: bool = False,
                   fuse_activations: bool = True) -> Selection:
    """Which tensors to quantize and how they are tied (see the module docstring).

    ``fuse_activations`` fuses any elementwise activation region (:func:`activation_region`);
    False keeps to the seed's ReLU / Clip(min >= 0).

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
    order = graph.topological_order()
    fused: set[Node] = set()  # nodes inside an activation region: their inputs are not stored
    for node in order:
        q = quant_of(node)
        if q is None or not q.fuses_activation or not quantizable(node):
            continue
        for v in node.outputs:
            found = activation_region(v, outs, fuse_activations) if _is_float(v) else None
            if found is None:
                continue
            region, stored = found
            names = ", ".join(f"{n.op_type} '{n.name}'" for n in region[:3]) + (" ..." if len(region) > 3 else "")
            for t in [v] + [n.outputs[0] for n in region]:
                if t is not stored:
                    sel.skipped[t.name] = f"fused with its activation ({names}); '{stored.name}' is stored"
            fused.update(region)
    for node in order:
        if not quantizable(node):
            continue
        q = quant_of(node)
        params = param_inputs(node)
        for i, v in enumerate(node.inputs):
            if not _is_float(v) or i in params:
                continue
            if node in fused and (v.const is not None or v.name in sel.skipped):
                continue  # the activation's own constants and inputs stay float
            if v.const is not None:
                if q.bias is not None and i == q.bias:
                    continue  # handled below once x and w are known
                if not np.isfinite(v.const).all():
                    # -inf as the identity of a Max (JAX's softmax, masks): no scale holds it
                    sel.skipped[v.name] = "constant holding infinity or NaN: read float"
                    continue
                axis_fn = q.weights.get(i)
                if not per_channel or v.const.ndim < 2:
                    axis = None
                elif axis_fn:
                    axis = axis_fn(node.attrs, v.const.shape)
                else:
                    # no operator axis (an elementwise operand, a Gather's table): the
                    # axis whose per-slice scales round it best
                    axis = slice_axis(v.const)
                if v.name in sel.weights and sel.weights[v.name] != axis:
                    axis = None  # read by two ops wanting different axes: per tensor
                sel.weights[v.name] = axis
            elif v.name not in sel.skipped:
                acts[v.name] = None
        for v in node.outputs:
            if not _is_float(v) or v.name in sel.skipped:
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


