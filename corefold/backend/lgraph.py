"""The lowered graph: compute tasks on physical tensors; data movement becomes pieces.

:func:`build` walks the tiled IR graph (:mod:`corefold.backend.tile`) in topological order:

* an operator that only moves data (Concat, a Slice with constant bounds and unit steps,
  Split, Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout) computes nothing: its
  output is described by :class:`~corefold.backend.boxes.Piece` s of the tensors it reads,
  so the copies happen as transfers into the consumer's buffer (or not at all). A reshape
  that does not map boxes to boxes *materialises* its input with a gather task;
* one whose data inputs are all constants is folded into a constant;
* every other operator is a :class:`Task` on one core unit, with an :class:`Op` for the
  executable and its cost (:func:`corefold.cost.op_cost`);
* a graph input that fits a core is loaded by a gather task, once, and sent on from that
  core (DRAM bandwidth is shared by the whole chip, the NoC links are not), unless only
  the tile step's Slices read it: then each band is loaded by the core reading it; a tensor to
  materialise that is too big for a core is *staged*: its pieces are stored to DRAM (or,
  when already in DRAM, copied there from region to region) and its readers load their
  boxes from there.

Physical tensors (:class:`Phys`) are the graph inputs (in DRAM), the constants (resident
weights of the cores that read them) and the task outputs (in the producing core's SRAM).
O(V + E + pieces).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from corefold.backend.activations import activation_cost, fused_activation
from corefold.backend.boxes import (
    Piece,
    Shape,
    coalesce,
    piece_boxes,
    prod,
    reshape_pieces,
    shift,
    sub_pieces,
)
from corefold.backend.executable import Op, QuantTensor, dtype_name
from corefold.backend.tile import INTEGER_DOMAIN
from corefold.cost import op_cost
from corefold.errors import UnsupportedOpError
from corefold.ir import Graph, Node, Value
from corefold.passes.split.split import ACTIVATION_META, JOIN_META
from corefold.target import Target

_PIECES = re.compile(r"(?:_(?:rows|part)\d+)+$")


def operator_name(piece: str) -> str:
    """The operator a piece was cut from: ``piece`` without its trailing ``_rows<k>`` and
    ``_part<k>`` suffixes (``conv_part1_rows3`` -> ``conv``), as the tile step names its
    pieces. O(len(piece))."""
    return _PIECES.sub("", piece) or piece


VIEW_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"})


@dataclass
class Phys:
    """A tensor with storage: a graph input (``kind="input"``), a constant (``"const"``), a
    task output (``"op"``) or a tensor assembled in DRAM from ``source`` (``"staged"``)."""

    id: int
    name: str
    shape: Shape
    dtype: np.dtype
    kind: str
    task: int | None = None
    const: np.ndarray | None = None
    quant: QuantTensor | None = None
    source: "Operand | None" = None  # kind "staged": assembled in DRAM from these pieces

    @property
    def nbytes(self) -> int:
        return prod(self.shape) * self.dtype.itemsize

    @property
    def elements(self) -> int:
        return prod(self.shape)


@dataclass
class Operand:
    """A tensor a task reads (or the graph outputs), as pieces of physical tensors."""

    shape: Shape
    dtype: np.dtype
    pieces: tuple[Piece, ...]

    @property
    def nbytes(self) -> int:
        return prod(self.shape) * self.dtype.itemsize

    def whole_piece(self) -> Piece | None:
        """The single piece covering the operand, if it is one box of one tensor."""
        if len(self.pieces) == 1 and self.pieces[0].extent == tuple(self.shape):
            return self.pieces[0]
        return None


@dataclass
class Task:
    """One operator on one unit (or, with ``op`` None, a gather that assembles its single
    input into its output tensor with transfers only)."""

    id: int
    name: str
    op: Op | None
    inputs: list[Operand | None]
    outputs: list[int]
    unit: str
    seconds: float
    control: list[int] = field(default_factory=list)

    @property
    def is_gather(self) -> bool:
        return self.op is None


@dataclass
class LoweredGraph:
    """Tasks in a topological order, the physical tensors, and the graph's I/O. Built once
    (:func:`build`) and never changed after: what is derived from it (:func:`node_edges`,
    :func:`input_bytes`, :func:`copied_bytes`) is kept in ``derived`` for every clustering
    and trial of it, read-only."""

    tasks: list[Task]
    phys: list[Phys]
    inputs: list[int]
    outputs: list[tuple[str, Operand]]
    derived: dict = field(default_factory=dict, repr=False, compare=False)

    def consts_of(self, task: Task) -> list[int]:
        """The constants a task reads (its resident weights), without repeats."""
        seen: dict[int, None] = {}
        for o in task.inputs:
            if o is not None:
                for p in o.pieces:
                    if self.phys[p.phys].kind == "const":
                        seen[p.phys] = None
        return list(seen)

    def weight_bytes(self, task: Task) -> int:
        return sum(self.phys[c].nbytes for c in self.consts_of(task))

    def working_bytes(self, task: Task) -> int:
        """Bytes of the task's non-constant inputs and outputs (its working set)."""
        total = sum(self.phys[o].nbytes for o in task.outputs)
        if task.is_gather:
            return total  # its input lands in its output buffer
        for o in task.inputs:
            if o is not None and not all(self.phys[p.phys].kind == "const" for p in o.pieces):
                total += o.nbytes
        return total


