"""The executable: what :func:`corefold.backend.lower` produces and ``corefold sim`` runs.

An :class:`Executable` is one compiled (sub)graph for one target. It holds, for every core
it uses, a program (a list of instructions) and the SRAM buffers the program touches; the
weights that stay resident in those buffers; the DRAM regions holding graph inputs,
outputs and spilled tensors; the graph's I/O descriptors; the op table the compute
instructions refer to; and the fingerprint of the target it was compiled for. The ``.cfx``
file (docs/executable.md) stores exactly this; this module is the in-memory model, with
no behaviour beyond small queries, so that a functional and a timed simulator can be
written from these docstrings alone.

Coordinates and directions
--------------------------
A core is named by its global mesh coordinates ``(x, y)``, ``0 <= x < target.width``,
``0 <= y < target.height`` (on a board of several chips, coordinates run over the whole
board, as in :class:`corefold.target.Target`). Its row-major index is ``y * width + x``.
``y`` grows southwards: direction ``"N"`` goes to ``(x, y - 1)``, ``"S"`` to ``(x, y + 1)``,
``"E"`` to ``(x + 1, y)``, ``"W"`` to ``(x - 1, y)``. :data:`DIRECTIONS` lists them in the
order of the simulator report's ``link_bytes[y][x][d]``.

A *hop* ``(x, y, d)`` is the directed mesh link leaving router ``(x, y)`` in direction
``d``. A *route* is the tuple of hops a transfer crosses, in order, chosen by XY routing
(all of x first, then all of y: :func:`xy_route`). A link between two cores of different
chips is an inter-chip link (``target.chip_of`` differs at its two ends).

Memories
--------
* **SRAM.** Each core has ``target.sram_bytes`` of SRAM, addressed from 0. A
  :class:`Buffer` is a byte range ``[offset, offset + nbytes)`` of one core's SRAM that
  holds one dense tensor (or tensor box) of ``shape`` and ``dtype`` in C order.
  ``kind == "weight"`` buffers are *resident*: filled once when the executable is loaded
  (from :attr:`Executable.weights`) and read-only afterwards. ``kind == "activation"``
  buffers are working storage; two activation buffers of a core may share addresses only
  if their lifetimes (below) are disjoint; the lowering guarantees it through ``deps``.
* **DRAM.** A :class:`DramRegion` is a byte range of one DRAM channel, or striped over
  several channels of one chip (``interleave``); channel ``c``
  attaches to the mesh at router ``target.dram_channels[c]`` and has
  ``target.dram_channel_bytes_per_s`` of bandwidth. The host attaches
  at router ``target.host_router`` over ``target.host_link_bytes_per_s``. Regions hold the graph's
  inputs and outputs and any tensor spilled or assembled outside SRAM. Distinct regions
  never overlap.

Views
-----
Every operand of every instruction is a :class:`View`: the bytes of a buffer (or region)
seen as a C-order array of ``shape`` with the buffer's ``dtype`` (``prod(shape) *
itemsize == nbytes`` of the buffer/region: a reshape is free), and the sub-box
``[start[d], start[d] + extent[d])`` on every axis ``d`` of it. In NumPy terms the operand
is ``memory.view(dtype).reshape(shape)[tuple(slice(s, s + e) for s, e in zip(start,
extent))]``. A view may be strided (a sub-box of a bigger array); the data a transfer moves
is ``prod(extent) * itemsize`` bytes.

Programs and instructions
-------------------------
Each used core has one :class:`CoreProgram`: instructions in *program order*. Each
instruction names the *engine* that executes it (``unit``): ``"<kind><i>"`` for unit
``i`` of kind ``kind`` of that core (``"matrix0"``, ``"vector1"``, ``"dma0"``; ``i <
target.units[kind].count``), or ``None`` for :class:`Send`, :class:`Recv`,
:class:`Signal` and :class:`Wait`, which need no unit of the core. Instruction ``j`` has
``deps``: indices ``< j`` into the same program.

When an instruction may start (both simulators):

1. every instruction in its ``deps`` has *completed*, and
2. if it has an engine: every earlier instruction (in program order) of the same engine
   has completed: each engine executes its instructions one at a time, in program order;
3. a :class:`Send` additionally waits until its matching :class:`Recv` (same ``tag``, on
   the destination core) has been *posted* (rule 4), so that the destination buffer is
   free (rendezvous; the sender never overwrites live data);
4. a :class:`Recv` is *posted* as soon as rule 1 holds for it; it then waits, with no
   engine, until the matching Send's data has arrived, and completes then;
5. a :class:`Signal` starts when rule 1 holds (no rendezvous); the matching :class:`Wait`
   (same ``tag``) completes once rule 1 holds for it and the signal has arrived. A signal
   orders work of two cores through DRAM: the DMA stores (and DMA copies) before it
   complete before the DMA loads (and copies) after the wait start.

Sends, recvs, signals and waits do not block one another: a core may have many in
flight at once, in any order. Each core's program is sorted by one global topological
order of the lowered graph; a Recv sits just before the task that reads its data, and
the sending core does not reuse the sent buffer's addresses for work placed before that
task, so every wait points at work earlier in that order (or at the same task's) and the
programs cannot deadlock.

What each instruction reads and writes is in its class docstring. An instruction reads
its sources when it starts and writes its destinations by the time it completes; nothing
else touches those bytes meanwhile (guaranteed by ``deps`` and rule 3).

Buffer lifetime: an activation buffer is *live* from the moment the first instruction of
its core that accesses it starts (a :class:`Recv` into it: is posted) until every
instruction of its core that accesses it has completed (a :class:`Send` from it accesses
it until the data has arrived). At any time the
live buffers of a core must not overlap in address; weight buffers are live from load to
the end. A simulator asserts both (``sram_peak_bytes`` is the largest sum of ``nbytes`` of
the live buffers of a core, weights included).

Timing (the reference model; the timed simulator adds contention):

* :class:`Compute`: ``ops[op].work / (throughput * clock_hz)`` seconds with the throughput
  of one unit of ``ops[op].unit_kind`` (:class:`corefold.target.Unit`). A fused
  activation's ``ops[op].activation_work`` runs at the vector units' throughput: on a
  matrix engine ``i`` it streams through vector engine ``i mod count`` as the results
  come (an epilogue pipeline: that engine is held meanwhile, and the instruction completes
  when both are done, ``max`` of the two times when neither waits), or, when it would
  take longer than the op's own work, is dealt evenly over vector engines ``i, i + 1,
  ...`` (mod count), as many as ``ceil(activation time / work time)``, at most all of
  them; on a vector op it follows the op's own work on its engine (:func:`compute_stages`);
* :class:`DmaLoad` / :class:`DmaStore`: ``bytes`` at the smallest of the DMA unit's rate,
  the DRAM channel's share of the DRAM bandwidth and the route's link bandwidth, plus one
  hop latency per hop of ``route`` (on an interleaved region, each channel's share of the
  bytes so, on its own XY route, in parallel); :class:`DmaCopy` likewise, through both regions'
  channels (DRAM traffic of twice its bytes: read once, written once);
  :class:`Copy`: ``bytes`` at the DMA unit's rate;
* :class:`Send`: ``bytes`` at the route's link bandwidth plus one hop latency per hop;
  :class:`Signal`: the hop latencies of its route (no payload).

Numerics
--------
A :class:`Compute` runs ``ops[op]``: an ONNX operator (opset 21 semantics, as the
reference executor ``corefold.executor`` implements it, on the exact input arrays) or,
when ``ops[op].quant`` is set, the integer operator of :class:`QuantOp`. Graph inputs are
in DRAM before the run (written over the host link when their ``location`` is
``"host"``), graph outputs are in DRAM after it.

Everything here is immutable except the :class:`Executable` container itself, whose
``meta`` dict records lowering statistics (free-form, JSON-able).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from typing import Any, Iterator

import numpy as np

from corefold.backend.instructions import (  # noqa: F401  (re-exported: the executable's model)
    ALIGNMENT,
    INSTRUCTION_TYPES,
    Buffer,
    Compute,
    Copy,
    Core,
    DmaCopy,
    DmaLoad,
    DmaStore,
    DramRegion,
    Hop,
    Instruction,
    Recv,
    Route,
    Send,
    Signal,
    View,
    Wait,
    dtype_name,
    engine,
    instruction_kind,
    split_bytes,
    whole,
)

#: Newest version of the in-memory model and of the ``.cfx`` format (docs/executable.md).
#: Version 2 added :class:`DmaCopy` (opcode 9); an executable without one is written as
#: version 1, byte for byte as before, so version-1 readers still read it. Version 3 added
#: interleaved DRAM regions (:attr:`DramRegion.interleave` above 1); an executable without
#: one is written as version 1 or 2. Version 4 added fused activations of float ops
#: (:attr:`Op.activation`); an executable without one is written as an earlier version.
#: Version 5 added the integer ``Sum`` of partial accumulators (an op ``Sum`` with ``quant``
#: set, its inputs int32: a linear operator cut over its reduced dimension).
FORMAT_VERSION = 5

#: Every format version this corefold reads.
READABLE_VERSIONS = (1, 2, 3, 4, 5)

#: Mesh directions, in the order of the report's ``link_bytes[y][x][d]``.
DIRECTIONS = ("N", "E", "S", "W")

#: (dx, dy) of each direction; y grows southwards.
DIRECTION_STEP = {"N": (0, -1), "E": (1, 0), "S": (0, 1), "W": (-1, 0)}

# -- ops ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class QuantTensor:
    """Integers ``q`` standing for ``(q - zero_point) * scale`` (per tensor, or per ``axis``).

    Attributes:
        scale: float64 array, shape ``()`` (per tensor) or ``(n,)`` along ``axis``.
        zero_point: integer array of the same shape (corefold's quantizer writes zeros).
        axis: the axis of a per-axis scale, or None.
        dtype: NumPy dtype name of the integers (``"int8"``, ``"uint8"``, ``"int16"``,
            ``"int32"`` for biases).
    """

    scale: np.ndarray
    zero_point: np.ndarray
    axis: int | None
    dtype: str

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, QuantTensor) and self.axis == other.axis and self.dtype == other.dtype
                and np.array_equal(self.scale, other.scale) and np.array_equal(self.zero_point, other.zero_point))

    def __hash__(self) -> int:
        return hash((self.axis, self.dtype, self.scale.tobytes(), self.zero_point.tobytes()))


@dataclass(frozen=True)
class QuantOp:
    """An operator computed on integers, as :class:`corefold.passes.quantize.integer.IntegerRunner`
    computes the pattern ``DequantizeLinear -> op [-> activation] -> QuantizeLinear``.

    Semantics, exactly (the simulator must reproduce them bit for bit): build the graph
    where op input ``i`` is ``DequantizeLinear(x_i, inputs[i].scale, inputs[i].zero_point,
    axis=inputs[i].axis)`` (or ``x_i`` itself when ``inputs[i]`` is None), the op
    (:class:`Op` type and attributes) follows, then the activation (``Relu``; ``Sigmoid``
    and ``Mul`` of the op's output for ``"Silu"``; the one node of that type for
    ``"HardSwish"``, ``"Sigmoid"``, ``"Tanh"``), then ``QuantizeLinear(., output.scale,
    output.zero_point)`` producing ``output.dtype``; and run it with ``IntegerRunner``
    (integer accumulation, one rounding ``rint(acc * multiplier)`` with ties to even, clip
    to the integer range; a float activation is applied in float64 to the dequantized
    accumulator before that rounding).
    ``corefold.backend.kernels.run_op`` does exactly that.

    Attributes:
        inputs: per op input, its quantization (None: read as is, e.g. an int64 table).
        output: the output's quantization; the op's output dtype is ``output.dtype``.
        activation: one of ``corefold.passes.quantize.integer.ACTIVATIONS`` or None.
    """

    inputs: tuple[QuantTensor | None, ...]
    output: QuantTensor
    activation: str | None = None


@dataclass(frozen=True)
class Op:
    """One operator application, referred to by :class:`Compute` instructions.

    Attributes:
        name: the IR node (operator piece) it comes from.
        op_type: ONNX operator type (opset 21 semantics).
        attrs: ONNX attributes (ints, floats, strings, lists of them).
        input_shapes: shape of each input (``None`` for a missing optional input).
        input_dtypes: dtype name of each input (``None`` likewise).
        output_shapes: shape of each output.
        output_dtypes: dtype name of each output.
        unit_kind: ``"matrix"``, ``"vector"`` or ``"dma"``: the kind of unit it runs on.
        work: MACs (matrix), element operations (vector) or bytes (dma); its duration on
            one unit is ``work / (throughput * clock_hz)``.
        quant: set for an integer operator (:class:`QuantOp`); its inputs are then the
            integers (dtypes above) and its output the quantized integers.
        activation: a float operator's fused activation (one of
            ``corefold.passes.quantize.integer.ACTIVATIONS``), applied to its output as
            the executor computes that node (``"Silu"``: ``Mul(y, Sigmoid(y))``), or None.
            It runs as an epilogue on the core's vector unit (:func:`compute_stages`).
        activation_work: the vector element operations of the fused activation (this
            attribute's, or an integer op's ``quant.activation``); a Compute of this op
            takes ``work / (throughput * clock_hz)`` of its unit and ``activation_work``
            over the vector unit's rate (:func:`compute_stages`).
    """

    name: str
    op_type: str
    attrs: dict[str, Any]
    input_shapes: tuple[tuple[int, ...] | None, ...]
    input_dtypes: tuple[str | None, ...]
    output_shapes: tuple[tuple[int, ...], ...]
    output_dtypes: tuple[str, ...]
    unit_kind: str
    work: float
    quant: QuantOp | None = None
    activation: str | None = None
    activation_work: float = 0.0

    def __hash__(self) -> int:
        return hash((self.name, self.op_type))


def compute_stages(op: Op, unit: str, target: Any) -> list[tuple[str, float]]:
    """The engines a :class:`Compute` of ``op`` on engine ``unit`` occupies, in order, and
    for how long (module docstring, Timing): ``work`` over one unit of ``op.unit_kind``;
    a fused activation's ``activation_work`` streamed beside matrix engine ``i`` through
    vector engines ``i, i + 1, ... (mod count)``, as many as keep up with the matrix
    engine (``ceil(activation / work)`` of them, at most all), each taking an equal share
    of the elements (an epilogue pipeline; the roofline's vector term counts every vector
    unit of a core too); or after the work on the same engine when the op is itself a
    vector op or the core has no vector unit. O(count)."""
    clock = target.clock_hz
    stages = [(unit, op.work / (target.units[op.unit_kind].throughput * clock))]
    if op.activation_work:
        vector = target.units.get("vector")
        seconds = op.activation_work / ((vector or target.units[op.unit_kind]).throughput * clock)
        if vector is None or op.unit_kind == "vector":
            stages[0] = (unit, stages[0][1] + seconds)
        else:
            # NOTE: an epilogue longer than the work (a Silu's Sigmoid takes 10 vector operations
            # per element, a 1024-MAC engine ~9 per element on a 3 x 3 depthwise or a 3-channel
            # conv) held one vector engine while the other idled: float EfficientNet-B0 309.4
            # -> 277.5 us, int8 132.9 -> 110.7; shorter ones keep one engine (dealt over both
            # anyway, the int8 ResNet-18 went 122.0 -> 125.6: the second engine was busy)
            index = int(unit[len(op.unit_kind):] or 0)
            work = stages[0][1]
            n = vector.count if work <= 0 else min(vector.count, max(1, math.ceil(seconds / work * (1 - 1e-9))))
            stages.extend((f"vector{(index + i) % vector.count}", seconds / n) for i in range(n))
    return stages


# -- weights and I/O ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Weight:
    """The content of a resident weight :class:`Buffer`, written to it at load time.

    Attributes:
        buffer: the weight buffer's id.
        data: the array (shape and dtype of the buffer): float32 values, or the integers of
            a quantized weight.
        quant: for integers, their scale (the consumer op's :class:`QuantOp` input entry
            carries the same); None for float data.
    """

    buffer: int
    data: np.ndarray
    quant: QuantTensor | None = None


@dataclass(frozen=True)
class TensorIO:
    """A graph input or output.

    Attributes:
        name: the graph's input or output name.
        shape: its shape.
        dtype: NumPy dtype name.
        region: the :class:`DramRegion` holding it during the run.
        location: ``"host"``: the host writes the input into the region over the host
            link before the run (reads the output back after it); ``"dram"``: it is
            already there (an earlier executable of a chain left it) or stays there for a
            later one.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    region: int
    location: str = "host"


