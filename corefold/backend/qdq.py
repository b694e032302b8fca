"""The QDQ clean-ups of the tile step (:mod:`corefold.backend.tile`), on its private copy of
the graph: what computes its input unchanged goes (:func:`drop_identities`), Concat and Slice
of dequantized weights become the DequantizeLinear of the moved integers
(:func:`dequantize_after_moves`), and the weights of operators left in float are dequantized
once, at lowering (:func:`fold_dequantized_weights`). Helpers read a DequantizeLinear's
constant quantization (:func:`dq_params`).
"""

from __future__ import annotations

import numpy as np

from corefold.backend.executable import QuantTensor
from corefold.ir import Graph, Node, Value


def is_quantized(graph: Graph) -> bool:
    """Whether the graph has QuantizeLinear nodes (a QDQ model)."""
    return any(n.op_type == "QuantizeLinear" for n in graph.nodes)


def const_of(v: Value | None) -> np.ndarray | None:
    return None if v is None or v.const is None else v.const


def quant_tensor(scale: np.ndarray, zp: np.ndarray | None, axis: int | None, dtype: np.dtype) -> QuantTensor:
    scale = np.asarray(scale)
    z = np.zeros(scale.shape, dtype) if zp is None else np.asarray(zp)
    return QuantTensor(scale, z, axis if scale.ndim else None, np.dtype(dtype).name)


def dq_params(dq: Node) -> QuantTensor | None:
    """The quantization of a DequantizeLinear's input, if its scale and zero point are constants."""
    scale = const_of(dq.inputs[1])
    zp_v = dq.inputs[2] if len(dq.inputs) > 2 else None
    zp = const_of(zp_v)
    if scale is None or (zp_v is not None and zp is None):
        return None
    return quant_tensor(scale, zp, int(dq.attrs.get("axis", 1)), dq.inputs[0].dtype)


def _inference_dropout(n: Node) -> bool:
    ratio = n.inputs[1] if len(n.inputs) > 1 else None
    training = n.inputs[2] if len(n.inputs) > 2 else None
    if ratio is not None and ratio.const is not None and float(np.asarray(ratio.const).reshape(-1)[0]) == 0.0:
        return True
    return training is None or (training.const is not None and not bool(np.asarray(training.const).reshape(-1)[0]))


def _same_quantization(dq: Node, q: Node) -> bool:
    """Whether QuantizeLinear ``q`` undoes DequantizeLinear ``dq`` exactly: the same constant
    scale and zero point (and axis, when per-axis) and the same integer type, of at most
    16 bits with a float32 or float64 scale (so that ``(q - z) * s / s`` rounds back to
    ``q - z``)."""
    a, b = dq_params(dq), dq_params(q)
    t = dq.inputs[0].dtype
    if a is None or b is None or q.outputs[0].dtype != t or not np.issubdtype(t, np.integer) or t.itemsize > 2:
        return False
    if a.scale.dtype not in (np.float32, np.float64) or b.scale.dtype != a.scale.dtype:
        return False
    if a.scale.shape != b.scale.shape or a.zero_point.shape != b.zero_point.shape:
        return False
    if a.scale.ndim and a.axis % len(dq.inputs[0].shape) != b.axis % len(dq.inputs[0].shape):
        return False
    return bool(np.array_equal(a.scale, b.scale) and np.array_equal(a.zero_point, b.zero_point))


