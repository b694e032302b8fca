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
* *NoC buffers*: a group receives from at most ``target.noc_streams_per_core`` others.

It spreads independent pieces of split operators over cores and keeps chains together
when moving data costs more than it saves. Cost: O(V * (k + deg^2) + E * k / 64) for k
groups.

**Mesh placement** (:func:`place_on_mesh`): the groups go onto physical cores with the
M4 kernels of :mod:`corefold.mapping` through a plain weighted graph (the adapter; the
mapper never sees the IR): the best rectangle of usable cores (``choose_region``), region
bisection of the group graph (``place_groups``), then force-directed and pairwise swaps
and annealing (``improve_placement``) minimising hop-weighted traffic
``sum over group pairs of bytes(a, b) * hops(core(a), core(b))``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from corefold.backend.lgraph import LoweredGraph, Task
from corefold.errors import CompileError
from corefold.target import Target

#: Hops a transfer is assumed to cross before the groups are placed on the mesh.
ASSUMED_HOPS = 2.0


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


def _edges(lg: LoweredGraph) -> list[dict[int, float]]:
    """Per task: producer task -> bytes it reads from it."""
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
        for c in t.control:
            e.setdefault(c, 0.0)
        out.append(e)
    return out


def _input_bytes(lg: LoweredGraph, t: Task) -> float:
    total = 0.0
    for o in t.inputs:
        if o is not None:
            for p in o.pieces:
                ph = lg.phys[p.phys]
                if ph.kind == "input":
                    total += p.elements * ph.dtype.itemsize
    return total


def cluster(lg: LoweredGraph, target: Target) -> Clustering:
    """Tasks onto groups (module docstring).

    Raises:
        CompileError: ``core count`` when the tasks need more cores than the target has
            usable; ``SRAM`` when one task's weights and working set exceed a core;
            ``NoC buffers`` when a task reads from more cores than a core can receive from.
    """
    n = len(lg.tasks)
    k_max = len(target.usable_cores)
    cap = target.sram_bytes
    streams = target.noc_streams_per_core
    link = target.noc_link_bytes_per_cycle * target.clock_hz
    lat = ASSUMED_HOPS * target.noc_hop_latency_cycles / target.clock_hz
    dram = min(target.dram_bytes_per_s, target.units["dma"].throughput * target.clock_hz)
    kinds = list(target.units)
    edges = _edges(lg)

    group = np.full(n, -1, np.int64)
    start = np.zeros(n)
    end = np.zeros(n)
    # per group: unit free times, resident constants and bytes, largest working set,
    # reachability (bit g' set in reach[g] iff g reaches g'), sources
    free: list[dict[str, list[float]]] = []
    consts: list[set[int]] = []
    wbytes: list[int] = []
    wsmax: list[int] = []
    reach: list[int] = []
    reached_by: list[int] = []
    sources: list[set[int]] = []
    traffic: dict[tuple[int, int], float] = {}

    def open_group() -> int:
        g = len(free)
        free.append({k: [0.0] * target.units[k].count for k in kinds})
        consts.append(set())
        wbytes.append(0)
        wsmax.append(0)
        reach.append(1 << g)
        reached_by.append(1 << g)
        sources.append(set())
        return g

    for t in lg.tasks:
        tc = lg.consts_of(t)
        ws = lg.working_bytes(t)
        own = sum(lg.phys[c].nbytes for c in tc)
        if own + ws > cap:
            raise CompileError("SRAM", "every core", own + ws, cap,
                               f"task '{t.name}' with its weights and working set")
        preds = edges[t.id]
        pred_groups = {int(group[p]) for p in preds}
        remote_arrival = {p: end[p] + (lat + b / link if b > 0 else lat) for p, b in preds.items()}
        base_ready = max(remote_arrival.values(), default=0.0)
        load = _input_bytes(lg, t) / dram
        pmask = 0
        for g in pred_groups:
            pmask |= 1 << g
        best = None
        candidates = list(range(len(free)))
        fresh = None
        if len(free) < k_max:
            fresh = -1
            candidates.append(fresh)
        for g in candidates:
            if g >= 0:
                if reach[g] & pmask & ~(1 << g):
                    continue  # g reaches a producer's group: a cycle
                new_w = sum(lg.phys[c].nbytes for c in tc if c not in consts[g])
                if wbytes[g] + new_w + max(wsmax[g], ws) > cap:
                    continue
                if len(sources[g] | (pred_groups - {g})) > streams:
                    continue
                ready = 0.0
                for p in preds:
                    ready = max(ready, end[p] if group[p] == g else remote_arrival[p])
                unit_free = min(free[g][t.unit])
            else:
                if len(pred_groups) > streams:
                    continue
                ready = base_ready
                unit_free = 0.0
            st = max(ready + load, unit_free)
            fin = st + t.seconds
            key = (fin, 0 if g in pred_groups else 1, 1 if g < 0 else 0, g)
            if best is None or key < best[0]:
                best = (key, g, st)
        if best is None:
            if len(pred_groups) > streams:
                raise CompileError("NoC buffers", "every core", len(pred_groups) * target.noc_stream_buffer_bytes,
                                   target.noc_buffer_bytes, f"task '{t.name}' reads from {len(pred_groups)} cores")
            need = _cores_needed(lg, target)
            raise CompileError("core count", f"target '{target.name}'", max(need, k_max + 1), k_max,
                               f"no core can take task '{t.name}'")
        _, g, st = best
        if g < 0:
            g = open_group()
        group[t.id] = g
        start[t.id] = st
        end[t.id] = st + t.seconds
        units = free[g][t.unit]
        units[units.index(min(units))] = end[t.id]
        for c in tc:
            if c not in consts[g]:
                consts[g].add(c)
                wbytes[g] += lg.phys[c].nbytes
        wsmax[g] = max(wsmax[g], ws)
        for p, b in preds.items():
            u = int(group[p])
            if u != g:
                sources[g].add(u)
                traffic[(u, g)] = traffic.get((u, g), 0.0) + b
                if not reach[u] >> g & 1:
                    _connect(reach, reached_by, u, g)
    return Clustering(group, start, end, len(free), consts, traffic, float(end.max(initial=0.0)))


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


