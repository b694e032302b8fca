"""SRAM offsets for the activation buffers of one core (step 3 of lowering, with :mod:`.plan`).

Buffers have lifetimes (first and last event of the core that touches them) and sizes;
two buffers may share addresses only if their lifetimes are disjoint. Finding the lowest
top is dynamic storage allocation (NP-hard); :func:`allocate` tries, in turn, a
best fit in time (as a program would run), a two-ended first fit (large buffers upwards,
small ones downwards), first fits in four orders, then seeded random orders, and keeps
the lowest top. When that top fits, the buffers are laid out again within the limit, each
where the bytes were last used longest ago (:func:`_least_recent`), so that a receive need
not wait for the buffer that used its addresses just before. O(B^2) per try for B buffers.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from corefold.backend.executable import ALIGNMENT
from corefold.backend.plan import CorePlan, Plan
from corefold.backend.spill import accesses, aligned, lifetimes, pressure

#: Random orders the allocator tries when the deterministic ones overflow.
RANDOM_ORDERS = 40


def allocate(plan: Plan, cp: CorePlan, base: int, limit: int) -> int:
    """Offsets for the activation buffers of ``cp`` in ``[base, limit)``: each at the lowest
    aligned address free of every buffer whose lifetime overlaps, buffers taken largest
    first, then (if that overflows) by start and by lifetime; the lowest top wins. If it
    fits, the least-recently-used layout within ``limit`` replaces it (when every buffer
    finds room there). Returns the highest end used (may exceed ``limit``: the caller
    spills more). O(B^2)."""
    life = lifetimes(plan, cp)
    size = {b: aligned(plan.buffers[b].nbytes) for b in life}
    load = pressure(plan, life, len(cp.events))
    hot = {b: int(load[lo:hi + 1].max()) for b, (lo, hi) in life.items()}
    orders = [lambda b: (-size[b], life[b][0], b), lambda b: (-hot[b], -size[b], life[b][0], b),
              lambda b: (life[b][0], -size[b], b), lambda b: (life[b][0] - life[b][1], -size[b], b)]
    best = _best_fit_in_time(life, size, base)
    if best[1] > limit:
        two = _two_ended(life, size, base, limit)
        if two is not None:
            best = two
    for key in orders:
        if best[1] <= limit:
            break
        offsets, top = _first_fit(sorted(life, key=key), life, size, base)
        if top < best[1]:
            best = (offsets, top)
    # NOTE: still over: seeded random perturbations of the largest-first order
    rng = np.random.default_rng(len(life))
    bufs = sorted(life)
    for _ in range(RANDOM_ORDERS if best[1] > limit else 0):
        noise = rng.lognormal(0.0, 0.7, len(bufs))
        order = [b for _, b in sorted(zip((-size[b] * z for b, z in zip(bufs, noise, strict=True)), bufs,
                                          strict=True))]
        offsets, top = _first_fit(order, life, size, base)
        if top < best[1]:
            best = (offsets, top)
            if top <= limit:
                break
    if best[1] <= limit:
        spread = _least_recent(life, size, base, limit)
        if spread is not None:
            best = spread
    for b, off in best[0].items():
        plan.buffers[b].offset = off
    return best[1]


def overflow_limits(plan: Plan, cp: CorePlan, limit: int, avail: int, limits: dict) -> bool:
    """After an allocation that ends above ``limit``: at the events where a buffer lies
    above it, allow at most the live bytes there less that excess (keyed by the event
    itself: keys of ``id(event)`` outlived the events a spill replaced, and a new event that
    got a freed id took a stale limit, so the lowering depended on memory reuse), so the
    next spill frees room exactly there. The cap is taken from the
    live bytes, not from ``avail``: when the buffers are fragmented, the live bytes are
    already under ``avail`` and a cap below ``avail`` alone would spill nothing, giving the
    same layout again. An event is never capped below the bytes of the buffers it accesses
    itself, which no spill can move out of it: a receive into a 448 KiB buffer, the only one
    live there, was capped to 382 KiB, and the core was refused ("weights and the buffers
    one step needs", onnx's light DenseNet-121, 693 KiB for 1 MiB) where other buffers
    within that buffer's lifetime could go. False when nothing overflows. O(B + events)."""
    life = lifetimes(plan, cp)
    load = pressure(plan, life, len(cp.events))
    changed = False
    for b, (lo, hi) in life.items():
        buf = plan.buffers[b]
        excess = buf.offset + aligned(buf.nbytes) - limit
        if excess > 0:
            for i in range(lo, hi + 1):
                ev = cp.events[i]
                own = sum(aligned(plan.buffers[a].nbytes) for a in set(accesses(ev)) if a in life)
                cap = max(min(avail, int(load[i])) - excess - ALIGNMENT, own)
                limits[ev] = min(limits.get(ev, avail), cap)
                changed = True
    return changed


def _best_fit_in_time(life: dict[int, tuple[int, int]], size: dict[int, int],
                      base: int) -> tuple[dict[int, int], int]:
    """Allocate as a program would run: at each event, free the buffers whose lifetime
    ended, then take for each starting buffer (largest first) the smallest free gap that
    holds it (best fit), else the top. O(B log B + B * gaps)."""
    starts: dict[int, list[int]] = {}
    for b, (lo, _) in life.items():
        starts.setdefault(lo, []).append(b)
    ends: dict[int, list[int]] = {}
    for b, (_, hi) in life.items():
        ends.setdefault(hi, []).append(b)
    gaps: list[tuple[int, int]] = []  # free [a, b) below top, sorted
    top = base
    offsets: dict[int, int] = {}
    for t in sorted(set(starts) | set(ends)):
        for b in sorted(starts.get(t, ()), key=lambda b: -size[b]):
            fit = [(e - a, i) for i, (a, e) in enumerate(gaps) if e - a >= size[b]]
            if fit:
                _, i = min(fit)
                a, e = gaps[i]
                offsets[b] = a
                gaps[i:i + 1] = [(a + size[b], e)] if a + size[b] < e else []
            else:
                if gaps and gaps[-1][1] == top:  # extend the last gap into the top
                    a, _ = gaps.pop()
                    offsets[b] = a
                    top = a + size[b]
                else:
                    offsets[b] = top
                    top += size[b]
        for b in ends.get(t, ()):
            gaps.append((offsets[b], offsets[b] + size[b]))
            gaps.sort()
            merged: list[tuple[int, int]] = []
            for a, e in gaps:
                if merged and merged[-1][1] >= a:
                    merged[-1] = (merged[-1][0], max(merged[-1][1], e))
                else:
                    merged.append((a, e))
            if merged and merged[-1][1] >= top:
                top = merged[-1][0]
                merged.pop()
            gaps = merged
    high = max((offsets[b] + size[b] for b in offsets), default=base)
    return offsets, high


def _two_ended(life: dict[int, tuple[int, int]], size: dict[int, int], base: int,
               limit: int) -> tuple[dict[int, int], int] | None:
    """Large buffers first fit upwards from ``base``, the small ones (under an eighth of
    the room) downwards from ``limit``: small buffers then fragment nothing in the middle.
    None if some buffer finds no room. O(B^2)."""
    room = limit - base
    big = sorted((b for b in life if size[b] * 8 >= room), key=lambda b: (-size[b], life[b][0], b))
    small = sorted((b for b in life if size[b] * 8 < room), key=lambda b: (-size[b], life[b][0], b))
    placed: list[tuple[int, int, int, int]] = []
    offsets: dict[int, int] = {}
    for b in big:
        lo, hi = life[b]
        busy = sorted((o, e) for (l2, h2, o, e) in placed if not (h2 < lo or hi < l2))
        offset = base
        for o, e in busy:
            if offset + size[b] <= o:
                break
            offset = max(offset, e)
        offsets[b] = offset
        placed.append((lo, hi, offset, offset + size[b]))
    for b in small:
        lo, hi = life[b]
        busy = sorted(((o, e) for (l2, h2, o, e) in placed if not (h2 < lo or hi < l2)), key=lambda x: -x[1])
        end = limit - (limit % ALIGNMENT)
        for o, e in busy:
            if e <= end - size[b]:
                break
            end = min(end, o)
        if end - size[b] < base:
            return None
        offsets[b] = end - size[b]
        placed.append((lo, hi, end - size[b], end))
    return offsets, max((e for *_, e in placed), default=base)


def _least_recent(life: dict[int, tuple[int, int]], size: dict[int, int], base: int,
                  limit: int) -> tuple[dict[int, int], int] | None:
    """Buffers in order of first use, each at the free aligned address in ``[base,
    limit)`` whose bytes were last used longest ago (never used first, then the lowest
    address). An emitted instruction that writes a buffer waits for every earlier user of
    its addresses (:mod:`.emit`), so a layout packed as low as it goes makes a Recv post,
    and its data move, only once the buffer before it at those addresses is done with: in
    the int8 MobileNetV3 the SE blocks' Mul pieces on one core received their inputs one
    after another, each posted after the previous Mul. With room to spare this layout
    lets a receive post earlier.

    The addresses tried are ``base``, the highest that fits, and those next to a live
    buffer (after its end, before its start); adding the top of what is used so far
    (untouched bytes as early as possible) posted nearly every Recv at once and ran
    0.1-2% slower on 4 of the bench's 9 rows (the early sends take the links). None if
    some buffer finds no room. O(B^2 L) for L candidate addresses per buffer, compiled
    (:func:`_least_recent_kernel`; ``alloc_test.py`` keeps the NumPy loop it replaced as
    its oracle).
    """
    order = sorted(life, key=lambda b: (life[b][0], -size[b], b))
    lo = np.array([life[b][0] for b in order], np.int64)
    hi = np.array([life[b][1] for b in order], np.int64)
    sizes = np.array([size[b] for b in order], np.int64)
    offs, top, placed = _least_recent_kernel(lo, hi, sizes, base, limit, ALIGNMENT)
    if placed < len(order):
        return None
    return dict(zip(order, offs.tolist(), strict=True)), int(top)


@njit(cache=True, nogil=True)
def _least_recent_kernel(lo, hi, size, base, limit, align):  # pragma: no cover - compiled
    """:func:`_least_recent` on buffers in placement order (lifetimes ``lo``-``hi``, sizes):
    ``(offsets, top, how many were placed)``, stopping at the first that finds no room.
    For each buffer, every candidate address against the placed buffers: O(B^2 L) for L
    candidates (two per buffer live at its start, plus two)."""
    n = len(lo)
    offs = np.zeros(n, np.int64)
    ends = np.zeros(n, np.int64)
    live = np.empty(n, np.int64)
    dead = np.empty(n, np.int64)
    cand = np.empty(2 * n + 2, np.int64)
    top = base
    for k in range(n):
        s = size[k]
        last = (limit - s) // align * align
        nl = 0
        nd = 0
        for j in range(k):  # every placed buffer started no later than this one
            if hi[j] >= lo[k]:
                live[nl] = j
                nl += 1
            else:
                dead[nd] = j
                nd += 1
        m = 2
        cand[0] = base
        cand[1] = last
        for i in range(nl):
            j = live[i]
            cand[m] = ends[j]
            cand[m + 1] = (offs[j] - s) // align * align
            m += 2
        best = -1
        best_recent = 0
        for i in range(m):
            c = cand[i]
            if c < base or c > last:
                continue
            clash = False
            for t in range(nl):
                j = live[t]
                if offs[j] < c + s and c < ends[j]:
                    clash = True
                    break
            if clash:
                continue
            recent = -1  # the latest last use of a dead buffer on these bytes
            for t in range(nd):
                j = dead[t]
                if offs[j] < c + s and c < ends[j] and hi[j] > recent:
                    recent = hi[j]
            if best < 0 or recent < best_recent or (recent == best_recent and c < best):
                best = c
                best_recent = recent
        if best < 0:
            return offs, top, k
        offs[k] = best
        ends[k] = best + s
        top = max(top, best + s)
    return offs, top, n


def _first_fit(order: list[int], life: dict[int, tuple[int, int]], size: dict[int, int],
               base: int) -> tuple[dict[int, int], int]:
    placed: list[tuple[int, int, int, int]] = []  # (lo, hi, offset, end)
    offsets: dict[int, int] = {}
    top = base
    for b in order:
        lo, hi = life[b]
        busy = sorted((o, e) for (l2, h2, o, e) in placed if not (h2 < lo or hi < l2))
        offset = base
        for o, e in busy:
            if offset + size[b] <= o:
                break
            offset = max(offset, e)
        offsets[b] = offset
        placed.append((lo, hi, offset, offset + size[b]))
        top = max(top, offset + size[b])
    return offsets, top
