"""Per-operator cost on a target.

For an operator ``o`` bound to unit kind ``u(o)`` with throughput ``r_u`` per cycle at clock
``f``::

    compute_seconds(o) = work(o) / (r_u * f)            (one unit of kind u)
    work(o) = MACs(o)             if u = matrix   (conv, conv-transpose, gemm, matmul)
              vector_ops(o)       if u = vector   (elementwise, pooling, normalisation)
              bytes moved(o)      if u = dma      (transpose, concat, slice, pad, gather...)

and a transfer of ``b`` bytes between DRAM and a core takes
``b / min(r_dma * f, dram_bandwidth)`` (SPEC M3 §5's T1). The unit kind and the work of
each operator come from the operator table (``corefold.ops``, facet ``cost``); shape-only
ops (Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout at inference) cost nothing.
An operator the table lacks is an UnsupportedOpError, never a silent default (PyTorch's
aten operators get their entries as the torch importer meets them,
``corefold.ops.defs.aten``). On a ``kind = "gpu"`` target the time is a roofline instead
(:mod:`corefold.cost.roofline`).
Every function here is O(1) per node (O(V) per graph).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from corefold import ops
from corefold.ir import Graph, Node
from corefold.ir.liveness import liveness
from corefold.target import Target


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


def unit_of(node: Node) -> str:
    """The unit kind that runs ``node`` (the operator table's cost facet; shape-only ops
    are booked on the vector unit at zero time).

    Raises:
        UnsupportedOpError: the operator is not in the table.
    """
    unit = ops.get(node.op_type, node.domain, where=f"node '{node.name}'").cost.unit
    return "vector" if unit == "free" else unit


def op_cost(node: Node, target: Target) -> OpCost:
    """The cost of ``node`` on ``target``. Every input and output needs a static shape.

    Raises:
        ValueError: a value of the node has no static shape.
    """
    input_bytes = sum(v.nbytes for v in node.inputs if v is not None and not v.is_constant)
    weight_bytes = sum(v.nbytes for v in node.inputs if v is not None and v.is_constant)
    output_bytes = sum(v.nbytes for v in node.outputs)
    entry = ops.get(node.op_type, node.domain, where=f"node '{node.name}'")
    ins = [None if v is None else (v.shape, v.dtype) for v in node.inputs]
    outs = [(v.shape, v.dtype) for v in node.outputs]
    unit, work, macs = ops.work(entry, node.attrs, ins, outs)
    if unit == "matrix":
        has_bias = len(node.inputs) > 2 and node.inputs[2] is not None
        flops = 2 * macs + (int(np.prod(node.outputs[0].shape, dtype=np.int64)) if has_bias else 0)
    elif unit == "vector":
        flops = int(work)
    else:
        flops = 0
    unit = "vector" if unit == "free" else unit
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
    gc.peak_live_bytes = liveness(graph, order).peak_bytes()
    gc.seconds_by_unit = {k: by_unit.get(k, 0.0) for k in target.units}
    gc.count_by_op = dict(count)
    gc.macs_by_op = dict(macs_by)
    gc.seconds_by_op = dict(sec_by)
    return gc
