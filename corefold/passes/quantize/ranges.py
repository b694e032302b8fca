"""Ranges known from the operators alone, without data (SPEC M5 §1).

A forward pass over the graph in topological order gives every float value an interval
``[lo, hi]`` where either bound may be unknown (``None``). The rules:

* ReLU -> [0, ?]; ReLU6 / Clip(min, max) -> [min, max] (non-negative when min >= 0);
  Sigmoid, Softmax -> [0, 1]; Abs, Exp, Sqrt -> [0, ?];
* a fused conv / depthwise / transposed-conv / normalisation whose ``activation``
  attribute is Relu, Relu6 or a Clip with min >= 0 (as ``FusedConv`` writes it) -> that
  activation's range;
* Concat, Max, Min, Add, Mul, Div, pooling, Resize and pure data movement (Reshape,
  Transpose, Slice, Gather's data, Pad with a non-negative value ...) of non-negative inputs
  -> non-negative; Max with any non-negative input -> non-negative;
* a constant -> its exact [min, max].

The rules are the operator table's ``quant.range`` facets (``corefold/ops/defs/``); this
module walks the graph. O(V + E). Only the lower bound decides the mode; the upper bound
is reported.
"""

from __future__ import annotations

import numpy as np

from corefold import ops
from corefold.ir import Graph, Node, Value
from corefold.ops import NON_NEGATIVE, UNKNOWN, Interval

__all__ = ["Interval", "UNKNOWN", "NON_NEGATIVE", "static_ranges", "non_negative_values", "node_interval"]


def _activation_interval(name, params) -> Interval | None:
    """The range of a fused ``activation`` attribute (as FusedConv writes it)."""
    name = name.decode() if isinstance(name, bytes) else str(name)
    if name == "Relu":
        return NON_NEGATIVE
    if name == "Relu6":
        return Interval(0.0, 6.0)
    if name == "Clip" and params and len(params) >= 2:
        return Interval(float(params[0]), float(params[1]))
    if name in ("Sigmoid", "HardSigmoid"):
        return Interval(0.0, 1.0)
    return None


def node_interval(node: Node, ranges: dict[Value, Interval]) -> Interval:
    """Output 0's interval from the operator table's range rule (``quant.range``); a
    fusing operator with an ``activation`` attribute takes that activation's range; the
    parameter inputs (shapes, indices, bounds) are not data and read as unknown."""
    entry = ops.get(node.op_type, node.domain, where=f"node '{node.name}'")
    q = entry.quant
    if not isinstance(q, ops.Quant):
        return UNKNOWN
    if q.fuses_activation and "activation" in node.attrs:
        act = _activation_interval(node.attrs["activation"], node.attrs.get("activation_params"))
        if act is not None:
            return act
    if q.range is None:
        return UNKNOWN
    params = set(entry.param_inputs) if isinstance(entry.param_inputs, tuple) else set()
    rngs = [None if (v is None or i in params) else ranges.get(v, UNKNOWN) for i, v in enumerate(node.inputs)]
    consts = [None if v is None else v.const for v in node.inputs]
    return q.range(node.attrs, rngs, consts)


def _is_movement(node: Node) -> bool:
    q = ops.get(node.op_type, node.domain).quant
    return isinstance(q, ops.Quant) and q.role == ops.MOVEMENT


def static_ranges(graph: Graph) -> dict[Value, Interval]:
    """The interval of every value known without data (unknown values map to ``UNKNOWN``).

    Returns a dict over every input, constant and node output of ``graph``.
    """
    ranges: dict[Value, Interval] = {v: UNKNOWN for v in graph.inputs}
    for v in graph.constants.values():
        if v.const.size and np.issubdtype(v.const.dtype, np.number):
            ranges[v] = Interval(float(np.min(v.const)), float(np.max(v.const)))
        else:
            ranges[v] = UNKNOWN
    for node in graph.topological_order():
        iv = node_interval(node, ranges)
        shared = _is_movement(node)
        for i, out in enumerate(node.outputs):
            # every output of a data-movement op (Split) holds input values; others: output 0
            ranges[out] = iv if (i == 0 or shared) else UNKNOWN
    return ranges


def non_negative_values(graph: Graph) -> set[str]:
    """Names of values known to be >= 0 without any data."""
    return {v.name for v, iv in static_ranges(graph).items() if iv.non_negative}
