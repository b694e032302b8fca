"""Steps 4 to 6 of lowering, *Route*, *Emit* and *Pack*: the executable from the plan.

* **Memory.** Per core, resident weights take addresses from 0; the activation buffers are
  spilled (:func:`~corefold.backend.spill.spill`) and allocated above them
  (:func:`~corefold.backend.alloc.allocate`), spilling more while the allocation overflows.
  DRAM regions are striped over every channel of the chip nearest the core that uses
  them (``LowerSettings.dram_interleave``, the default), or each goes to one channel so
  that the channels' traffic stays balanced, near the cores that use it
  (:func:`assign_channels`).
* **Route.** Every send follows the XY route between its cores, every DMA transfer the XY
  route between the core and its region's channel router, every DRAM copy the XY route
  between its two regions' channel routers (none is written for an interleaved region:
  each channel's share follows its own XY route) (:func:`~corefold.backend.executable.xy_route`).
* **Emit.** Each event becomes an instruction. ``deps`` are: for a read, the instructions
  that wrote the buffer; for a write, every instruction that accessed a buffer of the same
  core whose addresses overlap and whose lifetime ended before (the buffer is reused).
  A dependence implied by another one (through ``deps`` and in-order engines, on the
  core) is dropped: a transitive reduction over bitsets of ancestors, so an instruction
  lists what it waits for directly, not every reader of a reused buffer. Compute goes to
  the unit of its kind that frees up first under the tasks' durations; so does a copy
  between two buffers of the core, on the engine :meth:`~corefold.target.Target.copy_unit`
  names for its elements (a vector engine for float32 on the ``npu`` preset, four times
  the DMA engine's bytes a cycle), else the DMA engines in turn, as loads and stores.
* **Pack.** Each weight buffer gets its constant's array (float32 as in the model, or the
  integers of a fused integer operator with their :class:`QuantTensor`).

Cost: O(B^2) per core for the buffer overlaps, O(I * deps * I / 64) for the instructions
(the ancestor bitsets).
"""

from __future__ import annotations

import numpy as np

from corefold.backend.alloc import allocate, overflow_limits
from corefold.backend.executable import (
    Buffer,
    Compute,
    Copy,
    Core,
    CoreProgram,
    DmaCopy,
    DmaLoad,
    DmaStore,
    DramRegion,
    Recv,
    Send,
    Signal,
    TensorIO,
    View,
    Wait,
    Weight,
    compute_stages,
    dtype_name,
    xy_route,
)
from corefold.backend.lgraph import LoweredGraph
from corefold.backend.plan import Plan
from corefold.backend.spill import aligned, lifetimes, spill
from corefold.errors import CompileError
from corefold.target import Target


def lay_out_memory(plan: Plan, target: Target) -> dict[Core, int]:
    """Offsets for every buffer of every core; returns the weight bytes per core.

    Raises:
        CompileError: SRAM of a core, when its weights and one step's buffers do not fit.
    """
    cap = target.sram_bytes
    weights: dict[Core, int] = {}
    for core, cp in plan.cores.items():
        top = 0
        for b in cp.buffers:
            buf = plan.buffers[b]
            if buf.kind == "weight":
                buf.offset = top
                top += aligned(buf.nbytes)
        weights[core] = top
        if top > cap:
            raise CompileError("SRAM", f"core ({core[0]},{core[1]})", top, cap, "resident weights")
        avail = cap - top
        limits: dict = {}  # event -> bytes allowed there
        for _ in range(64):
            spill(plan, cp, avail, top, limits=limits)
            end = allocate(plan, cp, top, cap)
            if end <= cap:
                break
            overflow_limits(plan, cp, cap, avail, limits)
        else:
            raise CompileError("SRAM", f"core ({core[0]},{core[1]})", end, cap, "fragmented buffers")
    return weights


#: Rows of the buffer-pair matrix :func:`_reuse_deps` compares at once (bounds its memory).
REUSE_ROWS = 512