@dataclass(frozen=True)
class TargetFingerprint:
    """Which target an executable was compiled for.

    Attributes:
        name: the target's name.
        digest: :func:`target_fingerprint` of the target (hex SHA-256).
        width: cores along x (whole board).
        height: cores along y.
    """

    name: str
    digest: str
    width: int
    height: int


def _canonical(x: Any) -> Any:
    if is_dataclass(x) and not isinstance(x, type):
        return {f.name: _canonical(getattr(x, f.name)) for f in fields(x)}
    if isinstance(x, dict):
        return {str(k): _canonical(v) for k, v in sorted(x.items(), key=lambda kv: str(kv[0]))}
    if isinstance(x, (frozenset, set)):
        return sorted((_canonical(v) for v in x), key=repr)
    if isinstance(x, (list, tuple)):
        return [_canonical(v) for v in x]
    if isinstance(x, float):
        return repr(x)
    return x


def target_fingerprint(target: Any) -> TargetFingerprint:
    """The fingerprint of a :class:`corefold.target.Target`: SHA-256 of a canonical JSON
    form of every field (so any change of the chip changes it). O(size of the target)."""
    text = json.dumps(_canonical(target), sort_keys=True, separators=(",", ":"))
    return TargetFingerprint(target.name, hashlib.sha256(text.encode()).hexdigest(), target.width, target.height)


