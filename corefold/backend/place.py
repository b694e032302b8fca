"""Step 2 of lowering, *Place*: tasks onto cores.

Two phases.

**Cluster** (:func:`cluster`): tasks go to *groups* (one group per core) by list
scheduling in a topological order, each task to the group where it would finish first::

    finish(t, g) = max(ready(t, g), free(g, unit(t))) + d(t)
    ready(t, g)  = max over producers p of  end(p) + [group(p) != g] * (hops * lat + bytes(p, t) / B_link)
                   and over graph inputs x of  bytes(x) / B_dram

among the groups already open and one fresh group, under three constraints:

* *SRAM*: a group's resident weights plus the largest working set of its tasks fit a
  core (weights stay resident, SPEC M1; the SRAM plan spills activations when needed);
* *direction*: the group graph stays acyclic (a task joins group ``g`` only if ``g``
  reaches none of its producers' groups, tracked with reachability bitsets), so data
  flows one way between cores, as in a pipeline;
* *NoC buffers*: a group receives from at most ``target.noc_streams_per_core`` others;
  and the producers of a task that reads more tasks than that (each channel piece of a
  convolution whose weights were cut into more pieces than that reads every piece of the
  one before) go to at most that many groups: once they span that many, the next goes
  to one of them, else no core could receive for the reader (float ResNet-34 on
  ``npu-array``: its ``layer4`` pieces read 37 pieces each).

Each unit, and each group's outgoing and incoming link, is a queue in task order, or with
``insert`` a set of busy intervals whose idle gaps a later task or transfer may fill
(insertion list scheduling, :class:`_Timeline`). It spreads independent pieces of split
operators over cores and keeps chains together when moving data costs more than it saves.
Cost: O(V * (k + deg^2) + E * k / 64) for k groups (with ``insert``, times the gaps a
query scans).

**Mesh placement** (:func:`corefold.backend.mesh.place_on_mesh`): the groups go onto physical cores with the
M4 kernels of :mod:`corefold.mapping` through a plain weighted graph (the adapter; the
mapper never sees the IR): the best rectangle of usable cores (``choose_region``), region
bisection of the group graph (``place_groups``), then force-directed and pairwise swaps
and annealing (``improve_placement``) minimising hop-weighted traffic
``sum over group pairs of bytes(a, b) * hops(core(a), core(b))``.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

import numpy as np

from corefold.backend.lgraph import LoweredGraph, Task, copied_bytes, input_bytes, node_edges
from corefold.errors import CompileError
from corefold.target import Target

#: Hops a transfer is assumed to cross before the groups are placed on the mesh.
ASSUMED_HOPS = 2.0

#: Groups evaluated per task besides its producers' (all of them when none of these fit).
CANDIDATES = 12


class _Timeline:
    """Busy intervals of one resource, in time order: the earliest idle gap of a length at
    or after a time (insertion list scheduling). O(log n + gaps scanned) per query."""

    def __init__(self):
        self.starts: list[float] = []
        self.ends: list[float] = []

    def fit(self, ready: float, length: float) -> float:
        ends = self.ends
        if not ends or ready >= ends[-1]:  # (the intervals are disjoint: ends sorted too)
            return ready
        s = ready
        i = bisect.bisect_right(self.ends, ready)
        while i < len(self.starts) and s + length > self.starts[i]:
            s = max(s, self.ends[i])
            i += 1
        return s

    def add(self, start: float, length: float) -> None:
        i = bisect.bisect_right(self.starts, start)
        self.starts.insert(i, start)
        self.ends.insert(i, start + length)


@dataclass
class Clustering:
    """Group of every task, each task's estimated start and end (seconds), the groups'
    resident constants, and the bytes between groups (directed, ``(src, dst) -> bytes``)."""

    group: np.ndarray
    start: np.ndarray
    end: np.ndarray
    groups: int
    consts: list[set[int]]
    traffic: dict[tuple[int, int], float]
    makespan: float
    #: the most headroom every group keeps beside its weights, ``min (cap - weights) /
    #: largest working set - 1`` over groups (inf without weights): ``cluster(headroom=h)``
    #: for any h from this clustering's headroom up to it gives this one again (no group
    #: was ever crowded at h, and no candidate spared at h was preferred at the lower one)
    headroom: float = math.inf
    #: whether the ``spread`` rule ever kept a fresh group from the candidates (while cores
    #: and the weights' reserve allowed one): if not, any larger spread gives this one again
    spread_limited: bool = True
    #: whether local copies go to the engine ``Target.copy_unit`` names (else the DMA engine)
    vector_copies: bool = True


def _copy_engine(lg: LoweredGraph, t: Task, target: Target, vector: bool = True) -> tuple[str, float]:
    """``(unit kind, bytes per second)`` of the engine that assembles ``t``'s operands from
    local pieces (:meth:`Target.copy_unit` for the item size of its first assembled
    operand; the emitter picks the same, ``emit``). O(inputs)."""
    o = next((o for o in t.inputs if o is not None and o.whole_piece() is None), None)
    itemsize = np.dtype(o.dtype).itemsize if o is not None else 1
    kind = target.copy_unit(itemsize, vector)
    return kind, target.copy_bytes_per_s(kind, itemsize)


def copies_choose_engine(lg: LoweredGraph, target: Target) -> bool:
    """Whether some task assembles an operand whose copy ``Target.copy_unit`` would put on a
    vector engine (so that ``cluster(vector_copies=...)`` changes anything; an int8 graph on
    the ``npu`` preset has none). O(tasks + pieces)."""
    return any(copied_bytes(lg, t) and _copy_engine(lg, t, target)[0] != "dma" for t in lg.tasks)


def cluster(lg: LoweredGraph, target: Target, acyclic: bool = True, spread: float = 1.5,
            headroom: float = 0.0, insert: bool = False, vector_copies: bool = True,
            reserve_pieces: bool = False, packed: list[int] | None = None) -> Clustering:
    """Tasks onto groups (module docstring).

    A fresh group opens only while the groups open stay within ``spread`` times the
    share of the work scheduled so far (``k * spread * done / total``) and enough cores
    remain for the weights still to place, unless no open group can take the task. With
    ``acyclic`` False the direction constraint is dropped (the programs stay deadlock-free
    either way; see :mod:`corefold.backend.executable`).

    ``headroom`` > 0 leaves room for more than the largest working set: a task bringing
    weights goes to a group where the weights then leave less than ``1 + headroom`` times
    the group's largest working set only when no candidate (a fresh group included)
    leaves that much. The SRAM plan holds more than one step's working set (buffers kept
    for sends, prefetched inputs, assembled operands), and a core packed with weights
    spills and stages the rest through DRAM.

    ``insert``: *insertion* list scheduling (as HEFT does): a task may start in an idle gap
    of an engine of its group, and a transfer in an idle gap of its sender's outgoing and
    its reader's incoming links (:class:`_Timeline`), instead of only after everything
    placed on them before. Tasks are placed in file order, layer after layer, so without it
    a band of ``fire2`` whose operands are ready at 3 us is timed (and so ordered) behind
    the last band of ``conv1`` on its core, which waits for the input's last share until
    23 us; with it the clustering fills the gaps, opens fewer groups and runs some models
    faster (int8 ResNet-18 119.3 -> 109.4 us) and others slower (int8 SqueezeNet 40.6 ->
    53.9), so the lowering tries both. The DMA engine and DRAM stay queues in file order.

    ``vector_copies``: a task's operands assembled from local pieces are copied on the
    engine ``Target.copy_unit`` names (a vector engine for float32 on the ``npu`` preset),
    else on the DMA engine; the emitter follows (:attr:`Clustering.vector_copies`).

    ``reserve_pieces``: the fresh cores kept for the weights still to place count those
    weights once per task that reads them (as if every piece ran on a core of its own, the
    row bands of a convolution each with a copy of its weights), not once per weight: more
    cores stay fresh for the later layers. Without it the int8 Inception v1's last
    convolutions, whose weights are a third of its 7 MB, found the early layers spread over
    every core and ran as 36 pieces on 7 cores (135.1 us; 97.7 with it on from the start,
    104.5 as :func:`~corefold.backend.lower.lower` tries it, after the tilings).

    ``packed``: each task's core as :func:`corefold.backend.pack.pack` chose it (groups numbered in the order
    their first task comes); only the times are list-scheduled, and neither the outputs
    held for later readers (the SRAM plan spills them), the NoC streams (the emitted
    program is checked for them) nor the direction constrain it.

    Raises:
        CompileError: ``core count`` when the tasks need more cores than the target has
            usable; ``SRAM`` when one task's weights and working set exceed a core;
            ``NoC buffers`` when a task reads from more cores than a core can receive from.
    """
    return _Clusterer(lg, target, acyclic, spread, headroom, insert, vector_copies, reserve_pieces, packed).run()


class _Clusterer:
    def __init__(self, lg: LoweredGraph, target: Target, acyclic: bool, spread: float, headroom: float = 0.0,
                 insert: bool = False, vector_copies: bool = True, reserve_pieces: bool = False,
                 packed: list[int] | None = None):
        self.lg = lg
        self.packed = packed
        self.group_of_core: dict[int, int] = {}
        self.reserve_pieces = reserve_pieces
        self.insert = insert
        self.vector_copies = vector_copies
        self.target = target
        self.acyclic = acyclic
        self.spread = spread
        self.headroom = headroom
        self.k_max = len(target.usable_cores)
        # NOTE: buffers are 64-byte aligned; keep 1% for the allocator's fragmentation
        self.cap = int(0.99 * target.sram_bytes)
        self.wsize = [-(-p.nbytes // 64) * 64 for p in lg.phys]
        self.streams = target.noc_streams_per_core
        # NOTE: a core's traffic leaves and enters over about two of its four links
        self.link = 2 * target.noc_link_bytes_per_cycle * target.clock_hz
        self.lat = ASSUMED_HOPS * target.noc_hop_latency_cycles / target.clock_hz
        self.dram = min(target.dram_bytes_per_s, target.units["dma"].throughput * target.clock_hz)
        n = len(lg.tasks)
        self.group = np.full(n, -1, np.int64)
        self.start = np.zeros(n)
        self.end = np.zeros(n)
        # per group: unit free times, resident constants and their bytes, largest working
        # set, reachability (bit h of reach[g] set iff g reaches h), sending groups
        self.free: list[dict[str, list[float]]] = []
        self.consts: list[set[int]] = []
        self.wbytes: list[int] = []
        self.wsmax: list[int] = []
        self.reach: list[int] = []
        self.reached_by: list[int] = []
        self.sources: list[set[int]] = []
        self.traffic: dict[tuple[int, int], float] = {}
        # outputs held in a group's SRAM until every reader is placed; NoC and DRAM queues
        self.held: list[int] = []
        self.egress: list[float] = []
        self.ingress: list[float] = []
        self.egress_tl: list[_Timeline] = []
        self.ingress_tl: list[_Timeline] = []
        self.unit_tl: list[dict[str, list[_Timeline]]] = []
        self.dram_free = 0.0
        self.reserved = 0
        self.readers_left = [0] * n
        edges = node_edges(lg)
        for e in edges:
            for p in e:
                self.readers_left[p] += 1
        # readers with more producers than a core has receive streams: the groups their
        # producers went to so far (a producer placed elsewhere once these number
        # ``streams`` would leave the reader no core to receive on)
        self.wide_readers: list[list[int]] = [[] for _ in range(n)]
        self.fanin: dict[int, set[int]] = {}
        for t, e in enumerate(edges):
            if len(e) > self.streams:
                self.fanin[t] = set()
                for p in e:
                    self.wide_readers[p].append(t)

    def _copy_on(self, g: int, kind: str, ready: float, seconds: float) -> None:
        """Book a copy of ``seconds`` on the engine of ``kind`` of group ``g`` that frees
        first, from ``ready`` (with ``insert``, into the earliest gap that holds it)."""
        units = self.free[g][kind]
        i = units.index(min(units))
        if self.insert:
            tl = self.unit_tl[g][kind][i]
            st = tl.fit(ready, seconds)
            tl.add(st, seconds)
            units[i] = max(units[i], st + seconds)
        else:
            units[i] = max(units[i], ready) + seconds

    def open_group(self) -> int:
        g = len(self.free)
        self.free.append({k: [0.0] * u.count for k, u in self.target.units.items()})
        self.consts.append(set())
        self.wbytes.append(0)
        self.wsmax.append(0)
        self.reach.append(1 << g)
        self.reached_by.append(1 << g)
        self.sources.append(set())
        self.held.append(0)
        self.egress.append(0.0)
        self.ingress.append(0.0)
        self.egress_tl.append(_Timeline())
        self.ingress_tl.append(_Timeline())
        self.unit_tl.append({k: [_Timeline() for _ in range(u.count)] for k, u in self.target.units.items()})
        return g

    def best_group(self, t: Task, cands: list[int], preds: dict[int, float], tc: list[int], ws: int,
                   remaining_w: int = 0):
        """(key, group, start) of the candidate where ``t`` finishes first, or None; one
        that is not crowded (:func:`cluster`'s ``headroom``) first.

        Memory budget: the SRAM the groups reserve (resident weights plus largest working
        set) plus the weights still to place must stay within 90% of all cores' SRAM; a
        candidate that would break it is taken only if none keeps it, the one reserving
        the least then.
        """
        lg = self.lg
        # per producers' group: bytes read, latest end, latest send (O(preds) once, so that
        # each candidate costs O(1) for them; byte counts are whole numbers, so the sums
        # are exact in any order)
        group_of = {p: int(self.group[p]) for p in preds}
        by_bytes: dict[int, float] = {}
        by_end: dict[int, float] = {}
        by_sent: dict[int, float] = {}
        for p, b in preds.items():
            h = group_of[p]
            # (with insert, a local producer's entry goes unused)
            s = (self.egress_tl[h].fit(self.end[p], b / self.link) if self.insert
                 else max(self.end[p], self.egress[h]))
            by_bytes[h] = by_bytes.get(h, 0.0) + b
            by_end[h] = max(by_end.get(h, -math.inf), self.end[p])
            by_sent[h] = max(by_sent.get(h, -math.inf), s)
        pred_groups = set(by_bytes)
        pmask = 0
        for g in pred_groups:
            pmask |= 1 << g
        total_bytes = sum(by_bytes.values())
        # the two latest-sending groups: the latest send from any group but g
        top = sorted(by_sent.items(), key=lambda kv: -kv[1])[:2]
        in_bytes = input_bytes(lg, t)
        copies = copied_bytes(lg, t)
        copied_by: dict[int, float] = {}
        for p, b in copies.items():
            h = int(self.group[p])
            copied_by[h] = copied_by.get(h, 0.0) + b
        copy_kind, copy_rate = _copy_engine(lg, t, self.target, self.vector_copies) if copies else ("dma", 1.0)
        best = None
        thrifty = None
        budget = 0.9 * self.k_max * self.cap - self.reserved - remaining_w
        # the readers of many producers that already receive from as many cores as a core may
        full_readers = [self.fanin[r] for r in self.wide_readers[t.id] if len(self.fanin[r]) >= self.streams]
        unit_tls = self.unit_tl
        self.rejected = rejected = {"direction": 0, "SRAM": 0, "NoC buffers": 0}
        # (the loop below reads these once per candidate: locals, not attributes)
        packed = self.packed is not None
        direction = self.acyclic and not packed
        reach, consts, wsize, wsmax, wbytes = self.reach, self.consts, self.wsize, self.wsmax, self.wbytes
        held_by, sources, free, ingress_of = self.held, self.sources, self.free, self.ingress
        cap, grow, streams, link, lat = self.cap, 1 + self.headroom, self.streams, self.link, self.lat
        insert, ingress_tl, dram_free, dram = self.insert, self.ingress_tl, self.dram_free, self.dram
        unit, seconds = t.unit, t.seconds
        tc_w = [(c, wsize[c]) for c in tc]
        n_pred_groups = len(pred_groups)
        n_by_bytes = len(by_bytes)
        for g in cands:
            mine = by_bytes.get(g, 0.0)  # (held inputs are part of the working set)
            remote = n_by_bytes - (g in by_bytes) > 0
            rbytes = total_bytes - mine
            if g >= 0:
                if direction and reach[g] & pmask & ~(1 << g):
                    rejected["direction"] += 1
                    continue  # g reaches a producer's group: a cycle
                new_w = 0
                if tc_w:
                    cg = consts[g]
                    for c, w in tc_w:
                        if c not in cg:
                            new_w += w
                wsmax_g = wsmax[g]
                most = wsmax_g if wsmax_g > ws else ws
                wb = wbytes[g]
                crowded = new_w > 0 and wb + new_w + grow * most > cap
                held = 0 if packed else max(0, held_by[g] - mine)
                if wb + new_w + most + held > cap:
                    rejected["SRAM"] += 1
                    continue
                if (not packed and len(sources[g]) + n_pred_groups > streams
                        and len(sources[g] | (pred_groups - {g})) > streams):
                    rejected["NoC buffers"] += 1
                    continue
                if not packed and full_readers and any(g not in f for f in full_readers):
                    rejected["NoC buffers"] += 1
                    continue  # a reader of many producers would receive from too many cores
                ingress = ingress_of[g]
                units = free[g]
                unit_free = min(units[unit])
                dma_free = min(units["dma"])
                delta = new_w + max(0, ws - wsmax_g)
            else:
                if not packed and n_pred_groups > streams:
                    continue
                if not packed and full_readers:
                    rejected["NoC buffers"] += 1
                    continue
                ingress = 0.0
                unit_free = 0.0
                dma_free = 0.0
                delta = sum(w for _, w in tc_w) + ws
                crowded = False
            # the core's one DMA engine loads the graph-input bands; local pieces are copied
            # by the engine Target.copy_unit names (float32 on the npu preset: a vector engine)
            loaded = max(dram_free, dma_free) + in_bytes / dram if in_bytes else 0.0
            ready = max(by_end[g], loaded) if g in by_end else loaded
            mine_copied = copied_by.get(g, 0.0)
            if mine_copied:
                copy_free = dma_free if copy_kind == "dma" else (min(free[g][copy_kind]) if g >= 0 else 0.0)
                ready = max(ready, copy_free) + mine_copied / copy_rate
            if remote:
                first = top[1][1] if top[0][0] == g else top[0][1]
                if insert:
                    arrive = ingress_tl[g].fit(first, rbytes / link) if g >= 0 else first
                    ready = max(ready, arrive + lat + rbytes / link)
                else:
                    ready = max(ready, max(first, ingress) + lat + rbytes / link)
            if insert and g >= 0 and unit != "dma":
                st = math.inf
                for tl in unit_tls[g][unit]:
                    f = tl.fit(ready, seconds)
                    if f < st:
                        st = f
            else:
                st = max(ready, unit_free)
            key = (crowded, st + seconds, 0 if g in pred_groups else 1, 1 if g < 0 else 0, g)
            if delta <= budget and (best is None or key < best[0]):
                best = (key, g, st)
            if thrifty is None or (delta, key) < thrifty[0]:
                thrifty = ((delta, key), g, st)
        if best is None and thrifty is not None:
            return (thrifty[0][1], thrifty[1], thrifty[2])
        return best

    def candidates(self, t: Task, preds: dict[int, float]) -> list[int]:
        """The groups worth trying first: the producers' and the few whose unit of the
        task's kind frees up first (O(k) with a partial sort, not O(k) evaluations)."""
        opened = len(self.free)
        if opened <= CANDIDATES:
            return list(range(opened))
        own = {int(self.group[p]) for p in preds}
        free = np.fromiter((min(f[t.unit]) for f in self.free), np.float64, opened)
        early = np.argpartition(free, CANDIDATES - 1)[:CANDIDATES]
        room = np.array(self.wbytes) + np.array(self.wsmax) + np.array(self.held)
        roomy = np.argpartition(room, CANDIDATES // 2 - 1)[:CANDIDATES // 2]
        # groups already reserving a large working set take a large one for free
        reserving = np.argpartition(-np.array(self.wsmax), CANDIDATES // 2 - 1)[:CANDIDATES // 2]
        return sorted(own | {int(g) for g in early} | {int(g) for g in roomy} | {int(g) for g in reserving})

    def run(self) -> Clustering:
        lg, cap = self.lg, self.cap
        edges = node_edges(lg)
        total_work = sum(t.seconds for t in lg.tasks) or 1.0
        done_work = 0.0
        const_users: dict[int, int] = {}
        for t in lg.tasks:
            for c in lg.consts_of(t):
                const_users[c] = const_users.get(c, 0) + 1
        remaining_w = sum(self.wsize[c] for c in const_users)
        # reserve_pieces: the weights still to place counted once per task reading them
        demand = sum(self.wsize[c] for t in lg.tasks for c in lg.consts_of(t)) if self.reserve_pieces else 0
        limited = False
        for t in lg.tasks:
            tc = lg.consts_of(t)
            done_work += t.seconds
            ws = lg.working_bytes(t)
            own = sum(self.wsize[c] for c in tc)
            if own + ws > cap:
                raise CompileError("SRAM", "every core", own + ws, cap,
                                   f"task '{t.name}' with its weights and working set")
            preds = edges[t.id]
            own_new = sum(self.wsize[c] for c in tc if const_users[c] == 1)
            if self.reserve_pieces:
                demand -= own
            reserve = int(np.ceil(max(0, demand if self.reserve_pieces else remaining_w - own_new) / (0.9 * cap)))
            budget = int(np.ceil(self.k_max * min(1.0, self.spread * done_work / total_work)))
            opened = len(self.free)
            could_open = opened < self.k_max and self.k_max - opened - 1 >= reserve
            may_open = could_open and opened < max(budget, 1)
            limited |= could_open and not may_open
            rest = remaining_w - own_new
            if self.packed is not None:
                best = self.best_group(t, [self.group_of_core.get(self.packed[t.id], -1)], preds, tc, ws, rest)
                if best is not None and best[1] < 0:
                    best = (best[0], self.open_group(), best[2])
                    self.group_of_core[self.packed[t.id]] = best[1]
            else:
                best = self.best_group(t, self.candidates(t, preds) + ([-1] if may_open else []), preds, tc, ws, rest)
            if best is None and self.packed is None and opened > len(self.candidates(t, preds)):
                best = self.best_group(t, list(range(opened)) + ([-1] if may_open else []), preds, tc, ws, rest)
            if best is None and self.packed is None and not may_open and opened < self.k_max:
                best = self.best_group(t, [-1], preds, tc, ws, rest)
            if best is None:
                self.fail(t, preds)
            _, g, st = best
            if g < 0:
                g = self.open_group()
            self.assign(t, g, st, tc, ws, preds)
            for c in tc:
                const_users[c] -= 1
                if const_users[c] == 0:
                    remaining_w -= self.wsize[c]
        kept = [(self.cap - w) / m - 1 for w, m in zip(self.wbytes, self.wsmax, strict=True) if w > 0 and m > 0]
        return Clustering(self.group, self.start, self.end, len(self.free), self.consts, self.traffic,
                          float(self.end.max(initial=0.0)), min(kept, default=math.inf), limited,
                          self.vector_copies)

    def assign(self, t: Task, g: int, st: float, tc: list[int], ws: int, preds: dict[int, float]) -> None:
        self.group[t.id] = g
        for r in self.wide_readers[t.id]:
            self.fanin[r].add(g)
        self.start[t.id] = st
        self.end[t.id] = st + t.seconds
        copies = sum(b for p, b in copied_bytes(self.lg, t).items() if self.group[p] == g)
        copy_kind, copy_rate = _copy_engine(self.lg, t, self.target, self.vector_copies) if copies else ("dma", 1.0)
        units = self.free[g][t.unit]
        if self.insert and t.unit != "dma":
            tls = self.unit_tl[g][t.unit]
            e = min(range(len(tls)), key=lambda i: (tls[i].fit(st, t.seconds), i))
            tls[e].add(st, t.seconds)
            units[e] = max(units[e], self.end[t.id])
        else:
            units[units.index(min(units))] = self.end[t.id]
        before = self.wbytes[g] + self.wsmax[g]
        for c in tc:
            if c not in self.consts[g]:
                self.consts[g].add(c)
                self.wbytes[g] += self.wsize[c]
        # NOTE: what the group holds for later readers is live beside this working set
        mine = sum(b for p, b in preds.items() if self.group[p] == g)
        # (packed: the SRAM plan spills what the core holds for later readers)
        self.wsmax[g] = max(self.wsmax[g], ws + (0 if self.packed is not None else max(0, self.held[g] - int(mine))))
        self.reserved += self.wbytes[g] + self.wsmax[g] - before
        if copies and copy_kind != "dma":  # booked after t took its unit (a vector task: on the other engine)
            self._copy_on(g, copy_kind, max([self.end[p] for p in preds if self.group[p] == g]), copies / copy_rate)
            copies = 0
        in_bytes = input_bytes(self.lg, t)
        if in_bytes or copies:  # the DMA engine as best_group timed it
            dma = self.free[g]["dma"]
            i = dma.index(min(dma))
            if in_bytes:
                dma[i] = max(self.dram_free, dma[i]) + in_bytes / self.dram
            if copies:
                local = [self.end[p] for p in preds if self.group[p] == g]
                dma[i] = max([dma[i], *local]) + copies / copy_rate
        if in_bytes:
            self.dram_free += in_bytes / self.dram
        remote_end = 0.0
        first, rbytes = 0.0, 0.0
        for p, b in preds.items():
            u = int(self.group[p])
            self.readers_left[p] -= 1
            if self.readers_left[p] == 0:
                self.held[u] -= self._out_bytes(p)
            if u != g:
                self.sources[g].add(u)
                self.traffic[(u, g)] = self.traffic.get((u, g), 0.0) + b
                if self.insert:
                    sp = self.egress_tl[u].fit(self.end[p], b / self.link)
                    self.egress_tl[u].add(sp, b / self.link)
                    first, rbytes = max(first, sp), rbytes + b
                self.egress[u] = max(self.egress[u], self.end[p]) + b / self.link
                remote_end = max(remote_end, self.egress[u])
                if self.acyclic and not self.reach[u] >> g & 1:
                    _connect(self.reach, self.reached_by, u, g)
        self.ingress[g] = max(self.ingress[g], remote_end)
        if self.insert and rbytes:
            self.ingress_tl[g].add(self.ingress_tl[g].fit(first, rbytes / self.link), rbytes / self.link)
        if self.readers_left[t.id] > 0:
            self.held[g] += self._out_bytes(t.id)

    def _out_bytes(self, t: int) -> int:
        return sum(self.lg.phys[o].nbytes for o in self.lg.tasks[t].outputs)

    def fail(self, t: Task, preds: dict[int, float]):
        pred_groups = {int(self.group[p]) for p in preds}
        target = self.target
        if len(pred_groups) > self.streams:
            raise CompileError("NoC buffers", "every core", len(pred_groups) * target.noc_stream_buffer_bytes,
                               target.noc_buffer_bytes, f"task '{t.name}' reads from {len(pred_groups)} cores")
        full = [r for r in self.wide_readers[t.id] if len(self.fanin[r]) >= self.streams]
        if full and self.rejected.get("NoC buffers"):
            r = self.lg.tasks[full[0]]
            raise CompileError("NoC buffers", "every core", (self.streams + 1) * target.noc_stream_buffer_bytes,
                               target.noc_buffer_bytes, f"task '{r.name}' reads from {self.streams} "
                               f"core{'s' if self.streams != 1 else ''} already, none with room for its "
                               f"producer '{t.name}'")
        need = _cores_needed(self.lg, target)
        why = ", ".join(f"{v} by {k}" for k, v in self.rejected.items() if v)
        raise CompileError("core count", f"target '{target.name}'", max(need, self.k_max + 1), self.k_max,
                           f"no core can take task '{t.name}'" + (f": cores refused {why}" if why else ""))


def _connect(reach: list[int], reached_by: list[int], u: int, g: int) -> None:
    """Add the group edge u -> g to the reachability bitsets. O(k) big-int operations."""
    add = reach[g]
    src = reached_by[u]
    w = src
    while w:
        low = w & -w
        i = low.bit_length() - 1
        reach[i] |= add
        w ^= low
    w = add
    while w:
        low = w & -w
        i = low.bit_length() - 1
        reached_by[i] |= src
        w ^= low


def _cores_needed(lg: LoweredGraph, target: Target) -> int:
    """A lower bound on the cores the resident weights need (their total over the SRAM)."""
    total = sum(p.nbytes for p in lg.phys if p.kind == "const")
    return int(np.ceil(total / target.sram_bytes))