def _reuse_deps(plan: Plan, core_buffers: list[int], life: dict[int, tuple[int, int]]) -> dict[int, list[int]]:
    """Activation buffer -> earlier buffers of the core overlapping its addresses (dead
    before it is first used), in order of first use. O(B^2) comparisons, as NumPy blocks
    of :data:`REUSE_ROWS` rows (a buffer dead before another's first use comes before it in
    that order, so each row needs only the columns before it), plus O(pairs found)."""
    acts = sorted((b for b in core_buffers if b in life), key=lambda b: life[b][0])
    out: dict[int, list[int]] = {b: [] for b in acts}
    if not acts:
        return out
    first = np.array([life[b][0] for b in acts], np.int64)
    last = np.array([life[b][1] for b in acts], np.int64)
    lo = np.array([plan.buffers[b].offset for b in acts], np.int64)
    hi = lo + np.array([plan.buffers[b].nbytes for b in acts], np.int64)
    ids = np.array(acts, np.int64)
    for s in range(0, len(acts), REUSE_ROWS):
        e = min(len(acts), s + REUSE_ROWS)
        rows, cols = np.nonzero((last[None, :e] < first[s:e, None]) & (lo[None, :e] < hi[s:e, None])
                                & (lo[s:e, None] < hi[None, :e]))
        if not rows.size:
            continue
        cut = np.flatnonzero(np.diff(rows)) + 1  # rows come sorted, each row's columns in order
        for r, cs in zip(rows[np.r_[0, cut]].tolist(), np.split(ids[cols], cut), strict=True):
            out[acts[s + r]] = cs.tolist()
    return out


def _nearest_channel(target: Target, core: Core) -> int:
    chans = target.dram_channels
    return min(range(len(chans)), key=lambda c: (abs(chans[c][0] - core[0]) + abs(chans[c][1] - core[1]), c))


def region_traffic(plan: Plan) -> dict[tuple, dict[Core, int]]:
    """Bytes each core moves to or from each DRAM region (loads, stores, and the DRAM
    copies it drives, counted on both their regions). O(events)."""
    out: dict[tuple, dict[Core, int]] = {}
    for core, cp in plan.cores.items():
        for ev in cp.events:
            if ev.kind not in ("load", "store", "dram_copy"):
                continue
            keys = [ev.region] + ([ev.src_region] if ev.kind == "dram_copy" else [])
            views = [ev.region_view] + ([ev.src_region_view] if ev.kind == "dram_copy" else [])
            for key, v in zip(keys, views, strict=True):
                n = 1
                for d in v[2]:
                    n *= int(d)
                per = out.setdefault(key, {})
                per[core] = per.get(core, 0) + n * plan.regions[key][1].itemsize
    return out


#: Weight of distance in :func:`assign_channels`: moving a region's bytes one hop further
#: from the cores that use it costs this fraction of holding them on a busier channel.
HOP_WEIGHT = 0.05


def assign_channels(plan: Plan, target: Target) -> dict[tuple, int]:
    """The DRAM channel of every region: the channels share the DRAM bandwidth, so a
    region goes where the channels' traffic stays balanced, near the cores that use it.

    Greedy, largest traffic first (LPT): each region goes to the channel minimising
    ``load[c] + bytes + HOP_WEIGHT * sum over using cores of bytes(core) * hops(core, c)``,
    where ``load`` is the traffic already assigned to that channel. With one channel every
    region goes to it; a region no core moves (an input nobody reads) goes to the channel
    nearest its core. O(R log R + R * C * users).
    """
    chans = target.dram_channels
    traffic = region_traffic(plan)
    load = [0.0] * len(chans)
    out: dict[tuple, int] = {}

    def hops(core: Core, c: int) -> int:
        return abs(chans[c][0] - core[0]) + abs(chans[c][1] - core[1])

    order = sorted(plan.regions, key=lambda k: -sum(traffic.get(k, {}).values()))
    for key in order:
        users = traffic.get(key)
        if not users:
            out[key] = _nearest_channel(target, plan.regions[key][3])
            continue
        total = sum(users.values())
        best = min(range(len(chans)), key=lambda c: (
            load[c] + total + HOP_WEIGHT * sum(b * hops(core, c) for core, b in users.items()), c))
        load[best] += total
        out[key] = best
    return out