def drop_identities(graph: Graph) -> int:
    """Remove, in place, the nodes whose output is their input unchanged; return how many.

    * a Dropout at inference (``training_mode`` absent or constant false, or ratio
      constant 0) whose mask output nobody reads, and an Identity;
    * ``QuantizeLinear(DequantizeLinear(q))`` with the same constant scale, zero point and
      integer type: ``round((q - z) * s / s) + z = q`` exactly for every integer ``q`` of
      the type (an 8-bit ``q - z`` times a float32 ``s`` and divided by it is within an
      ulp of ``q - z``), so its readers read ``q``.

    On a quantized model the first leaves ``DQ -> Q`` around a removed Dropout (the
    quantizer gives a data movement's output its input's scale), which the second then
    removes, so the reader's pattern fuses with the integers before the Dropout: on the int8
    SqueezeNet a dequantize, a float send, a quantize and an integer send of 4-10 us left
    the critical path. Graph outputs are kept. O(V + E).
    """
    outputs = set(map(id, graph.outputs))
    dropped = 0
    for n in list(graph.nodes):
        if n.domain or id(n.outputs[0]) in outputs or n.inputs[0] is None:
            continue
        if n.op_type == "Dropout":
            if not _inference_dropout(n) or any(o.uses() or id(o) in outputs for o in n.outputs[1:]):
                continue
        elif n.op_type == "QuantizeLinear":
            dq = n.inputs[0].producer
            if dq is None or dq.op_type != "DequantizeLinear" or dq.domain or not _same_quantization(dq, n):
                continue
            graph.replace_all_uses(n.outputs[0], dq.inputs[0])
            graph.remove_node(n)
            dropped += 1
            continue
        elif n.op_type != "Identity":
            continue
        graph.replace_all_uses(n.outputs[0], n.inputs[0])
        graph.remove_node(n)
        dropped += 1
    if dropped:
        remove_dead(graph)
    return dropped


def _dq_of_constants(v: Value | None) -> Node | None:
    """The DequantizeLinear computing ``v`` from constants alone, if it is one."""
    d = None if v is None else v.producer
    if d is None or d.op_type != "DequantizeLinear" or d.domain or d.control_preds:
        return None
    return d if all(x is None or x.is_constant for x in d.inputs) else None


def _moved_quantization(n: Node, dqs: list[Node]) -> tuple[np.ndarray, QuantTensor] | None:
    """The integer constant and quantization that ``n`` (a Concat or constant-bound Slice of
    the dequantized constants ``dqs``) computes, when dequantizing afterwards gives the same
    floats; None otherwise. O(the weight's elements)."""
    from corefold import ops

    params = [dq_params(d) for d in dqs]
    if any(p is None for p in params):
        return None
    first = params[0]
    rank = dqs[0].inputs[0].const.ndim
    qaxis = None if first.axis is None else first.axis % max(rank, 1)
    if n.op_type == "Concat":
        axis = int(n.attrs.get("axis", 0)) % max(rank, 1)
        same = all(p.axis == first.axis and p.dtype == first.dtype and np.array_equal(p.scale, first.scale)
                   and np.array_equal(p.zero_point, first.zero_point) for p in params[1:])
        if not same or axis == qaxis:
            return None
        return np.concatenate([d.inputs[0].const for d in dqs], axis=axis), first
    bounds = [None if v is None else v.const for v in n.inputs[1:]]
    kernel = ops.get("Slice").kernel
    q = dqs[0].inputs[0].const
    moved = np.asarray(kernel(n.attrs, [q, *bounds])[0])
    if qaxis is None or 0 in moved.shape:
        return moved, first
    shape = [1] * rank
    shape[qaxis] = -1
    index = np.broadcast_to(np.arange(q.shape[qaxis]).reshape(shape), q.shape)
    kept = np.moveaxis(np.asarray(kernel(n.attrs, [index, *bounds])[0]), qaxis, 0).reshape(moved.shape[qaxis], -1)[:, 0]
    return moved, QuantTensor(first.scale[kept], first.zero_point[kept], first.axis, first.dtype)


