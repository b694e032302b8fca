"""Stage 7: QuantizeLinear/DequantizeLinear insertion (QDQ) and the JSON report.

Pattern -> replacement, per tensor ``t`` with parameters ``p``:

* activation: ``t`` -> ``QuantizeLinear(t, 1/k, 0) -> DequantizeLinear(.., 1/k, 0)``; every
  data reader of ``t`` reads the dequantized value (a graph output keeps its name);
* weight (a float constant read by a quantizable op): stored as integers ``q`` with a
  ``DequantizeLinear(q, 1/k, 0, axis)`` in front of its data readers (per-channel along
  ``axis``);
* bias of Conv / Gemm: int32 with scale ``s_x * s_w`` (per output channel), so the
  accumulator adds it without rescaling;
* float bias ``[N]`` added to a MatMul of a dequantized activation of rank >= 3 (a
  transformer's Linear): written as ``[1, N]`` (:func:`bias_rows`), the same broadcast.

A reader that takes ``t`` as a parameter input (a Resize's scales, a Clip's bounds: facet
``param_inputs`` of the operator table) keeps reading the float tensor: shapes, sizes and
bounds are never quantized, even when the same tensor is data elsewhere. Zero points are
always 0 of the integer type (uint8/int8, uint16/int16, uint4/int4). O(V + E) plus the
constants' size.
"""

from __future__ import annotations

import numpy as np

from corefold.ir import Graph, Value
from corefold.ir.shapes import infer_node
from corefold.passes.quantize.params import SYMMETRIC, UNSIGNED, QuantParams
from corefold.passes.quantize.select import Selection, param_inputs


def _int32_params_quantize(p: QuantParams, x: np.ndarray) -> np.ndarray:
    s = np.asarray(1.0 / p.k, dtype=np.float32)
    if p.axis is not None and s.ndim:
        s = s.reshape([-1] + [1] * (x.ndim - 1))
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.rint(x / s)
    # a scale that underflows to 0 in float32 (s_x * s_w of tiny ranges) stores a 0 bias
    q = np.where(np.isfinite(q), q, 0.0)
    return np.clip(q, -(2**31), 2**31 - 1).astype(np.int32)


def _data_uses(v):
    """The uses of ``v`` that read it as data (not as a shape, index or parameter input)."""
    return [u for u in v.uses() if u.index not in param_inputs(u.node)]


def insert_qdq(graph: Graph, plan: dict[str, QuantParams]) -> Graph:
    """Rewrite ``graph`` in place into its QDQ form for ``plan`` and return it.

    Graph outputs keep their names (the float tensor before the pair is renamed).
    """
    by_name = {v.name: v for v in graph.values()}
    for name, p in plan.items():
        v = by_name[name]
        if not _data_uses(v) and v not in graph.outputs:
            continue  # read only as a parameter (shape, scales, bounds): stays float
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
            readers = _data_uses(v)
            dq = graph.make_node("DequantizeLinear", [qv, scale, zp], attrs, name=f"{name}_dequantize",
                                 output_names=[f"{name}_dequantized"])
            infer_node(dq)
            for u in readers:
                u.node.replace_input(u.index, dq.outputs[0])
            continue
        zp = graph.add_constant(f"{name}_zero_point", np.zeros(scale.shape, p.dtype))
        readers = _data_uses(v)
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
    bias_rows(graph)
    graph.remove_unused_constants()
    graph.sort()
    return graph


def bias_rows(graph: Graph) -> int:
    """Reshape each float bias ``[N]`` of a Linear on a rank >= 3 dequantized activation to ``[1, N]``.

    Pattern: ``DequantizeLinear -> MatMul(x, w) -> Add(., b)`` where ``x`` has rank >= 3, ``w``
    rank 2, the MatMul's output is read only by that Add, and ``b`` is a float constant of shape
    ``[N]``. Replacement: the Add reads ``b`` as ``[1, N]`` (a new constant if ``b`` has other
    readers). The Add's output has rank >= 3 either way, so the broadcast and every value are
    the same. Check: the Add's output shape is unchanged.

    NOTE: ONNX Runtime (1.32, default level, any non-ARM CPU, where it moves int8 activations
    to uint8) refuses the ``[N]`` form (issue 9). Its MatMulAddFusion turns a rank >= 3
    MatMul + Add(``[N]``) into ``Reshape -> Gemm -> Reshape``; QDQPropagationTransformer then
    copies the DequantizeLinear across the new Reshape as a Q/DQ pair whose Q carries
    ``output_dtype=INT8``; QDQS8ToU8Transformer moves that pair's zero point to uint8 but keeps
    the attribute, and the Q no longer type-checks ("output_dtype INT8 does not match
    y_zero_point type UINT8"). MatMulAddFusion takes a ``[1, N]`` bias only from a rank-2
    MatMul, so it leaves this Add alone, and no Reshape is made.

    Returns:
        The number of Adds rewritten.
    """
    rows: dict[str, Value] = {}
    changed = 0
    for add in list(graph.nodes):
        if add.op_type != "Add" or len(add.inputs) != 2:
            continue
        for i in (0, 1):
            m, b = add.inputs[i], add.inputs[1 - i]
            mm = m.producer if m is not None else None
            if mm is None or mm.op_type != "MatMul" or len(m.uses()) != 1 or m in graph.outputs:
                continue
            x, w = mm.inputs[0], mm.inputs[1]
            if x.producer is None or x.producer.op_type != "DequantizeLinear":
                continue
            if x.shape is None or len(x.shape) < 3 or w.shape is None or len(w.shape) != 2:
                continue
            if b is None or b.const is None or b.const.ndim != 1 or not np.issubdtype(b.const.dtype, np.floating):
                continue
            shape = add.outputs[0].shape
            if len(b.uses()) == 1 and b not in graph.outputs:
                b.set_const(b.const.reshape(1, -1))
                row = b
            else:
                row = rows.get(b.name)
                if row is None:
                    row = rows[b.name] = graph.add_constant(f"{b.name}_row", b.const.reshape(1, -1))
                add.replace_input(1 - i, row)
            infer_node(add)
            if add.outputs[0].shape != shape:
                raise AssertionError(f"bias_rows changed the shape of Add '{add.name}': {shape} -> "
                                     f"{add.outputs[0].shape}")
            changed += 1
            break
    return changed


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


__all__ = ["bias_rows", "insert_qdq", "plan_to_json"]