def emit(plan: Plan, lg: LoweredGraph, target: Target, task_ops: list[int | None], durations: list[float],
         interleave: bool = True, vector_copies: bool = True):
    """Programs, buffers, weights, regions and I/O descriptors of the executable.

    ``task_ops[t]`` is the op-table index of task ``t`` (None for a gather). ``interleave``:
    every region is striped over all DRAM channels of the chip nearest the core that uses
    it (:attr:`DramRegion.interleave`); otherwise each lies on one channel
    (:func:`assign_channels`).
    """
    # DRAM regions
    region_id: dict[tuple, int] = {}
    regions: list[DramRegion] = []
    bump: dict[int, int] = {}
    per_chip = len(target.dram_attach) if interleave else 1
    channel_of = {} if per_chip > 1 else assign_channels(plan, target)

    def channel(key, core: Core) -> int:
        if per_chip > 1:
            return _nearest_channel(target, core) // per_chip * per_chip
        return channel_of[key]

    for key, (shape, dtype, name, core) in plan.regions.items():
        ch = channel(key, core)
        nbytes = int(_aligned_size(shape, dtype))
        off = bump.get(ch, 0)
        bump[ch] = off + aligned(max(nbytes, 1))
        kind = {"input": "input", "output": "output", "spill": "spill", "stage": "staging",
                "staged": "staging"}[key[0]]
        region_id[key] = len(regions)
        regions.append(DramRegion(len(regions), ch, off, nbytes, tuple(shape), dtype_name(dtype), kind, name, per_chip))
    for ph in lg.inputs:  # an input nobody reads still has its region
        key = ("input", ph)
        if key not in region_id:
            p = lg.phys[ph]
            ch = _nearest_channel(target, target.host_router) // per_chip * per_chip
            off = bump.get(ch, 0)
            bump[ch] = off + aligned(max(p.nbytes, 1))
            region_id[key] = len(regions)
            regions.append(DramRegion(len(regions), ch, off, p.nbytes, p.shape, p.dtype.name, "input", p.name,
                                      per_chip))

    buffers = [Buffer(b.id, b.core, b.offset, b.nbytes, b.shape, dtype_name(b.dtype), b.kind, b.name)
               for b in plan.buffers]
    weights = {}
    for b in plan.buffers:
        if b.kind == "weight":
            ph = lg.phys[b.phys]
            weights[b.id] = Weight(b.id, ph.const, ph.quant)

    recv_view = {ev.tag: ev.writes[0] for cp in plan.cores.values() for ev in cp.events if ev.kind == "recv"}
    programs = []
    for core, cp in plan.cores.items():
        programs.append(_emit_core(plan, cp, core, target, region_id, regions, task_ops, durations, lg, recv_view,
                                   vector_copies))

    inputs = [TensorIO(lg.phys[ph].name, lg.phys[ph].shape, lg.phys[ph].dtype.name, region_id[("input", ph)])
              for ph in lg.inputs]
    outputs = [TensorIO(name, o.shape, o.dtype.name, region_id[("output", i)]) for i, (name, o) in enumerate(lg.outputs)]
    return programs, buffers, weights, regions, inputs, outputs


def _aligned_size(shape, dtype) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n * dtype.itemsize


