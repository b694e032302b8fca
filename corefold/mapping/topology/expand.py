"""Expand a corefold IR graph into neuron-level connectivity ("real networks become topologies").

Every element of a layer's output tensor is one neuron; every synapse is directed from an
input neuron to the output neuron whose receptive field holds it:

* the graph inputs (batch 1) are the first layer's input neurons, one per element;
* ``Conv`` (1-D or 2-D; strides, pads, ``auto_pad``, dilations, groups): output neuron
  (co, oy, ox) receives from input (ci, oy*s - p + ky*d, ...) for every kernel offset in
  the image and every ci of co's group: ``Cout * Cin/groups * window`` synapses at most;
* ``MatMul`` / ``Gemm`` (the weight operand is a 2-D tensor, constant in practice): every
  input neuron of a row to every output neuron of that row (dense: ``in * out``);
* pooling (``MaxPool``, ``AveragePool``, ``LpPool``, ``GlobalAveragePool``,
  ``GlobalMaxPool``) maps to a neuron per output element, connected to its window in its
  own channel (NOTE: pooling neurons exist on neuromorphic chips; passing connectivity
  through would multiply synapses instead);
* elementwise and activation layers (``Relu``, ``BatchNormalization``, ``Add`` with a
  constant, ``Softmax``, ...) are folded into their producer: same neurons, no synapses;
  an elementwise op of two activations (a residual ``Add``) keeps the first full-shape
  input's neurons and adds a synapse from each element of the other (broadcast) input;
* reductions (``ReduceMean``, ``ReduceMax``, ...): a neuron per output element, linked to
  every input element it reduces;
* ``Flatten``, ``Reshape``, ``Squeeze``, ``Unsqueeze``, ``Transpose``, ``Concat``, ``Pad``,
  ``Slice``, ``Split`` rearrange or select neurons (padding elements are constants: no
  neuron, no synapse; their constant operands must be constants).

Kernel weights do not matter (a zero weight is still a synapse). The construction is
vectorised: a NumPy array of neuron ids per tensor (-1 = no neuron), one pass per kernel
offset; O(synapses) time and memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from corefold.errors import ShapeError, UnsupportedOpError
from corefold.ir import Graph, Node, Value
from corefold.mapping.topology.model import Topology, index_dtype

#: Ops folded into their producer (same neurons, no synapses).
FOLDED = frozenset({
    "Relu", "LeakyRelu", "PRelu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Clip", "Elu",
    "Selu", "Celu", "Softplus", "Softsign", "Gelu", "Mish", "Erf", "Identity", "Dropout", "Cast",
    "BatchNormalization", "InstanceNormalization", "LayerNormalization", "Neg", "Abs", "Exp",
    "Log", "Sqrt", "Reciprocal", "Floor", "Ceil", "Round", "Sign", "Softmax", "LogSoftmax",
    "QuantizeLinear", "DequantizeLinear", "ThresholdedRelu", "Shrink",
})
ELEMENTWISE = frozenset({"Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "Mean", "Sum"})
POOLS = frozenset({"MaxPool", "AveragePool", "LpPool"})
GLOBAL_POOLS = frozenset({"GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"})
RESHAPES = frozenset({"Flatten", "Reshape", "Squeeze", "Unsqueeze"})
REDUCTIONS = frozenset({"ReduceMean", "ReduceMax", "ReduceMin", "ReduceSum", "ReduceL2", "ReduceL1",
                        "ReduceLogSumExp", "ReduceProd", "ReduceSumSquare"})


@dataclass
class NeuronExpansion:
    """The directed synapse list of a network.

    Attributes:
        num_neurons: vertices, numbered layer by layer (graph inputs first).
        src, dst: int32 (int64 beyond 2^31 neurons)[synapses], presynaptic and postsynaptic neuron ids.
        layers: (name, first neuron, neuron count) per input and per neuron-making node.
    """

    num_neurons: int
    src: np.ndarray
    dst: np.ndarray
    layers: list[tuple[str, int, int]] = field(default_factory=list)

    @property
    def num_synapses(self) -> int:
        return int(self.src.shape[0])

    def topology(self) -> Topology:
        """The symmetrised topology (weight 1 per synapse, synapses = fan-in; int32 weights),
        with the synapses' directions (``sends``)."""
        return Topology.from_edges(self.src, self.dst, None, self.num_neurons, weights_dtype=np.int32,
                                   directions=True)