# -- the executable ----------------------------------------------------------------------------
@dataclass
class CoreProgram:
    """The instructions of one core, in program order (module docstring).

    Attributes:
        core: ``(x, y)``.
        instructions: the program.
    """

    core: Core
    instructions: list[Instruction] = field(default_factory=list)


@dataclass
class Executable:
    """One compiled (sub)graph for one target (module docstring).

    Attributes:
        target: the target it was compiled for.
        programs: one per used core, in row-major core order.
        buffers: every SRAM buffer; ``buffers[i].id == i``.
        weights: resident weight contents by buffer id (every ``kind == "weight"`` buffer
            has one).
        regions: every DRAM region; ``regions[i].id == i``.
        inputs: graph inputs, in the graph's order.
        outputs: graph outputs, in the graph's order.
        ops: the op table.
        meta: lowering statistics and names (JSON-able; not interpreted).
    """

    target: TargetFingerprint
    programs: list[CoreProgram]
    buffers: list[Buffer]
    weights: dict[int, Weight]
    regions: list[DramRegion]
    inputs: list[TensorIO]
    outputs: list[TensorIO]
    ops: list[Op]
    meta: dict[str, Any] = field(default_factory=dict)

    # -- queries --------------------------------------------------------------------------------
    def program(self, core: Core) -> CoreProgram:
        """The program of ``core``.

        Raises:
            KeyError: the core runs nothing.
        """
        for p in self.programs:
            if p.core == core:
                return p
        raise KeyError(core)

    @property
    def cores(self) -> list[Core]:
        """The cores with a program, row-major."""
        return [p.core for p in self.programs]

    def instructions(self) -> Iterator[tuple[Core, int, Instruction]]:
        """Every ``(core, index, instruction)``, core by core."""
        for p in self.programs:
            for i, ins in enumerate(p.instructions):
                yield p.core, i, ins

    def buffers_of(self, core: Core) -> list[Buffer]:
        """The buffers in ``core``'s SRAM, by offset."""
        return sorted((b for b in self.buffers if b.core == core), key=lambda b: (b.offset, b.id))

    def weight_bytes(self, core: Core | None = None) -> int:
        """Bytes of resident weights (of one core, or of all)."""
        return sum(b.nbytes for b in self.buffers if b.kind == "weight" and (core is None or b.core == core))

    def sram_extent(self, core: Core) -> int:
        """The highest SRAM address used on ``core`` (its buffers' largest end)."""
        return max((b.end for b in self.buffers if b.core == core), default=0)

    def summary(self) -> dict[str, Any]:
        """Counts for ``corefold inspect``: cores, instructions by kind, bytes."""
        kinds: dict[str, int] = {k: 0 for k in INSTRUCTION_TYPES}
        for _, _, ins in self.instructions():
            kinds[instruction_kind(ins)] += 1
        return {
            "target": self.target.name,
            "cores_used": len(self.programs),
            "instructions": sum(kinds.values()),
            "instructions_by_kind": kinds,
            "ops": len(self.ops),
            "buffers": len(self.buffers),
            "weight_bytes": self.weight_bytes(),
            "regions": len(self.regions),
            "dram_bytes": sum(r.nbytes for r in self.regions),
            "inputs": [asdict(t) for t in self.inputs],
            "outputs": [asdict(t) for t in self.outputs],
        }