def _training(node: Node) -> bool:
    """Whether a Dropout may drop elements: its ``training_mode`` input is given and not a
    constant false (opset 12 on; before, it is an inference no-op)."""
    mode = node.inputs[2] if len(node.inputs) > 2 else None
    return mode is not None and (mode.const is None or bool(np.asarray(mode.const)))


def _ints(v: Value | None) -> list[int] | None:
    if v is None:
        return None
    if v.const is None:
        return None
    return [int(x) for x in np.asarray(v.const).reshape(-1)]


def _slice_box(node: Node, shape: Shape) -> tuple[Shape, Shape] | None:
    """The box a constant-bound, unit-step Slice selects, or None."""
    starts, ends = _ints(node.inputs[1]), _ints(node.inputs[2])
    axes = _ints(node.inputs[3]) if len(node.inputs) > 3 and node.inputs[3] is not None else None
    steps = _ints(node.inputs[4]) if len(node.inputs) > 4 and node.inputs[4] is not None else None
    if starts is None or ends is None or (len(node.inputs) > 3 and node.inputs[3] is not None and axes is None) \
            or (len(node.inputs) > 4 and node.inputs[4] is not None and steps is None):
        return None
    axes = axes if axes is not None else list(range(len(starts)))
    steps = steps if steps is not None else [1] * len(starts)
    if any(s != 1 for s in steps):
        return None
    start, extent = [0] * len(shape), list(shape)
    for s, e, a in zip(starts, ends, axes, strict=False):
        a %= len(shape)
        lo, hi, _ = slice(s, e, 1).indices(shape[a])
        start[a], extent[a] = lo, max(0, hi - lo)
    if any(e == 0 for e in extent):
        return None
    return tuple(start), tuple(extent)