def place_on_mesh(clustering: Clustering, target: Target, seed: int = 0, effort: int = 1) -> list[tuple[int, int]]:
    """Core ``(x, y)`` of every group, by the M4 placement kernels (module docstring).

    ``effort`` scales the force-directed iterations and annealing steps. Cost: O(W^2 H^2)
    for the region, O((k + nnz) log k) for the bisection, O(steps * degree) for the swaps.
    """
    from corefold.mapping.objectives import hop_distance_matrix
    from corefold.mapping.place.force import improve_placement
    from corefold.mapping.place.initial import choose_region, place_groups

    k = clustering.groups
    usable = np.array(target.usable_cores, np.int64).reshape(-1, 2)
    if k == 0:
        return []
    rows, cols, vals = [], [], []
    for (a, b), w in clustering.traffic.items():
        rows += [a, b]
        cols += [b, a]
        vals += [w, w]
    q = sp.csr_matrix((np.array(vals, np.float64), (np.array(rows, np.int64), np.array(cols, np.int64))),
                      shape=(k, k))
    q.sum_duplicates()
    rng = np.random.default_rng(seed)
    slots = choose_region(usable, k, target.width, target.height, target.mesh_width, target.mesh_height,
                          target.interchip_hop_cost)
    grid = np.full((target.height, target.width), -1, np.int64)
    grid[usable[:, 1], usable[:, 0]] = np.arange(usable.shape[0])
    pos = grid[slots[:, 1], slots[:, 0]][place_groups(q, slots, rng, restarts=2)]
    dist = hop_distance_matrix(usable, target.mesh_width, target.mesh_height, target.interchip_hop_cost)
    if q.nnz:
        improve_placement(q, pos, usable, dist, target.width, target.height, rng, iterations=20 * effort,
                          swap_passes=3, anneal_steps=200 * k * effort, anneal_work=2e6 * effort)
    return [(int(usable[p, 0]), int(usable[p, 1])) for p in pos]
