"""The numerics of one :class:`~corefold.backend.executable.Op`: what a Compute instruction
computes, for the simulator and the backend's own checks.

A plain op runs the reference executor's kernel (``corefold.executor``) on the input
arrays. An integer op (``op.quant`` set) runs
:class:`~corefold.passes.quantize.integer.IntegerRunner` on the small graph
``DequantizeLinear (each quantized input) -> op [-> Relu] -> QuantizeLinear``, so its
integers are exactly those of the integer runner on the whole model. The small graph is
built once per op and cached. O(the kernel's cost).
"""

from __future__ import annotations

import numpy as np

from corefold.backend.executable import Op, QuantOp
from corefold.errors import UnsupportedOpError


def run_op(op: Op, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
    """The outputs of ``op`` on ``inputs`` (one array or None per op input).

    Raises:
        UnsupportedOpError: no kernel for the operator.
    """
    if op.quant is None:
        from corefold import ops

        fn = ops.get(op.op_type, where=f"op '{op.name}'").blocking_free_kernel
        if not callable(fn):
            raise UnsupportedOpError(f"op '{op.name}': no kernel for operator {op.op_type}")
        out = run_float(op, fn, inputs)
        if op.activation is not None:
            out[0] = apply_activation(op.activation, out[0])
        return out
    hit = _CACHE.get(id(op))
    if hit is None or hit[0] is not op:
        if len(_CACHE) > 4096:
            _CACHE.clear()
        hit = _CACHE[id(op)] = (op, *_integer_graph(op))
    _, runner, names = hit
    feeds = {n: np.asarray(x) for n, x in zip(names, inputs, strict=True) if n is not None}
    return [runner.run(feeds)["y"]]


def run_float(op: Op, fn, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
    """``fn`` (an operator table kernel) on ``inputs``, computed in the wider of the
    operands' and the op's declared float types and returned in the declared ones: the
    float64 partial results of a quantized model's float32 operator cut over a reduced
    dimension (:mod:`corefold.passes.split.split`) are computed in float64, and their
    ``Sum`` rounds once to its float32 output. Any other op computes as its kernel does.
    O(kernel + operand sizes)."""
    declared = [np.dtype(d) for d in op.output_dtypes]
    if any(d == np.float64 for d in declared):
        from corefold.ops import widen_float32

        inputs = widen_float32(inputs)
    out = [np.asarray(r) for r in fn(op.attrs, list(inputs))[: len(op.output_shapes)]]
    if not any(x is not None and x.dtype == np.float64 for x in inputs):
        return out  # a kernel that widens on its own is a kernel bug: the caller's dtype check sees it
    return [r.astype(d) if r.dtype == np.float64 and d == np.float32 else r for r, d in zip(out, declared, strict=False)]


def apply_activation(kind: str, y: np.ndarray) -> np.ndarray:
    """A fused float activation (:attr:`Op.activation`) on ``y``, with the reference
    executor's kernels of the nodes it stands for (``"Silu"``: ``Mul(y, Sigmoid(y))``), so
    that the result is the unfused graph's, bit for bit. O(y.size)."""
    from corefold import ops

    def node(op_type: str, *xs: np.ndarray) -> np.ndarray:
        return np.asarray(ops.get(op_type, where=f"activation {kind}").kernel({}, list(xs))[0])

    if kind == "Silu":
        return node("Mul", y, node("Sigmoid", y))
    return node(kind, y)


#: id(op) -> (op, runner, input names): the small graphs of integer ops, built once.
_CACHE: dict[int, tuple] = {}


def _integer_graph(op: Op):
    from corefold.ir import Graph, Node, Value
    from corefold.passes.quantize.integer import IntegerRunner

    q: QuantOp = op.quant
    g = Graph(op.name)
    names: list[str | None] = []
    ins = []
    for i, (shape, dtype, qt) in enumerate(zip(op.input_shapes, op.input_dtypes, q.inputs, strict=True)):
        if shape is None:
            names.append(None)
            ins.append(None)
            continue
        x = g.add_input(f"x{i}", shape, dtype)
        names.append(x.name)
        if qt is None:
            ins.append(x)
            continue
        s = g.add_constant(f"s{i}", qt.scale)
        z = g.add_constant(f"z{i}", qt.zero_point)
        attrs = {"axis": int(qt.axis)} if qt.axis is not None else {}
        dq = g.make_node("DequantizeLinear", [x, s, z], attrs, name=f"dq{i}")
        ins.append(dq.outputs[0])
    node = g.make_node(op.op_type, ins, dict(op.attrs), name="op")
    y = node.outputs[0]
    if q.activation == "Silu":
        y = g.make_node("Mul", [y, g.make_node("Sigmoid", [y], name="sigmoid").outputs[0]], name="act").outputs[0]
    elif q.activation is not None:
        y = g.make_node(q.activation, [y], name="act").outputs[0]
    s = g.add_constant("sy", q.output.scale)
    z = g.add_constant("zy", q.output.zero_point)
    out = Value("y", op.output_shapes[0], q.output.dtype)
    qn = Node("QuantizeLinear", [y, s, z], [out], name="q")
    g.add_node(qn)
    g.outputs = [out]
    runner = IntegerRunner(g)
    if qn not in runner.plan:
        raise UnsupportedOpError(f"op '{op.name}' ({op.op_type}) has no integer form")
    return runner, names
