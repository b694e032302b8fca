"""Step 3 of lowering, *Plan SRAM*: per core, the events in program order and the buffers.

Events (proto-instructions) per core, sorted by ``(position, stage, sequence)`` where the
position is a task's place in one global topological order:

* before task ``t``: the transfers that assemble each input that is not already one box
  of a tensor in this core's SRAM (a DMA load from DRAM, a copy from a local tensor or a
  resident weight); a load of a graph input (in DRAM from the start, nothing to wait for)
  is issued earlier, first thing at the core's previous task that loads a graph input,
  when that task is at most ``PREFETCH_WINDOW`` tasks of the core back: double buffering,
  so that the core's one DMA engine streams the input while the previous piece computes
  and its copies run (without it a core reading an input in pieces ran load, compute,
  copy, load in turn: 40.9 of the int8 MobileNetV3's 70.8 us); the window keeps the
  buffer's extra lifetime short (unbounded, the int8 Inception v1 spilled 5 buffers
  instead of 2 and ran 23% slower);
* ``t``'s compute, then the sends of its outputs to the cores that read them and the DMA
  stores of graph outputs;
* the pieces of a graph output (or of a tensor assembled in DRAM) that are already in
  DRAM (boxes of graph inputs or of other assembled tensors: a Slice or Concat that moves
  data without computing) are *DRAM copies* from region to region, issued by the I/O
  core: no SRAM holds them, so data movement bigger than a core still lowers;
* a receive sits before the task that reads it, and the sending core keeps the sent
  buffer until that position (a *hold* event, no instruction), so that no wait points at
  later work (the executable's deadlock argument);
* on a board of several chips (``chip_of``), a box that crosses chips is sent once per
  destination chip: its first reader there (in position order) receives it from the
  producer and *relays* it, sending it on after its own task to every later reader on
  its chip, and holds it until their positions as a producer would. A chip-to-chip link
  carries a quarter of an on-chip link's bytes per cycle, and XY routing takes every send
  from one core into another chip through the one link of the sender's row (or column):
  the int8 ResNet-50 on ``npu-array`` sent 886 boxes across chips, 394 of them again to a
  chip that had them (1.48 of 3.23 MB), one of them to a dozen cores, spanning 67.7 us of
  the critical path; relayed, it runs 342.3 us instead of 408.7.

Buffers: one resident buffer per (core, constant) from address 0; one per task output;
one per assembled input (shared by the tasks of a core that read the same pieces). An
activation buffer lives from its first to its last event; offsets come from
:func:`~corefold.backend.alloc.allocate` (lowest free address among the buffers whose lifetimes
overlap, :mod:`.alloc`). When the live bytes exceed the SRAM left by the weights,
:func:`~corefold.backend.spill.spill` stores the live buffer whose next use is farthest
(Belady) to DRAM after its last use before the peak and reloads it before its next use,
until the peak fits.

Cost: O(V + P) to find the prefetch positions (P pieces read), O(E log E) events per core
to sort, O(B^2) for the allocation of B buffers, O(S * E) for S spills.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from corefold.backend.boxes import Piece, Shape, prod
from corefold.backend.executable import Core
from corefold.backend.lgraph import LoweredGraph, Operand

#: Issue a task's loads of graph inputs at the previous input-loading task of its core, at
#: most PREFETCH_WINDOW of its tasks back (module docstring: double buffering).
PREFETCH_INPUTS = True
PREFETCH_WINDOW = 2

#: A view of a planned buffer: (buffer id, shape, start, extent).
BView = tuple[int, Shape, Shape, Shape]


@dataclass
class PBuffer:
    """A planned SRAM buffer."""

    id: int
    core: Core
    shape: Shape
    dtype: np.dtype
    kind: str  # "weight" or "activation"
    name: str
    phys: int | None = None
    offset: int = -1
    nbytes: int = field(init=False)

    def __post_init__(self):
        self.nbytes = prod(self.shape) * self.dtype.itemsize


@dataclass(eq=False)  # compared and hashed by identity: spill limits are keyed by the event
class Event:
    """A proto-instruction of one core: ``kind`` is compute, load, store, copy, dram_copy,
    send, recv, signal, wait or hold (no instruction: keeps a sent buffer until the reader's
    position); ``reads`` and ``writes`` are views of planned buffers; DRAM sides name a
    region key (``("input", i)``, ``("output", i)``, ``("spill", ...)``, ``("stage", ...)``)
    and a view of it (a dram_copy writes ``region`` and reads ``src_region``); ``after``
    lists events of the same core it must follow (beyond data)."""

    key: tuple
    kind: str
    task: int | None = None
    reads: list[BView | None] = field(default_factory=list)
    writes: list[BView] = field(default_factory=list)
    region: tuple | None = None
    region_view: tuple[Shape, Shape, Shape] | None = None
    src_region: tuple | None = None
    src_region_view: tuple[Shape, Shape, Shape] | None = None
    peer: Core | None = None
    tag: int | None = None
    after: list = field(default_factory=list)


@dataclass
class CorePlan:
    core: Core
    events: list[Event]
    buffers: list[int]


@dataclass
class Plan:
    """Every core's events and buffers, and the DRAM regions (key -> (shape, dtype, name, core))."""

    cores: dict[Core, CorePlan]
    buffers: list[PBuffer]
    regions: dict[tuple, tuple[Shape, np.dtype, str, Core]]
    tags: int


