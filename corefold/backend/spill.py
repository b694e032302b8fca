"""Part of step 3 of lowering, *Plan SRAM*: the buffers' liveness on a core, and the spills
that bring its live bytes under the SRAM the weights leave (the events and buffers come
from :class:`~corefold.backend.plan.Planner`).

:func:`spill` stores the live buffer whose next use is farthest (Belady) to DRAM after its
last use before the peak and reloads it before its next use; a buffer kept for a send (a
hold) is *staged*: stored once, each send becomes a signal and each receiver loads its box
from DRAM. O(S * E) for S spills over E events.
"""

from __future__ import annotations

import numpy as np

from corefold.backend.boxes import Shape, prod
from corefold.backend.executable import ALIGNMENT
from corefold.backend.plan import CorePlan, Event, PBuffer, Plan
from corefold.errors import CompileError


def accesses(ev: Event) -> list[int]:
    """The buffers ``ev`` reads and writes (with repeats). O(operands)."""
    return [v[0] for v in ev.reads if v is not None] + [v[0] for v in ev.writes]


def lifetimes(plan: Plan, cp: CorePlan) -> dict[int, tuple[int, int]]:
    """Activation buffer -> (first, last) event index on its core. O(events x operands)."""
    life: dict[int, tuple[int, int]] = {}
    first: dict[int, int] = {}  # activation buffer -> first use (others never enter it)
    buffers = plan.buffers
    for i, ev in enumerate(cp.events):
        for v in (*ev.reads, *ev.writes):  # accesses(ev), inlined: a core plan has thousands
            if v is None:
                continue
            b = v[0]
            lo = first.get(b)
            if lo is None:
                if buffers[b].kind != "activation":
                    continue
                first[b] = lo = i
            life[b] = (lo, i)
    return life


