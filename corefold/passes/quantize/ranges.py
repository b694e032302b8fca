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

O(V + E). Only the lower bound decides the mode; the upper bound is reported.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from corefold.ir import Graph, Node, Value


class Interval(NamedTuple):
    lo: float | None
    hi: float | None

    @property
    def non_negative(self) -> bool:
        return self.lo is not None and self.lo >= 0


UNKNOWN = Interval(None, None)
NON_NEGATIVE = Interval(0.0, None)

_NONNEG_OUTPUT = {"Relu": NON_NEGATIVE, "Sigmoid": Interval(0.0, 1.0), "Softmax": Interval(0.0, 1.0),
                  "Abs": NON_NEGATIVE, "Exp": NON_NEGATIVE, "Sqrt": NON_NEGATIVE, "HardSigmoid": Interval(0.0, 1.0),
                  "Softplus": NON_NEGATIVE, "ReduceL2": NON_NEGATIVE, "ReduceSumSquare": NON_NEGATIVE}
#: ops whose (first-input) output is non-negative when every data input is
_ALL_NONNEG = {"Concat", "Add", "Mul", "Div", "Min", "Sum", "Mean", "MaxPool", "AveragePool",
               "GlobalAveragePool", "GlobalMaxPool", "Resize", "Upsample", "Reshape", "Transpose",
               "Flatten", "Squeeze", "Unsqueeze", "Identity", "Slice", "Split", "Expand", "Tile",
               "DepthToSpace", "SpaceToDepth", "ReduceMax", "ReduceMin", "ReduceMean", "ReduceSum",
               "Dropout", "LpPool", "Pow"}
#: ops whose data is their first input only (the others are indices / shapes / sizes)
_FIRST_INPUT_ONLY = {"Reshape", "Slice", "Split", "Expand", "Tile", "Resize", "Upsample", "Squeeze",
                     "Unsqueeze", "Gather", "GatherElements", "GatherND", "Pad", "ReduceMax", "ReduceMin",
                     "ReduceMean", "ReduceSum", "Dropout", "Pow"}
_FUSABLE = {"Conv", "ConvTranspose", "FusedConv", "BatchNormalization", "InstanceNormalization",
            "LayerNormalization", "GroupNormalization", "Gemm", "MatMul", "FusedGemm"}


def _const_scalar(v: Value | None) -> float | None:
    if v is None or v.const is None or v.const.size != 1:
        return None
    return float(np.asarray(v.const, dtype=np.float64).reshape(-1)[0])


def _activation_interval(name: str, params: list[float] | None) -> Interval | None:
    name = name.decode() if isinstance(name, bytes) else str(name)
    if name == "Relu":
        return NON_NEGATIVE
    if name in ("Relu6",):
        return Interval(0.0, 6.0)
    if name == "Clip" and params and len(params) >= 2:
        return Interval(float(params[0]), float(params[1]))
    if name in ("Sigmoid", "HardSigmoid"):
        return Interval(0.0, 1.0)
    return None


def _node_interval(node: Node, ranges: dict[Value, Interval]) -> Interval:
    op = node.op_type
    ins = node.inputs

    def rng(v: Value | None) -> Interval:
        return UNKNOWN if v is None else ranges.get(v, UNKNOWN)

    if op in _NONNEG_OUTPUT:
        return _NONNEG_OUTPUT[op]
    if op == "Clip":
        lo = _const_scalar(ins[1]) if len(ins) > 1 else None
        hi = _const_scalar(ins[2]) if len(ins) > 2 else None
        lo = lo if lo is not None else node.attrs.get("min")
        hi = hi if hi is not None else node.attrs.get("max")
        src = rng(ins[0])
        if lo is None and src.lo is not None:
            lo = src.lo
        return Interval(None if lo is None else float(lo), None if hi is None else float(hi))
    if op in _FUSABLE and "activation" in node.attrs:
        act = _activation_interval(node.attrs["activation"], node.attrs.get("activation_params"))
        if act is not None:
            return act
    if op == "Max":
        data = [rng(v) for v in ins if v is not None]
        if any(r.non_negative for r in data):
            return Interval(max(r.lo for r in data if r.lo is not None), None)
        return UNKNOWN
    if op == "Pad":
        value = _const_scalar(ins[2]) if len(ins) > 2 else 0.0
        mode = node.attrs.get("mode", "constant")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        src = rng(ins[0])
        if src.non_negative and (mode != "constant" or value is None or value >= 0):
            return NON_NEGATIVE
        return UNKNOWN
    if op in ("Gather", "GatherElements", "GatherND"):
        return rng(ins[0])
    if op in _ALL_NONNEG:
        data = ins[:1] if op in _FIRST_INPUT_ONLY else [v for v in ins if v is not None]
        if op == "Pow":
            data = ins[:1]
        if data and all(rng(v).non_negative for v in data):
            return NON_NEGATIVE
        return UNKNOWN
    return UNKNOWN


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
        iv = _node_interval(node, ranges)
        for i, out in enumerate(node.outputs):
            # multi-output ops (Split) share the interval; others only output 0
            ranges[out] = iv if (i == 0 or node.op_type == "Split") else UNKNOWN
    return ranges


def non_negative_values(graph: Graph) -> set[str]:
    """Names of values known to be >= 0 without any data."""
    return {v.name for v, iv in static_ranges(graph).items() if iv.non_negative}