# -- routing -----------------------------------------------------------------------------------
def xy_route(src: Core, dst: Core) -> Route:
    """The XY route from router ``src`` to router ``dst``: along x first, then along y.

    Returns the hops ``(x, y, direction)`` leaving each router on the way (empty when
    ``src == dst``). O(hops), once per pair (cached: the simulator asks for the same
    routes for every transfer).
    """
    return _xy_route(tuple(src), tuple(dst))


@functools.lru_cache(maxsize=1 << 16)
def _xy_route(src: Core, dst: Core) -> Route:
    x, y = src
    hops: list[Hop] = []
    while x != dst[0]:
        d = "E" if dst[0] > x else "W"
        hops.append((x, y, d))
        x += 1 if d == "E" else -1
    while y != dst[1]:
        d = "S" if dst[1] > y else "N"
        hops.append((x, y, d))
        y += 1 if d == "S" else -1
    return tuple(hops)


def route_end(start: Core, route: Route) -> Core:
    """The router a route starting at ``start`` arrives at (checks it is connected).

    Raises:
        ValueError: a hop does not leave the router the previous one arrived at.
    """
    x, y = start
    for hx, hy, d in route:
        if (hx, hy) != (x, y):
            raise ValueError(f"hop {(hx, hy, d)} does not leave router {(x, y)}")
        dx, dy = DIRECTION_STEP[d]
        x, y = x + dx, y + dy
    return (x, y)