def dequantize_after_moves(graph: Graph) -> int:
    """Rewrite every Concat of DequantizeLinear nodes of constants, and every Slice with
    constant bounds of one, as the DequantizeLinear of the concatenated or sliced integer
    constant (ONNX Runtime moves DequantizeLinear across such data movement the same way
    in its QDQ propagation); return how many.

    The split pass, run on a QDQ model before M1, cuts a weight's DequantizeLinear that is
    too big for a core into pieces and a Concat, and the pieces of the convolution reading
    it into Slices of that Concat: :func:`fuse_integer` then found no DequantizeLinear
    before the convolution, left it in float, and its piece held the whole float weight
    (the int8 light SqueezeNet on 128 KiB cores: a 32-channel piece of a 3 x 3 convolution
    needed 377.6 KiB). A Concat along a per-channel quantization's own axis, or of pieces
    quantized differently, stays as it is. O(V + the weights' elements).
    """
    outputs = set(map(id, graph.outputs))
    moved = 0
    for n in graph.topological_order():
        if n.domain or n.op_type not in ("Concat", "Slice") or id(n.outputs[0]) in outputs:
            continue
        data = list(n.inputs) if n.op_type == "Concat" else [n.inputs[0]]
        if n.op_type == "Slice" and not all(v is None or v.is_constant for v in n.inputs[1:]):
            continue
        dqs = [_dq_of_constants(v) for v in data]
        if not dqs or any(d is None for d in dqs):
            continue
        found = _moved_quantization(n, dqs)
        if found is None:
            continue
        q, qt = found
        out = n.outputs[0]
        ins = [graph.add_constant(out.name + "_quantized", np.ascontiguousarray(q, dtype=qt.dtype)),
               graph.add_constant(out.name + "_scale", np.asarray(qt.scale)),
               graph.add_constant(out.name + "_zero_point", np.asarray(qt.zero_point, dtype=qt.dtype))]
        attrs = {} if qt.axis is None else {"axis": int(qt.axis)}
        dq = Node("DequantizeLinear", ins, [Value(out.name + "_moved", tuple(q.shape), out.dtype)], attrs,
                  name=n.name + "_dequantize")
        graph.add_node(dq)
        graph.replace_all_uses(out, dq.outputs[0])
        graph.remove_node(n)
        moved += 1
    if moved:
        remove_dead(graph)
        graph.sort()
    return moved


def fold_dequantized_weights(graph: Graph) -> int:
    """Replace every DequantizeLinear left after :func:`fuse_integer` whose inputs are all
    constants (the weights of an operator that stays float, e.g. a Gemm whose output is
    not quantized) by the float constant it computes, so that the split pass can cut that
    operator along its weights like any float one; return how many. Without it the
    dequantized weight is one activation the size of the whole float weight, made by one
    task, which no split can cut. O(weights' elements).
    """
    from corefold import ops

    kernel = ops.get("DequantizeLinear").kernel
    outputs = set(map(id, graph.outputs))
    folded = 0
    for n in list(graph.nodes):
        if n.op_type != "DequantizeLinear" or n.domain or id(n.outputs[0]) in outputs:
            continue
        if not all(v is None or v.is_constant for v in n.inputs):
            continue
        out = n.outputs[0]
        array = kernel(n.attrs, [None if v is None else v.const for v in n.inputs])[0]
        c = graph.add_constant(out.name + "_folded", np.asarray(array, dtype=out.dtype))
        graph.replace_all_uses(out, c)
        graph.remove_node(n)
        folded += 1
    if folded:
        remove_dead(graph)
    return folded


def remove_dead(graph: Graph) -> None:
    """Drop nodes whose outputs nobody reads (the consumed DequantizeLinear nodes), then
    constants nobody reads. O(V + E)."""
    outputs = set(map(id, graph.outputs))
    changed = True
    while changed:
        changed = False
        for n in reversed(graph.nodes):
            if n.op_type == "DequantizeLinear" and all(not o.uses() and id(o) not in outputs for o in n.outputs):
                graph.remove_node(n)
                changed = True
    dead = [k for k, v in graph.constants.items() if not v.uses() and id(v) not in outputs]
    for k in dead:
        graph.remove_constant(k)