class _Builder:
    def __init__(self) -> None:
        self.count = 0
        self.src: list[np.ndarray] = []
        self.dst: list[np.ndarray] = []
        self.layers: list[tuple[str, int, int]] = []

    def neurons(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        k = int(np.prod(shape, dtype=np.int64))
        ids = np.arange(self.count, self.count + k, dtype=np.int64).reshape(shape)
        self.layers.append((name, self.count, k))
        self.count += k
        return ids

    def connect(self, src: np.ndarray, dst: np.ndarray) -> None:
        src, dst = np.broadcast_arrays(src, dst)
        keep = (src >= 0) & (dst >= 0)
        idt = index_dtype(self.count)  # ids so far fit; a later int64 layer promotes on concatenation
        self.src.append(src[keep].astype(idt))
        self.dst.append(dst[keep].astype(idt))


def _static(node: Node, v: Value) -> tuple[int, ...]:
    if not v.has_static_shape:
        raise ShapeError(f"node '{node.name}' ({node.op_type}): value '{v.name}' has no static shape "
                         f"{v.shape}; bind the input shapes first")
    return tuple(int(d) for d in v.shape)


def _ints(node: Node, name: str, default: list[int]) -> list[int]:
    return [int(x) for x in node.attrs.get(name, default)]


def _window(node: Node, spatial_in: tuple[int, ...], kernel: tuple[int, ...],
            out_spatial: tuple[int, ...] | None, global_pool: bool = False):
    """Strides, dilations, begin pads and output size per spatial axis (ONNX rules)."""
    r = len(spatial_in)
    if global_pool:
        return [1] * r, [1] * r, [0] * r, [1] * r
    strides = _ints(node, "strides", [1] * r)
    dil = _ints(node, "dilations", [1] * r)
    pads = _ints(node, "pads", [0] * (2 * r))
    auto = node.attrs.get("auto_pad", "NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    ceil = int(node.attrs.get("ceil_mode", 0))
    begin, out = [], []
    for i in range(r):
        span = (kernel[i] - 1) * dil[i] + 1
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            o = -(-spatial_in[i] // strides[i])
            total = max(0, (o - 1) * strides[i] + span - spatial_in[i])
            b = total // 2 if auto == "SAME_UPPER" else total - total // 2
        elif auto == "VALID":
            o, b = (spatial_in[i] - span) // strides[i] + 1, 0
        else:
            b = pads[i]
            num = spatial_in[i] + pads[i] + pads[i + r] - span
            o = (-(-num // strides[i]) if ceil else num // strides[i]) + 1
        begin.append(b)
        out.append(o)
    if out_spatial is not None and tuple(out) != tuple(out_spatial):
        raise ShapeError(f"node '{node.name}' ({node.op_type}): output spatial shape {tuple(out_spatial)} "
                         f"disagrees with the window arithmetic {tuple(out)}")
    return strides, dil, begin, out


def _receptive(b: _Builder, node: Node, x: np.ndarray, out: np.ndarray, kernel: tuple[int, ...],
               groups: int, strides, dil, begin) -> None:
    """Synapses from each kernel window (all input channels of the group) to ``out``.

    ``x``: ids (C, *spatial_in); ``out``: ids (Cout, *spatial_out). One pass per kernel offset.
    """
    c, cout = x.shape[0], out.shape[0]
    if c % groups or cout % groups:
        raise UnsupportedOpError(f"node '{node.name}' ({node.op_type}): {c} input and {cout} output "
                                 f"channels do not split into {groups} groups")
    spatial_out = out.shape[1:]
    pad_width = [(0, 0)]
    for i, so in enumerate(spatial_out):
        need = begin[i] + (so - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1
        pad_width.append((begin[i], max(0, need - begin[i] - x.shape[1 + i])))
    xp = np.pad(x, pad_width, constant_values=-1)
    og = out.reshape(groups, cout // groups, 1, *spatial_out)
    for offset in np.ndindex(*kernel):
        sl = tuple(slice(offset[i] * dil[i], offset[i] * dil[i] + (spatial_out[i] - 1) * strides[i] + 1, strides[i])
                   for i in range(len(kernel)))
        win = xp[(slice(None),) + sl].reshape(groups, 1, c // groups, *spatial_out)
        b.connect(win, og)


def _conv_like(b: _Builder, node: Node, ids: dict[Value, np.ndarray]) -> None:
    x = ids[node.inputs[0]]
    xs = _static(node, node.inputs[0])
    if len(xs) not in (3, 4):
        raise UnsupportedOpError(f"node '{node.name}' ({node.op_type}): only 1-D and 2-D inputs "
                                 f"(N, C, [H,] W) are expanded, got rank {len(xs)}")
    if xs[0] != 1:
        raise ShapeError(f"node '{node.name}' ({node.op_type}): batch {xs[0]}; expand one sample (batch 1)")
    op = node.op_type
    out_v = node.outputs[0]
    out_shape = _static(node, out_v) if out_v.has_static_shape else None
    spatial_in = xs[2:]
    if op == "Conv":
        w = _static(node, node.inputs[1])
        kernel, groups, cout = tuple(w[2:]), int(node.attrs.get("group", 1)), w[0]
        if w[1] * groups != xs[1]:
            raise ShapeError(f"node '{node.name}' (Conv): weight {w} does not fit input {xs} with {groups} groups")
    elif op in GLOBAL_POOLS:
        kernel, groups, cout = spatial_in, xs[1], xs[1]
    else:
        kernel, groups, cout = tuple(_ints(node, "kernel_shape", [])), xs[1], xs[1]
    if len(kernel) != len(spatial_in):
        raise ShapeError(f"node '{node.name}' ({op}): kernel {kernel} does not match input {xs}")
    strides, dil, begin, so = _window(node, spatial_in, kernel, out_shape[2:] if out_shape else None,
                                      global_pool=op in GLOBAL_POOLS)
    out = b.neurons(node.name, (cout, *so))
    _receptive(b, node, x[0], out, kernel, groups, strides, dil, begin)
    ids[out_v] = out[None]


def _dense(b: _Builder, node: Node, ids: dict[Value, np.ndarray]) -> None:
    a_v, w_v = node.inputs[0], node.inputs[1]
    a = ids[a_v]
    if w_v in ids and not w_v.is_constant:
        raise UnsupportedOpError(f"node '{node.name}' ({node.op_type}): both operands are activations; "
                                 "only dense layers with a weight tensor are expanded")
    ws = _static(node, w_v)
    if node.op_type == "Gemm":
        if int(node.attrs.get("transA", 0)):
            a = a.T
        n_out = ws[0] if int(node.attrs.get("transB", 0)) else ws[1]
    else:
        if len(ws) != 2:
            raise UnsupportedOpError(f"node '{node.name}' (MatMul): weight rank {len(ws)}; only 2-D weights are expanded")
        n_out = ws[1]
    rows = a.reshape(-1, a.shape[-1])
    out = b.neurons(node.name, (rows.shape[0], n_out))
    for r in range(rows.shape[0]):  # one pass per row (1 for a classifier head)
        b.connect(rows[r][None, :], out[r][:, None])
    out_v = node.outputs[0]
    shape = _static(node, out_v) if out_v.has_static_shape else a.shape[:-1] + (n_out,)
    ids[out_v] = out.reshape(shape)


def _elementwise(b: _Builder, node: Node, ids: dict[Value, np.ndarray]) -> None:
    live = [ids[v] for v in node.inputs if v is not None and v in ids]
    out_v = node.outputs[0]
    shape = _static(node, out_v) if out_v.has_static_shape else np.broadcast_shapes(*(a.shape for a in live))
    base = next((i for i, a in enumerate(live) if a.shape == tuple(shape)), None)
    if base is None:  # every input is broadcast: the output elements are new neurons
        out = b.neurons(node.name, tuple(shape))
        for a in live:
            b.connect(a, out)
    else:
        out = live[base].copy()
        for i, a in enumerate(live):
            if i != base:
                ab = np.broadcast_to(a, out.shape)
                b.connect(ab, out)
                out = np.where(out >= 0, out, ab)
    ids[out_v] = out


def _rearrange(node: Node, ids: dict[Value, np.ndarray]) -> None:
    op = node.op_type
    x = ids[node.inputs[0]]
    out_v = node.outputs[0]
    if op in RESHAPES:
        ids[out_v] = x.reshape(_static(node, out_v))
    elif op == "Transpose":
        perm = node.attrs.get("perm")
        ids[out_v] = np.transpose(x, None if perm is None else [int(p) for p in perm])
    elif op == "Concat":
        parts = [ids[v] for v in node.inputs if v is not None]
        axis = int(node.attrs.get("axis", 0))
        ids[out_v] = np.concatenate(parts, axis=axis)
    elif op == "Slice":
        consts = [node.inputs[i] if i < len(node.inputs) else None for i in range(1, 5)]
        if any(v is not None and not v.is_constant for v in consts):
            raise UnsupportedOpError(f"node '{node.name}' (Slice): starts, ends, axes and steps must be constants")
        starts, ends = (consts[i].const.reshape(-1).tolist() for i in (0, 1))
        axes = consts[2].const.reshape(-1).tolist() if consts[2] is not None else list(range(len(starts)))
        steps = consts[3].const.reshape(-1).tolist() if consts[3] is not None else [1] * len(starts)
        sl = [slice(None)] * x.ndim
        for a, b, e, st in zip(axes, starts, ends, steps, strict=True):
            sl[int(a)] = slice(int(b), int(e), int(st))  # Python's clamping is ONNX's
        ids[out_v] = x[tuple(sl)]
    elif op == "Pad":
        pads_v = node.inputs[1] if len(node.inputs) > 1 else None
        if pads_v is None or not pads_v.is_constant:
            raise UnsupportedOpError(f"node '{node.name}' (Pad): pads must be a constant")
        mode = node.attrs.get("mode", "constant")
        if (mode.decode() if isinstance(mode, bytes) else mode) != "constant":
            raise UnsupportedOpError(f"node '{node.name}' (Pad): only constant padding is expanded")
        p = [int(v) for v in pads_v.const.reshape(-1)]
        r = x.ndim
        if len(p) != 2 * r or min(p) < 0:
            raise UnsupportedOpError(f"node '{node.name}' (Pad): needs 2 x rank non-negative pads (no axes input)")
        ids[out_v] = np.pad(x, [(p[i], p[i + r]) for i in range(r)], constant_values=-1)
    if out_v.has_static_shape and ids[out_v].shape != _static(node, out_v):
        raise ShapeError(f"node '{node.name}' ({op}): neurons {ids[out_v].shape} disagree with "
                         f"the output shape {out_v.shape}")


def _split(node: Node, ids: dict[Value, np.ndarray]) -> None:
    x = ids[node.inputs[0]]
    axis = int(node.attrs.get("axis", 0)) % x.ndim
    outs = node.outputs
    sizes_v = node.inputs[1] if len(node.inputs) > 1 else None
    if sizes_v is not None:
        if not sizes_v.is_constant:
            raise UnsupportedOpError(f"node '{node.name}' (Split): split sizes must be a constant")
        sizes = [int(v) for v in sizes_v.const.reshape(-1)]
    else:
        sizes = [_static(node, v)[axis] for v in outs]
    cuts = np.cumsum(sizes)[:-1]
    for v, part in zip(outs, np.split(x, cuts, axis=axis), strict=True):
        ids[v] = part


def _reduce(b: _Builder, node: Node, ids: dict[Value, np.ndarray]) -> None:
    x = ids[node.inputs[0]]
    axes_v = node.inputs[1] if len(node.inputs) > 1 else None
    if axes_v is not None and not axes_v.is_constant:
        raise UnsupportedOpError(f"node '{node.name}' ({node.op_type}): axes must be a constant")
    axes = axes_v.const.reshape(-1).tolist() if axes_v is not None else node.attrs.get("axes")
    if not axes:
        axes = [] if int(node.attrs.get("noop_with_empty_axes", 0)) else list(range(x.ndim))
    if not axes:
        ids[node.outputs[0]] = x
        return
    axes = sorted(int(a) % x.ndim for a in axes)
    kept = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    out = b.neurons(node.name, kept)
    b.connect(x, out)  # broadcast: each input element to the output element it reduces into
    out_v = node.outputs[0]
    ids[out_v] = out.reshape(_static(node, out_v)) if out_v.has_static_shape else out


def expand_graph(graph: Graph) -> NeuronExpansion:
    """The neuron-level synapse list of ``graph`` (static shapes, batch 1).

    Raises:
        ShapeError: a needed shape is unknown or the batch is not 1.
        UnsupportedOpError: an operator outside the lists in the module docstring.
    """
    b = _Builder()
    ids: dict[Value, np.ndarray] = {}
    for v in graph.inputs:
        if not v.has_static_shape:
            raise ShapeError(f"graph input '{v.name}' has no static shape {v.shape}; bind it first")
        ids[v] = b.neurons(v.name, tuple(int(d) for d in v.shape))
    for node in graph.topological_order():
        live = [v for v in node.inputs if v is not None and v in ids]
        if not live:  # constant folding territory: no neurons involved
            continue
        op = node.op_type
        if op == "Conv" or op in POOLS or op in GLOBAL_POOLS:
            _conv_like(b, node, ids)
        elif op in ("MatMul", "Gemm"):
            _dense(b, node, ids)
        elif op in ELEMENTWISE:
            _elementwise(b, node, ids)
        elif op in FOLDED:
            ids[node.outputs[0]] = ids[node.inputs[0]]
        elif op in RESHAPES or op in ("Transpose", "Concat", "Pad", "Slice"):
            _rearrange(node, ids)
        elif op == "Split":
            _split(node, ids)
        elif op in REDUCTIONS:
            _reduce(b, node, ids)
        else:
            raise UnsupportedOpError(f"node '{node.name}': operator {op} cannot be expanded into neurons "
                                     "(supported: Conv, MatMul, Gemm, pooling, reductions, elementwise, reshapes, Slice, Split)")
    idt = index_dtype(b.count)
    src = np.concatenate(b.src).astype(idt) if b.src else np.zeros(0, idt)
    dst = np.concatenate(b.dst).astype(idt) if b.dst else np.zeros(0, idt)
    return NeuronExpansion(b.count, src, dst, b.layers)


def expand_topology(graph: Graph) -> Topology:
    """:func:`expand_graph` then symmetrise (weight 1 per synapse, synapses = fan-in)."""
    return expand_graph(graph).topology()
