"""Choosing what to quantize and inserting QuantizeLinear/DequantizeLinear pairs (QDQ).

Pattern -> replacement, per tensor ``t`` with parameters ``p``:

* activation: ``t`` -> ``QuantizeLinear(t, 1/k, 0) -> DequantizeLinear(.., 1/k, 0)``; every
  reader of ``t`` reads the dequantized value (a graph output keeps its name);
* weight (a float constant read by a quantizable op): stored as integers ``q`` with a
  ``DequantizeLinear(q, 1/k, 0, axis)`` in front of its readers (per-channel along ``axis``);
* bias of Conv / Gemm: int32 with scale ``s_x * s_w`` (per output channel), so the
  accumulator adds it without rescaling.

Zero points are always 0 of the integer type (uint8/int8, uint16/int16, uint4/int4).

What is quantized (:func:`select_tensors`): every float input and output of a node whose
operator the table marks ``compute`` or ``movement`` (``corefold.ops``, facet ``quant``),
except its parameter inputs (shapes, indices, scales, sizes, bounds: facet
``param_inputs``, never quantized) and

* a pre-activation tensor whose only reader is ReLU / Clip(min >= 0) (the seed's fused
  conv + activation): only the activation's output is stored, so it is unsigned;
* a tensor read only by Softmax is clipped at most SOFTMAX_MARGIN below its maximum
  (softmax is shift-invariant, so masked -1e4 scores need no integer levels);
* tensors *tied* to others share one parameter set: the inputs and output of a Concat (one
  scale for all, SPEC M5 beyond the seed) and the output of a pure data movement op
  (Reshape, Transpose, MaxPool, ...) with its input, so re-quantizing it is exact.

O(V + E) plus the constants' size.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from corefold import ops
from corefold.ir import Graph, Node, Value
from corefold.ir.shapes import infer_node
from corefold.passes.quantize.calibrate import TensorStats, clip_magnitude
from corefold.passes.quantize.params import (
    SYMMETRIC,
    UNSIGNED,
    QuantizeError,
    QuantParams,
    choose_mode,
    integer_range,
    scale_factor,
    weight_params,
)
from corefold.passes.quantize.ranges import Interval


def quant_of(node: Node) -> ops.Quant | None:
    """The table's quantization facet of ``node`` (None: the operator has none)."""
    q = ops.get(node.op_type, node.domain, where=f"node '{node.name}'").quant
    return q if isinstance(q, ops.Quant) else None


def quantizable(node: Node) -> bool:
    """Whether M5 quantizes around ``node`` (role compute or movement)."""
    q = quant_of(node)
    return q is not None and q.role in (ops.COMPUTE, ops.MOVEMENT)


def param_inputs(node: Node) -> tuple[int, ...]:
    p = ops.get(node.op_type, node.domain).param_inputs
    return p if isinstance(p, tuple) else ()


#: how far below its maximum a Softmax input may be clipped without changing the result
SOFTMAX_MARGIN = 20.0


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
                if not np.isfinite(v.const).all():
                    # -inf as the identity of a Max (JAX's softmax, masks): no scale holds it
                    sel.skipped[v.name] = "constant holding infinity or NaN: read float"
                    continue
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


@dataclass(frozen=True)
class PlanSettings:
    """What :func:`make_plan` needs: widths, calibration method and the unsigned rule."""

    bits: int = 8
    weight_bits: int = 8
    per_channel: bool = True
    calibration: str = "mse"
    percentile: float = 99.99
    unsigned_rule: bool = True


def make_plan(graph: Graph, sel: Selection, stats: dict[str, TensorStats], static: dict[Value, Interval],
              settings: PlanSettings, bits: dict[str, int] | None = None) -> dict[str, QuantParams]:
    """Parameters of every selected tensor (activations, weights, biases).

    ``bits`` overrides the width of individual tensors (a tied group takes its widest
    member's). Modes follow the seed: unsigned iff the minimum (observed or known without
    data) is >= 0 and ``settings.unsigned_rule``; magnitudes by ``settings.calibration``.
    """
    bits = bits or {}
    by_name = {v.name: v for v in graph.values()}
    plan: dict[str, QuantParams] = {}
    for members in sel.members().values():
        lo = min(stats[t].minimum for t in members)
        hi = max(stats[t].maximum for t in members)
        known_nonneg = all(static.get(by_name[t], Interval(None, None)).non_negative for t in members)
        n = max(bits.get(t, settings.bits) for t in members)
        mode = choose_mode(0.0 if known_nonneg else lo, settings.unsigned_rule)
        qmax = integer_range(mode, n)[1]
        m = max(clip_magnitude(stats[t], settings.calibration, qmax, settings.percentile) for t in members)
        if all(t in sel.softmax_inputs for t in members) and -lo > max(hi, 0.0) + SOFTMAX_MARGIN:
            # softmax(x) depends on x - max(x): values more than SOFTMAX_MARGIN below the
            # largest weigh < exp(-20); clipping them there changes nothing (attention masks)
            m = min(m, max(hi, 0.0) + SOFTMAX_MARGIN)
        src = "static range + calibration" if known_nonneg else "calibration"
        for t in members:
            plan[t] = QuantParams(mode, n, scale_factor(m, mode, n), None, lo, hi, src)
    for w, axis in sel.weights.items():
        plan[w] = weight_params(by_name[w].const, bits.get(w, settings.weight_bits), axis=axis,
                                allow_unsigned=settings.unsigned_rule)
    for b, (x, w) in sel.biases.items():
        px, pw = plan[x], plan[w]
        s = px.onnx_scale.astype(np.float64) * pw.onnx_scale.astype(np.float64)
        const = by_name[b].const
        s = np.broadcast_to(s, const.shape) if pw.axis is not None else s
        plan[b] = QuantParams(SYMMETRIC, 32, (1.0 / s), 0 if pw.axis is not None else None,
                              float(const.min(initial=0)), float(const.max(initial=0)), "bias = s_x * s_w")
    return plan


