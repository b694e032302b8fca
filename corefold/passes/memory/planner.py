"""Budget mode: choose the evictions that bring the step-model peak under a budget.

Let ``M(i)`` be the bytes live at compute step ``i`` (:mod:`~corefold.passes.memory.memsim`)
and ``X = sum_i max(0, M(i) - budget)`` the excess. Each round takes the peak step ``i*``,
and among the ``candidates`` largest storages live there but not read there (``i*``
strictly inside one of their use gaps, :mod:`~corefold.passes.memory.evictions`; the next
``candidates`` when none of these helps), every allowed reduction of that gap. For a choice ``c`` with excess drop ``dX(c) > 0`` it
books its copies on the link timelines (:mod:`~corefold.passes.memory.links`) against the
stall-free compute times ``S`` (prefix sums of the cost model's op times):

* the SwapOut takes the earliest free d2h slot after its input is ready; the release
  step ``s`` is the first step starting after the slot ends;
* the SwapIn takes the latest free h2d slot that ends by the first read ``S(hi)``; its
  trigger ``q`` is the last step ending before the slot starts (the restore's transfer
  fits in the compute between ``q`` and the read: SPEC M2's choice of Q);
* when that does not relieve ``i*`` (``s > i*`` or ``q < i*``; the copy is live from
  ``q + 1``), ``s = i*`` and ``q >= i*`` are forced and the compute stream's wait is the
  choice's *stall*.

``cost(c) = stall + added compute (compress, decompress) + link_weight * link seconds``;
the round commits ``argmin (cost + eps) / dX``, so stall-free choices go first, largest
relief first. Every round evicts a new gap, so there are at most as many rounds as gaps;
a round is O(K (R + n_seg)) for K candidates, R bookings and n_seg the steps a choice
touches. It fails (``PlanError``) when the peak step has nothing left to evict.

The rounds fix which gaps are evicted; two final passes time them (``settings.timing``):
:meth:`BudgetPlanner.relax` keeps the rounds' bookings and spends what the budget leaves
over on later releases and earlier restores; :meth:`BudgetPlanner.retime` throws the
bookings away and list-schedules the copies, each link kept busy in order (SwapOuts by
readiness, SwapIns by first read) and each copy as early as the budget allows. The
rounds book restores as late as they can, which on a deep network crowds the first
layers' large restores into the end of the backward phase; the list schedule starts them
while the backward phase still has memory to spare (ResNet-50 at batch 768 on
``gpu-nvlink``: 27.6% overhead with ``relax``, 16.7% with ``retime``). Neither wins on
every graph, so ``best`` (the default) keeps the one the time simulator finds faster.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from corefold.errors import CapacityError
from corefold.ops.defs.memory import CompressFormat, compress_format
from corefold.passes.memory.evictions import BOTH, COMPRESS, SWAP, Eviction, UseGaps, use_gaps
from corefold.passes.memory.links import LinkTimeline
from corefold.passes.memory.memsim import step_profile
from corefold.passes.memory.program import COMPUTE, Program, Storage
from corefold.passes.memory.settings import MemorySettings
from corefold.passes.memory.timesim import copy_seconds, node_seconds
from corefold.target import Target


class PlanError(CapacityError):
    """No set of evictions brings the peak under the budget."""


@dataclass
class Proposal:
    """One candidate choice: the storage's new plan and what it costs and relieves."""

    eviction: Eviction
    gap: int
    new_swap: bool
    restore_slot: tuple[float, float] | None
    score: float
    cost: float
    compute_added: dict[int, float]


def compress_seconds(nbytes: int, compressed: int, target: Target) -> float:
    """Compress or decompress time: read one form, write the other, at memory bandwidth."""
    dev = target.device
    if dev is None:
        return (nbytes + compressed) / target.dram_bytes_per_s
    return dev.launch_seconds + (nbytes + compressed) / dev.memory_bytes_per_s


def compressible(storage: Storage, fmt: CompressFormat) -> bool:
    """Floating tensors wider than the format."""
    dt = storage.root.dtype
    return dt.kind == "f" and dt.itemsize > fmt.itemsize


def _copy(ev: Eviction) -> Eviction:
    """A copy of ``ev`` whose lists can change on their own."""
    return replace(ev, gaps=list(ev.gaps), triggers=list(ev.triggers), restore_slots=list(ev.restore_slots))