class _Builder:
    def __init__(self, graph: Graph, target: Target):
        self.graph = graph
        self.target = target
        self.phys: list[Phys] = []
        self.tasks: list[Task] = []
        self.operand: dict[int, Operand] = {}
        self.task_of_node: dict[Node, int] = {}
        self.last_task: dict[Node, list[int]] = {}
        # id(pieces) -> (pieces, piece_boxes(pieces)) of the operands cut into several boxes
        self._boxes: dict[int, tuple[tuple[Piece, ...], tuple[np.ndarray, np.ndarray]]] = {}

    def boxes_of(self, pieces: tuple[Piece, ...]) -> tuple[np.ndarray, np.ndarray] | None:
        """:func:`piece_boxes` of ``pieces``, made once per tuple (the tuple is kept, so its
        id is not reused); None for a few pieces, where the plain loop is as fast. O(P)."""
        if len(pieces) < 8:
            return None
        hit = self._boxes.get(id(pieces))
        if hit is None:
            hit = self._boxes[id(pieces)] = (pieces, piece_boxes(pieces))
        return hit[1]

    def new_phys(self, name: str, shape, dtype, kind: str, **kw) -> Operand:
        p = Phys(len(self.phys), name, tuple(int(d) for d in shape), np.dtype(dtype), kind, **kw)
        self.phys.append(p)
        zero = (0,) * len(p.shape)
        return Operand(p.shape, p.dtype, (Piece(zero, p.shape, p.id, p.shape, zero),))

    def of(self, v: Value | None) -> Operand | None:
        if v is None:
            return None
        key = id(v)
        if key not in self.operand:
            if v.const is None:
                raise UnsupportedOpError(f"value '{v.name}' is read before it is computed")
            self.operand[key] = self.new_phys(v.name, v.shape, v.dtype, "const",
                                              const=np.ascontiguousarray(v.const))
        return self.operand[key]

    def run(self) -> LoweredGraph:
        inputs = []
        for v in self.graph.inputs:
            if not v.has_static_shape:
                raise UnsupportedOpError(f"input '{v.name}' has no static shape; bind it with --shape")
            x = self.new_phys(v.name, v.shape, v.dtype, "input")
            inputs.append(x.pieces[0].phys)
            # an input that fits a core is loaded once, by one core, and sent on from there,
            # unless it is read only in bands (the tile step's pieces): each loads its own
            banded = bool(v.uses()) and all(u.node.op_type == "Slice" and u.node.meta.get(JOIN_META)
                                            for u in v.uses())
            small = x.nbytes <= self.target.core_memory_threshold
            self.operand[id(v)] = self.gather(v.name, x) if small and not banded else x
        for node in self.graph.topological_order():
            self.node(node)
        outputs = []
        for v in self.graph.outputs:
            outputs.append((v.name, self.of(v)))
        return LoweredGraph(self.tasks, self.phys, inputs, outputs)

    def node(self, node: Node) -> None:
        data = [v for v in node.inputs if v is not None]
        op = node.op_type
        if node.domain != INTEGER_DOMAIN and data and all(v.const is not None for v in data) and not node.domain:
            self.fold(node)
            return
        if not node.domain and self.dissolve(node):
            self.last_task[node] = self._ancestor_tasks(node)
            return
        ins = [self.of(v) for v in node.inputs]
        for v in node.outputs:
            if not v.has_static_shape:
                raise UnsupportedOpError(f"value '{v.name}' of node '{node.name}' has no static shape")
        c = op_cost(node, self.target)
        quant = node.meta.get("quant")
        act = node.meta.get(ACTIVATION_META) if quant is None else None  # float ops only: Op.activation
        # float or integer; planned as vector work after the op's own, though the timed run
        # streams it beside a matrix op (executable.compute_stages): the longer estimate
        # clustered and cut better (int8 EfficientNet-B0 309 us against 319 with the max;
        # with long epilogues dealt over both vector engines, 110.7 us against 115.5 with the
        # work plus the dealt share and 117.7 with the max of them)
        fused = fused_activation(node)
        act_work, act_s = activation_cost(fused, node.outputs[0], self.target) if fused else (0.0, 0.0)
        tid = len(self.tasks)
        outs = []
        for v in node.outputs:
            opnd = self.new_phys(v.name, v.shape, v.dtype, "op", task=tid)
            self.operand[id(v)] = opnd
            outs.append(opnd.pieces[0].phys)
        for i, v in enumerate(node.inputs):
            if v is not None and v.const is not None and quant is not None and quant.inputs[i] is not None:
                self.phys[ins[i].pieces[0].phys].quant = quant.inputs[i]
        xop = Op(node.name, op, dict(node.attrs), tuple(o.shape if o is not None else None for o in ins),
                 tuple(dtype_name(o.dtype) if o is not None else None for o in ins),
                 tuple(tuple(v.shape) for v in node.outputs), tuple(dtype_name(v.dtype) for v in node.outputs),
                 c.unit, float(c.work), quant, act, act_work)
        task = Task(tid, node.name, xop, ins, outs, c.unit, float(c.compute_seconds) + act_s)
        task.control = sorted({t for p in node.control_preds for t in self._tasks_of(p)})
        self.tasks.append(task)
        self.task_of_node[node] = tid

    def _tasks_of(self, node: Node) -> list[int]:
        if node in self.task_of_node:
            return [self.task_of_node[node]]
        return self.last_task.get(node, [])

    def _ancestor_tasks(self, node: Node) -> list[int]:
        out: set[int] = set()
        for p in node.predecessors():
            out.update(self._tasks_of(p))
        return sorted(out)

    def fold(self, node: Node) -> None:
        from corefold import ops

        fn = ops.get(node.op_type, node.domain, where=f"node '{node.name}'").kernel
        if not callable(fn):
            raise UnsupportedOpError(f"node '{node.name}': no kernel for operator {node.op_type}")
        res = list(fn(node.attrs, [v.const if v is not None else None for v in node.inputs]))
        if node.meta.get(ACTIVATION_META):
            from corefold.backend.kernels import apply_activation

            res[0] = apply_activation(node.meta[ACTIVATION_META], np.asarray(res[0]))
        for v, r in zip(node.outputs, res, strict=False):
            self.operand[id(v)] = self.new_phys(v.name, np.shape(r), np.asarray(r).dtype, "const",
                                                const=np.ascontiguousarray(r))

    def dissolve(self, node: Node) -> bool:
        """Describe a data-movement node's outputs as pieces; False if it must compute."""
        op = node.op_type
        if op in VIEW_OPS:
            if op == "Dropout" and (_training(node) or len(node.outputs) > 1 and (
                    node.outputs[1].uses() or any(v is node.outputs[1] for v in self.graph.outputs))):
                return False  # it drops elements, or its mask is read: the kernel computes it
            x = self.of(node.inputs[0])
            out = node.outputs[0]
            if 0 in x.shape:
                return False  # no elements, no boxes: the kernel reshapes it
            pieces = reshape_pieces(x.pieces, x.shape, tuple(out.shape), {p.id: p.elements for p in self.phys})
            if pieces is None:
                x = self.gather(node.inputs[0].name, x)
                pieces = reshape_pieces(x.pieces, x.shape, tuple(out.shape), {p.id: p.elements for p in self.phys})
            self.operand[id(out)] = Operand(tuple(out.shape), out.dtype, pieces)
            return True
        if op == "Concat":
            axis = int(node.attrs["axis"]) % len(node.outputs[0].shape)
            pieces: list[Piece] = []
            offset = 0
            for v in node.inputs:
                if v is None:
                    continue
                x = self.of(v)
                pieces.extend(shift(x.pieces, axis, offset))
                offset += x.shape[axis]
            out = node.outputs[0]
            self.operand[id(out)] = Operand(tuple(out.shape), out.dtype, coalesce(tuple(pieces)))
            return True
        if op == "Slice":
            x = self.of(node.inputs[0])
            box = _slice_box(node, x.shape)
            if box is None:
                return False
            out = node.outputs[0]
            self.operand[id(out)] = Operand(tuple(out.shape), out.dtype,
                                            sub_pieces(x.pieces, *box, self.boxes_of(x.pieces)))
            return True
        if op == "Split":
            x = self.of(node.inputs[0])
            axis = int(node.attrs.get("axis", 0)) % len(x.shape)
            offset = 0
            for out in node.outputs:
                start = tuple(offset if d == axis else 0 for d in range(len(x.shape)))
                self.operand[id(out)] = Operand(tuple(out.shape), out.dtype,
                                                sub_pieces(x.pieces, start, tuple(out.shape), self.boxes_of(x.pieces)))
                offset += out.shape[axis]
            return True
        return False

    def gather(self, name: str, x: Operand) -> Operand:
        """A gather task assembling ``x`` into one tensor; its output operand. A tensor too
        big for a core is assembled in DRAM instead (kind "staged")."""
        if x.nbytes > self.target.core_memory_threshold:
            return self.new_phys(f"{name}_staged", x.shape, x.dtype, "staged", source=x)
        tid = len(self.tasks)
        out = self.new_phys(f"{name}_gathered", x.shape, x.dtype, "op", task=tid)
        self.tasks.append(Task(tid, f"{name}_gather", None, [x], [out.pieces[0].phys], "dma", 0.0))
        return out


