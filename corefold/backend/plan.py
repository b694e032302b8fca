"""Step 3 of lowering, *Plan SRAM*: per core, the events in program order and the buffers.

Events (proto-instructions) per core, sorted by ``(position, stage, sequence)`` where the
position is a task's place in one global topological order:

* before task ``t``: the transfers that assemble each input that is not already one box
  of a tensor in this core's SRAM (a DMA load from DRAM, a copy from a local tensor or a
  resident weight);
* ``t``'s compute, then the sends of its outputs to the cores that read them and the DMA
  stores of graph outputs;
* a receive sits at the position of the *producer* of its data, so that every wait in
  the programs points at earlier work (the executable's deadlock argument).

Buffers: one resident buffer per (core, constant) from address 0; one per task output;
one per assembled input (shared by the tasks of a core that read the same pieces). An
activation buffer lives from its first to its last event; offsets come from
:func:`allocate` (largest first, lowest free address among the buffers whose lifetimes
overlap). When the live bytes exceed the SRAM left by the weights, :func:`spill` stores
the live buffer whose next use is farthest (Belady) to DRAM after its last use before the
peak and reloads it before its next use, until the peak fits.

Cost: O(E log E) events per core to sort, O(B^2) for the allocation of B buffers, O(S * E)
for S spills.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from corefold.backend.boxes import Piece, Shape, prod
from corefold.backend.executable import ALIGNMENT, Core
from corefold.backend.lgraph import LoweredGraph, Operand
from corefold.errors import CompileError

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

    @property
    def nbytes(self) -> int:
        return prod(self.shape) * self.dtype.itemsize


@dataclass
class Event:
    """A proto-instruction of one core: ``kind`` is compute, load, store, copy, send, recv,
    signal or wait; ``reads`` and ``writes`` are views of planned buffers; DRAM sides name a
    region key (``("input", i)``, ``("output", i)``, ``("spill", n)``) and a view of it."""

    key: tuple
    kind: str
    task: int | None = None
    reads: list[BView | None] = field(default_factory=list)
    writes: list[BView] = field(default_factory=list)
    region: tuple | None = None
    region_view: tuple[Shape, Shape, Shape] | None = None
    peer: Core | None = None
    tag: int | None = None


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
    """Builds the events and buffers of every core (module docstring)."""

    def __init__(self, lg: LoweredGraph, core_of_task: list[Core], position: list[int], io_core: Core):
        self.lg = lg
        self.core_of = core_of_task
        self.pos = position
        self.io_core = io_core
        self.buffers: list[PBuffer] = []
        self.events: dict[Core, list[Event]] = {}
        self.phys_buf: dict[int, int] = {}
        self.weight_buf: dict[tuple[Core, int], int] = {}
        self.assembled: dict[tuple, int] = {}
        self.regions: dict[tuple, tuple[Shape, np.dtype, str, Core]] = {}
        self.tags = 0
        self.seq = 0

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

    def local(self, core: Core, phys: int) -> int | None:
        """The buffer holding ``phys`` in ``core``'s SRAM without any transfer, if any."""
        ph = self.lg.phys[phys]
        if ph.kind == "const":
            return self.weight(core, phys)
        if ph.kind == "op" and self.core_of[ph.task] == core:
            return self.phys_buf[phys]
        return None

    def operand(self, core: Core, at: int, o: Operand, into: int | None = None) -> BView:
        """The view a task on ``core`` at position ``at`` reads ``o`` from, with the events
        that assemble it (into buffer ``into`` when given: a gather)."""
        whole = o.whole_piece()
        if into is None and whole is not None:
            b = self.local(core, whole.phys)
            if b is not None:
                return (b, *_piece_view(whole))
        key = (core, o.shape, o.pieces)
        if into is None and key in self.assembled:
            b = self.assembled[key]
            return (b, o.shape, (0,) * len(o.shape), o.shape)
        if into is None:
            b = self.buffer(core, o.shape, o.dtype, "activation", self._name(o))
            self.assembled[key] = b
        else:
            b = into
        for p in o.pieces:
            dst = (b, o.shape, p.dst_start, p.extent)
            ph = self.lg.phys[p.phys]
            src_local = self.local(core, p.phys)
            if src_local is not None:
                self.add(core, Event((at, 0), "copy", reads=[(src_local, *_piece_view(p))], writes=[dst]))
            elif ph.kind == "input":
                self.region(("input", p.phys), ph.shape, ph.dtype, ph.name, core)
                self.add(core, Event((at, 0), "load", writes=[dst], region=("input", p.phys),
                                     region_view=_piece_view(p)))
            else:
                src_core = self.core_of[ph.task]
                tag = self.tags
                self.tags += 1
                src = (self.phys_buf[p.phys], *_piece_view(p))
                self.add(src_core, Event((self.pos[ph.task], 2), "send", reads=[src], peer=core, tag=tag))
                self.add(core, Event((self.pos[ph.task], 4), "recv", writes=[dst], peer=src_core, tag=tag))
        return (b, o.shape, (0,) * len(o.shape), o.shape)

    def _name(self, o: Operand) -> str:
        names = dict.fromkeys(self.lg.phys[p.phys].name for p in o.pieces)
        return "+".join(list(names)[:3]) + ("+..." if len(names) > 3 else "")

    def region(self, key: tuple, shape: Shape, dtype: np.dtype, name: str, core: Core) -> None:
        self.regions.setdefault(key, (tuple(shape), np.dtype(dtype), name, core))

    def run(self) -> Plan:
        lg = self.lg
        for t in lg.tasks:
            core = self.core_of[t.id]
            for ph in t.outputs:
                p = lg.phys[ph]
                self.phys_buf[ph] = self.buffer(core, p.shape, p.dtype, "activation", p.name, ph)
        for t in sorted(lg.tasks, key=lambda t: self.pos[t.id]):
            core = self.core_of[t.id]
            at = self.pos[t.id]
            if t.is_gather:
                self.operand(core, at, t.inputs[0], into=self.phys_buf[t.outputs[0]])
                continue
            reads = [self.operand(core, at, o) if o is not None else None for o in t.inputs]
            writes = [(self.phys_buf[ph], lg.phys[ph].shape, (0,) * len(lg.phys[ph].shape), lg.phys[ph].shape)
                      for ph in t.outputs]
            self.add(core, Event((at, 1), "compute", task=t.id, reads=reads, writes=writes))
            for c in t.control:
                src_core = self.core_of[c]
                if src_core != core:
                    tag = self.tags
                    self.tags += 1
                    self.add(src_core, Event((self.pos[c], 2), "signal", peer=core, tag=tag))
                    self.add(core, Event((at, 0), "wait", peer=src_core, tag=tag))
        for i, (name, o) in enumerate(lg.outputs):
            self.region(("output", i), o.shape, o.dtype, name, self.io_core)
            for p in o.pieces:
                ph = lg.phys[p.phys]
                if ph.kind == "op":
                    core, at = self.core_of[ph.task], self.pos[ph.task]
                    src = (self.phys_buf[p.phys], *_piece_view(p))
                else:
                    core, at = self.io_core, len(lg.tasks)
                    if ph.kind == "const":
                        src = (self.weight(core, p.phys), *_piece_view(p))
                    else:
                        tmp = self.buffer(core, p.extent, ph.dtype, "activation", ph.name)
                        self.region(("input", p.phys), ph.shape, ph.dtype, ph.name, core)
                        self.add(core, Event((at, 0), "load", writes=[(tmp, p.extent, (0,) * len(p.extent), p.extent)],
                                             region=("input", p.phys), region_view=_piece_view(p)))
                        src = (tmp, p.extent, (0,) * len(p.extent), p.extent)
                self.add(core, Event((at, 3), "store", reads=[src], region=("output", i),
                                     region_view=(o.shape, p.dst_start, p.extent)))
        cores: dict[Core, CorePlan] = {}
        for core in sorted(self.events, key=lambda c: (c[1], c[0])):
            evs = sorted(self.events[core], key=lambda e: e.key)
            bufs = sorted({b.id for b in self.buffers if b.core == core})
            cores[core] = CorePlan(core, evs, bufs)
        return Plan(cores, self.buffers, self.regions, self.tags)


