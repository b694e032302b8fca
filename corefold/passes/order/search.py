"""Execution-order search (SPEC M3 §1-6): the issue order minimising the simulated makespan.

Objective: over topological orders ``pi`` of the graph (data and control edges),

    minimise  makespan(pi)      (simulator.py's simulator, from an idle core)

The graph is cut into segments at key nodes (key_nodes.py); segments run one after
another, so ``pi`` is the concatenation of per-segment orders. Segment ``j`` is searched
from the simulator state left by the chosen orders of segments ``< j`` (units' busy-until
times, residency and ready times carry over, so no overlap across the boundary is lost),
minimising (makespan so far, mean busy-until of the units) lexicographically over:

* with ``baselines``: the file order, the critical-path list schedule (highest bottom
  level first) and the greedy earliest-start list schedule;
* if the segment has at most ``exhaustive_limit`` topological orders: all of them,
  enumerated and simulated (exact for the segment);
* otherwise: ``samples`` sampled orders (perturbed-priority list schedules, or random
  ready choices), the dynamic program over sets of finished ops (ideals) pruned to a beam
  (segments of at most 63 ops), and, with ``local_search``, an iterated local search from
  the best within the segment's share of the budget: random insertion and carry moves
  (a node moved together with the ancestors or descendants it would jump over), restarted
  every ``round_iters`` tries from the best order after ``kicks`` random carry moves.

With ``local_search``, the concatenated order is then polished across segment boundaries
with the rest of the budget; with ``baselines`` it is compared with the whole-graph
baselines (candidates.py) and the best is returned, so the result is never worse than any
of them. ``target_makespan`` stops the search once a complete order reaches it (see
:class:`~corefold.passes.order.settings.OrderSettings`).

Cost: O(#orders * m) for an enumerated segment of m nodes, O((samples + iters) * m)
otherwise; the budget caps the sampled and local-search work.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import ClassVar

import numpy as np

from corefold.errors import CorefoldError
from corefold.ir import Graph, Node
from corefold.passes.order.bound import LowerBound, lower_bound
from corefold.passes.order.candidates import (
    baseline_orders,
    bottom_levels,
    count_orders_capped,
    enumerate_orders,
    local_preds,
)
from corefold.passes.order.key_nodes import segments
from corefold.passes.order.list_schedule import (
    beam_over_ideals,
    iterated_local_search,
    list_schedule,
    local_search,
    random_list_schedules,
)
from corefold.passes.order.settings import DEFAULT, OrderSettings
from corefold.passes.order.simulator import (
    Schedule,
    ScheduleProblem,
    build_problem,
    copy_state,
    evaluate_batch,
    initial_state,
    schedule,
    simulate,
)
from corefold.pipeline import EXACT, CompileContext, PassResult
from corefold.resources import fewer_collections
from corefold.target import Target


@dataclass
class OrderResult:
    """What :func:`order_graph` did.

    ``modified`` is True iff the file order changed. Makespans are in seconds of the
    simulator; ``baselines`` maps each baseline's name to its makespan; ``reached_target``
    says whether the stop rule (``target_makespan``) ended the search.
    """

    graph: Graph
    modified: bool
    order: list[Node]
    makespan_before: float
    makespan_after: float
    bound: LowerBound
    baselines: dict[str, float]
    search_seconds: float
    segments: int
    enumerated_segments: int
    schedule: Schedule
    problem: ScheduleProblem = field(repr=False)
    settings: OrderSettings = DEFAULT
    reached_target: bool = False

    def report(self) -> dict:
        """The JSON report of ``corefold order``."""
        return {
            "makespan_before": self.makespan_before,
            "makespan_after": self.makespan_after,
            "lower_bound": self.bound.value,
            "binding_bound": self.bound.binding,
            "bound_terms": self.bound.terms,
            "ratio_to_bound": self.makespan_after / self.bound.value if self.bound.value > 0 else 1.0,
            "baselines": self.baselines,
            "search_seconds": self.search_seconds,
            "segments": self.segments,
            "enumerated_segments": self.enumerated_segments,
            "modified": self.modified,
            "target_makespan": self.settings.target_makespan,
            "reached_target": self.reached_target,
            "settings": asdict(self.settings),
        }


@dataclass
class SearchOutcome:
    """What :func:`search_order` found: the order (node indices), the number of segments
    and of enumerated ones, and whether it stopped at the target makespan."""

    order: np.ndarray
    segments: int
    enumerated: int
    reached_target: bool = False


def _reached(makespan: float, settings: OrderSettings) -> bool:
    return settings.target_makespan is not None and makespan <= settings.target_makespan


def search_order(problem: ScheduleProblem, graph: Graph, settings: OrderSettings = DEFAULT,
                 progress=None, seed: int = 0) -> SearchOutcome:
    """Search an order for ``problem`` (built from ``graph``), segment by segment (see the
    module docstring); every random choice derives from ``seed``."""
    P = problem.arrays
    n = len(problem.nodes)
    prio = bottom_levels(problem)
    edges = (problem.pred_ptr, problem.pred_idx, problem.succ_ptr, problem.succ_idx)
    segs = [np.array([problem.index[x] for x in s], np.int64) for s in
            segments(graph, settings.key_nodes_per_segment)]
    local = [local_preds(problem, s) for s in segs]
    counts = [count_orders_capped(p, settings.exhaustive_limit) for p in local]
    hard = [len(s) for s, c in zip(segs, counts, strict=True) if c > settings.exhaustive_limit]
    hard_total = max(1, sum(hard))
    total_steps = settings.budget_seconds * settings.steps_per_second
    seg_steps = 0.75 * total_steps if settings.local_search else 0.0
    target = -1.0 if settings.target_makespan is None else settings.target_makespan
    state = initial_state(problem)
    order_parts: list[np.ndarray] = []
    enumerated = 0
    mask = np.zeros(n, np.bool_)
    for j, (members, preds, count) in enumerate(zip(segs, local, counts, strict=True)):
        if progress is not None:
            progress.update(1)
        if settings.target_makespan is not None and j > 0:
            rest = np.concatenate(segs[j:])
            mask[:] = False
            mask[rest] = True
            done = copy_state(state)
            tail = list_schedule(P, done, rest, mask, *edges, prio, False)
            if _reached(float(simulate(problem, np.zeros(0, np.int64), done)), settings):
                return SearchOutcome(np.concatenate(order_parts + [tail]), len(segs), enumerated, True)
        if count == 1:
            order_parts.append(members)
            simulate(problem, members, state)
            continue
        mask[:] = False
        mask[members] = True
        cands: list[np.ndarray] = []
        if settings.baselines:
            cands += [members, list_schedule(P, copy_state(state), members, mask, *edges, prio, False),
                      list_schedule(P, copy_state(state), members, mask, *edges, prio, True)]
        if count <= settings.exhaustive_limit:
            enumerated += 1
            cands.append(members[enumerate_orders(preds, settings.exhaustive_limit)])
        else:
            if settings.samples > 0:
                sampled, _, _ = random_list_schedules(P, state, members, mask, *edges, prio, settings.samples,
                                                      settings.spread, seed + j, settings.sampling == "random")
                cands.append(sampled)
            if 0 < settings.beam_width and len(members) <= 63:
                pred_mask = np.array([sum(1 << p for p in ps) for ps in preds], np.int64)
                cands.append(beam_over_ideals(P, state, members, pred_mask, settings.beam_width, 2))
            if not cands:
                cands.append(members)
            if settings.local_search:
                stacked = np.vstack([np.atleast_2d(c) for c in cands])
                ms, busy = evaluate_batch(P, state, stacked)
                cur = stacked[np.lexsort((busy, ms))[0]]
                share = seg_steps * len(members) / hard_total
                iters = int(max(0.0, share - settings.samples * len(members)) / len(members))
                cur, _, _ = iterated_local_search(P, state, cur, *edges, n, iters, seed + 7919 * j,
                                                  settings.round_iters, settings.kicks, settings.carry)
                cands.append(cur)
        stacked = np.vstack([np.atleast_2d(c) for c in cands])
        ms, busy = evaluate_batch(P, state, stacked)
        best = stacked[np.lexsort((busy, ms))[0]]
        order_parts.append(best)
        simulate(problem, best, state)
    order = np.concatenate(order_parts) if order_parts else np.zeros(0, np.int64)
    reached = _reached(float(simulate(problem, order)), settings)
    # polish the whole order across segment boundaries with what is left of the budget
    polish = int((total_steps - seg_steps) / max(1, n)) if settings.local_search else 0
    if all(c == 1 for c in counts) or reached:
        polish = 0  # every segment has one order, so the whole graph has one
    if n > 1 and polish > 0:
        order, ms, _ = local_search(P, initial_state(problem), order, *edges, n, polish, seed + 104729, target, 0.0)
        reached = _reached(float(ms), settings)
    return SearchOutcome(order, len(segs), enumerated, reached)


@fewer_collections()
def order_graph(graph: Graph, target: Target, settings: OrderSettings = DEFAULT, *, seed: int = 0,
                cost_fn=None, transfer_fn=None, release_fn=None, progress=None, bound: bool = True) -> OrderResult:
    """Reorder ``graph``'s nodes (in place) to minimise the simulated makespan on ``target``.

    Only the file order changes: nodes, values and edges stay as they are. ``seed``
    seeds every random choice; ``progress`` (a tqdm bar) advances once per segment.
    ``bound=False`` skips the lower bound (an LP and a branch and bound per key-node
    window), for callers that only want the order: the result's bound is then the trivial
    0 (term ``skipped``).

    Raises:
        ValueError: a value has no static shape (run shape inference / bind shapes first).
        SettingsError: ``settings`` out of range.
    """
    settings = settings.checked()
    t0 = time.perf_counter()
    problem = build_problem(graph, target, cost_fn, transfer_fn, release_fn)
    before_nodes = graph.nodes
    before = _makespan(problem, [problem.index[x] for x in graph.topological_order()])
    bases = baseline_orders(problem)
    base_ms = {k: _makespan(problem, o) for k, o in bases.items()}
    best_base = min(base_ms, key=lambda k: base_ms[k])
    if settings.baselines and _reached(base_ms[best_base], settings):
        best, best_ms, reached, nseg, nenum = bases[best_base], base_ms[best_base], True, 0, 0
    else:
        found = search_order(problem, graph, settings, progress, seed)
        best, best_ms, reached = found.order, _makespan(problem, found.order), found.reached_target
        nseg, nenum = found.segments, found.enumerated
        if settings.baselines and base_ms[best_base] < best_ms:  # never worse than a baseline
            best, best_ms = bases[best_base], base_ms[best_base]
    seconds = time.perf_counter() - t0
    sched = schedule(problem, best)
    order = [problem.nodes[i] for i in best]
    graph.reorder(order)
    low = lower_bound(problem, graph, window_nodes=settings.bound_nodes) if bound else LowerBound(0.0, {"skipped": 0.0})
    return OrderResult(graph, order != before_nodes, order, before, best_ms, low, base_ms,
                       seconds, nseg, nenum, sched, problem, settings, reached)


def _makespan(problem: ScheduleProblem, order) -> float:
    return simulate(problem, np.asarray(order, np.int64))


class OrderPass:
    """SPEC M3's order search as a pipeline pass (:mod:`corefold.pipeline`).

    Reads ``ctx.target``, its :class:`OrderSettings` and ``ctx.seed``; reorders the graph
    in place (outputs bit-identical: only the issue order changes). The report is
    :meth:`OrderResult.report`; the :class:`OrderResult` itself (schedule, bound) goes to
    ``ctx.data["order"]`` for the command line's Gantt chart.
    """

    name: ClassVar[str] = "order"
    settings_class: ClassVar[type] = OrderSettings
    equivalence = EXACT

    def run(self, graph: Graph, ctx: CompileContext) -> PassResult:
        """Reorder ``graph``.

        Raises:
            CorefoldError: no target in ``ctx``.
            SettingsError: settings out of range.
            ValueError: a value has no static shape.
        """
        if ctx.target is None:
            raise CorefoldError("the order pass needs a target (CompileContext.target)")
        settings = ctx.settings_for(self)
        bar = None
        if ctx.progress:
            from tqdm import tqdm

            bar = tqdm(total=len(segments(graph, settings.key_nodes_per_segment)), desc="segments",
                       unit="seg", disable=None, leave=False)
        try:
            res = order_graph(graph, ctx.target, settings, seed=ctx.seed, progress=bar)
        finally:
            if bar is not None:
                bar.close()
        ctx.data["order"] = res
        return PassResult(graph, res.modified, res.report())
