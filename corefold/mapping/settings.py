"""Mapper settings: one frozen dataclass with named presets (like KaHIP's fast/eco/strong).

It follows :mod:`corefold.settings`: every field is documented in the ``Attributes:``
section (``corefold map --help-settings`` prints them), :attr:`MapSettings.PRESETS` lists
what each preset changes, and ``corefold map --set NAME=VALUE`` sets any field.

The spec's parameters (SPEC M4) are fields here: the matching limit of 1/15 of a core
(``matching_limit``), the 4 to 8 matching repeats (``matching_repeats``), the 20% stop
(``min_shrink``), the 4 to 8 bisection restarts (``bisection_restarts``), the 5% of groups
(``force_fraction``) and the maximum force-directed iterations (``force_iterations``).
The ``seed`` preset runs them in the seed's order (a global hierarchy, then the cut, then
placement). The default bisects along the target region: graphs of up to
``finest_max_entries`` CSR entries at the finest level, so the global-hierarchy fields
(``matching_limit``, ``matching_repeats``, ``max_levels``'s global use, ``coarse_slack``)
do nothing there (their in-bisection counterparts are ``bisection_coarsest`` and
``bisection_matching_repeats``); larger graphs on the coarsest level of a global hierarchy,
which costs O(m) where re-coarsening at every depth costs O(m log k).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal

from corefold.settings import SettingsError, preset, preset_names


@dataclass(frozen=True)
class MapSettings:
    """Every knob of the mapper. The field defaults are the ``default`` preset.

    Attributes:
        matching_limit: a merged vertex may hold at most this fraction of a core's capacity
            (each of neurons and synapses) while coarsening the global hierarchy (seed:
            1/15). No effect under the default preset on graphs of at most
            ``finest_max_entries`` entries, which it bisects at the finest level
            (``bisection_level="auto"``), coarsening inside each bisection with
            ``bisection_coarsest`` instead.
        matching_repeats: randomised matching passes per level of the global hierarchy; the
            one whose total edge weight dropped most is kept (seed: 4 to 8; 1 by default:
            on cifar-cnn 4 repeats gained 1.4% traffic for 2.5x the coarsening time).
            No effect under the default preset on graphs of at most ``finest_max_entries``
            entries (bisected at the finest level, no global hierarchy); see
            ``bisection_matching_repeats``.
        min_shrink: coarsening stops when a level removes fewer than this fraction of the
            vertices (seed: 0.2); the global hierarchy and the one inside each bisection.
        max_levels: a hard cap on coarsening levels (global hierarchy and each bisection's).
        bisection_restarts: greedy-growing restarts per bisection, cheapest cut kept (seed: 4 to 8).
        max_fill: the mapper uses enough cores that the average fill is at most this, when
            the board has them (slack makes hard capacities easy to keep).
        strategy: ``topology`` bisects the graph along the target region (dual recursive
            bisection, parts are born placed) and refines hop-weighted traffic while
            uncoarsening; ``seed`` cuts first (refinement of the cut), then places the
            groups by region bisection, exactly the seed's order.
        refine_passes: refinement passes on the finest level and in each round of the final
            polish (stops early without gain).
        level_refine_passes: refinement passes on each coarser level of the global
            hierarchy (``bisection_level="coarsest"``); on cifar-cnn one pass per level
            ended at the same finest-level cost as three (1.410e7 against 1.415e7) in half
            the uncoarsening time.
        force_fraction: the share of groups with the largest net force visited per
            force-directed iteration (seed: 0.05).
        force_iterations: maximum force-directed iterations (the seed's "maximum number of
            iterations"; they also stop when no swap helps).
        swap_passes: passes of exact pairwise-swap search on the group graph (0 = off).
        swap_radius: a group is tried against cores within this many hops of its place
            (force-directed and pairwise swaps).
        matching_rating: ``weight`` (the seed's heaviest edge) or ``expansion``
            (w^2 / (n_u n_v)), in every coarsening.
        bisection_level: ``coarsest`` bisects the coarsest graph of the global hierarchy
            (seed); ``finest`` runs every bisection multilevel on the neuron graph itself
            (coarsen the part, grow, FM while uncoarsening), as Scotch does; ``auto``
            (default): ``finest`` up to ``finest_max_entries`` CSR entries, ``coarsest``
            above (always ``finest`` under the multicast objective, whose net-aware
            coarsening runs inside the bisections). ``finest`` re-coarsens every part at each of the log2(k) depths, so it
            costs O(m log k) against ``coarsest``'s O(m): on the bench's cifar-cnn (31.7M
            entries) ``coarsest`` maps in 0.4x the CPU time at 0.7% more traffic
            (docs/mapping.md), while on small graphs with long-range edges ``finest`` is
            far better (small-world: +70% traffic with ``coarsest``). On vgg-small (70.8M
            entries) ``coarsest`` costs 9% traffic for 2.5x less time; the ``strong``
            preset always bisects at the finest level.
        finest_max_entries: see ``bisection_level``.
        bisection_coarsest: inside each multilevel bisection (``bisection_level="finest"``)
            a merged vertex holds at most 1/this of the part's load and coarsening stops
            near this many vertices.
        bias_scale: weight of the outside-neighbour pull in topology-aware bisections
            (Scotch's external gains; 0 by default: on the bench it did not pay, the
            annealing places the parts instead).
        top_bisection_tries: multilevel bisections tried for the (up to three) nodes that
            hold over a quarter of the graph; the cheapest is kept.
        bisection_matching_repeats: matching passes per level inside each multilevel
            bisection (``bisection_level="finest"``); every bisection round re-coarsens the
            graph, so one pass per level is enough there (measured: no loss on the bench,
            40% less time); ``matching_repeats`` applies to the global hierarchy.
        anneal_steps_per_group: simulated-annealing swap trials per group on the group graph
            before the force-directed swaps (0 = off, as in the seed), at most
            ``anneal_max_steps`` in all and at most ``anneal_max_work`` group-graph edge
            visits (dense group graphs get fewer, costlier steps).
        anneal_max_steps: see ``anneal_steps_per_group``.
        anneal_max_work: see ``anneal_steps_per_group``.
        anneal_chains: independent annealing chains sharing those steps, best end kept
            (they run concurrently on ``threads``).
        two_hop_matching: when heavy-edge matching leaves over 10% of a level unmatched,
            pair unmatched vertices that share a neighbour (METIS's 2-hop matching); layered
            CNN graphs otherwise shrink by a third per level.
        coarse_slack: on coarse levels of the global hierarchy refinement may fill a core up
            to (1 + slack) of its capacity, shrinking linearly to 0 at the finest level,
            where repair enforces the exact capacity (no effect under the default preset,
            which has no global hierarchy).
        vertex_swap_rounds: rounds of (move refinement, pairwise vertex swaps between parts)
            on the final placement, until a round's swaps gain nothing or the round gains
            less than ``vertex_swap_min_gain`` of the traffic (0 = moves only).
        vertex_swap_min_gain: see ``vertex_swap_rounds``.
        rebalance_moves: at most this many overflow-lowering moves per bisection level
            when a side is over a capacity (two binding capacities; 0 = off).
        rebalance_tolerance: when two capacities bind, rebalance every bisection level
            towards each side's share of both loads times (1 + this), not just below its
            capacities (``balance.balance_caps``; None = to the capacities).
        eject_scan: the final refinement also pairs each improving move into a full core
            with the cheapest eviction back among this many members of that core
            (``exchange.eject_pass``; 0 = off).
        vertex_anneal_steps, vertex_anneal_max_steps: graphs under ``restart_work``
            vertices get, after the restarts, a simulated annealing of single vertices
            between the chosen cores (moves and swaps, capacities hard) of this many
            proposals per vertex, at most ``vertex_anneal_max_steps`` (0 = off).
        max_restarts, restart_work: graphs with few vertices are mapped
            ``min(max_restarts, restart_work // vertices)`` times with seeds drawn from the
            given seed, and the mapping with the least hop-weighted traffic is kept.
        restart_anneal_share: the restarts share this fraction of one run's annealing steps.
        threads: worker threads (0 = one per CPU): the nodes of one depth of the recursive
            bisection, and seeded restarts, run concurrently. The mapping does not depend on it.
        objective: ``synapse`` counts every synapse's hops (traffic = sum over edges of
            weight x hops); ``multicast`` counts every spike once per link of its XY
            multicast tree to the cores of its destinations (needs the topology's synapse
            directions, else every edge runs both ways): the bisections then cut the fewest
            nets (connectivity) and the final refinement moves vertices on the exact trees.
        multicast_passes: passes of the multicast move refinement on the final placement.
        multicast_synapse_start: under multicast, also map on the synapse objective, refine
            that mapping on the XY multicast trees, and keep whichever has less multicast
            traffic (cifar-cnn: the synapse mapping alone has 1.50e5 against the net-cut
            mapping's 1.67e5; mobilenet-tiny: 2.68e5 against 1.52e5).
        out_of_core: ``auto`` maps an archive out of core (edges streamed from disk, coarse
            levels written beside it, :mod:`corefold.mapping.out_of_core`) when mapping it in
            memory would pass ``memory_budget_gib``; ``always``; ``never``. Synapse
            objective only.
        memory_budget_gib: see ``out_of_core`` (the in-memory mapper needs about 60 bytes
            per edge entry).
        stream_coarsest_entries: out of core, coarsening goes on until a level has at most
            this many edge entries; that level is mapped in memory.
        stream_matching_repeats: out of core, matching passes per level, the one pairing
            most vertices kept; each is a full read of the level (the seed's 4 to 8
            repeats cost 4 to 8 reads).
        stream_refine_passes: out of core, move-refinement passes on each streamed level
            (each a full read of the level; a level stops early when a pass gains less than
            ``vertex_swap_min_gain`` of the traffic).
        stream_finest_refine_passes: the same for the finest level (the input archive, the
            largest read); ``None``: ``stream_refine_passes``.
        stream_deflate_level: out of core, the deflate level of the coarse levels and the
            flagged copies written to the work folder; 0 (default) stores them uncompressed
            (zip method 0), which the archive format allows: deflate was most of the
            contraction's time, and the levels are read back once or twice then deleted.
        debug: recompute every incremental cost from scratch and raise on mismatch.
        trace: record (vertices, (cut, cost), refinement gain) per level in the summary.
    """

    matching_limit: float = 1.0 / 15.0
    matching_repeats: int = 1
    min_shrink: float = 0.2
    max_levels: int = 40
    bisection_restarts: int = 4
    max_fill: float = 0.97
    strategy: Literal["topology", "seed"] = "topology"
    refine_passes: int = 3
    level_refine_passes: int = 1
    force_fraction: float = 0.05
    force_iterations: int = 50
    swap_passes: int = 3
    swap_radius: int = 3
    matching_rating: Literal["weight", "expansion"] = "weight"
    bisection_level: Literal["auto", "finest", "coarsest"] = "auto"
    finest_max_entries: int = 10_000_000
    bisection_coarsest: int = 128
    bias_scale: float = 0.0
    top_bisection_tries: int = 1
    bisection_matching_repeats: int = 1
    anneal_steps_per_group: int = 30_000
    anneal_max_steps: int = 20_000_000
    anneal_max_work: float = 1.5e8
    anneal_chains: int = 2
    two_hop_matching: bool = True
    coarse_slack: float = 0.0
    vertex_swap_rounds: int = 8
    vertex_swap_min_gain: float = 0.005
    rebalance_moves: int = 2000
    rebalance_tolerance: float | None = 0.0
    eject_scan: int = 64
    vertex_anneal_steps: int = 50
    vertex_anneal_max_steps: int = 2_000_000
    max_restarts: int = 4
    restart_work: int = 20_000
    restart_anneal_share: float = 0.3
    threads: int = 0
    objective: Literal["synapse", "multicast"] = "synapse"
    multicast_passes: int = 6
    multicast_synapse_start: bool = True
    out_of_core: Literal["auto", "always", "never"] = "auto"
    memory_budget_gib: float = 4.0
    stream_coarsest_entries: int = 20_000_000
    stream_matching_repeats: int = 1
    stream_refine_passes: int = 3
    stream_finest_refine_passes: int | None = None
    stream_deflate_level: int = 0
    debug: bool = False
    trace: bool = False

    #: What each preset changes from the field defaults (``default``: nothing).
    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {
        # NOTE: one run and short polishing (lenet: 0.35 s against the default's 0.55 s, +12%
        # traffic; cifar-cnn: 4.7 s against 8.5 s of CPU, +7%)
        "fast": dict(matching_repeats=1, bisection_restarts=2, refine_passes=1, stream_refine_passes=1, swap_passes=1,
                     force_iterations=20, anneal_steps_per_group=10_000, max_restarts=1,
                     vertex_swap_rounds=2, eject_scan=0, vertex_anneal_steps=10),
        "strong": dict(matching_repeats=8, bisection_matching_repeats=4, bisection_restarts=8, refine_passes=6,
                       stream_refine_passes=6,
                       level_refine_passes=6, bisection_level="finest",
                       swap_passes=6, swap_radius=5, force_iterations=200, anneal_steps_per_group=300_000,
                       anneal_max_work=1e9,
                       # NOTE: lenet-tight (seeds 0-2): 3.88e5-3.95e5 -> 3.71e5-3.73e5 for +1.8 s;
                       # 100M proposals do no better than 10M (3.69e5)
                       vertex_anneal_steps=1000, vertex_anneal_max_steps=20_000_000),
        # the seed's order of phases: global coarsening (1/15, 4 repeats, 20% stop), cut,
        # then placement by region bisection and force-directed swaps only
        "seed": dict(strategy="seed", bisection_level="coarsest", matching_repeats=4, level_refine_passes=3,
                     swap_passes=0,
                     anneal_steps_per_group=0,
                     rebalance_tolerance=None),
    }

    def __post_init__(self) -> None:
        """Reject values no mapper run can use.

        Raises:
            SettingsError: names the field and the allowed range.
        """
        fractions = {"matching_limit": self.matching_limit, "force_fraction": self.force_fraction,
                     "max_fill": self.max_fill}
        for name, value in fractions.items():
            if not 0.0 < value <= 1.0:
                raise SettingsError(f"{name} = {value}: must be in (0, 1]")
        if not 0.0 <= self.min_shrink < 1.0:
            raise SettingsError(f"min_shrink = {self.min_shrink}: must be in [0, 1)")
        positive = ("matching_repeats", "max_levels", "bisection_restarts", "bisection_coarsest",
                    "bisection_matching_repeats", "top_bisection_tries", "anneal_chains", "max_restarts")
        for name in positive:
            if getattr(self, name) < 1:
                raise SettingsError(f"{name} = {getattr(self, name)}: must be at least 1")
        non_negative = ("refine_passes", "level_refine_passes", "force_iterations", "swap_passes", "swap_radius", "anneal_steps_per_group",
                        "anneal_max_steps", "anneal_max_work", "coarse_slack", "vertex_swap_rounds",
                        "vertex_swap_min_gain", "rebalance_moves", "eject_scan", "vertex_anneal_steps",
                        "vertex_anneal_max_steps", "restart_work", "restart_anneal_share", "threads",
                        "finest_max_entries", "stream_refine_passes")
        for name in non_negative:
            if getattr(self, name) < 0:
                raise SettingsError(f"{name} = {getattr(self, name)}: must not be negative")
        if self.memory_budget_gib <= 0 or self.stream_coarsest_entries < 1 or self.stream_matching_repeats < 1:
            raise SettingsError("memory_budget_gib, stream_coarsest_entries and stream_matching_repeats must be "
                                "positive")
        if self.stream_finest_refine_passes is not None and self.stream_finest_refine_passes < 0:
            raise SettingsError(f"stream_finest_refine_passes = {self.stream_finest_refine_passes}: must not be negative")
        if not 0 <= self.stream_deflate_level <= 9:
            raise SettingsError(f"stream_deflate_level = {self.stream_deflate_level}: must be in 0..9")
        if self.rebalance_tolerance is not None and self.rebalance_tolerance < 0:
            raise SettingsError(f"rebalance_tolerance = {self.rebalance_tolerance}: must not be negative")

    @classmethod
    def preset(cls, name: str) -> "MapSettings":
        """``fast``, ``default``, ``strong`` or ``seed`` (the seed's order of phases).

        Raises:
            SettingsError: unknown preset name.
        """
        return preset(cls, name)

    @classmethod
    def preset_names(cls) -> list[str]:
        """The preset names, ``default`` first."""
        return preset_names(cls)

    def worker_threads(self) -> int:
        """``threads``, with 0 resolved to the CPUs this process may use."""
        if self.threads > 0:
            return self.threads
        import os

        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)

    def with_debug(self, debug: bool = True) -> "MapSettings":
        return replace(self, debug=debug)
