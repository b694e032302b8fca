"""Float activations fused into the operator whose output they alone read (tile step 3,
:mod:`corefold.backend.tile`), and what a fused activation costs on a vector engine.

A Relu, Sigmoid, Tanh, HardSwish or SiLU (``x * Sigmoid(x)``) that alone reads a Conv,
Gemm, MatMul, Add or BatchNormalization runs on the core that computes that operator, on
its output buffer (``meta[ACTIVATION_META]``, :attr:`~corefold.backend.executable.Op.activation`);
an integer operator's fused activation is its ``quant.activation``. O(V + E) for the
fusion, O(1) per query.
"""

from __future__ import annotations

import numpy as np

from corefold.ir import Graph, Node, Value
from corefold.passes.split.split import ACTIVATION_META
from corefold.target import Target

#: Float operators that take a fused activation (``meta[ACTIVATION_META]``).
FUSE_PRODUCERS = frozenset({"Conv", "Gemm", "MatMul", "Add", "BatchNormalization"})
#: Single-node activations fused into their producer (besides SiLU, ``x * Sigmoid(x)``).
FUSE_ACTIVATIONS = frozenset({"Relu", "Sigmoid", "Tanh", "HardSwish"})


def fuse_float_activations(graph: Graph) -> int:
    """Fuse every float activation that alone reads the output of a Conv, Gemm, MatMul, Add or
    BatchNormalization into that node (``meta[ACTIVATION_META]``; :attr:`Op.activation`):
    ``y = op(...); z = Relu(y)`` becomes one node computing ``z``; SiLU is the pair
    ``s = Sigmoid(y); z = Mul(y, s)`` with ``s`` read by nothing else. The activation runs
    on the core that computes ``y``, on its output buffer: ``y`` (and ``s``) are never
    stored, sent or cut apart from it. Numerics are the executor's, node for node
    (:func:`corefold.backend.kernels.apply_activation`). Return how many. O(V + E).

    On the float EfficientNet-B0 (65 Conv + SiLU), every SiLU was two more vector tasks
    and two more full-size tensors per Conv, sent between cores and staged through DRAM.
    """
    outputs = set(map(id, graph.outputs))
    fused = 0
    for node in list(graph.nodes):
        if node.graph is not graph or node.domain or node.op_type not in FUSE_PRODUCERS or \
                node.meta.get(ACTIVATION_META) or len(node.outputs) != 1:
            continue
        y = node.outputs[0]
        if id(y) in outputs or not np.issubdtype(y.dtype, np.floating):
            continue
        uses = [u.node for u in y.uses()]
        kind, last, gone = None, None, []
        if len(uses) == 1 and uses[0].op_type in FUSE_ACTIVATIONS and not uses[0].domain and not uses[0].attrs:
            kind, last, gone = uses[0].op_type, uses[0], [uses[0]]
        elif len(uses) == 2 and {u.op_type for u in uses} == {"Sigmoid", "Mul"}:
            sig = next(u for u in uses if u.op_type == "Sigmoid")
            mul = next(u for u in uses if u.op_type == "Mul")
            s = sig.outputs[0]
            if not sig.domain and not mul.domain and id(s) not in outputs and [u.node for u in s.uses()] == [mul] \
                    and {id(v) for v in mul.inputs} == {id(y), id(s)}:
                kind, last, gone = "Silu", mul, [mul, sig]
        if kind is None or any(n.control_preds or n.control_succs for n in gone):
            continue
        z = last.outputs[0]
        tmp = Value("__fused", z.shape, z.dtype)
        graph.replace_all_uses(z, tmp)
        for n in gone:
            graph.remove_node(n)
        preds, succs = list(node.control_preds), list(node.control_succs)
        ins, name, attrs, meta = list(node.inputs), node.name, dict(node.attrs), dict(node.meta)
        graph.remove_node(node)
        fused_node = Node(node.op_type, ins, [z], attrs, name=name)
        fused_node.meta = meta
        fused_node.meta[ACTIVATION_META] = kind
        graph.add_node(fused_node)
        graph.replace_all_uses(tmp, z)
        for p in preds:
            graph.add_control_edge(p, fused_node)
        for sc in succs:
            graph.add_control_edge(fused_node, sc)
        outputs = set(map(id, graph.outputs))
        fused += 1
    if fused:
        graph.sort()
    return fused


def fused_activation(node: Node) -> str | None:
    """The activation fused into ``node``: an integer op's ``quant.activation`` or a float
    op's ``meta[ACTIVATION_META]`` (:func:`fuse_float_activations`), else None. O(1)."""
    quant = node.meta.get("quant")
    return quant.activation if quant is not None else node.meta.get(ACTIVATION_META)


def activation_cost(kind: str, out: Value, target: Target) -> tuple[float, float]:
    """Vector element operations and seconds of a fused activation (``"Silu"``: a Sigmoid
    and a Mul) on ``out``. O(1)."""
    from corefold import ops

    spec = (out.shape, out.dtype)
    work = 0.0
    for op_type in ("Sigmoid", "Mul") if kind == "Silu" else (kind,):
        entry = ops.get(op_type, where=f"activation {kind}")
        work += float(ops.work(entry, {}, [spec] * (2 if op_type == "Mul" else 1), [spec])[1])
    return work, work / (target.units["vector"].throughput * target.clock_hz)