def _piece_view(p: Piece) -> tuple[Shape, Shape, Shape]:
    return p.src_shape, p.src_start, p.extent


class Planner:
    """Builds the events and buffers of every core (module docstring; ``shared``: :meth:`homes`)."""

    def __init__(self, lg: LoweredGraph, core_of_task: list[Core], position: list[int], io_core: Core,
                 threshold: int, sram: int | None = None, shared: bool = False,
                 chip_of: Callable[[int, int], tuple[int, int]] | None = None):
        self.threshold, self.shared, self.shared_pieces = threshold, shared, 0
        # a core's chip (``Target.chip_of``) when pieces crossing chips are relayed (module docstring)
        self.chip_of = chip_of
        self.relays: dict[tuple, tuple[Core, BView, int]] = {}
        self.sram = sram if sram is not None else threshold
        self.lg = lg
        self.core_of = core_of_task
        self.pos = position
        self.io_core = io_core
        self.buffers: list[PBuffer] = []
        self.events: dict[Core, list[Event]] = {}
        self.home: dict[int, BView] = {}  # op output -> its view in its core's SRAM
        self.weight_buf: dict[tuple[Core, int], int] = {}
        self.assembled: dict[tuple, int] = {}
        self.regions: dict[tuple, tuple[Shape, np.dtype, str, Core]] = {}
        self.tags = 0
        self.seq = 0
        self.writers: dict[tuple, dict[Core, list[Event]]] = {}
        self.waits: dict[tuple, Event] = {}

    def buffer(self, core: Core, shape: Shape, dtype: np.dtype, kind: str, name: str, phys: int | None = None) -> int:
        b = PBuffer(len(self.buffers), core, tuple(shape), np.dtype(dtype), kind, name, phys)
        self.buffers.append(b)
        return b.id

    def add(self, core: Core, ev: Event) -> Event:
        self.seq += 1
        ev.key = ev.key + (self.seq,)
        self.events.setdefault(core, []).append(ev)
        return ev

    def weight(self, core: Core, phys: int) -> int:
        key = (core, phys)
        if key not in self.weight_buf:
            ph = self.lg.phys[phys]
            self.weight_buf[key] = self.buffer(core, ph.shape, ph.dtype, "weight", ph.name, phys)
        return self.weight_buf[key]

    def view(self, core: Core, p: Piece) -> BView | None:
        """The view of piece ``p``'s source in ``core``'s SRAM, if it is there already."""
        ph = self.lg.phys[p.phys]
        if ph.kind == "const":
            return (self.weight(core, p.phys), *_piece_view(p))
        if ph.kind != "op" or self.core_of[ph.task] != core:
            return None
        return self.home_view(p)

    def home_view(self, p: Piece) -> BView:
        b, shape, start, extent = self.home[p.phys]
        if tuple(extent) == tuple(shape):  # its own buffer: any reinterpretation
            return (b, *_piece_view(p))
        # a box of another buffer (written in place of a concatenation): same coordinates
        return (b, shape, tuple(a + s for a, s in zip(start, p.src_start, strict=True)), p.extent)

    def direct(self, core: Core, o: Operand) -> BView | None:
        whole = o.whole_piece()
        return self.view(core, whole) if whole is not None else None

    def operand(self, core: Core, at: int, o: Operand, into: BView | None = None) -> BView:
        """The view a task on ``core`` at position ``at`` reads ``o`` from, with the events
        that assemble it (into ``into`` when given: a gather)."""
        if into is None:
            d = self.direct(core, o)
            if d is not None:
                return d
            key = (core, o.shape, o.pieces)
            if key not in self.assembled:
                self.assembled[key] = self.buffer(core, o.shape, o.dtype, "activation", self._name(o))
            b = self.assembled[key]
            if key in self.done:
                return (b, o.shape, (0,) * len(o.shape), o.shape)
            self.done.add(key)
        else:
            b = into[0]
        for p in o.pieces:
            dst = (b, o.shape, p.dst_start, p.extent)
            ph = self.lg.phys[p.phys]
            src_local = self.view(core, p)
            if src_local is not None:
                if src_local != dst:  # else computed in place
                    self.add(core, Event((at, 0), "copy", reads=[src_local], writes=[dst]))
            elif ph.kind == "input":
                self.region(("input", p.phys), ph.shape, ph.dtype, ph.name, core)
                # a graph input is in DRAM from the start: prefetched (module docstring)
                ahead = (at, 0)
                if PREFETCH_INPUTS and (core, at) in self.prefetch_at:
                    ahead = (self.prefetch_at[(core, at)], -1)
                self.add(core, Event(ahead, "load", writes=[dst], region=("input", p.phys),
                                     region_view=_piece_view(p)))
            elif ph.kind == "staged":
                waits = [self.wait_for(w, core, p.phys, (at, 0))
                         for w in self.write_region(("staged", p.phys), ph.source, ph.name)]
                self.add(core, Event((at, 0), "load", writes=[dst], region=("staged", p.phys),
                                     region_view=_piece_view(p), after=waits))
            else:
                src_core, src, send_at = self.core_of[ph.task], self.home_view(p), self.pos[ph.task]
                if self.chip_of is not None:
                    src_core, src, send_at = self._relayed(core, at, p, dst, (src_core, src, send_at))
                tag = self.tags
                self.tags += 1
                self.add(src_core, Event((send_at, 2), "send", reads=[src], peer=core, tag=tag))
                # NOTE: the sender keeps the data's buffer until the receiver's position
                # (a "hold", no instruction): then no wait points at later work (deadlock-free)
                self.add(src_core, Event((at, 5), "hold", reads=[src], tag=tag))
                self.add(core, Event((at, 0), "recv", writes=[dst], peer=src_core, tag=tag))
        return (b, o.shape, (0,) * len(o.shape), o.shape)

    def _relayed(self, core: Core, at: int, p: Piece, dst: BView,
                 source: tuple[Core, BView, int]) -> tuple[Core, BView, int]:
        """Where ``core`` receives piece ``p`` from: ``source`` (the producer's core, view
        and position), or, when the producer is on another chip and a core of ``core``'s
        chip received the same box earlier, that core (its view, its position): the box
        then crosses the chips' links once per chip, not once per reader (module
        docstring). Tasks come in position order, so the first receiver is the earliest.
        O(1)."""
        here = self.chip_of(*core)
        if self.chip_of(*source[0]) == here:
            return source
        key = (p.phys, p.src_shape, p.src_start, p.extent, here)
        first = self.relays.setdefault(key, (core, dst, at))
        return source if first[0] == core else first

    def write_region(self, key: tuple, o: Operand, name: str) -> list[Core]:
        """Fill DRAM region ``key`` with ``o`` (once per region): a piece in a core's SRAM
        (a task output, a weight) is stored by that core; a piece already in DRAM (a box of
        a graph input or of another assembled tensor) is a DRAM copy issued by the I/O core,
        after the writers of its source signalled. Returns the cores that write it."""
        if key in self.writers:
            return list(self.writers[key])
        lg = self.lg
        self.region(key, o.shape, o.dtype, name, self.io_core)
        stores: dict[Core, list[Event]] = {}
        for p in o.pieces:
            ph = lg.phys[p.phys]
            dst_view = (o.shape, p.dst_start, p.extent)
            if ph.kind in ("input", "staged"):
                core = self.io_core
                ev = self._dram_copy(core, p, key, dst_view)
                stores.setdefault(core, []).append(ev)
                continue
            if ph.kind == "op":
                core, at = self.core_of[ph.task], self.pos[ph.task]
                src = self.home_view(p)
            else:  # a constant: resident before the run starts
                core, at = self.io_core, -1
                src = (self.weight(core, p.phys), *_piece_view(p))
            ev = self.add(core, Event((at, 3), "store", reads=[src], region=key, region_view=dst_view))
            stores.setdefault(core, []).append(ev)
        self.writers[key] = stores
        return list(stores)

    def _dram_copy(self, core: Core, p: Piece, key: tuple, dst_view: tuple[Shape, Shape, Shape]) -> Event:
        """The event copying piece ``p`` (a box of a graph input or of a staged tensor) from
        its DRAM region into region ``key`` on ``core``'s DMA engine.

        A graph input is in DRAM before the run: the copy may go first (position -1). A
        staged tensor is complete once its writers stored their pieces: the copy follows
        its stores on this core and a wait for every other writer's signal, at the position
        of the last of those stores (never later than the tasks that read it)."""
        ph = self.lg.phys[p.phys]
        after: list[Event] = []
        if ph.kind == "input":
            src_key, at = ("input", p.phys), -1
            self.region(src_key, ph.shape, ph.dtype, ph.name, core)
        else:
            src_key = ("staged", p.phys)
            writers = self.write_region(src_key, ph.source, ph.name)
            stores = self.writers[src_key]
            at = max(ev.key[0] for evs in stores.values() for ev in evs)
            for w in writers:
                if w == core:
                    after.extend(stores[w])
                else:
                    after.append(self.wait_for(w, core, p.phys, (at, 3)))
        return self.add(core, Event((at, 3), "dram_copy", region=key, region_view=dst_view, src_region=src_key,
                                    src_region_view=_piece_view(p), after=after))

    def wait_for(self, writer: Core, reader: Core, phys: int, at: tuple[int, int]) -> Event:
        """A wait of ``reader``, at event key ``at`` (position, stage) or earlier, for the
        signal ``writer`` sends once its stores of staged tensor ``phys`` completed. An
        earlier wait for the same signal is reused; otherwise a new signal and wait are
        made (one Wait per Signal)."""
        key = (writer, reader, phys)
        ev = self.waits.get(key)
        if ev is not None and ev.key[:2] <= at:
            return ev
        stores = self.writers[("staged", phys)][writer]
        tag = self.tags
        self.tags += 1
        last = max(e.key for e in stores)
        self.add(writer, Event((last[0], 4), "signal", peer=reader, tag=tag, after=list(stores)))
        ev = self.waits[key] = self.add(reader, Event(at, "wait", peer=writer, tag=tag))
        return ev

    def _name(self, o: Operand) -> str:
        names = dict.fromkeys(self.lg.phys[p.phys].name for p in o.pieces)
        return "+".join(list(names)[:3]) + ("+..." if len(names) > 3 else "")

    def region(self, key: tuple, shape: Shape, dtype: np.dtype, name: str, core: Core) -> None:
        self.regions.setdefault(key, (tuple(shape), np.dtype(dtype), name, core))

    def homes(self) -> None:
        """A buffer for every task output, or a box of the buffer where the next task of its
        core assembles an operand containing it whole (in place, no copy): a concatenation,
        or a band of rows with halo rows from other cores. Only a piece read by that
        assembly alone, unless ``shared`` (counted in ``shared_pieces``): its other readers
        read the box (sends hold the bigger buffer, a local reader needs all of it in SRAM),
        which saves a copy and a buffer, or costs SRAM where the piece is a small part."""
        lg = self.lg
        shapes: dict[int, set] = {}
        readers: dict[int, int] = {}
        operands = [o for t in lg.tasks for o in t.inputs if o is not None] + [o for _, o in lg.outputs]
        operands += [ph.source for ph in lg.phys if ph.source is not None]
        for o in operands:
            for p in o.pieces:
                shapes.setdefault(p.phys, set()).add(p.src_shape)
            for ph in {p.phys for p in o.pieces}:
                readers[ph] = readers.get(ph, 0) + 1
        on_core: dict[Core, list[int]] = {}
        consts: dict[Core, set[int]] = {}
        for t in lg.tasks:
            on_core.setdefault(self.core_of[t.id], []).append(self.pos[t.id])
            consts.setdefault(self.core_of[t.id], set()).update(lg.consts_of(t))
        room = {c: min(self.threshold, self.sram - sum(lg.phys[k].nbytes for k in ks)) for c, ks in consts.items()}
        gathered = {t.outputs[0] for t in lg.tasks if t.is_gather}
        for t in sorted(lg.tasks, key=lambda t: self.pos[t.id]):
            if t.is_gather:
                continue
            core = self.core_of[t.id]
            for o in t.inputs:
                if o is None or len(o.pieces) < 2:
                    continue
                key = (core, o.shape, o.pieces)
                if key in self.assembled:
                    continue
                b = self.assembled[key] = self.buffer(core, o.shape, o.dtype, "activation", self._name(o))
                for p in o.pieces:
                    ph = lg.phys[p.phys]
                    # NOTE: in place only for a piece computed right before the assembly, and
                    # (unless shared) read by it alone: then it costs no memory
                    if (ph.kind == "op" and p.phys not in self.home and p.phys not in gathered
                            and self.core_of[ph.task] == core
                            and (self.shared or readers[p.phys] == 1)
                            and not any(self.pos[ph.task] < q < self.pos[t.id] for q in on_core[core])
                            and tuple(p.extent) == ph.shape and shapes[p.phys] == {ph.shape}
                            and lg.working_bytes(lg.tasks[ph.task]) - ph.nbytes + o.nbytes <= room[core]):
                        self.home[p.phys] = (b, o.shape, p.dst_start, p.extent)
                        self.shared_pieces += readers[p.phys] > 1
        for t in lg.tasks:
            for ph in t.outputs:
                if ph not in self.home:
                    p = lg.phys[ph]
                    b = self.buffer(self.core_of[t.id], p.shape, p.dtype, "activation", p.name, ph)
                    self.home[ph] = (b, p.shape, (0,) * len(p.shape), p.shape)

    def run(self) -> Plan:
        lg = self.lg
        self.done: set = set()
        self.homes()
        # per task reading a graph input: the position of the previous such task of its core
        # (at most PREFETCH_WINDOW tasks of the core before it, or none)
        self.prefetch_at: dict[tuple[Core, int], int] = {}
        last: dict[Core, tuple[int, int]] = {}
        count: dict[Core, int] = {}
        ordered = sorted(lg.tasks, key=lambda t: self.pos[t.id])
        for t in ordered:
            core = self.core_of[t.id]
            count[core] = count.get(core, 0) + 1
            if not any(lg.phys[p.phys].kind == "input" for o in t.inputs if o is not None for p in o.pieces):
                continue
            if core in last and count[core] - last[core][1] <= PREFETCH_WINDOW:
                self.prefetch_at[(core, self.pos[t.id])] = last[core][0]
            last[core] = (self.pos[t.id], count[core])
        for t in ordered:
            core = self.core_of[t.id]
            at = self.pos[t.id]
            if t.is_gather:
                self.operand(core, at, t.inputs[0], into=self.home[t.outputs[0]])
                continue
            reads = [self.operand(core, at, o) if o is not None else None for o in t.inputs]
            writes = [self.home[ph] for ph in t.outputs]
            self.add(core, Event((at, 1), "compute", task=t.id, reads=reads, writes=writes))
            for c in t.control:
                src_core = self.core_of[c]
                if src_core != core:
                    tag = self.tags
                    self.tags += 1
                    sig = self.add(src_core, Event((self.pos[c], 2), "signal", peer=core, tag=tag))
                    self.add(core, Event((at, 0), "wait", peer=src_core, tag=tag))
                    del sig
        for i, (name, o) in enumerate(lg.outputs):
            self.write_region(("output", i), o, name)
        cores: dict[Core, CorePlan] = {}
        ids: dict[Core, set[int]] = {}
        for b in self.buffers:
            ids.setdefault(b.core, set()).add(b.id)
        for core in sorted(self.events, key=lambda c: (c[1], c[0])):
            evs = sorted(self.events[core], key=lambda e: e.key)
            cores[core] = CorePlan(core, evs, sorted(ids.get(core, ())))
        return Plan(cores, self.buffers, self.regions, self.tags)
