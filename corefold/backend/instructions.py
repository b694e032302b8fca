"""The executable's memories and instructions: buffers, DRAM regions, views, and the nine
instruction kinds a core program is made of.

The semantics (ordering, dependencies, timing) are in :mod:`corefold.backend.executable`'s
docstring; this module only holds the immutable records, re-exported from there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Union

import numpy as np

#: Alignment of every SRAM buffer offset and DRAM region offset, in bytes.
ALIGNMENT = 64

Core = tuple[int, int]
Hop = tuple[int, int, str]
Route = tuple[Hop, ...]


# -- memories ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Buffer:
    """A byte range of one core's SRAM holding one dense C-order tensor (box).

    Attributes:
        id: index of this buffer in :attr:`Executable.buffers`.
        core: ``(x, y)`` of the core whose SRAM holds it.
        offset: first byte, a multiple of :data:`ALIGNMENT`; ``offset + nbytes <=
            target.sram_bytes``.
        nbytes: size in bytes, ``prod(shape) * itemsize``.
        shape: the tensor's shape (views may reinterpret it, same element count).
        dtype: NumPy dtype name of its elements (``"float32"``, ``"int8"``, ...).
        kind: ``"weight"`` (resident, filled at load time from :attr:`Executable.weights`,
            read-only) or ``"activation"`` (working storage, see the module docstring).
        name: the tensor it holds (an IR value name, for reports and traces).
    """

    id: int
    core: Core
    offset: int
    nbytes: int
    shape: tuple[int, ...]
    dtype: str
    kind: str
    name: str

    @property
    def end(self) -> int:
        """One past the last byte."""
        return self.offset + self.nbytes


@dataclass(frozen=True)
class DramRegion:
    """A byte range of one DRAM channel holding one dense C-order tensor.

    Attributes:
        id: index in :attr:`Executable.regions`.
        channel: index into ``target.dram_channels``, the routers ``(x, y)`` where each DRAM
            channel attaches to the mesh (on a board: every chip's channels, chips in
            row-major order); transfers to and from this region enter or leave the mesh
            at that router.
        offset: first byte within the channel, a multiple of :data:`ALIGNMENT`.
        nbytes: size, ``prod(shape) * itemsize``.
        shape: tensor shape.
        dtype: NumPy dtype name.
        kind: ``"input"`` or ``"output"`` (a graph input or output, see :class:`TensorIO`),
            ``"spill"`` (an activation that did not stay in SRAM) or ``"staging"`` (a
            tensor assembled in DRAM from pieces computed on several cores).
        name: the tensor it holds.
        interleave: the number of consecutive channels, ``channel`` to ``channel +
            interleave - 1`` (all on one chip), over which the region's bytes are striped,
            as DRAM controllers interleave addresses; 1: the region lies on ``channel``
            alone. A transfer of ``b`` bytes to or from an interleaved region moves
            ``b / interleave`` through each of those channels, each share along the XY route
            between that channel's router and the other end, so an instruction touching an
            interleaved region has an empty ``route`` (the routes follow from XY routing).
            ``offset`` is then an address in the interleaved space.
    """

    id: int
    channel: int
    offset: int
    nbytes: int
    shape: tuple[int, ...]
    dtype: str
    kind: str
    name: str
    interleave: int = 1

    @property
    def channels(self) -> range:
        """The channels holding the region's bytes."""
        return range(self.channel, self.channel + self.interleave)

    def shares(self, nbytes: int) -> list[tuple[int, int]]:
        """``(channel, bytes)`` of a transfer of ``nbytes`` to or from this region: an equal
        share per channel (the remainder on the first). O(interleave)."""
        return list(zip(self.channels, split_bytes(nbytes, self.interleave), strict=True))