def _emit_core(plan: Plan, cp, core: Core, target: Target, region_id: dict, regions: list[DramRegion],
               task_ops: list[int | None], durations: list[float], lg: LoweredGraph,
               recv_view: dict[int, tuple], vector_copies: bool = True) -> CoreProgram:
    life = lifetimes(plan, cp)
    reuse = _reuse_deps(plan, cp.buffers, life)
    writers: dict[int, list[int]] = {}
    accessors: dict[int, list[int]] = {}
    unit_free = {k: [0.0] * u.count for k, u in target.units.items()}
    dma_next = 0
    out: list = []

    def view(v) -> View:
        return View(v[0], tuple(v[1]), tuple(v[2]), tuple(v[3]))

    # ancestors[i]: bitset of the instructions that happen before instruction i on this core
    # (its deps, the previous instruction of its engine, and theirs, transitively)
    ancestors: list[int] = []
    last_on: dict[str, int] = {}

    def prune(deps: set[int], unit: str | None) -> tuple[tuple[int, ...], int]:
        """The deps not implied by another dep or by the engine's previous instruction
        (a transitive reduction), and the new instruction's ancestor bitset. O(d I / 64)."""
        covered = 0
        prev = last_on.get(unit) if unit is not None else None
        if prev is not None:
            covered = ancestors[prev] | 1 << prev
        if not deps:
            return (), covered
        keep = []
        for d in sorted(deps, reverse=True):  # an ancestor of d has a smaller index than d
            if not covered >> d & 1:
                keep.append(d)
                covered |= ancestors[d] | 1 << d
        keep.reverse()
        return tuple(keep), covered

    index_of: dict[int, int] = {}
    for ev in cp.events:
        if ev.kind == "hold":
            continue
        idx = len(out)
        index_of[id(ev)] = idx
        deps: set[int] = {index_of[id(a)] for a in ev.after}
        for v in ev.reads:
            if v is not None:
                deps.update(writers.get(v[0], ()))
        for v in ev.writes:
            for a in reuse.get(v[0], ()):
                deps.update(accessors.get(a, ()))
        deps.discard(idx)
        unit = None
        if ev.kind == "compute":
            t = lg.tasks[ev.task]
            frees = unit_free[t.unit]
            u = frees.index(min(frees))
            frees[u] += durations[ev.task]
            unit = f"{t.unit}{u}"
            for name, seconds in (compute_stages(t.op, unit, target)[1:] if t.op is not None else ()):
                # a streamed epilogue holds this vector engine too
                k = int(name[len("vector"):])
                unit_free["vector"][k] = max(unit_free["vector"][k], frees[u] - durations[ev.task]) + seconds
        elif ev.kind == "copy" and (kind := target.copy_unit((dt := plan.buffers[ev.reads[0][0]].dtype).itemsize,
                                                                     vector_copies)) != "dma":
            # the engine that moves these elements fastest (the clustering timed it there)
            frees = unit_free[kind]
            u = frees.index(min(frees))
            frees[u] += target.copy_seconds(kind, _aligned_size(ev.reads[0][3], dt), dt.itemsize)
            unit = f"{kind}{u}"
        elif ev.kind in ("load", "store", "copy", "dram_copy"):
            unit = f"dma{dma_next % target.units['dma'].count}"
            dma_next += 1
        dtuple, ancestry = prune(deps, unit)
        if ev.kind == "compute":
            ins = Compute(task_ops[ev.task], unit, tuple(view(v) if v is not None else None for v in ev.reads),
                          tuple(view(v) for v in ev.writes), dtuple)
        elif ev.kind in ("load", "store", "copy", "dram_copy"):
            if ev.kind == "copy":
                ins = Copy(unit, view(ev.reads[0]), view(ev.writes[0]), dtuple)
            elif ev.kind == "dram_copy":
                src, dst = region_id[ev.src_region], region_id[ev.region]
                route = () if regions[src].interleave > 1 or regions[dst].interleave > 1 else xy_route(
                    target.dram_channels[regions[src].channel], target.dram_channels[regions[dst].channel])
                ins = DmaCopy(unit, View(src, *[tuple(x) for x in ev.src_region_view]),
                              View(dst, *[tuple(x) for x in ev.region_view]), route, dtuple)
            else:
                rid = region_id[ev.region]
                router = target.dram_channels[regions[rid].channel]
                rview = View(rid, *[tuple(x) for x in ev.region_view])
                striped = regions[rid].interleave > 1
                if ev.kind == "load":
                    ins = DmaLoad(unit, rview, view(ev.writes[0]), () if striped else xy_route(router, core), dtuple)
                else:
                    ins = DmaStore(unit, view(ev.reads[0]), rview, () if striped else xy_route(core, router), dtuple)
        elif ev.kind == "send":
            ins = Send(ev.tag, view(ev.reads[0]), ev.peer, view(recv_view[ev.tag]), xy_route(core, ev.peer), dtuple)
        elif ev.kind == "recv":
            ins = Recv(ev.tag, ev.peer, view(ev.writes[0]), dtuple)
        elif ev.kind == "signal":
            ins = Signal(ev.tag, ev.peer, xy_route(core, ev.peer), dtuple)
        else:
            ins = Wait(ev.tag, ev.peer, dtuple)
        out.append(ins)
        ancestors.append(ancestry)
        if unit is not None:
            last_on[unit] = idx
        for v in ev.reads:
            if v is not None:
                accessors.setdefault(v[0], []).append(idx)
        for v in ev.writes:
            accessors.setdefault(v[0], []).append(idx)
            writers.setdefault(v[0], []).append(idx)
    return CoreProgram(core, out)
