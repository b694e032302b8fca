"""Per-operator cost on a target.

For an operator ``o`` bound to unit kind ``u(o)`` with throughput ``r_u`` per cycle at clock
``f``::

    compute_seconds(o) = work(o) / (r_u * f)            (one unit of kind u)
    work(o) = MACs(o)             if u = matrix   (conv, conv-transpose, gemm, matmul)
              vector_ops(o)       if u = vector   (elementwise, pooling, normalisation)
              bytes moved(o)      if u = dma      (transpose, concat, slice, pad, gather...)

and a transfer of ``b`` bytes between DRAM and a core takes
``b / min(r_dma * f, dram_bandwidth)`` (SPEC M3 §5's T1). Shape-only ops (Reshape,
Flatten, Squeeze, Unsqueeze, Identity, Dropout at inference) cost nothing. On a
``kind = "gpu"`` target the time is a roofline instead (:mod:`corefold.cost.roofline`).
Every function here is O(1) per node (O(V) per graph).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from corefold.ir import Graph, Node
from corefold.target import Target

#: Operators that only reinterpret a tensor's shape: no work, no unit time.
FREE_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout", "Shape", "Constant"})

#: Operators that move data without arithmetic: run on the DMA unit, work = output bytes.
MOVE_OPS = frozenset({"Transpose", "Concat", "Split", "Slice", "Pad", "Gather", "Expand", "Tile", "Cast",
                      "ConstantOfShape", "DepthToSpace", "SpaceToDepth"})

#: Vector operations per output element for element-wise operators.
ELEMENTWISE_OPS_PER_ELEMENT = {
    "Relu": 1, "LeakyRelu": 2, "Clip": 2, "Neg": 1, "Abs": 1, "Add": 1, "Sub": 1, "Mul": 1, "Div": 1,
    "Max": 1, "Min": 1, "Sqrt": 4, "Pow": 8, "Exp": 8, "Log": 8, "Sigmoid": 10, "Tanh": 10, "Erf": 10,
    "HardSigmoid": 3, "HardSwish": 4, "BatchNormalization": 2, "QuantizeLinear": 3, "DequantizeLinear": 2,
    "Where": 1, "Equal": 1, "Less": 1, "Greater": 1, "Not": 1, "Reciprocal": 4,
}


@dataclass(frozen=True)
class OpCost:
    """What one operator costs on a target.

    Attributes:
        macs: multiply-accumulates (matrix ops; 0 otherwise).
        flops: floating point operations (2 per MAC plus bias and element-wise work).
        input_bytes: bytes of non-constant inputs (activations) read.
        weight_bytes: bytes of constant inputs (weights, biases, tables).
        output_bytes: bytes written.
        unit: unit kind that runs it: "matrix", "vector" or "dma" (free ops: "vector", 0 s).
        work: amount in the unit's own measure (MACs, vector ops or bytes).
        compute_seconds: time on one unit of that kind.
    """

    op_type: str
    macs: int
    flops: int
    input_bytes: int
    weight_bytes: int
    output_bytes: int
    unit: str
    work: float
    compute_seconds: float

    @property
    def total_bytes(self) -> int:
        """Every byte the operator touches: inputs, weights and outputs (SPEC M3 §7)."""
        return self.input_bytes + self.weight_bytes + self.output_bytes


def transfer_seconds(nbytes: float, target: Target) -> float:
    """Seconds to move ``nbytes`` between DRAM and a core over the DMA unit(s)."""
    dma = target.units["dma"]
    rate = min(dma.throughput * dma.count * target.clock_hz, target.dram_bytes_per_s)
    return float(nbytes) / rate


def _prod(shape) -> int:
    return int(np.prod(shape, dtype=np.int64)) if shape else 1


def _macs(node: Node) -> int:
    op = node.op_type
    ins = node.inputs
    out = node.outputs[0]
    if op == "Conv":
        w = ins[1].shape  # (M, C/group, k...)
        return _prod(out.shape) * _prod(w[1:])
    if op == "ConvTranspose":
        x, w = ins[0].shape, ins[1].shape  # w: (C, M/group, k...)
        return _prod(x) * _prod(w[1:])
    if op in ("MatMul", "MatMulInteger", "Gemm"):
        a = ins[0].shape
        if op == "Gemm":
            k = a[0] if node.attrs.get("transA", 0) else a[-1]
        else:
            k = a[-1]
        return _prod(out.shape) * int(k)
    return 0


def _vector_ops(node: Node) -> float:
    op = node.op_type
    out_elems = _prod(node.outputs[0].shape)
    in_elems = _prod(node.inputs[0].shape) if node.inputs and node.inputs[0] is not None else out_elems
    if op in ("Sum", "Max", "Min", "Mean"):  # variadic: one op per extra input
        return out_elems * max(1, len([v for v in node.inputs if v is not None]) - 1)
    if op in ELEMENTWISE_OPS_PER_ELEMENT:
        return ELEMENTWISE_OPS_PER_ELEMENT[op] * out_elems
    if op in ("MaxPool", "AveragePool"):
        return out_elems * _prod(node.attrs.get("kernel_shape", [1]))
    if op in ("GlobalAveragePool", "GlobalMaxPool", "ReduceMean", "ReduceSum", "ReduceMax"):
        return in_elems
    if op == "LRN":
        return out_elems * (int(node.attrs.get("size", 1)) + 3)
    if op in ("Softmax", "LogSoftmax"):
        return out_elems * 5
    if op == "LayerNormalization":
        return out_elems * 8
    if op == "Resize":
        mode = node.attrs.get("mode", "nearest")
        return out_elems * (1 if mode == "nearest" else 8)
    return out_elems


def unit_of(node: Node) -> str:
    """The unit kind that runs ``node``: matrix for MAC-heavy ops, dma for data movement,
    vector for the rest."""
    if node.op_type in ("Conv", "ConvTranspose", "Gemm", "MatMul", "MatMulInteger", "ConvInteger"):
        return "matrix"
    if node.op_type in MOVE_OPS:
        return "dma"
    return "vector"


def op_cost(node: Node, target: Target) -> OpCost:
    """The cost of ``node`` on ``target``. Every input and output needs a static shape.

    Raises:
        ValueError: a value of the node has no static shape.
    """
    input_bytes = sum(v.nbytes for v in node.inputs if v is not None and not v.is_constant)
    weight_bytes = sum(v.nbytes for v in node.inputs if v is not None and v.is_constant)
    output_bytes = sum(v.nbytes for v in node.outputs)
    unit = unit_of(node)
    macs = 0
    if node.op_type in FREE_OPS:
        work = 0.0
        flops = 0
    elif unit == "matrix":
        macs = _macs(node)
        work = float(macs)
        has_bias = len(node.inputs) > 2 and node.inputs[2] is not None
        flops = 2 * macs + (_prod(node.outputs[0].shape) if has_bias else 0)
    elif unit == "dma":
        work = float(output_bytes)
        flops = 0
    else:
        work = float(_vector_ops(node))
        flops = int(work)
    u = target.units[unit]
    cost = OpCost(node.op_type, macs, flops, input_bytes, weight_bytes, output_bytes, unit, work,
                  work / (u.throughput * target.clock_hz))
    if target.device is not None:  # a GPU-like device: roofline times (corefold.cost.roofline)
        from corefold.cost.roofline import roofline

        return roofline(cost, node, target)
    return cost


@dataclass
class GraphCost:
    """Totals of :func:`op_cost` over a graph."""

    ops: dict[Node, OpCost]
    macs: int = 0
    flops: int = 0
    parameters: int = 0
    parameter_bytes: int = 0
    activation_bytes: int = 0
    peak_live_bytes: int = 0
    seconds_by_unit: dict[str, float] = field(default_factory=dict)
    count_by_op: dict[str, int] = field(default_factory=dict)
    macs_by_op: dict[str, int] = field(default_factory=dict)
    seconds_by_op: dict[str, float] = field(default_factory=dict)


def graph_cost(graph: Graph, target: Target) -> GraphCost:
    """Sum op costs; also parameters (constant elements read by nodes), activation memory
    (every non-constant value's bytes) and the peak of live activations in file order. O(V + E)."""
    order = graph.topological_order()
    ops = {n: op_cost(n, target) for n in order}
    gc = GraphCost(ops)
    by_unit: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    macs_by: dict[str, int] = defaultdict(int)
    sec_by: dict[str, float] = defaultdict(float)
    for n, c in ops.items():
        gc.macs += c.macs
        gc.flops += c.flops
        by_unit[c.unit] += c.compute_seconds
        count[n.op_type] += 1
        macs_by[n.op_type] += c.macs
        sec_by[n.op_type] += c.compute_seconds
    used_consts = [v for v in graph.constants.values() if v.uses()]
    gc.parameters = sum(v.size for v in used_consts)
    gc.parameter_bytes = sum(v.nbytes for v in used_consts)
    gc.activation_bytes = sum(v.nbytes for v in graph.inputs) + sum(o.nbytes for n in order for o in n.outputs)
    # live-set peak over the topological order: a value lives from its producer to its last use
    last_use: dict[int, int] = {}
    for i, n in enumerate(order):
        for v in n.inputs:
            if v is not None and not v.is_constant:
                last_use[id(v)] = i
    outputs = {id(v) for v in graph.outputs}
    live = sum(v.nbytes for v in graph.inputs)
    peak = live
    frees: dict[int, int] = defaultdict(int)
    for v in graph.inputs:
        if id(v) not in outputs and id(v) in last_use:
            frees[last_use[id(v)]] += v.nbytes
    for i, n in enumerate(order):
        for o in n.outputs:
            live += o.nbytes
            if id(o) not in outputs:
                frees[last_use.get(id(o), i)] += o.nbytes
        peak = max(peak, live)
        live -= frees.pop(i, 0)
    gc.peak_live_bytes = peak
    gc.seconds_by_unit = {k: by_unit.get(k, 0.0) for k in target.units}
    gc.count_by_op = dict(count)
    gc.macs_by_op = dict(macs_by)
    gc.seconds_by_op = dict(sec_by)
    return gc
