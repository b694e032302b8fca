"""Execution-order search (SPEC M3 §1-6): the issue order minimising the simulated makespan.

Objective: over topological orders ``pi`` of the graph (data and control edges),

    minimise  makespan(pi)      (simulator.py's simulator, from an idle core)

The graph is cut into segments at key nodes (key_nodes.py); segments run one after
another, so ``pi`` is the concatenation of per-segment orders. Segment ``j`` is searched
from the simulator state left by the chosen orders of segments ``< j`` (units' busy-until
times, residency and ready times carry over, so no overlap across the boundary is lost),
minimising (makespan so far, mean busy-until of the units) lexicographically:

* candidates always tried: the file order, the critical-path list schedule (highest
  bottom level first) and the greedy earliest-start list schedule;
* if the segment has at most ``exhaustive_limit`` topological orders, all are enumerated
  and simulated (exact for the segment);
* otherwise seeded Monte Carlo list schedules with randomly perturbed priorities, then
  random insertion moves (local search) from the best, within the segment's time budget.

Finally the whole concatenated order is polished by local search with the remaining
budget and compared with the whole-graph baselines (file order, ready-first, critical
path, greedy); the best is returned, so the result is never worse than any of them.
Cost: O(#orders * m) for an enumerated segment of m nodes, O((samples + iters) * m)
otherwise.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from corefold.ir import Graph, Node
from corefold.passes.order.bound import LowerBound, lower_bound
from corefold.passes.order.key_nodes import segments
from corefold.passes.order.list_schedule import list_schedule, local_search, random_list_schedules
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
from corefold.target import Target


@dataclass(frozen=True)
class OrderSettings:
    """Knobs of the order search; use the presets :data:`FAST`, :data:`DEFAULT`, :data:`STRONG`.

    Attributes:
        budget_seconds: budget of the whole search, converted into a fixed number of
            simulated operator issues (``budget_seconds * steps_per_second``) so the
            result does not depend on the machine's speed or load (enumeration of small
            segments and the baselines always run, even past the budget).
        steps_per_second: simulated operator issues per second assumed for that
            conversion (measured on one x86 core; bench/order.py prints the real time).
        exhaustive_limit: enumerate a segment's orders when it has at most this many.
        key_nodes_per_segment: consecutive key-node segments joined into one.
        samples: Monte Carlo list schedules per non-enumerated segment.
        spread: log-normal spread of the Monte Carlo priorities.
        seed: seed of every random choice.
    """

    budget_seconds: float = 5.0
    steps_per_second: float = 2e6
    exhaustive_limit: int = 2000
    key_nodes_per_segment: int = 1
    samples: int = 64
    spread: float = 0.5
    seed: int = 0


FAST = OrderSettings(budget_seconds=1.0, exhaustive_limit=200, samples=16)
DEFAULT = OrderSettings()
STRONG = OrderSettings(budget_seconds=30.0, exhaustive_limit=20000, samples=256)
PRESETS = {"fast": FAST, "default": DEFAULT, "strong": STRONG}


@dataclass
class OrderResult:
    """What :func:`order_graph` did.

    ``modified`` is True iff the file order changed. Makespans are in seconds of the
    simulator; ``baselines`` maps each baseline's name to its makespan.
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
        }


# -- baselines -----------------------------------------------------------------------------
def bottom_levels(problem: ScheduleProblem) -> np.ndarray:
    """Longest compute-plus-store path from each node to a sink. O(V + E)."""
    n = len(problem.nodes)
    bl = problem.duration + problem.output_store
    bl = bl.copy()
    for i in range(n - 1, -1, -1):
        best = 0.0
        for s in problem.succ_idx[problem.succ_ptr[i]:problem.succ_ptr[i + 1]]:
            best = max(best, bl[s])
        bl[i] += best
    return bl


def file_order(problem: ScheduleProblem) -> np.ndarray:
    """The graph's stable topological (file) order."""
    return np.arange(len(problem.nodes), dtype=np.int64)


def ready_first_order(problem: ScheduleProblem) -> np.ndarray:
    """Kahn's algorithm with a FIFO queue: nodes in the order they become ready. O(V + E)."""
    n = len(problem.nodes)
    indeg = np.diff(problem.pred_ptr).copy()
    queue = [i for i in range(n) if indeg[i] == 0]
    order = []
    head = 0
    while head < len(queue):
        i = queue[head]
        head += 1
        order.append(i)
        for s in problem.succ_idx[problem.succ_ptr[i]:problem.succ_ptr[i + 1]]:
            indeg[s] -= 1
            if indeg[s] == 0:
                queue.append(int(s))
    return np.array(order, np.int64)