def aligned(n: int) -> int:
    """``n`` rounded up to :data:`~corefold.backend.executable.ALIGNMENT`."""
    return -(-n // ALIGNMENT) * ALIGNMENT


def pressure(plan: Plan, life: dict[int, tuple[int, int]], n: int) -> np.ndarray:
    """Aligned live bytes at each of the ``n`` events of a core, given ``life`` from
    :func:`lifetimes`. O(B + n)."""
    delta = np.zeros(n + 1, np.int64)
    for b, (lo, hi) in life.items():
        size = aligned(plan.buffers[b].nbytes)
        delta[lo] += size
        delta[hi + 1] -= size
    return np.cumsum(delta)[:n]


def spill(plan: Plan, cp: CorePlan, avail: int, weights: int = 0, max_spills: int = 10000,
          limits: dict[Event, int] | None = None) -> int:
    """Move activation buffers of ``cp`` out of SRAM until its live bytes fit ``avail``;
    return how many moves it took (module docstring).

    At the peak, the live buffer not used there whose next use is farthest goes: a buffer
    kept for a send (a hold) is *staged*: stored to DRAM once, each send becomes a signal
    and each receiving core waits for it and loads its box from DRAM; any other buffer is
    stored after its last use before the peak and reloaded into a new buffer before its
    next use.

    ``limits`` lowers the bytes allowed at some events (keyed by the event), where the
    allocator found no room at ``avail``.

    Raises:
        CompileError: SRAM, when the buffers one event needs at once exceed ``avail``.
    """
    spills = 0
    best_peak, best_total, stalled = None, None, 0
    limits = limits or {}
    while spills < max_spills:
        life = lifetimes(plan, cp)
        if not life:
            return spills
        load = pressure(plan, life, len(cp.events))
        cap = np.array([limits.get(ev, avail) for ev in cp.events], np.int64)
        excess = load - cap
        peak_at = int(np.argmax(excess))
        if excess[peak_at] <= 0:
            return spills
        over = int(excess[peak_at])
        # NOTE: progress is the worst step's excess or the excess summed over the steps: a
        # chain of equal peaks (the light DenseNet-121's float BN buffers, 6848 bytes over at
        # each of its steps) clears one step per spill without lowering the worst
        total = int(excess[excess > 0].sum())
        if best_peak is None or over < best_peak or total < best_total:
            best_peak = over if best_peak is None else min(best_peak, over)
            best_total = total if best_total is None else min(best_total, total)
            stalled = 0
        else:
            stalled += 1
            if stalled > 8:
                raise CompileError("SRAM", f"core ({cp.core[0]},{cp.core[1]})", int(load[peak_at]) + weights,
                                   int(cap[peak_at]) + weights, "weights and the buffers a step needs at once")
        uses: dict[int, list[int]] = {}
        for i, ev in enumerate(cp.events):
            for b in accesses(ev):
                uses.setdefault(b, []).append(i)
        best = None
        at = cp.events[peak_at]
        copied = at.reads[0][0] if at.kind == "copy" and at.writes[0][0] != at.reads[0][0] else None
        for b, (lo, hi) in life.items():
            if b == copied and lo < peak_at:
                # the copy out of b becomes a load from DRAM once b is stored: b is gone by then
                later = [i for i in uses[b] if i >= peak_at]
            elif not lo < peak_at < hi or peak_at in uses[b]:
                continue
            else:
                later = [i for i in uses[b] if i > peak_at]
            held = [i for i in later if cp.events[i].kind == "hold"]
            plain = [i for i in later if cp.events[i].kind != "hold"]
            nxt = plain[0] if plain else len(cp.events) + 1
            move = "stage" if held else "split"
            score = (nxt - peak_at, plan.buffers[b].nbytes)
            if best is None or score > best[0]:
                before = max(i for i in uses[b] if i < peak_at)
                best = (score, b, move, before, nxt)
        if best is None:
            raise CompileError("SRAM", f"core ({cp.core[0]},{cp.core[1]})", int(load[peak_at]) + weights,
                               int(cap[peak_at]) + weights, "weights and the buffers one step needs")
        _, b, move, before, nxt = best
        if move == "stage":
            _stage(plan, cp, b, peak_at)
        else:
            _split_lifetime(plan, cp, b, before, nxt)
        spills += 1
    raise CompileError("SRAM", f"core ({cp.core[0]},{cp.core[1]})", int(load[peak_at]) + weights, avail + weights,
                       f"still over after {max_spills} spills")


def _stage(plan: Plan, cp: CorePlan, b: int, peak_at: int) -> None:
    """Send buffer ``b``'s data through DRAM instead of holding it for the receivers
    whose holds lie after ``peak_at`` (see :func:`spill`)."""
    buf = plan.buffers[b]
    holds = {ev.tag for ev in cp.events[peak_at:] if ev.kind == "hold" and ev.reads[0][0] == b}
    key = ("stage", b)
    plan.regions[key] = (buf.shape, buf.dtype, buf.name, cp.core)
    # NOTE: a send reads the buffer through its own view shape (a Reshape's, when the reader
    # sees the tensor reshaped); a box is only meaningful in that shape, so the store takes
    # it too (storing a box of a 4-d view as one of the 5-d buffer lost a channel of the
    # light ShuffleNet's channel shuffle)
    boxes = _staged_boxes([tuple(ev.reads[0][1:]) for ev in cp.events if ev.kind == "send" and ev.tag in holds])
    events: list[Event] = []
    stores: dict[tuple, Event] = {}
    for ev in cp.events:
        if ev.kind == "hold" and ev.tag in holds:
            continue
        if ev.kind == "send" and ev.tag in holds:
            box = boxes[tuple(ev.reads[0][1:])]
            store = stores.get(box)
            if store is None:
                store = Event(ev.key + (-0.5,), "store", reads=[(b, *box)], region=key, region_view=box)
                stores[box] = store
                events.append(store)
            events.append(Event(ev.key, "signal", peer=ev.peer, tag=ev.tag, after=[store]))
            _receive_from_dram(plan, ev, key)
            continue
        events.append(ev)
    cp.events = events


def _staged_boxes(views: list[tuple[Shape, Shape, Shape]]) -> dict[tuple[Shape, Shape, Shape],
                                                                     tuple[Shape, Shape, Shape]]:
    """For each sent ``(view shape, start, extent)`` of a staged buffer, the box stored to
    DRAM that holds it, in the same view shape: per view shape, the bounding box of its
    views when that is no bigger than their sum (one store), else the view itself (one
    store per distinct view). Only what is received goes through DRAM: a buffer staged for
    a halo of a few rows stores those rows, not the whole buffer (on the float
    EfficientNet-B0, 12.1 of 19.9 MB of DRAM traffic were staging stores, of which the
    receivers loaded 6.6). O(S * rank) for S sends."""
    out: dict[tuple[Shape, Shape, Shape], tuple[Shape, Shape, Shape]] = {}
    by_shape: dict[Shape, list[tuple[Shape, Shape]]] = {}
    for shape, start, extent in dict.fromkeys(views):
        by_shape.setdefault(tuple(shape), []).append((tuple(start), tuple(extent)))
    for shape, distinct in by_shape.items():
        lo = tuple(min(s[d] for s, _ in distinct) for d in range(len(shape)))
        hi = tuple(max(s[d] + e[d] for s, e in distinct) for d in range(len(shape)))
        bbox = (shape, lo, tuple(h - low for h, low in zip(hi, lo, strict=True)))
        merge = prod(bbox[2]) <= sum(prod(e) for _, e in distinct)
        for start, extent in distinct:
            out[(shape, start, extent)] = bbox if merge else (shape, start, extent)
    return out


def _receive_from_dram(plan: Plan, send: Event, key: tuple) -> None:
    """On the receiving core, the recv of ``send`` becomes a wait and a DMA load."""
    peer = plan.cores[send.peer]
    out: list[Event] = []
    for ev in peer.events:
        if ev.kind == "recv" and ev.tag == send.tag:
            wait = Event(ev.key, "wait", peer=ev.peer, tag=ev.tag)
            out.append(wait)
            out.append(Event(ev.key + (0.5,), "load", writes=ev.writes, region=key,
                             region_view=tuple(send.reads[0][1:]), after=[wait]))
        else:
            out.append(ev)
    peer.events = out


def _split_lifetime(plan: Plan, cp: CorePlan, b: int, before: int, after: int) -> None:
    """Store buffer ``b`` after event ``before``; from event ``after`` on, a copy out of it
    becomes a DMA load from DRAM straight into the copy's destination, and any other use
    reads a new buffer reloaded just before the first such use."""
    buf = plan.buffers[b]
    key = ("spill", b, before)
    plan.regions[key] = (buf.shape, buf.dtype, buf.name, cp.core)
    zero = (0,) * len(buf.shape)
    store = Event(cp.events[before].key + (0.5,), "store", reads=[(b, buf.shape, zero, buf.shape)], region=key,
                  region_view=(buf.shape, zero, buf.shape))
    tail: list[Event] = []
    nb = None
    reload = None
    for ev in cp.events[after:]:
        uses_b = any(v is not None and v[0] == b for v in ev.reads) or any(v[0] == b for v in ev.writes)
        if ev.kind == "copy" and ev.reads[0][0] == b:
            tail.append(Event(ev.key, "load", writes=ev.writes, region=key, region_view=tuple(ev.reads[0][1:]),
                              after=[store] + ev.after))
            continue
        if uses_b and nb is None:
            nb = PBuffer(len(plan.buffers), cp.core, buf.shape, buf.dtype, "activation", buf.name, buf.phys)
            plan.buffers.append(nb)
            cp.buffers.append(nb.id)
            reload = Event(ev.key[:-1] + (-0.5,), "load", writes=[(nb.id, buf.shape, zero, buf.shape)],
                           region=key, region_view=(buf.shape, zero, buf.shape), after=[store])
            tail.append(reload)
        if nb is not None:
            ev.reads = [(nb.id, *v[1:]) if v is not None and v[0] == b else v for v in ev.reads]
            ev.writes = [(nb.id, *v[1:]) if v[0] == b else v for v in ev.writes]
            if any(v[0] == nb.id for v in ev.writes):
                # NOTE: the reload writes the whole buffer, a later write (a receive of the
                # part the buffer did not hold yet) writes into it; emit orders a buffer's
                # readers after its writers, not two writers of one buffer: unordered, the
                # reload could land after the receive and overwrite it with the stale bytes
                # stored before (the int8 ResNet-18's layer2 on 128 KiB cores, 63 steps off)
                ev.after = [*ev.after, reload]
        tail.append(ev)
    cp.events = cp.events[:before + 1] + [store] + cp.events[before + 1:after] + tail
