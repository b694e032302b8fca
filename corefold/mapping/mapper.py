"""The mapper: neuron-level topology -> one core per neuron, capacities never exceeded.

Phases (SPEC M4), each with a progress bar on stderr:

1. coarsen (:mod:`.partition.coarsen`) with heavy-edge matching;
2. initial partition (:mod:`.partition.recursive`) of the coarsest graph by recursive
   greedy-growing bisection (:mod:`.partition.initial`). Strategy ``topology`` (default) splits along the target
   region, so every part is born on a core (dual recursive bisection); strategy ``seed``
   splits by part count and places afterwards;
3. uncoarsen and refine (:mod:`.partition.refine`): project, repair capacities, refine
   (hop-weighted traffic for ``topology``, the cut for ``seed``);
4. place (:mod:`.place.initial`, :mod:`.place.force`): region bisection of the group graph
   (``seed``), then force-directed and pairwise swaps on the group graph.

Memory: the hierarchy is a list of CSR levels (int32 indices, float64 weights); no Python
object per vertex or edge.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field, replace

import numpy as np

from corefold.errors import CapacityError, TargetError
from corefold.mapping import objectives
from corefold.mapping.nets import contract as contract_nets
from corefold.mapping.nets import fanout_of, hypergraph_of
from corefold.mapping.parallel import run_indexed
from corefold.mapping.partition.anneal import anneal_vertices
from corefold.mapping.partition.coarsen import coarsen, finest_level
from corefold.mapping.partition.exchange import refine_with_exchanges
from corefold.mapping.partition.multicast import MULTICAST_MAX_STATE, refine_multicast
from corefold.mapping.partition.recursive import halves, recursive_bisection
from corefold.mapping.partition.refine import refine, repair_capacity
from corefold.mapping.place.force import improve_placement
from corefold.mapping.place.initial import choose_region, place_groups, region_split
from corefold.mapping.settings import MapSettings
from corefold.mapping.topology.model import Topology


@dataclass
class Mapping:
    """Result: ``core_xy`` int64 (n, 2) global core coordinates per vertex, and a summary."""

    core_xy: np.ndarray
    summary: dict = field(default_factory=dict)


def _bar(enabled: bool, desc: str, total: int | None = None, disable_reason: bool = False):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="step", file=sys.stderr, leave=False,
                disable=not enabled or disable_reason)


def core_capacities(target) -> np.ndarray:
    """(neurons, synapses) per core as int64 (2,); synapses unbounded (int64 max / 2^20) if unset.

    Raises:
        TargetError: the target has no neuron capacity.
    """
    if target.neurons_per_core is None:
        raise TargetError(f"target '{target.name}' has no core.neurons (neurons per core); "
                          "use a neuromorphic target or --neurons-per-core")
    syn = target.synapses_per_core if target.synapses_per_core is not None else np.iinfo(np.int64).max >> 20
    return np.array([target.neurons_per_core, syn], np.int64)


def map_topology(topo: Topology, target, settings: MapSettings | None = None, seed: int = 0,
                 progress: bool | None = None) -> Mapping:
    """Map every vertex of ``topo`` to one core of ``target``.

    Args:
        topo: symmetric weighted graph with neuron and synapse loads per vertex.
        target: a :class:`corefold.target.Target` with ``neurons_per_core`` (and optionally
            ``synapses_per_core``, ``unusable_cores``, several chips).
        settings: mapper knobs (default preset if None).
        seed: seeds every random choice; same input and seed give the same mapping.
        progress: show progress bars (default: when stderr is a terminal).

    Returns:
        a :class:`Mapping`; every core holds at most its capacity in every dimension.

    Raises:
        CapacityError: the topology cannot fit the usable cores, or one vertex exceeds a core.
        TargetError: the target has no neuron capacity.
    """
    settings = settings or MapSettings()
    show = sys.stderr.isatty() if progress is None else progress
    t0 = time.perf_counter()
    runs = restarts_for(topo, settings)
    if runs <= 1:
        rng = np.random.default_rng(seed)
        m = _map_once(topo, target, settings, rng, show)
        _anneal_small(topo, target, settings, m, rng)
        m = _multicast_from_synapse(topo, target, settings, m, rng, show)
        m.summary["seconds"] = time.perf_counter() - t0
        return m
    seeds = np.random.default_rng(seed).integers(0, 2**31, runs)
    # NOTE: the runs share ``restart_anneal_share`` of one run's annealing budget (measured
    # on lenet: a tenth of it anneals the 36 groups as well as all of it).
    settings = replace(settings, anneal_steps_per_group=int(settings.anneal_steps_per_group
                                                            * settings.restart_anneal_share / runs))
    threads = settings.worker_threads()
    inner = replace(settings, threads=max(1, threads // runs))

    def run(r: int) -> Mapping:
        return _map_once(topo, target, inner, np.random.default_rng(int(seeds[r])), show and threads == 1)

    results = run_indexed(run, runs, threads)
    best = min(((m.summary["traffic_estimate"], r), m) for r, m in enumerate(results))
    m = best[1]
    rng = np.random.default_rng(int(seeds[best[0][1]]))
    _anneal_small(topo, target, settings, m, rng)
    m = _multicast_from_synapse(topo, target, settings, m, rng, show)
    m.summary["restarts"] = runs
    m.summary["seconds"] = time.perf_counter() - t0
    return m


def _multicast_from_synapse(topo: Topology, target, settings: MapSettings, m: Mapping, rng: np.random.Generator,
                            show: bool) -> Mapping:
    """Under the multicast objective (``settings.multicast_synapse_start``): also map on the
    synapse objective, refine that mapping on the XY multicast trees
    (:func:`~.partition.multicast.refine_multicast`), and return whichever of it and ``m``
    has less multicast traffic. On dense CNN graphs a spike's destinations are nearly its
    synapse neighbourhood and the edge-weighted bisections win (cifar-cnn); on sparse ones
    the net-cut bisections do (mobilenet-tiny). O(one synapse mapping + the refinement).
    """
    if settings.objective != "multicast" or not settings.multicast_synapse_start or topo.num_vertices == 0:
        return m
    t = time.perf_counter()
    alt = _map_once(topo, target, replace(settings, objective="synapse"), rng, show)
    cores, part = np.unique(alt.core_xy, axis=0, return_inverse=True)
    part = part.reshape(-1).astype(np.int64)
    k = cores.shape[0]
    fan = fanout_of(topo)
    if topo.num_vertices * k <= MULTICAST_MAX_STATE:
        loads = objectives.loads_of(topo)
        level = finest_level(topo, loads)
        refine_multicast(level.indptr, level.indices, fan, loads, part, objectives.part_fill(loads, part, k),
                         np.repeat(core_capacities(target)[None, :], k, axis=0), cores, target.width,
                         target.mesh_width, target.mesh_height, target.interchip_hop_cost, rng,
                         settings.multicast_passes, settings.debug)
    core_xy = cores[part].astype(np.int64)
    traffic = objectives.multicast_traffic(fan, core_xy, target.width, target.height, target.mesh_width,
                                           target.mesh_height, target.interchip_hop_cost)
    m.summary.setdefault("time", {})["synapse_start"] = time.perf_counter() - t
    m.summary["synapse_start_traffic"] = traffic
    if traffic < m.summary["traffic_estimate"]:
        m.core_xy = core_xy
        m.summary.update(traffic_estimate=traffic, start="synapse", cores_used=k)
    return m


def _anneal_small(topo: Topology, target, settings: MapSettings, m: Mapping, rng: np.random.Generator) -> None:
    """Graphs under ``restart_work`` vertices: anneal single vertices between the chosen
    cores (:func:`~.partition.anneal.anneal_vertices`, ``vertex_anneal_steps`` per vertex),
    then one more round of moves, swaps and ejections; ``m`` is updated in place.
    O(steps * mean degree)."""
    n = topo.num_vertices
    if (n == 0 or n >= settings.restart_work or settings.vertex_anneal_steps <= 0 or settings.strategy != "topology"
            or settings.objective == "multicast"):  # NOTE: the annealing's deltas are per synapse
        return
    t = time.perf_counter()
    cores, part = np.unique(m.core_xy, axis=0, return_inverse=True)
    part = part.reshape(-1).astype(np.int64)
    k = cores.shape[0]
    loads = objectives.loads_of(topo)
    caps = np.repeat(core_capacities(target)[None, :], k, axis=0)
    fill = objectives.part_fill(loads, part, k)
    dist = objectives.hop_distance_matrix(cores, target.mesh_width, target.mesh_height, target.interchip_hop_cost)
    level = finest_level(topo, loads)
    args = (level.indptr, level.indices, level.weights, loads, part, fill, caps, dist)
    anneal_vertices(*args, min(settings.vertex_anneal_steps * n, settings.vertex_anneal_max_steps),
                    int(rng.integers(2**31)), settings.anneal_chains, settings.worker_threads())
    refine_with_exchanges(*args, rng, settings.vertex_swap_rounds, settings.refine_passes,
                          settings.vertex_swap_min_gain, settings.eject_scan, settings.debug)
    m.core_xy = cores[part].astype(np.int64)
    m.summary["traffic_estimate"] = float(objectives.edge_costs(level.indptr, level.indices, level.weights, part,
                                                                 dist)[1])
    m.summary.setdefault("time", {})["anneal_vertices"] = time.perf_counter() - t


def restarts_for(topo: Topology, settings: MapSettings) -> int:
    """Independent runs for this graph: ``settings.restart_work / vertices``, 1 to ``settings.max_restarts``.

    Small graphs map in a fraction of a second, so several seeded runs (best kept) cost
    little; large ones run once. (Vertices, not edges: the bisections' cost grows with them.)
    """
    return int(min(max(settings.restart_work // max(topo.num_vertices, 1), 1), max(settings.max_restarts, 1)))


def _map_once(topo: Topology, target, settings: MapSettings, rng: np.random.Generator, show: bool) -> Mapping:
    """One run of the four phases; see :func:`map_topology`."""
    times: dict[str, float] = {}
    t0 = time.perf_counter()
    caps = core_capacities(target)
    loads = objectives.loads_of(topo)
    n = topo.num_vertices
    if n == 0:
        return Mapping(np.zeros((0, 2), np.int64), {"cores_used": 0, "traffic_estimate": 0.0})
    too_big = np.flatnonzero((loads > caps[None, :]).any(axis=1))
    if too_big.size:
        v = int(too_big[0])
        raise CapacityError(f"vertex {v} needs {loads[v, 0]} neurons and {loads[v, 1]} synapses, "
                            f"more than one core holds ({caps[0]} neurons, {caps[1]} synapses)")
    usable = np.array(target.usable_cores, np.int64).reshape(-1, 2)
    total = loads.sum(axis=0)
    need = int(max(np.ceil(total / caps).max(), 1))
    if need > usable.shape[0]:
        raise CapacityError(f"{total[0]} neurons and {total[1]} synapses need at least {need} cores of "
                            f"{caps[0]} neurons / {caps[1]} synapses, but the target has {usable.shape[0]} "
                            "usable cores")
    k = int(np.ceil((total / (caps * settings.max_fill)).max()))
    k = max(need, min(k, usable.shape[0], n))
    width, height = target.width, target.height
    mw, mh, kappa = target.mesh_width, target.mesh_height, target.interchip_hop_cost
    slots_xy = choose_region(usable, k, width, height, mw, mh, kappa)
    grid = np.full((height, width), -1, np.int64)
    grid[usable[:, 1], usable[:, 0]] = np.arange(usable.shape[0])
    dist_all = objectives.hop_distance_matrix(usable, mw, mh, kappa)
    slot_caps = np.repeat(caps[None, :], k, axis=0)
    times["setup"] = time.perf_counter() - t0

    # 1. coarsen
    t = time.perf_counter()
    limit = np.maximum(np.floor(caps * settings.matching_limit), 1).astype(np.int64)
    # NOTE: under multicast only the bisections' own coarsening matches on nets (the global
    # hierarchy matches on synapse weights): cifar-cnn's multicast traffic was 2.73e5 with
    # the global hierarchy against 1.67e5 at the finest level, so auto keeps the finest there
    multilevel = settings.bisection_level == "finest" or (
        settings.bisection_level == "auto" and (settings.objective == "multicast"
                                                or topo.indices.shape[0] <= settings.finest_max_entries))
    with _bar(show, "coarsen", disable_reason=multilevel) as bar:
        levels = [finest_level(topo, loads)] if multilevel else coarsen(finest_level(topo, loads), limit, rng, settings.matching_repeats, settings.min_shrink,
                         settings.max_levels, min_vertices=2 * k,
                         expansion=settings.matching_rating == "expansion", progress=lambda nc: bar.update(1),
                         two_hop=settings.two_hop_matching)
    times["coarsen"] = time.perf_counter() - t
    # NOTE: under the multicast objective the partition minimises the nets' connectivity
    # (cut nets in every bisection) and the final refinement the XY multicast trees
    multicast = settings.objective == "multicast"
    fan = fanout_of(topo) if multicast else None
    top_nets = None
    if multicast:
        hyper = hypergraph_of(fan)
        top_nets = (hyper.ptr, hyper.pins, hyper.weight)
        del hyper
        for li in range(len(levels) - 1):
            top_nets = contract_nets(*top_nets, levels[li].coarse_of, levels[li + 1].n)

    # 2. initial partition of the coarsest graph
    t = time.perf_counter()
    top = levels[-1]
    topology_aware = settings.strategy == "topology"
    split = region_split(slots_xy) if topology_aware else halves
    with _bar(show, "initial partition", total=k - 1) as bar:
        part = recursive_bisection(top.indptr, top.indices, top.weights, top.loads, slot_caps, split, rng,
                                   settings.bisection_restarts, slots_xy if topology_aware else None,
                                   multilevel, settings.bisection_matching_repeats, settings.min_shrink,
                                   progress=bar.update, bias_scale=settings.bias_scale,
                                   top_tries=settings.top_bisection_tries,
                                   rebalance_moves=settings.rebalance_moves, threads=settings.worker_threads(),
                                   two_hop=settings.two_hop_matching, rebalance_tolerance=settings.rebalance_tolerance,
                                   coarsest=settings.bisection_coarsest, max_levels=settings.max_levels,
                                   expansion=settings.matching_rating == "expansion", nets=top_nets)
    del top_nets
    pos = grid[slots_xy[:, 1], slots_xy[:, 0]]  # group -> index into usable
    if topology_aware:
        dist = dist_all[np.ix_(pos, pos)]
    else:
        dist = 1.0 - np.eye(k)
    fill = objectives.part_fill(top.loads, part, k)
    coarsest_vertices = top.n
    del top
    times["initial"] = time.perf_counter() - t

    trace: list = []
    # 3. uncoarsen and refine (placement of the coarse groups first, when topology-aware)
    t = time.perf_counter()
    with _bar(show, "uncoarsen", total=len(levels)) as bar:
        for li in range(len(levels) - 1, -1, -1):
            lv = levels[li]
            slack = settings.coarse_slack * li / max(len(levels) - 1, 1)
            level_caps = np.floor(slot_caps * (1.0 + slack)).astype(np.int64)
            if li < len(levels) - 1:
                part = part[lv.coarse_of]
                levels[li + 1] = None  # free the coarser level
            repair_capacity(lv.indptr, lv.indices, lv.weights, lv.loads, part, fill, level_caps, dist)
            if topology_aware and li == len(levels) - 1:
                if multicast and li == 0:
                    q = objectives.multicast_quotient(fan, part, k)
                else:
                    q = objectives.quotient_graph(lv.indptr, lv.indices, lv.weights, part, k)
                improve_placement(q, pos, usable, dist_all, width, height, rng, settings.force_fraction,
                                  settings.force_iterations, settings.swap_passes, settings.swap_radius,
                                  settings.debug, min(settings.anneal_steps_per_group * k, settings.anneal_max_steps),
                                  settings.anneal_max_work, settings.anneal_chains, settings.worker_threads())
                dist = dist_all[np.ix_(pos, pos)]
            if multicast and li == 0:
                gain = 0.0  # the multicast refinement runs once the groups are placed (4.)
            else:
                gain = refine(lv.indptr, lv.indices, lv.weights, lv.loads, part, fill, level_caps, dist, rng,
                              settings.refine_passes if li == 0 else settings.level_refine_passes, settings.debug)
            if settings.trace:
                trace.append((lv.n, objectives.edge_costs(lv.indptr, lv.indices, lv.weights, part, dist), gain))
            bar.update(1)
    finest = levels[0]
    times["uncoarsen"] = time.perf_counter() - t

    # 4. place the groups (seed order) and polish
    t = time.perf_counter()
    with _bar(show, "place") as bar:
        if multicast:
            q = objectives.multicast_quotient(fan, part, k)
        else:
            q = objectives.quotient_graph(finest.indptr, finest.indices, finest.weights, part, k)
        if not topology_aware:
            pos = grid[slots_xy[:, 1], slots_xy[:, 0]][place_groups(q, slots_xy, rng, settings.bisection_restarts)]
        # NOTE: topology-aware groups were annealed before the last refinement already;
        # only the seed order places from scratch here.
        anneal = 0 if topology_aware else min(settings.anneal_steps_per_group * k, settings.anneal_max_steps)
        improve_placement(q, pos, usable, dist_all, width, height, rng, settings.force_fraction,
                          settings.force_iterations, settings.swap_passes, settings.swap_radius, settings.debug,
                          anneal, settings.anneal_max_work, settings.anneal_chains, settings.worker_threads())
        dist = dist_all[np.ix_(pos, pos)]
        if multicast and n * k <= MULTICAST_MAX_STATE:
            refine_multicast(finest.indptr, finest.indices, fan, finest.loads, part, fill, slot_caps, usable[pos],
                             width, mw, mh, kappa, rng, settings.multicast_passes, settings.debug)
        elif topology_aware and settings.vertex_swap_rounds > 0:
            refine_with_exchanges(finest.indptr, finest.indices, finest.weights, finest.loads, part, fill,
                                  slot_caps, dist, rng, settings.vertex_swap_rounds, settings.refine_passes,
                                  settings.vertex_swap_min_gain, settings.eject_scan, settings.debug)
        elif topology_aware or settings.swap_passes > 0:
            refine(finest.indptr, finest.indices, finest.weights, finest.loads, part, fill, slot_caps, dist,
                   rng, settings.refine_passes, settings.debug)
        bar.update(1)
    left = repair_capacity(finest.indptr, finest.indices, finest.weights, finest.loads, part, fill, slot_caps,
                           dist, rounds=100, rng=rng)
    if left:
        raise CapacityError(f"could not fit {total[0]} neurons / {total[1]} synapses into {k} cores of "
                            f"{caps[0]} / {caps[1]}: {left} cores stay over capacity")
    times["place"] = time.perf_counter() - t
    core_xy = usable[pos[part]]
    summary = {
        "cores_used": k,
        "levels": len(levels),
        "coarsest_vertices": int(coarsest_vertices),
        "time": times,
        "trace": trace,
        "traffic_estimate": (objectives.multicast_traffic(fan, usable[pos[part]], width, height, mw, mh, kappa)
                             if multicast else
                             float(objectives.edge_costs(finest.indptr, finest.indices, finest.weights, part, dist)[1])),
        "seconds": time.perf_counter() - t0,
    }
    return Mapping(core_xy, summary)
