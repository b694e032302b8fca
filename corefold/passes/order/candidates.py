"""Candidate orders: the baselines the search is compared with, and exhaustive enumeration.

Baselines (whole graph or one segment): the file order, ready-first (FIFO Kahn), and two
list schedules on the simulator, critical path (highest bottom level first) and greedy
(earliest start first). Enumeration lists every topological order of a small segment;
:func:`count_orders` decides when that is affordable.
"""

from __future__ import annotations

import numpy as np

from corefold.passes.order.list_schedule import list_schedule
from corefold.passes.order.simulator import ScheduleProblem, initial_state


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
def local_preds(problem: ScheduleProblem, members: np.ndarray) -> list[list[int]]:
    """Predecessors of each member inside ``members``, as positions in ``members``."""
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
    nexts: dict[int, list[int]] = {}  # an ideal's successors, from its first visit
    while stack:
        done, expanded = stack.pop()
        if done in memo:
            continue
        if expanded:
            memo[done] = min(cap + 1, sum(memo[x] for x in nexts.pop(done)))
            if len(memo) > 10 * cap:
                return cap + 1
        else:
            nxt = nexts.get(done)
            if nxt is None:
                nexts[done] = nxt = [done | 1 << j for j in range(m) if not done >> j & 1 and pred_mask[j] & ~done == 0]
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


def count_orders_capped(preds: list[list[int]], cap: int) -> int:
    """:func:`count_orders`, answering at once for one node, long chains (1) and segments
    too big to enumerate (``cap + 1``)."""
    if len(preds) <= 1:
        return 1
    if len(preds) > _ENUMERABLE_NODES and all(preds[j] == [j - 1] for j in range(1, len(preds))):
        return 1  # a long chain
    if len(preds) > _ENUMERABLE_NODES:
        return cap + 1
    return count_orders(preds, cap)


#: Segments with more nodes are never enumerated (recursion depth, bitmask cost).
_ENUMERABLE_NODES = 200


def baseline_orders(problem: ScheduleProblem) -> dict[str, np.ndarray]:
    """The whole-graph orders corefold's search is compared with."""
    return {"file": file_order(problem), "ready_first": ready_first_order(problem),
            "critical_path": critical_path_order(problem), "greedy": greedy_order(problem)}