def build(graph: Graph, target: Target) -> LoweredGraph:
    """The lowered graph of a tiled graph (module docstring).

    Raises:
        UnsupportedOpError: a value has no static shape, or a constant subgraph has an
            operator without a kernel.
    """
    return _Builder(graph, target).run()


def node_edges(lg: LoweredGraph) -> list[dict[int, float]]:
    """Per task: producer task -> bytes it reads from it (0 for an order only: a control
    edge, or a read staged through DRAM). Made once per lowered graph and shared by every
    caller: read-only. O(tasks + pieces) the first time, O(1) after."""
    out = lg.derived.get("node_edges")
    if out is None:
        out = lg.derived["node_edges"] = _node_edges(lg)
    return out


def _node_edges(lg: LoweredGraph) -> list[dict[int, float]]:
    out: list[dict[int, float]] = []
    for t in lg.tasks:
        e: dict[int, float] = {}
        for o in t.inputs:
            if o is None:
                continue
            for p in o.pieces:
                ph = lg.phys[p.phys]
                if ph.kind == "op":
                    e[ph.task] = e.get(ph.task, 0.0) + p.elements * ph.dtype.itemsize
                elif ph.kind == "staged":  # through DRAM: an order, no NoC bytes
                    for q in ph.source.pieces:
                        if lg.phys[q.phys].kind == "op":
                            e.setdefault(lg.phys[q.phys].task, 0.0)
        for c in t.control:
            e.setdefault(c, 0.0)
        out.append(e)
    return out