def _list_order(problem: ScheduleProblem, greedy: bool, state: tuple | None = None,
                members: np.ndarray | None = None, prio: np.ndarray | None = None) -> np.ndarray:
    n = len(problem.nodes)
    if members is None:
        members = np.arange(n, dtype=np.int64)
    mask = np.zeros(n, np.bool_)
    mask[members] = True
    if prio is None:
        prio = bottom_levels(problem)
    if state is None:
        state = initial_state(problem)
    return list_schedule(problem.arrays, state, members, mask, problem.pred_ptr, problem.pred_idx,
                         problem.succ_ptr, problem.succ_idx, prio, greedy)


def critical_path_order(problem: ScheduleProblem) -> np.ndarray:
    """List schedule issuing the ready node with the longest path to a sink first."""
    return _list_order(problem, greedy=False)


def greedy_order(problem: ScheduleProblem) -> np.ndarray:
    """List schedule issuing the ready node that would start earliest (then longest path)."""
    return _list_order(problem, greedy=True)


# -- enumeration ---------------------------------------------------------------------------
def _local_preds(problem: ScheduleProblem, members: np.ndarray) -> list[list[int]]:
    where = {int(i): j for j, i in enumerate(members)}
    preds = []
    for i in members:
        preds.append([where[int(p)] for p in problem.pred_idx[problem.pred_ptr[i]:problem.pred_ptr[i + 1]]
                      if int(p) in where])
    return preds


def count_orders(preds: list[list[int]], cap: int) -> int:
    """Number of topological orders of a small DAG (given local predecessor lists), or
    ``cap + 1`` as soon as it exceeds ``cap``. DP over sets of finished nodes, memoised:
    O(#ideals * m) time, exponential only in the DAG's width."""
    m = len(preds)
    pred_mask = [sum(1 << p for p in ps) for ps in preds]
    full = (1 << m) - 1
    memo: dict[int, int] = {full: 1}
    # iterative DFS over ideals to avoid deep recursion
    stack = [(0, False)]
    while stack:
        done, expanded = stack.pop()
        if done in memo:
            continue
        ready = [j for j in range(m) if not done >> j & 1 and pred_mask[j] & ~done == 0]
        nxt = [done | 1 << j for j in ready]
        if expanded:
            memo[done] = min(cap + 1, sum(memo[x] for x in nxt))
            if len(memo) > 10 * cap:
                return cap + 1
        else:
            stack.append((done, True))
            stack.extend((x, False) for x in nxt if x not in memo)
    return memo[0]


def enumerate_orders(preds: list[list[int]], limit: int) -> np.ndarray:
    """All topological orders (local positions) of a small DAG, as rows; at most ``limit``."""
    m = len(preds)
    pred_mask = [sum(1 << p for p in ps) for ps in preds]
    out: list[list[int]] = []
    cur: list[int] = []

    def dfs(done: int) -> None:
        if len(out) >= limit:
            return
        if len(cur) == m:
            out.append(list(cur))
            return
        for j in range(m):
            if not done >> j & 1 and pred_mask[j] & ~done == 0:
                cur.append(j)
                dfs(done | 1 << j)
                cur.pop()

    dfs(0)
    return np.array(out, np.int64).reshape(len(out), m)


def _count(preds: list[list[int]], cap: int) -> int:
    if len(preds) <= 1:
        return 1
    if len(preds) > _ENUMERABLE_NODES and all(preds[j] == [j - 1] for j in range(1, len(preds))):
        return 1  # a long chain
    if len(preds) > _ENUMERABLE_NODES:
        return cap + 1
    return count_orders(preds, cap)


#: Segments with more nodes are never enumerated (recursion depth, bitmask cost).
_ENUMERABLE_NODES = 200