class BudgetPlanner:
    """The greedy planner of the module doc; :meth:`plan` returns the evictions."""

    def __init__(self, program: Program, target: Target, settings: MemorySettings, budget: int):
        self.program = program
        self.target = target
        self.settings = settings
        self.budget = int(budget)
        self.fmt = compress_format(settings.compress_format)
        n = program.num_steps
        self.durations = np.array([node_seconds(c, COMPUTE, target) for c in program.compute], dtype=np.float64)
        self.extra = np.zeros(n, dtype=np.float64)
        self._times()
        profile = step_profile(program)
        self.memory = profile.memory.astype(np.int64).copy()
        self.base = profile.intervals
        self.gaps = use_gaps(program, profile.intervals)
        self.plans: dict[Storage, Eviction] = {}
        self.d2h, self.h2d = LinkTimeline(), LinkTimeline()
        self._swap_key: dict[Storage, int] = {}
        self._restore_key: dict[tuple[Storage, int], int] = {}
        self._order = sorted(self.gaps.values(), key=lambda u: -u.nbytes)
        self._lo = np.array([int(u.points[0]) for u in self._order], dtype=np.int64)
        self._hi = np.array([u.end for u in self._order], dtype=np.int64)
        self.rounds = 0

    # -- time helpers ------------------------------------------------------------------
    def _times(self) -> None:
        self.S = np.concatenate([[0.0], np.cumsum(self.durations + self.extra)])

    def _first_step_from(self, t: float) -> int:
        """The first step starting at or after ``t`` (``n`` if none)."""
        return int(np.searchsorted(self.S[:-1], t - 1e-15, side="left"))

    def _last_step_ending_by(self, t: float) -> int:
        """The last step ending at or before ``t`` (-1 if none)."""
        return int(np.searchsorted(self.S[1:], t + 1e-15, side="right")) - 1

    def _modes(self, u: UseGaps) -> list[str]:
        plan = self.plans.get(u.storage)
        if plan is not None:
            return [plan.mode]
        red = self.settings.reduction
        can = compressible(u.storage, self.fmt)
        if red == SWAP:
            return [SWAP]
        if red == COMPRESS:
            return [COMPRESS] if can else []
        if red == BOTH:
            return [BOTH] if can else [SWAP]
        return [SWAP, COMPRESS, BOTH] if can else [SWAP]

    # -- one candidate -----------------------------------------------------------------
    def _relief(self, old: list, new: list) -> float:
        lo = min(a for a, _, _ in old + new)
        hi = max(b for _, b, _ in old + new)
        seg = self.memory[lo:hi + 1].copy()
        before = float(np.maximum(seg - self.budget, 0).sum())
        for a, b, x in old:
            seg[a - lo:b - lo + 1] -= x
        for a, b, x in new:
            seg[a - lo:b - lo + 1] += x
        return before - float(np.maximum(seg - self.budget, 0).sum())

    def propose(self, u: UseGaps, gap: int, mode: str, peak: int) -> Proposal | None:
        """Evict ``gap`` of ``u`` with ``mode`` so that step ``peak`` is relieved (or, when
        the gap is evicted already but the storage is still live at ``peak``, move its
        release and trigger past ``peak``); None when that relieves nothing."""
        st = u.storage
        old = self.plans.get(st)
        if old is not None and old.mode != mode:
            return None
        tighten = old is not None and gap in old.gaps
        gaps = sorted((old.gaps if old else []) + ([] if tighten else [gap]))
        j = gaps.index(gap)
        fmt = self.fmt if mode != SWAP else None
        ev = Eviction(u, mode, fmt, gaps, release=old.release if old else 0,
                      triggers=list(old.triggers) if old else [],
                      swap_slot=old.swap_slot if old else (0.0, 0.0),
                      swap_anchor=old.swap_anchor if old else 0,
                      restore_slots=list(old.restore_slots) if old else [])
        lo, hi = u.lo(gap), u.hi(gap)
        first_gap = j == 0 and not tighten
        stall = link = 0.0
        added: dict[int, float] = {}
        small = ev.compressed_bytes()
        moved = u.nbytes if mode == SWAP else small
        slot = None
        if mode != SWAP and not tighten:
            t = compress_seconds(u.nbytes, small, self.target)
            added[hi] = t
            if old is None:
                added[lo] = added.get(lo, 0.0) + t
        if mode in (SWAP, BOTH):
            length = copy_seconds(moved, self.target)
            if first_gap:
                t0 = self.S[int(u.points[0]) + 1] if mode == SWAP else self.S[lo + 1] + added.get(lo, 0.0)
                xs, xe = self.d2h.earliest(t0, length, exclude=st)
                ev.release, ev.swap_slot = max(lo + 1, self._first_step_from(xe)), (xs, xe)
                ev.swap_anchor = max(int(u.points[0]) if mode == SWAP else lo,
                                     min(self._last_step_ending_by(xs), ev.release - 1))
                link += length
            if j == 0 and ev.release > peak:
                stall += max(0.0, ev.swap_slot[1] - self.S[peak])
                ev.release = peak
                ev.swap_anchor = min(ev.swap_anchor, peak - 1)
            if not tighten or ev.triggers[j] < peak:
                lower = max(ev.swap_slot[1], self.S[lo + 1])
                slot = None if tighten else self.h2d.latest(lower, self.S[hi], length)
                q = min(hi - 1, self._last_step_ending_by(slot[0])) if slot else -1
                if q < peak:  # the copy is live from q + 1: it must start after step peak
                    slot = self.h2d.earliest(max(lower, self.S[peak + 1]), length,
                                             exclude=(st, gap) if tighten else None)
                    q = max(peak, min(hi - 1, self._last_step_ending_by(slot[0])))
                    stall += max(0.0, slot[1] - self.S[hi])
                link += length
                if tighten:
                    ev.triggers[j], ev.restore_slots[j] = q, slot
                else:
                    ev.triggers.insert(j, q)
                    ev.restore_slots.insert(j, slot)
        old_iv = old.intervals() if old else [(self.base[st][0], self.base[st][1], u.nbytes)]
        score = self._relief(old_iv, ev.intervals())
        if score <= 0:
            return None
        cost = stall + sum(added.values()) + self.settings.link_weight * link
        return Proposal(ev, gap, first_gap and mode != COMPRESS, slot, score, cost, added)

    def commit(self, p: Proposal) -> None:
        """Apply a proposal: memory, bookings, added compute time."""
        ev, st = p.eviction, p.eviction.storage
        old = self.plans.get(st)
        old_iv = old.intervals() if old else [(self.base[st][0], self.base[st][1], ev.uses.nbytes)]
        for a, b, x in old_iv:
            self.memory[a:b + 1] -= x
        for a, b, x in ev.intervals():
            self.memory[a:b + 1] += x
        if p.new_swap:
            if st in self._swap_key:
                self.d2h.cancel(self._swap_key[st])
            self._swap_key[st] = self.d2h.book(*ev.swap_slot, st)
        if p.restore_slot is not None:
            key = (st, p.gap)
            if key in self._restore_key:
                self.h2d.cancel(self._restore_key[key])
            self._restore_key[key] = self.h2d.book(*p.restore_slot, key)
        self.plans[st] = ev
        if p.compute_added:
            for k, t in p.compute_added.items():
                self.extra[k] += t
            self._times()

    # -- the loop ----------------------------------------------------------------------
    def candidates_at(self, peak: int):
        """The storages live at ``peak`` with ``peak`` strictly inside a gap that is not yet
        evicted (or still live inside an evicted one), largest first, in chunks of
        ``candidates``."""
        idx = np.nonzero((self._lo < peak) & (self._hi > peak))[0]
        chunk = []
        for k in idx:
            u = self._order[k]
            if u.gap_at(peak) is None:
                continue
            plan = self.plans.get(u.storage)
            if plan is not None and not any(a <= peak <= b for a, b, _ in plan.intervals()):
                continue
            chunk.append(u)
            if len(chunk) >= self.settings.candidates:
                yield chunk
                chunk = []
        if chunk:
            yield chunk

    def choose(self) -> None:
        """The greedy rounds: evictions that bring every step under the budget, with the
        greedy's own bookings.

        Raises:
            PlanError: the peak step keeps more than the budget whatever is evicted.
        """
        while self.memory.size and int(self.memory.max()) > self.budget:
            peak = int(np.argmax(self.memory))
            best = None
            for chunk in self.candidates_at(peak):
                for u in chunk:
                    gap = u.gap_at(peak)
                    for mode in self._modes(u):
                        p = self.propose(u, gap, mode, peak)
                        if p is None:
                            continue
                        key = ((p.cost + 1e-12) / p.score, -p.score)
                        if best is None or key < best[0]:
                            best = (key, p)
                if best is not None:
                    break  # the next chunk only when nothing larger helps
            if best is None:
                node = self.program.compute[peak]
                raise PlanError(f"no plan fits the budget of {self.budget:,} bytes: at step {peak} "
                                f"('{node.name}', {node.op_type}) {int(self.memory[peak]):,} bytes stay live "
                                "and nothing left there can be evicted")
            self.commit(best[1])
            self.rounds += 1

    def plan(self) -> list[Eviction]:
        """Evictions that bring every step under the budget, timed by ``settings.timing``
        (``best``: the first of :meth:`plan_variants`).

        Raises:
            PlanError: the peak step keeps more than the budget whatever is evicted.
        """
        return next(iter(self.plan_variants().values()))

    def plan_variants(self) -> dict[str, list[Eviction]]:
        """The greedy's choice of gaps (:meth:`choose`), timed each way ``settings.timing``
        names: ``retime`` and ``relax`` for ``best``. Each variant fits the budget.

        Raises:
            PlanError: the peak step keeps more than the budget whatever is evicted.
        """
        self.choose()
        timings = ["retime", "relax"] if self.settings.timing == "best" else [self.settings.timing]
        out: dict[str, list[Eviction]] = {}
        memory, plans = self.memory.copy(), {st: _copy(ev) for st, ev in self.plans.items()}
        for k, timing in enumerate(timings):
            if k:
                self.memory, self.plans = memory.copy(), {st: _copy(ev) for st, ev in plans.items()}
            self.retime() if timing == "retime" else self.relax()
            out[timing] = [_copy(ev) for ev in self.plans.values()]
        return out

    # -- using the headroom ------------------------------------------------------------
    def _headroom(self, a: int, b: int, nbytes: int) -> int:
        """The largest ``k`` in ``[a - 1, b]`` such that steps ``a..k`` can take ``nbytes`` more."""
        if a > b:
            return b
        over = np.nonzero(self.memory[a:b + 1] + nbytes > self.budget)[0]
        return b if over.size == 0 else a + int(over[0]) - 1

    def relax(self) -> None:
        """Spend the budget's headroom on time: a forced release moves later (towards the
        step its SwapOut really ends before) and a late restore earlier (towards a slot
        that ends before its read), as far as every step stays within the budget. One pass
        over the plans, largest first; O(E (R + n))."""
        for ev in sorted(self.plans.values(), key=lambda e: -e.uses.nbytes):
            if not ev.moves:
                continue
            st, u = ev.storage, ev.uses
            moved = u.nbytes if ev.mode == SWAP else ev.compressed_bytes()
            natural = min(u.hi(ev.gaps[0]), max(u.lo(ev.gaps[0]) + 1, self._first_step_from(ev.swap_slot[1])))
            if ev.release < natural:
                last = self._headroom(ev.release, natural - 1, moved)
                if last >= ev.release:
                    self.memory[ev.release:last + 1] += moved
                    ev.release = last + 1
            length = copy_seconds(moved, self.target)
            for j, gap in enumerate(ev.gaps):
                hi, q = u.hi(gap), ev.triggers[j]
                slot = ev.restore_slots[j]
                if slot[1] <= self.S[hi] + 1e-12:
                    continue
                k = q
                while k > u.lo(gap) and self.memory[k] + moved <= self.budget:
                    k -= 1
                key = (st, gap)
                lower = max(ev.swap_slot[1], self.S[k + 1])
                better = self.h2d.latest(lower, self.S[hi], length, exclude=key)
                if better is None:
                    continue
                q_new = min(hi - 1, self._last_step_ending_by(better[0]))
                if q_new >= q or q_new < k:
                    continue
                self.memory[q_new + 1:q + 1] += moved
                ev.triggers[j], ev.restore_slots[j] = q_new, better
                if key in self._restore_key:
                    self.h2d.cancel(self._restore_key[key])
                self._restore_key[key] = self.h2d.book(*better, key)

    # -- list-scheduling the copies ----------------------------------------------------
    def _move(self, old: list, new: list) -> None:
        for a, b, x in old:
            self.memory[a:b + 1] -= x
        for a, b, x in new:
            self.memory[a:b + 1] += x

    def retime(self) -> float:
        """Re-time the chosen evictions as a list schedule of the two links; returns the
        estimated step time with its stalls.

        The greedy books each copy when its storage is chosen, largest first, and each
        restore as late as it can: on a chain of layers the restores of the first layers'
        large tensors then crowd the end of the backward phase while the memory under the
        budget sits unused. Here the choice of gaps is kept and only the release and the
        triggers move:

        1. every eviction is set to its least memory (release ``lo + 1``, trigger
           ``hi - 1``), which fits because the greedy's did;
        2. SwapOuts in order of readiness, each right after the previous one on the d2h
           link (``xs = max(free, end(ready))``); the release goes as far towards the first
           step starting after ``xs + L`` as the budget allows, and when it stops short the
           compute stream waits there: ``D[r:] += xs + L - start(r)``;
        3. SwapIns in order of first read, each right after the previous one on the h2d
           link and no earlier than the end of step ``q_min``, the earliest trigger whose
           copy fits under the budget until the read; a copy that ends after its read
           starts delays it and every later step.

        ``start(i) = S(i) + D(i)`` and ``end(k) = S(k + 1) + D(k)`` with ``D`` the stalls
        so far, so later copies see the delays of earlier ones. Every step stays within the
        budget: each move only adds a copy where the budget has room. O(E log E + R n).
        """
        evs = [ev for ev in self.plans.values() if ev.moves]
        n = self.program.num_steps
        S = self.S
        D = np.zeros(n + 1, dtype=np.float64)
        if not evs:
            return float(S[n])
        for ev in evs:
            old = ev.intervals()
            ev.release = ev.uses.lo(ev.gaps[0]) + 1
            ev.triggers = [ev.uses.hi(g) - 1 for g in ev.gaps]
            self._move(old, ev.intervals())

        def start(i: int) -> float:
            return S[i] + D[i]

        def end(k: int) -> float:
            return S[k + 1] + D[k]

        def ready(ev: Eviction) -> int:
            return int(ev.uses.points[0]) if ev.mode == SWAP else ev.uses.lo(ev.gaps[0])

        free = 0.0
        for ev in sorted(evs, key=lambda e: (ready(e), -e.uses.nbytes)):
            u, moved = ev.uses, self._moved(ev)
            lo, hi = u.lo(ev.gaps[0]), u.hi(ev.gaps[0])
            xs = max(free, end(ready(ev)))
            xe = free = xs + copy_seconds(moved, self.target)
            r = lo + 1
            while r < hi and start(r) < xe - 1e-15 and self.memory[r] + moved <= self.budget:
                self.memory[r] += moved
                r += 1
            ev.release = r
            if start(r) < xe:
                D[r:] += xe - start(r)
            k = lo
            while k + 1 < r and end(k + 1) <= xs + 1e-15:
                k += 1
            ev.swap_slot, ev.swap_anchor = (xs, xe), max(ready(ev), min(k, r - 1))
        restores = sorted(((ev.uses.hi(g), -ev.uses.nbytes, i, j) for i, ev in enumerate(evs)
                           for j, g in enumerate(ev.gaps)))
        free = 0.0
        for hi, _, i, j in restores:
            ev = evs[i]
            moved, lo = self._moved(ev), ev.uses.lo(ev.gaps[j])
            q = hi - 1
            while q > lo and self.memory[q] + moved <= self.budget:
                q -= 1
            xs = max(free, end(q), ev.swap_slot[1])
            xe = free = xs + copy_seconds(moved, self.target)
            while q + 1 < hi and end(q + 1) <= xs + 1e-15:
                q += 1
            self.memory[q + 1:hi] += moved
            if xe > start(hi):
                D[hi:] += xe - start(hi)
            ev.triggers[j], ev.restore_slots[j] = q, (xs, xe)
        return float(S[n] + D[n])

    def _moved(self, ev: Eviction) -> int:
        """Bytes ``ev`` moves over the link: the storage's, or its compressed form's."""
        return ev.uses.nbytes if ev.mode == SWAP else ev.compressed_bytes()