# -- liveness, spilling and allocation ---------------------------------------------------------------
def _accesses(ev: Event) -> list[int]:
    return [v[0] for v in ev.reads if v is not None] + [v[0] for v in ev.writes]


def lifetimes(plan: Plan, cp: CorePlan) -> dict[int, tuple[int, int]]:
    """Activation buffer -> (first, last) event index on its core."""
    life: dict[int, tuple[int, int]] = {}
    for i, ev in enumerate(cp.events):
        for b in _accesses(ev):
            if plan.buffers[b].kind != "activation":
                continue
            lo, _ = life.get(b, (i, i))
            life[b] = (lo, i)
    return life


def _pressure(plan: Plan, life: dict[int, tuple[int, int]], n: int) -> np.ndarray:
    delta = np.zeros(n + 1, np.int64)
    for b, (lo, hi) in life.items():
        size = _aligned(plan.buffers[b].nbytes)
        delta[lo] += size
        delta[hi + 1] -= size
    return np.cumsum(delta)[:n]


def _aligned(n: int) -> int:
    return -(-n // ALIGNMENT) * ALIGNMENT


def spill(plan: Plan, cp: CorePlan, avail: int, weights: int = 0, max_spills: int = 10000) -> int:
    """Store and reload activation buffers of ``cp`` until its live bytes fit ``avail``
    (module docstring); return how many were spilled.

    Raises:
        CompileError: SRAM, when the buffers one event needs at once exceed ``avail``.
    """
    spills = 0
    while spills < max_spills:
        life = lifetimes(plan, cp)
        if not life:
            return spills
        load = _pressure(plan, life, len(cp.events))
        peak_at = int(np.argmax(load))
        if load[peak_at] <= avail:
            return spills
        ev_uses: dict[int, list[int]] = {}
        for i, ev in enumerate(cp.events):
            for b in _accesses(ev):
                ev_uses.setdefault(b, []).append(i)
        best = None
        for b, (lo, hi) in life.items():
            if not lo < peak_at < hi or peak_at in ev_uses[b]:
                continue
            before = max(i for i in ev_uses[b] if i < peak_at)
            after = min(i for i in ev_uses[b] if i > peak_at)
            score = (after - peak_at, plan.buffers[b].nbytes)
            if best is None or score > best[0]:
                best = (score, b, before, after)
        if best is None:
            raise CompileError("SRAM", f"core ({cp.core[0]},{cp.core[1]})", int(load[peak_at]) + weights,
                               avail + weights, "weights and the buffers one step needs")
        _, b, before, after = best
        _split_lifetime(plan, cp, b, before, after)
        spills += 1
    raise CompileError("SRAM", f"core ({cp.core[0]},{cp.core[1]})", int(load[peak_at]) + weights, avail + weights,
                       f"still over after {max_spills} spills")


def _split_lifetime(plan: Plan, cp: CorePlan, b: int, before: int, after: int) -> None:
    """Store buffer ``b`` after event ``before`` and reload it into a new buffer before
    event ``after``; later events read the new buffer."""
    buf = plan.buffers[b]
    key = ("spill", b, before)
    plan.regions[key] = (buf.shape, buf.dtype, buf.name, cp.core)
    nb = PBuffer(len(plan.buffers), cp.core, buf.shape, buf.dtype, "activation", buf.name, buf.phys)
    plan.buffers.append(nb)
    cp.buffers.append(nb.id)
    zero = (0,) * len(buf.shape)
    store = Event(cp.events[before].key + (0.5,), "store", reads=[(b, buf.shape, zero, buf.shape)], region=key,
                  region_view=(buf.shape, zero, buf.shape))
    load = Event(cp.events[after].key[:-1] + (-0.5,), "load", writes=[(nb.id, buf.shape, zero, buf.shape)],
                 region=key, region_view=(buf.shape, zero, buf.shape))
    for ev in cp.events[after:]:
        ev.reads = [(nb.id, *v[1:]) if v is not None and v[0] == b else v for v in ev.reads]
        ev.writes = [(nb.id, *v[1:]) if v[0] == b else v for v in ev.writes]
    cp.events = cp.events[:before + 1] + [store] + cp.events[before + 1:after] + [load] + cp.events[after:]


def allocate(plan: Plan, cp: CorePlan, base: int, limit: int) -> int:
    """Offsets for the activation buffers of ``cp`` in ``[base, limit)``: largest first, at
    the lowest aligned address free of every buffer whose lifetime overlaps. Returns the
    highest end used (may exceed ``limit``: the caller spills more). O(B^2)."""
    life = lifetimes(plan, cp)
    order = sorted(life, key=lambda b: (-plan.buffers[b].nbytes, life[b][0], b))
    placed: list[tuple[int, int, int, int]] = []  # (lo, hi, offset, end)
    top = base
    for b in order:
        lo, hi = life[b]
        size = _aligned(plan.buffers[b].nbytes)
        busy = sorted((o, e) for (l2, h2, o, e) in placed if not (h2 < lo or hi < l2))
        offset = base
        for o, e in busy:
            if offset + size <= o:
                break
            offset = max(offset, e)
        plan.buffers[b].offset = offset
        placed.append((lo, hi, offset, offset + size))
        top = max(top, offset + size)
    return top