def dtype_name(dtype: np.dtype) -> str:
    """``dtype.name``, looked up: NumPy builds the name anew on every read (about 3 us),
    and a lowering names the dtype of every buffer and operand of every trial. O(1)."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = dtype.name
    return name


_DTYPE_NAMES: dict[np.dtype, str] = {}


def split_bytes(nbytes: int, parts: int) -> list[int]:
    """``nbytes`` in ``parts`` equal shares, the remainder on the first. O(parts)."""
    q, r = divmod(int(nbytes), parts)
    return [q + r] + [q] * (parts - 1)


@dataclass(frozen=True)
class View:
    """An operand: buffer (or region) ``ref`` seen as a C-order array of ``shape``, sub-box
    ``[start, start + extent)`` (module docstring, *Views*).

    Attributes:
        ref: a :class:`Buffer` id (SRAM) or a :class:`DramRegion` id (DRAM), as the
            instruction's field says.
        shape: the reinterpretation; ``prod(shape)`` equals the buffer's element count.
        start: first index on each axis.
        extent: length on each axis (``start[d] + extent[d] <= shape[d]``).
    """

    ref: int
    shape: tuple[int, ...]
    start: tuple[int, ...]
    extent: tuple[int, ...]

    @property
    def elements(self) -> int:
        return int(math.prod(self.extent))

    @property
    def is_whole(self) -> bool:
        """True when the view covers the whole buffer."""
        return all(s == 0 for s in self.start) and tuple(self.extent) == tuple(self.shape)

    def index(self) -> tuple:
        """The NumPy index of the sub-box into ``array.reshape(shape)``; ``(...,)`` for a
        0-d buffer, so that indexing it gives a writable view, not a NumPy scalar."""
        return tuple(slice(s, s + e) for s, e in zip(self.start, self.extent, strict=True)) or (Ellipsis,)


def whole(ref: int, shape: tuple[int, ...]) -> View:
    """The view of all of buffer/region ``ref`` as ``shape``."""
    shape = tuple(int(d) for d in shape)
    return View(ref, shape, (0,) * len(shape), shape)


# -- instructions ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Compute:
    """Run op ``ops[op]`` on one unit of the core.

    Reads the arrays of ``inputs`` (SRAM views on this core; ``None`` for a missing
    optional ONNX input), in the op's input order, each of extent exactly the op's input
    shape; writes the op's outputs into ``outputs`` (SRAM views on this core, extent the
    output shapes). Inputs may be weight buffers. Duration: ``ops[op].work`` over one unit's
    throughput (module docstring).

    Attributes:
        op: index into :attr:`Executable.ops`.
        unit: engine, a unit of kind ``ops[op].unit_kind`` (``"matrix0"``, ``"vector1"``...).
        inputs: one view (or None) per op input.
        outputs: one view per op output.
        deps: indices of earlier instructions of this core that must complete first.
    """

    op: int
    unit: str
    inputs: tuple[View | None, ...]
    outputs: tuple[View, ...]
    deps: tuple[int, ...] = ()


@dataclass(frozen=True)
class DmaLoad:
    """Copy a box of a DRAM region into a box of an SRAM buffer of this core.

    Reads ``src`` (a view of region ``src.ref``), writes ``dst`` (a view of buffer
    ``dst.ref`` on this core); both have the same extent and dtype. The data enters the
    mesh at the region's channel attach router and follows ``route`` to this core (an empty
    route when the channel attaches at this core's router).

    Attributes:
        unit: a DMA engine of this core (``"dma0"``).
        src: view of a :class:`DramRegion`.
        dst: view of a :class:`Buffer` of this core.
        route: hops from the channel's attach router to this core.
        deps: as for :class:`Compute`.
    """

    unit: str
    src: View
    dst: View
    route: Route
    deps: tuple[int, ...] = ()


@dataclass(frozen=True)
class DmaStore:
    """Copy a box of an SRAM buffer of this core into a box of a DRAM region.

    Reads ``src`` (this core's SRAM), writes ``dst`` (a region); same extent and dtype. The
    data follows ``route`` from this core to the region's channel attach router.

    Attributes:
        unit: a DMA engine of this core.
        src: view of a :class:`Buffer` of this core.
        dst: view of a :class:`DramRegion`.
        route: hops from this core to the channel's attach router.
        deps: as for :class:`Compute`.
    """

    unit: str
    src: View
    dst: View
    route: Route
    deps: tuple[int, ...] = ()


@dataclass(frozen=True)
class DmaCopy:
    """Copy a box of one DRAM region into a box of another, driven by a DMA engine of this
    core; the data never enters the core's SRAM.

    Reads ``src`` (a view of region ``src.ref``), writes ``dst`` (a view of region
    ``dst.ref``, another region); same extent and dtype. The data leaves DRAM at the source
    region's channel attach router, follows ``route`` to the destination region's channel
    attach router (an empty route when both channels attach at the same router) and
    enters DRAM there. This is how data movement that does not fit a core (a Slice or
    Concat of tensors in DRAM, written into a graph output or a staged tensor) is lowered.

    Attributes:
        unit: a DMA engine of this core (``"dma0"``).
        src: view of a :class:`DramRegion`.
        dst: view of another :class:`DramRegion`.
        route: hops from the source channel's attach router to the destination's.
        deps: as for :class:`Compute`.
    """

    unit: str
    src: View
    dst: View
    route: Route
    deps: tuple[int, ...] = ()


@dataclass(frozen=True)
class Copy:
    """Copy a box between two SRAM buffers of this core (same extent and dtype), on a DMA
    engine (``bytes_per_cycle``) or a vector engine (``elements_per_cycle``: the lowering
    picks it where that moves more bytes, ``Target.copy_unit``); no NoC traffic.

    Attributes:
        unit: a DMA or vector engine of this core.
        src: view of a :class:`Buffer` of this core.
        dst: view of a :class:`Buffer` of this core.
        deps: as for :class:`Compute`.
    """

    unit: str
    src: View
    dst: View
    deps: tuple[int, ...] = ()


@dataclass(frozen=True)
class Send:
    """Send a box of this core's SRAM to a box of another core's SRAM over the NoC.

    Starts when its ``deps`` completed *and* the matching :class:`Recv` (same ``tag``) on
    ``dst_core`` is posted. Reads ``src`` on this core when it starts, writes ``dst`` on
    ``dst_core``; completes when the last byte has arrived there (then the matching Recv
    completes too). Crosses ``route`` (XY, from this core to ``dst_core``). Uses no unit of
    the core; several sends may be in flight at once.

    Attributes:
        tag: unique in the executable; exactly one Send and one Recv carry it.
        src: view of a :class:`Buffer` of this core.
        dst_core: the receiving core.
        dst: view of a :class:`Buffer` of ``dst_core`` (same extent and dtype as ``src``).
        route: the hops from this core to ``dst_core``.
        deps: as for :class:`Compute`.
    """

    tag: int
    src: View
    dst_core: Core
    dst: View
    route: Route
    deps: tuple[int, ...] = ()


@dataclass(frozen=True)
class Recv:
    """Receive the box sent by the :class:`Send` with the same ``tag`` into ``dst``.

    Posted when its ``deps`` completed (its destination bytes are free from then on);
    completes when the data has arrived. Uses no unit of the core.

    Attributes:
        tag: the matching Send's tag.
        src_core: the sending core.
        dst: view of a :class:`Buffer` of this core (equal to the Send's ``dst``).
        deps: as for :class:`Compute`.
    """

    tag: int
    src_core: Core
    dst: View
    deps: tuple[int, ...] = ()


@dataclass(frozen=True)
class Signal:
    """Tell another core that this core's earlier work (its ``deps``) has completed.

    No data: a message of no payload that crosses ``route``. Starts when its ``deps``
    completed (no rendezvous); completes when it has arrived at ``dst_core``. Used to order
    a DMA store of one core before a DMA load of another (a tensor assembled in DRAM).

    Attributes:
        tag: unique in the executable; exactly one Signal and one Wait carry it.
        dst_core: the core that waits for it.
        route: the hops from this core to ``dst_core``.
        deps: as for :class:`Compute`.
    """

    tag: int
    dst_core: Core
    route: Route
    deps: tuple[int, ...] = ()


@dataclass(frozen=True)
class Wait:
    """Wait for the :class:`Signal` with the same ``tag``: completes when its ``deps``
    completed and the signal has arrived. Uses no unit.

    Attributes:
        tag: the matching Signal's tag.
        src_core: the signalling core.
        deps: as for :class:`Compute`.
    """

    tag: int
    src_core: Core
    deps: tuple[int, ...] = ()


Instruction = Union[Compute, DmaLoad, DmaStore, Copy, Send, Recv, Signal, Wait, DmaCopy]

#: Instruction classes by their name in reports and in the ``.cfx`` opcode table.
INSTRUCTION_TYPES: dict[str, type] = {"compute": Compute, "dma_load": DmaLoad, "dma_store": DmaStore,
                                      "copy": Copy, "send": Send, "recv": Recv, "signal": Signal,
                                      "wait": Wait, "dma_copy": DmaCopy}


def instruction_kind(ins: Instruction) -> str:
    """The name of an instruction's class in :data:`INSTRUCTION_TYPES`."""
    for name, cls in INSTRUCTION_TYPES.items():
        if type(ins) is cls:
            return name
    raise TypeError(f"not an instruction: {ins!r}")


def engine(ins: Instruction) -> str | None:
    """The engine an instruction occupies (None for Send and Recv)."""
    return getattr(ins, "unit", None)