def input_bytes(lg: LoweredGraph, t: Task) -> float:
    """Bytes ``t`` loads from DRAM: its pieces of graph inputs and of staged tensors.
    O(pieces) the first time for ``t``, O(1) after."""
    return _per_task(lg, "input_bytes", t, _input_bytes)


def _per_task(lg: LoweredGraph, key: str, t: Task, make):
    """``make(lg, t)``, made once per task of ``lg`` and kept in ``lg.derived[key]``. O(1)
    after the first call for ``t``."""
    memo = lg.derived.get(key)
    if memo is None:
        memo = lg.derived[key] = [None] * len(lg.tasks)
    if memo[t.id] is None:
        memo[t.id] = make(lg, t)
    return memo[t.id]


def _input_bytes(lg: LoweredGraph, t: Task) -> float:
    total = 0.0
    for o in t.inputs:
        if o is not None:
            for p in o.pieces:
                ph = lg.phys[p.phys]
                if ph.kind in ("input", "staged"):
                    total += p.elements * ph.dtype.itemsize
    return total


def copied_bytes(lg: LoweredGraph, t: Task) -> dict[int, float]:
    """Per producer task: the bytes of ``t``'s operands assembled from boxes of that
    producer's outputs (an operand that is not one box of one tensor is copied together on
    ``t``'s core from its local pieces, by the engine :meth:`Target.copy_unit` names for
    its elements: :func:`~corefold.backend.place._copy_engine`). Shared by every caller:
    read-only. O(pieces) the first time for ``t``, O(1) after."""
    return _per_task(lg, "copied_bytes", t, _copied_bytes)


def _copied_bytes(lg: LoweredGraph, t: Task) -> dict[int, float]:
    out: dict[int, float] = {}
    for o in t.inputs:
        if o is None or o.whole_piece() is not None:
            continue
        for p in o.pieces:
            ph = lg.phys[p.phys]
            if ph.kind == "op":
                out[ph.task] = out.get(ph.task, 0.0) + p.elements * ph.dtype.itemsize
    return out