def _int32_params_quantize(p: QuantParams, x: np.ndarray) -> np.ndarray:
    s = np.asarray(1.0 / p.k, dtype=np.float32)
    if p.axis is not None and s.ndim:
        s = s.reshape([-1] + [1] * (x.ndim - 1))
    return np.clip(np.rint(x / s), -(2**31), 2**31 - 1).astype(np.int32)


def insert_qdq(graph: Graph, plan: dict[str, QuantParams]) -> Graph:
    """Rewrite ``graph`` in place into its QDQ form for ``plan`` and return it.

    Graph outputs keep their names (the float tensor before the pair is renamed).
    """
    by_name = {v.name: v for v in graph.values()}
    for name, p in plan.items():
        v = by_name[name]
        scale = graph.add_constant(f"{name}_scale", p.onnx_scale if p.bits != 32 else
                                   np.asarray(1.0 / p.k, dtype=np.float32))
        attrs = {"axis": int(p.axis)} if p.axis is not None and np.ndim(p.k) else {}
        if v.const is not None:
            if p.bits == 32:
                q = _int32_params_quantize(p, v.const)
                zp = graph.add_constant(f"{name}_zero_point", np.zeros(scale.shape, np.int32))
            else:
                q = p.weight_integers(v.const).astype(p.dtype)
                if v.const.size > 1 and all(st == 0 for st in v.const.strides) and np.all(q == q.flat[0]):
                    # a splat (ConstantOfShape fill) stays a splat
                    q = np.broadcast_to(q.reshape(-1)[:1].reshape(()), v.const.shape)
                zp = graph.add_constant(f"{name}_zero_point", np.zeros(scale.shape, p.dtype))
            qv = graph.add_constant(f"{name}_quantized", q)
            readers = v.uses()
            dq = graph.make_node("DequantizeLinear", [qv, scale, zp], attrs, name=f"{name}_dequantize",
                                 output_names=[f"{name}_dequantized"])
            infer_node(dq)
            for u in readers:
                u.node.replace_input(u.index, dq.outputs[0])
            continue
        zp = graph.add_constant(f"{name}_zero_point", np.zeros(scale.shape, p.dtype))
        readers = v.uses()
        qn = graph.make_node("QuantizeLinear", [v, scale, zp], attrs, name=f"{name}_quantize",
                             output_names=[f"{name}_quantized"])
        infer_node(qn)
        dq = graph.make_node("DequantizeLinear", [qn.outputs[0], scale, zp], attrs, name=f"{name}_dequantize",
                             output_names=[f"{name}_dequantized"])
        infer_node(dq)
        for u in readers:
            u.node.replace_input(u.index, dq.outputs[0])
        if v in graph.outputs:
            graph.outputs = [dq.outputs[0] if o is v else o for o in graph.outputs]
            v.name, dq.outputs[0].name = dq.outputs[0].name, v.name
    graph.remove_unused_constants()
    graph.sort()
    return graph


def plan_to_json(plan: dict[str, QuantParams], sel: Selection) -> dict:
    """The JSON report: every quantized tensor's kind, mode, bits and scale(s)."""
    tensors = {}
    for name, p in plan.items():
        kind = "bias" if name in sel.biases else "weight" if name in sel.weights else "activation"
        entry = {"kind": kind, **p.to_json()}
        if kind == "activation" and sel.groups.get(name, name) != name:
            entry["shares_scale_with"] = sel.groups[name]
        tensors[name] = entry
    return {"tensors": tensors, "not_quantized": dict(sel.skipped),
            "modes": {m: sum(1 for p in plan.values() if p.mode == m and p.bits != 32) for m in (UNSIGNED, SYMMETRIC)}}


__all__ = ["quantizable", "quant_of", "Selection", "select_tensors", "PlanSettings", "make_plan", "insert_qdq",
           "plan_to_json", "QuantizeError"]
