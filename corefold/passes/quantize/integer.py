"""Integer execution of a QDQ graph: integer inputs, exact integer accumulation, requantization.

For every ``QuantizeLinear`` whose input is computed by an op all of whose float inputs are
``DequantizeLinear`` outputs (pattern ``DQ -> op [-> activation] -> Q``), the quantized output
is computed from the integers, as an integer-only chip does:

* Conv / ConvTranspose-free / MatMul / Gemm: ``acc = sum (x - zx)(w - zw)`` exactly
  (int64; int8/int16 products fit the int32 accumulator of the chip for the sizes here and
  are never rounded), ``+ bias`` (int32 at scale ``sx * sw``), then
  ``q = clip(round(acc * M) + zy)`` with the requantization multiplier
  ``M = sx * sw / sy`` (per output channel);
* Add / Sub: ``round(Ma (a - za) +- Mb (b - zb))``; Mul: ``round(M (a - za)(b - zb))``;
* AveragePool / GlobalAveragePool: integer sums, one multiplier ``sx / (sy * count)``;
* Sum of inputs that all have the same scale (per tensor, or per axis on the same axis
  counted from the end): the integers summed exactly, one multiplier ``s / sy``. The
  backend writes this to finish a linear operator cut over its reduced dimension: each
  piece's int32 partial accumulator at scale ``sx * sw``, the bias in the first, so that
  the sum requantizes to exactly the integers of the whole operator
  (:func:`bias_integers`);
* data movement and max (Reshape, Transpose, MaxPool, Concat, Relu, Pad, ...): applied to
  the integers, rescaled only when the input and output scales differ.

The activation fused before the Q (:data:`ACTIVATIONS`) is Relu (or Clip at 0) after any
of the first two kinds or a Sum, applied to the rounded integers; or, after a Conv, MatMul,
Gemm or a Sum of partial accumulators,
SiLU (``Sigmoid`` and ``Mul`` of the accumulator), HardSwish, Sigmoid or Tanh, the
quantizer's activation regions (``select.activation_region``): the exact accumulator is
dequantized (``acc * sx * sw`` in float64), the activation applied in float64 on the
vector unit, and the result quantized, ``q = clip(round(f(acc sx sw) / sy) + zy)``; the
float graph computes the same function of a float32 accumulator.

Any other op (Softmax, LayerNormalization, Erf, ...), and an elementwise or layout op reading
a per-axis dequantized constant (position embeddings, an embedding table), runs in float
between its DQ and Q, as ONNX Runtime does for ops without an integer kernel. The reference
semantics are the float QDQ graph; an integer result differs from it only by rounding, so
corefold and ONNX Runtime agree within one quantization step per element. O(sum of op costs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from scipy.special import expit

from corefold import ops
from corefold.errors import UnsupportedOpError
from corefold.executor import Interpreter
from corefold.ir import Graph, Node, Value


def integer_kind(node: Node) -> str | None:
    """The operator table's integer kernel kind of ``node`` (``linear``, ``add``, ``mul``,
    ``average``, ``layout``) or None: it runs in float between its DQ and Q."""
    q = ops.get(node.op_type, node.domain, where=f"node '{node.name}'").quant
    return q.integer if isinstance(q, ops.Quant) else None


@dataclass
class _QIn:
    """A dequantized input: integers (int64, zero point removed), scale broadcast to the data."""

    q: np.ndarray
    scale: np.ndarray  # per-tensor () or per-axis, broadcastable to q
    axis: int | None


def _axis_shape(a: np.ndarray, ndim: int, axis: int) -> np.ndarray:
    if a.ndim == 0:
        return a
    shape = [1] * ndim
    shape[axis % ndim] = -1
    return a.reshape(shape)


def _int_range(dtype: np.dtype) -> tuple[int, int]:
    if dtype.name in ("int4", "uint4"):
        return (-8, 7) if dtype.name == "int4" else (0, 15)
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def conv_integer(x: np.ndarray, w: np.ndarray, attrs: dict) -> np.ndarray:
    """Exact N-d convolution of integer arrays (NCHW...), returned as int64.

    im2col then a float64 matrix product: every partial sum is an integer below 2^53, so
    the product is exact. O(N * Cout * Cin/g * prod(kernel) * prod(out)).
    """
    if attrs.get("auto_pad", "NOTSET") not in ("NOTSET", b"NOTSET", "VALID", b"VALID"):
        raise UnsupportedOpError("integer Conv supports explicit pads only (auto_pad NOTSET/VALID)")
    nd = x.ndim - 2
    k = w.shape[2:]
    strides = list(attrs.get("strides", [1] * nd))
    dil = list(attrs.get("dilations", [1] * nd))
    pads = list(attrs.get("pads", [0] * 2 * nd))
    group = int(attrs.get("group", 1))
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + [(pads[i], pads[i + nd]) for i in range(nd)])
    out = [(xp.shape[2 + i] - dil[i] * (k[i] - 1) - 1) // strides[i] + 1 for i in range(nd)]
    n, c = x.shape[:2]
    cols = np.empty((n, c) + tuple(k) + tuple(out), np.float64)
    for idx in np.ndindex(*k):
        sl = tuple(slice(idx[i] * dil[i], idx[i] * dil[i] + strides[i] * (out[i] - 1) + 1, strides[i])
                   for i in range(nd))
        cols[(slice(None), slice(None)) + idx] = xp[(slice(None), slice(None)) + sl]
    cg, mg = c // group, w.shape[0] // group
    kk = int(np.prod(k))
    res = np.empty((n, w.shape[0], int(np.prod(out))), np.float64)
    wf = w.astype(np.float64)
    for g in range(group):
        col = cols[:, g * cg:(g + 1) * cg].reshape(n, cg * kk, -1)
        wg = wf[g * mg:(g + 1) * mg].reshape(mg, cg * kk)
        res[:, g * mg:(g + 1) * mg] = np.einsum("mk,nkp->nmp", wg, col, optimize=True)
    return res.reshape((n, w.shape[0]) + tuple(out)).astype(np.int64)


#: Activations fused between an integer operator and its QuantizeLinear (module docstring);
#: all but Relu are computed in float on the dequantized accumulator of a linear operator.
ACTIVATIONS = ("Relu", "Silu", "HardSwish", "Sigmoid", "Tanh")

_FLOAT_ACTIVATIONS = {
    "Silu": lambda v: v * expit(v),
    "HardSwish": lambda v: v * np.clip(v / 6.0 + 0.5, 0.0, 1.0),
    "Sigmoid": expit,
    "Tanh": np.tanh,
}


class Activation(NamedTuple):
    """The activation fused into an integer pattern: its kind (:data:`ACTIVATIONS`) and the
    graph nodes computing it (Relu or Clip; Sigmoid and Mul for SiLU; the one node else)."""

    kind: str
    nodes: tuple[Node, ...]


def _requantize(acc: np.ndarray, multiplier: np.ndarray, zp: np.ndarray, dtype: np.dtype,
                act: str | None = None, ys: np.ndarray | None = None) -> np.ndarray:
    """``clip(round(acc M) + zp)`` (Relu: of the rounded value clamped at 0); with a float
    activation ``act``, ``clip(round(f(acc M ys) / ys) + zp)``."""
    if act is not None and act != "Relu":
        v = _FLOAT_ACTIVATIONS[act](acc.astype(np.float64) * multiplier * ys)
        y = np.rint(v / ys)
    else:
        y = np.rint(acc.astype(np.float64) * multiplier)
    if act == "Relu":
        y = np.maximum(y, 0)
    lo, hi = _int_range(dtype)
    return np.clip(y + zp, lo, hi).astype(dtype)


def bias_integers(values: np.ndarray, mult: np.ndarray, scale: np.ndarray | None = None,
                  per_axis: bool = False) -> np.ndarray:
    """A linear operator's bias as integers at the accumulator's scale ``mult`` (``sx * sw``,
    float64, per output channel or per tensor). ``values`` are the bias integers (zero point
    removed) stored at ``scale`` (``per_axis``: one per channel): kept when that is the
    accumulator's scale, else re-rounded; with ``scale`` None, ``values`` is a bias that is
    not quantized, divided by ``mult`` and rounded. O(channels)."""
    if scale is None:
        return np.rint(np.asarray(values, np.float64) / mult).astype(np.int64)
    bs = scale.reshape(-1) if per_axis else scale
    if np.allclose(bs, mult, rtol=1e-6, atol=0):
        return values
    return np.rint(values * (bs / mult)).astype(np.int64)


def _same_scales(dqs: list[Node]) -> bool:
    """Whether the DequantizeLinear nodes ``dqs`` all have one constant scale (the same
    values, per tensor or on the same axis counted from the end of their shapes). O(scale)."""
    keys = []
    for dq in dqs:
        s = dq.inputs[1].const if dq.inputs[1] is not None else None
        if s is None:
            return False
        s = np.asarray(s, np.float64)
        axis = None
        if s.ndim:
            rank = len(dq.inputs[0].shape)
            axis = int(dq.attrs.get("axis", 1)) % rank - rank
        keys.append((axis, s))
    return all(k[0] == keys[0][0] and np.array_equal(k[1], keys[0][1]) for k in keys)


def _per_axis(dq: Node) -> bool:
    """Whether a DequantizeLinear has a per-axis scale (more than one value)."""
    scale = dq.inputs[1]
    return scale is not None and scale.const is not None and np.size(scale.const) > 1


def _float_activation(node: Node) -> tuple[Activation, Node] | None:
    """``node`` as the last node of a float activation after a linear operator (module
    docstring): the activation and that operator, or None. Each tensor inside is read only
    inside the pattern. O(readers)."""
    def linear_alone(v: Value, readers: int) -> Node | None:
        p = v.producer
        ok = p is not None and integer_kind(p) in ("linear", "sum") and len(v.consumers()) == readers
        return p if ok else None

    if node.op_type in ("HardSwish", "Sigmoid", "Tanh") and not node.attrs:
        src = linear_alone(node.inputs[0], 1)
        return (Activation(node.op_type, (node,)), src) if src is not None else None
    if node.op_type == "Mul" and len(node.inputs) == 2:
        for c, s in (node.inputs, node.inputs[::-1]):
            sig = s.producer if s is not None else None
            if (sig is not None and sig.op_type == "Sigmoid" and sig.inputs[0] is c and len(s.consumers()) == 1
                    and c is not s):
                src = linear_alone(c, 2)
                if src is not None:
                    return Activation("Silu", (sig, node)), src
    return None


def _clip_is_relu(node: Node) -> bool:
    if node.op_type == "Relu":
        return True
    lo = node.inputs[1] if len(node.inputs) > 1 else None
    hi = node.inputs[2] if len(node.inputs) > 2 else None
    return lo is not None and lo.const is not None and float(np.asarray(lo.const).reshape(-1)[0]) == 0.0 \
        and (hi is None)


def integer_patterns(graph: Graph) -> dict[Node, tuple[Node, Activation | None]]:
    """The patterns :class:`IntegerRunner` computes in integers: each planned QuantizeLinear
    to the operator it quantizes and the activation between them (module docstring). O(V + E)."""
    plan: dict[Node, tuple[Node, Activation | None]] = {}
    for q in graph.nodes:
        if q.op_type != "QuantizeLinear":
            continue
        src = q.inputs[0].producer
        act = None
        if src is not None and src.op_type in ("Relu", "Clip"):
            inner = src.inputs[0].producer
            if (inner is not None and integer_kind(inner) in ("linear", "add", "sum")
                    and len(src.inputs[0].consumers()) == 1 and _clip_is_relu(src)):
                act, src = Activation("Relu", (src,)), inner
        elif src is not None:
            found = _float_activation(src)
            if found is not None:
                act, src = found
        kind = integer_kind(src) if src is not None else None
        if kind is None:
            continue
        floats = [v for v in src.inputs if v is not None and np.issubdtype(v.dtype, np.floating)]
        if floats and all(v.producer is not None and v.producer.op_type == "DequantizeLinear" for v in floats):
            if kind == "sum" and not _same_scales([v.producer for v in floats]):
                continue
            if kind not in ("linear", "sum") and any(_per_axis(v.producer) for v in floats):
                continue  # a per-axis constant (position embeddings, a table): float, as ONNX Runtime
            if kind == "layout" and not ops.get(src.op_type).quant.ties_inputs and src.op_type != "Relu" \
                    and len(floats) != 1:
                continue
            plan[q] = (src, act)
    return plan


class IntegerRunner(Interpreter):
    """Runs a QDQ graph with integer kernels where the pattern allows (module docstring):
    the one interpreter, computing the planned QuantizeLinear nodes from integers and
    skipping the float nodes only they read.

    ``integer_nodes`` lists the Q nodes computed in integers after construction. The float
    nodes run their blocking-free kernels (``Interpreter.blocking_free``): a float product
    feeding a QuantizeLinear then rounds the same here as cut into pieces on the chip.
    """

    blocking_free = True

    def __init__(self, graph: Graph):
        super().__init__(graph)
        self.plan = integer_patterns(graph)
        self.integer_nodes = [q.name for q in self.plan]
        skip: set[Node] = set()
        for _q, (src, act) in self.plan.items():
            inner = act.nodes if act is not None else ()
            for n in (src, *inner):
                if all(c in self.plan or c in inner for v in n.outputs for c in v.consumers()) \
                        and not any(v in graph.outputs for v in n.outputs):
                    skip.add(n)
        self.skip = skip

    def _qin(self, v: Value, env: dict[str, np.ndarray]) -> _QIn:
        dq = v.producer
        q = env[dq.inputs[0]]
        scale = np.asarray(env[dq.inputs[1]], np.float64)
        axis = int(dq.attrs.get("axis", 1)) if scale.ndim else None
        qi = q.astype(np.int64)
        if len(dq.inputs) > 2 and dq.inputs[2] is not None:
            z = np.asarray(env[dq.inputs[2]]).astype(np.int64)
            qi = qi - (_axis_shape(z, qi.ndim, axis) if axis is not None else z)
        return _QIn(qi, scale, axis)

    def _integer(self, q: Node, src: Node, act: Activation | None, env: dict[str, np.ndarray]) -> np.ndarray:
        ys = np.asarray(env[q.inputs[1]], np.float64)
        zy_arr = env[q.inputs[2]] if len(q.inputs) > 2 and q.inputs[2] is not None else np.zeros((), np.uint8)
        if ys.ndim:
            raise UnsupportedOpError(f"per-axis activation scale on '{q.name}'")
        zy = np.asarray(zy_arr).astype(np.int64)
        dtype = np.asarray(zy_arr).dtype
        kind = act.kind if act is not None else None
        op = src.op_type
        ins = [self._qin(v, env) if v is not None and np.issubdtype(v.dtype, np.floating) else
               (env[v] if v is not None else None) for v in src.inputs]
        if op == "Conv":
            x, w = ins[0], ins[1]
            acc = conv_integer(x.q, w.q, src.attrs)
            sw = w.scale if w.axis is None else w.scale.reshape(-1)
            mult = x.scale * sw
            if len(ins) > 2 and ins[2] is not None:
                acc = acc + self._bias(ins[2], mult, acc.ndim, 1)
            return _requantize(acc, _axis_shape(np.asarray(mult / ys), acc.ndim, 1), zy, dtype, kind, ys)
        if op == "MatMul":
            a, b = ins
            acc = np.matmul(a.q.astype(np.float64), b.q.astype(np.float64)).astype(np.int64)
            sb = b.scale
            if b.axis is not None:
                if b.axis % b.q.ndim != b.q.ndim - 1:
                    raise UnsupportedOpError(f"MatMul '{src.name}': per-axis weight scale not on the last axis")
                sb = sb.reshape(-1)
            if a.axis is not None:
                raise UnsupportedOpError(f"MatMul '{src.name}': per-axis scale on the left input")
            return _requantize(acc, a.scale * sb / ys, zy, dtype, kind, ys)
        if op == "Gemm":
            a, b = ins[0], ins[1]
            am = a.q.T if src.attrs.get("transA", 0) else a.q
            bm = b.q.T if src.attrs.get("transB", 0) else b.q
            acc = (am.astype(np.float64) @ bm.astype(np.float64)).astype(np.int64)
            sb = b.scale.reshape(-1) if b.axis is not None else b.scale
            alpha, beta = float(src.attrs.get("alpha", 1.0)), float(src.attrs.get("beta", 1.0))
            mult = alpha * a.scale * sb
            if len(ins) > 2 and ins[2] is not None:
                if beta != 1.0 or alpha != 1.0:
                    raise UnsupportedOpError(f"Gemm '{src.name}': integer bias needs alpha = beta = 1")
                acc = acc + self._bias(ins[2], mult, acc.ndim, -1)
            return _requantize(acc, mult / ys, zy, dtype, kind, ys)
        if op in ("Add", "Sub", "Mul"):
            a, b = ins
            if not isinstance(a, _QIn) or not isinstance(b, _QIn) or a.axis is not None or b.axis is not None:
                raise UnsupportedOpError(f"{op} '{src.name}': needs two per-tensor quantized inputs")
            if op == "Mul":
                return _requantize(a.q * b.q, a.scale * b.scale / ys, zy, dtype, kind)
            sign = -1.0 if op == "Sub" else 1.0
            y = np.rint((a.scale / ys) * a.q + sign * (b.scale / ys) * b.q)
            return _requantize(y, np.float64(1.0), zy, dtype, kind)
        if op == "Sum":
            xs = [v for v in ins if v is not None]
            acc = xs[0].q
            for x in xs[1:]:
                acc = acc + x.q
            x = max(xs, key=lambda v: v.q.ndim)
            mult = np.asarray(x.scale / ys)
            if x.axis is not None:
                mult = _axis_shape(mult, acc.ndim, x.axis % x.q.ndim - x.q.ndim)
            return _requantize(acc, mult, zy, dtype, kind, ys)
        if op in ("AveragePool", "GlobalAveragePool"):
            x = ins[0]
            if op == "GlobalAveragePool":
                axes = tuple(range(2, x.q.ndim))
                acc = x.q.sum(axis=axes, keepdims=True)
                count = int(np.prod([x.q.shape[i] for i in axes]))
                return _requantize(acc, x.scale / (ys * count), zy, dtype, kind)
            # integer sums are exact in float64; the kernel's division by the count is the
            # one rescale folded into the multiplier
            avg = ops.get(op).kernel(src.attrs, [x.q.astype(np.float64)])[0]
            return _requantize(avg, x.scale / ys, zy, dtype, kind)
        # layout ops and Relu/Concat: on the integers, rescaled to the output scale
        if op == "Concat":
            parts = [np.rint(v.q * (v.scale / ys)) for v in ins]
            y = ops.get(op).kernel(src.attrs, [p.astype(np.float64) for p in parts])[0]
            return _requantize(y, np.float64(1.0), zy, dtype, kind)
        x = ins[0]
        if x.axis is not None:
            raise UnsupportedOpError(f"{op} '{src.name}': per-axis scale on its input")
        rest = [a if not isinstance(a, _QIn) else None for a in ins[1:]]
        if op == "Pad" and len(src.inputs) > 2 and src.inputs[2] is not None and isinstance(ins[2], _QIn):
            rest[1] = np.asarray(0.0)  # pad value is quantized separately; a zero-point-free 0
        y = ops.get(op).kernel(src.attrs, [x.q.astype(np.float64)] + rest)[0]
        return _requantize(y, x.scale / ys, zy, dtype, kind)

    def _bias(self, b, mult: np.ndarray, ndim: int, axis: int) -> np.ndarray:
        """The bias as integers at scale ``mult`` (:func:`bias_integers`), shaped along ``axis``."""
        bi = bias_integers(b.q, mult, b.scale, b.axis is not None) if isinstance(b, _QIn) else bias_integers(b, mult)
        return _axis_shape(bi, ndim, axis) if axis == 1 else bi

    def on_value(self, value: Value, array: np.ndarray) -> np.ndarray:
        self._env[value] = array
        return array

    def skips(self, index: int, node: Node) -> bool:
        return node in self.skip

    def run_node(self, index: int, node: Node) -> list:
        if node in self.plan:
            src, act = self.plan[node]
            return [self._integer(node, src, act, self._env)]
        return super().run_node(index, node)

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The graph outputs by name (the executor's feed checks apply)."""
        self._env: dict[Value, np.ndarray] = {}
        try:
            return super().run(feeds)
        finally:
            self._env = {}


def run_integer(graph: Graph, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run a QDQ graph with integer arithmetic where possible (see :class:`IntegerRunner`)."""
    return IntegerRunner(graph).run(feeds)