# -- the pass ------------------------------------------------------------------------------
def search_order(problem: ScheduleProblem, graph: Graph, settings: OrderSettings = DEFAULT,
                 progress=None) -> tuple[np.ndarray, int, int]:
    """The searched order (node indices), the number of segments and of enumerated ones."""
    P = problem.arrays
    n = len(problem.nodes)
    prio = bottom_levels(problem)
    segs = [np.array([problem.index[x] for x in s], np.int64) for s in
            segments(graph, settings.key_nodes_per_segment)]
    local = [_local_preds(problem, s) for s in segs]
    counts = [_count(p, settings.exhaustive_limit) for p in local]
    hard = [len(s) for s, c in zip(segs, counts, strict=False) if c > settings.exhaustive_limit]
    hard_total = max(1, sum(hard))
    total_steps = settings.budget_seconds * settings.steps_per_second
    seg_steps = 0.75 * total_steps
    state = initial_state(problem)
    order_parts: list[np.ndarray] = []
    enumerated = 0
    mask = np.zeros(n, np.bool_)
    for j, (members, preds, count) in enumerate(zip(segs, local, counts, strict=False)):
        if progress is not None:
            progress.update(1)
        if count == 1:
            order_parts.append(members)
            simulate(problem, members, state)
            continue
        mask[:] = False
        mask[members] = True
        cands = [members,
                 list_schedule(P, copy_state(state), members, mask, problem.pred_ptr, problem.pred_idx,
                               problem.succ_ptr, problem.succ_idx, prio, False),
                 list_schedule(P, copy_state(state), members, mask, problem.pred_ptr, problem.pred_idx,
                               problem.succ_ptr, problem.succ_idx, prio, True)]
        if count <= settings.exhaustive_limit:
            enumerated += 1
            cands.append(members[enumerate_orders(preds, settings.exhaustive_limit)])
        else:
            share = seg_steps * len(members) / hard_total
            best, _, _ = random_list_schedules(P, state, members, mask, problem.pred_ptr, problem.pred_idx,
                                               problem.succ_ptr, problem.succ_idx, prio, settings.samples,
                                               settings.spread, settings.seed + j)
            cands.append(best)
            stacked = np.vstack([np.atleast_2d(c) for c in cands])
            ms, busy = evaluate_batch(P, state, stacked)
            cur = stacked[np.lexsort((busy, ms))[0]]
            iters = int(max(0.0, share - settings.samples * len(members)) / len(members))
            cur, _, _ = local_search(P, state, cur, problem.pred_ptr, problem.pred_idx, problem.succ_ptr,
                                     problem.succ_idx, n, iters, settings.seed + 7919 * j)
            cands.append(cur)
        stacked = np.vstack([np.atleast_2d(c) for c in cands])
        ms, busy = evaluate_batch(P, state, stacked)
        best = stacked[np.lexsort((busy, ms))[0]]
        order_parts.append(best)
        simulate(problem, best, state)
    order = np.concatenate(order_parts) if order_parts else np.zeros(0, np.int64)
    # polish the whole order across segment boundaries with what is left of the budget
    polish = int((total_steps - seg_steps) / max(1, n))
    if n > 1 and polish > 0:
        order, _, _ = local_search(P, initial_state(problem), order, problem.pred_ptr, problem.pred_idx,
                                   problem.succ_ptr, problem.succ_idx, n, polish, settings.seed + 104729)
    return order, len(segs), enumerated


def baseline_orders(problem: ScheduleProblem) -> dict[str, np.ndarray]:
    """The orders corefold's search is compared with."""
    return {"file": file_order(problem), "ready_first": ready_first_order(problem),
            "critical_path": critical_path_order(problem), "greedy": greedy_order(problem)}


def order_graph(graph: Graph, target: Target, settings: OrderSettings = DEFAULT, *,
                cost_fn=None, transfer_fn=None, progress=None) -> OrderResult:
    """Reorder ``graph``'s nodes (in place) to minimise the simulated makespan on ``target``.

    Only the file order changes: nodes, values and edges stay as they are.

    Raises:
        ValueError: a value has no static shape (run shape inference / bind shapes first).
    """
    t0 = time.perf_counter()
    problem = build_problem(graph, target, cost_fn, transfer_fn)
    before_nodes = graph.nodes
    before = _makespan(problem, [problem.index[x] for x in graph.topological_order()])
    bases = baseline_orders(problem)
    base_ms = {k: _makespan(problem, o) for k, o in bases.items()}
    found, nseg, nenum = search_order(problem, graph, settings, progress)
    best, best_ms = found, _makespan(problem, found)
    for k, o in bases.items():  # never worse than a baseline
        if base_ms[k] < best_ms:
            best, best_ms = o, base_ms[k]
    seconds = time.perf_counter() - t0
    sched = schedule(problem, best)
    order = [problem.nodes[i] for i in best]
    graph.reorder(order)
    return OrderResult(graph, order != before_nodes, order, before, best_ms, lower_bound(problem, graph), base_ms,
                       seconds, nseg, nenum, sched, problem)


def _makespan(problem: ScheduleProblem, order) -> float:
    return simulate(problem, np.asarray(order, np.int64))
