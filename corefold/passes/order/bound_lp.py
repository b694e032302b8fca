"""The linear program of bound.py (see its module docstring for the constraints and why
each holds in every order), built as sparse rows and solved with HiGHS (scipy).

Times are divided by a reference (the largest single task or the DMA work) so the LP's
numbers are O(1). O(V + E + sum of the live sets) variables and rows; HiGHS's dual
simplex solves the bench models in well under a second.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, linprog, milp
from scipy.sparse import coo_matrix

from corefold.passes.order.simulator import DMA, ScheduleProblem
from corefold.target.model import UNIT_KINDS

#: Branch-and-bound nodes of the spill MILP (deterministic); the time limit is a safety net.
MIP_NODES = 2000
MIP_SECONDS = 60.0


class _LP:
    """Variables by name and rows ``sum_k a_k v_k <= b`` of a sparse LP."""

    def __init__(self) -> None:
        self.lo: list[float] = []
        self.hi: list[float] = []
        self.r: list[int] = []
        self.c: list[int] = []
        self.a: list[float] = []
        self.b: list[float] = []

    def var(self, count: int, lo: float = 0.0, hi: float = np.inf) -> int:
        first = len(self.lo)
        self.lo += [lo] * count
        self.hi += [hi] * count
        return first

    def row(self, cols: list[int], coefs: list[float], rhs: float) -> None:
        """``sum coefs * cols <= rhs``; a column ``-1`` stands for the constant 0."""
        keep = [(c, a) for c, a in zip(cols, coefs, strict=True) if c >= 0 and a != 0.0]
        k = len(self.b)
        self.r += [k] * len(keep)
        self.c += [c for c, _ in keep]
        self.a += [a for _, a in keep]
        self.b.append(rhs)

    def solve(self, objective: int, integral: int = 0) -> tuple[float, np.ndarray] | None:
        """Minimise variable ``objective``; the first ``integral`` variables are 0/1.

        Returns (a lower bound of the optimum, the best solution found) or None. With
        integral variables HiGHS's branch and bound stops after ``MIP_NODES`` nodes (so the
        answer does not depend on the machine) and its dual bound is returned: a lower
        bound of the mixed-integer optimum, never above it.
        """
        n = len(self.lo)
        a_ub = coo_matrix((self.a, (self.r, self.c)), shape=(len(self.b), n)).tocsr()
        obj = np.zeros(n)
        obj[objective] = 1.0
        lo, hi = np.array(self.lo), np.array(self.hi)
        if integral:
            kinds = np.zeros(n)
            kinds[:integral] = 1
            res = milp(obj, constraints=LinearConstraint(a_ub, -np.inf, np.array(self.b)), bounds=Bounds(lo, hi),
                       integrality=kinds, options={"node_limit": MIP_NODES, "time_limit": MIP_SECONDS})
            bound = getattr(res, "mip_dual_bound", None)
            if res.x is not None and bound is not None and np.isfinite(bound):
                return float(min(bound, res.fun)), res.x
        res = linprog(obj, A_ub=a_ub, b_ub=np.array(self.b), bounds=np.column_stack([lo, hi]), method="highs")
        return (float(res.fun), res.x) if res.status == 0 else None


def solve_bound(problem: ScheduleProblem, seg: np.ndarray, vals, certain: list[np.ndarray],
                possible: list[list[tuple[int, np.ndarray]]], closing: list[int],
                families: tuple[str, ...], windows: bool, integral: bool = True,
                floors: dict[int, float] | None = None, detail: dict | None = None) -> dict[str, float] | None:
    """Solve the bound's LP; return ``M`` and each family's term (seconds), or None when
    HiGHS does not report an optimum.

    ``certain[o]``: values live at ``o`` in every order; ``possible[o]``: for each consumed
    output ``v`` of ``o``, the values that may be live when ``v``'s residency is decided;
    ``closing[j]``: the key node closing segment ``j`` (-1 for none); ``floors[j]``: a
    lower bound of window ``j``'s length (bound_windows.py). ``integral`` makes
    the spill variables 0/1 (a mixed-integer program; else its LP relaxation). ``detail``, when
    given, receives the spill fractions per value (``x``) and window ends (``W``).
    """
    n = len(problem.nodes)
    c = problem.duration
    e = problem.external_load
    s = problem.output_store
    in_ptr, in_val, out_ptr, out_val, vbytes, vload, vuses, vis_out, budget = (
        problem.arrays[k] for k in (4, 5, 6, 7, 10, 11, 12, 13, 16))
    kind_count = problem.kind_count
    n_dma = float(kind_count[DMA])
    work = {k: float(c[problem.kind == i].sum()) for i, k in enumerate(UNIT_KINDS)}
    w0_dma = work["dma"] + float(e.sum() + s.sum())
    ref = max(w0_dma / n_dma, float((c + e + s).max()), 1e-30)
    c, e, s, t, cost = c / ref, e / ref, s / ref, vload / ref, vals.cost / ref
    B = float(budget[0])
    lp = _LP()

    # spill fractions x_v of consumed values; forced ones (bigger than B) are 1
    consumed = np.flatnonzero(vuses > 0)
    xi = np.full(len(vbytes), -1, np.int64)
    xi[consumed] = lp.var(len(consumed), 0.0, 1.0) + np.arange(len(consumed))
    for v in consumed[vals.forced[consumed]]:
        lp.lo[xi[v]] = 1.0
    mi = lp.var(1)
    # every order spills enough of each certainly-live set (tightened 0/1 covers) ...
    for o in range(n):
        vs = certain[o]
        excess = float(vbytes[vs].sum() - B) if len(vs) else 0.0
        if excess > 0:
            lp.row([int(xi[v]) for v in vs], [-min(float(vbytes[v]), excess) / excess for v in vs], -1.0)
    # ... and spills v only if what may be live and resident then leaves no room for it
    for o in range(n):
        for v, maybe in possible[o]:
            if vals.forced[v] or not len(maybe):
                continue
            room = B - float(vbytes[v]) + 1.0  # bytes are integers
            if float(vbytes[maybe].sum()) < room:
                lp.hi[xi[v]] = 0.0  # always fits: resident in every order
                continue
            # sum_{w in maybe} b(w) (1 - x_w) >= room * x_v
            lp.row([int(xi[w]) for w in maybe] + [int(xi[v])], [float(vbytes[w]) / B for w in maybe] + [room / B],
                   float(vbytes[maybe].sum()) / B)

    # D(v, o): delay of o after its producer when v is spilled
    forced_t = np.where(vals.forced, t, 0.0)
    store_forced = np.zeros(n)  # forced non-output outputs' store time, per producer
    for q in range(n):
        for v in out_val[out_ptr[q]:out_ptr[q + 1]]:
            if vals.forced[v] and not vis_out[v]:
                store_forced[q] += t[v]
    in_forced = np.array([forced_t[in_val[in_ptr[o]:in_ptr[o + 1]]].sum() for o in range(n)])
    edges = []  # (q, o, v, D)
    for o in range(n):
        for v in in_val[in_ptr[o]:in_ptr[o + 1]]:
            q = int(vals.producer[v])
            store = s[q] + store_forced[q] + (0.0 if vis_out[v] else t[v] - forced_t[v])
            edges.append((q, o, int(v), store + t[v] + e[o] + in_forced[o] - forced_t[v]))
    preds = [problem.pred_idx[problem.pred_ptr[o]:problem.pred_ptr[o + 1]] for o in range(n)]
    out: dict[str, float] = {}
    use_win = "segment_sum" in families and windows
    use_queue = "dma_queue" in families and windows and n_dma == 1
    use_floors = "window_search" in families and windows and bool(floors)

    est0 = -1
    if "critical_path" in families:
        est0 = lp.var(n)
        for o in range(n):
            lp.lo[est0 + o] = e[o]
            for p in preds[o]:
                lp.row([est0 + int(p), est0 + o], [1.0, -1.0], -c[p])
            lp.row([est0 + o, mi], [1.0, -1.0], -(c[o] + s[o]))
        for q, o, v, d in edges:
            lp.row([est0 + q, est0 + o, int(xi[v])], [1.0, -1.0, d], -c[q])
    if "work" in families:
        lp.row([int(xi[v]) for v in consumed] + [mi], list(cost[consumed]) + [-n_dma], -w0_dma / ref)
        lp.lo[mi] = max(work[k] / float(kind_count[i]) for i, k in enumerate(UNIT_KINDS) if k != "dma") / ref

    nseg = int(seg.max()) + 1
    members = [np.flatnonzero(seg == j) for j in range(nseg)]
    w0 = -1
    if use_win or use_queue or use_floors:
        w0 = lp.var(nseg)  # W_j: end of window j (the end of its closing key node)
        lp.row([w0 + nseg - 1, mi], [1.0, -1.0], 0.0)
        for j in range(1, nseg):
            lp.row([w0 + j - 1, w0 + j], [1.0, -1.0], 0.0)

    def prev_w(j: int) -> int:
        return w0 + j - 1 if j > 0 else -1

    if use_floors:
        for j, floor in floors.items():
            lp.row([prev_w(j), w0 + j], [1.0, -1.0], -floor / ref)

    if use_win:
        last = nseg - 1
        loc0 = lp.var(n)  # start of each node after its window's start
        y0 = lp.var(n, 0.0, 1.0)  # y_o >= x_v: o's load waits for a store inside the window
        for o in range(n):
            lp.lo[loc0 + o] = e[o] if seg[o] == 0 else 0.0
            for p in preds[o]:
                if seg[p] == seg[o]:
                    lp.row([loc0 + int(p), loc0 + o], [1.0, -1.0], -c[p])
            j = int(seg[o])
            lp.row([loc0 + o, w0 + j, prev_w(j)], [1.0, -1.0, 1.0], -(c[o] + (s[o] if j == last else 0.0)))
        inside = np.full(len(vbytes), -1, np.int64)  # the window a consumed value lives in
        for v in consumed:
            segs = {int(seg[x]) for x in vals.consumers[v]}
            if len(segs) == 1:
                inside[v] = segs.pop()
        for q, o, v, d in edges:
            if seg[q] == seg[o]:
                lp.row([loc0 + q, loc0 + o, int(xi[v])], [1.0, -1.0, d], -c[q])
            else:
                lp.row([loc0 + o, int(xi[v])], [-1.0, d], 0.0)
            if inside[v] == seg[o] and seg[o] > 0 and e[o] > 0:
                lp.row([int(xi[v]), y0 + o], [1.0, -1.0], 0.0)
        for j in range(nseg):
            mem = members[j]
            for i in range(len(UNIT_KINDS)):
                work_j = float(c[mem[problem.kind[mem] == i]].sum()) / float(kind_count[i])
                lp.row([prev_w(j), w0 + j], [1.0, -1.0], -work_j)
            const = float(c[mem[problem.kind[mem] == DMA]].sum())
            if j == 0:
                const += float(e[mem].sum())
            if j == last:
                const += float(s[mem].sum())
                opening = {int(vals.producer[v]) for o in mem for v in in_val[in_ptr[o]:in_ptr[o + 1]]
                           if seg[vals.producer[v]] != j}
                const += float(sum(s[q] for q in opening))
            mine = [int(v) for v in consumed if inside[v] == j]
            ys = [int(o) for o in mem if e[o] > 0] if j > 0 else []
            lp.row([int(xi[v]) for v in mine] + [y0 + o for o in ys] + [w0 + j, prev_w(j)],
                   list(cost[mine]) + list(e[ys]) + [-n_dma, n_dma], -const)
    if use_queue:
        _dma_blocks(lp, problem, seg, members, closing, vals, xi, w0, mi, c, e, s, t, cost)

    solved = lp.solve(mi, integral=len(consumed) if integral else 0)
    if solved is None:
        return None
    value, x = solved
    out["M"] = value * ref
    if est0 >= 0:
        out["critical_path"] = float((x[est0:est0 + n] + c + s).max()) * ref
    if "work" in families:
        xs = np.clip(x[xi[consumed]], 0.0, 1.0)
        for i, k in enumerate(UNIT_KINDS):
            w = work[k] / ref + (float(e.sum() + s.sum() + cost[consumed] @ xs) if k == "dma" else 0.0)
            out[f"work_{k}"] = w / float(kind_count[i]) * ref
    if w0 >= 0:
        name = "segment_sum" if use_win else "dma_queue" if use_queue else "window_search"
        out[name] = float(x[w0 + nseg - 1]) * ref
    if detail is not None:
        detail["x"] = {int(v): float(x[xi[v]]) for v in consumed}
        detail["W"] = x[w0:w0 + nseg] * ref if w0 >= 0 else None
    return out


def _dma_blocks(lp: _LP, problem: ScheduleProblem, seg, members, closing, vals, xi, w0, mi, c, e, s, t,
                cost) -> None:
    """The in-order DMA queue (one DMA unit): block ``j`` (the loads and DMA-kind computes
    of segment ``j``, the stores of its operators but the closing key node's, and the
    store of the key node opening it) runs after block ``j - 1``, so with ``F_j`` the end
    of block ``j`` and ``W_j`` the end of window ``j``::

        F_j >= F_{j-1} + D_j(x)                      (D_j: the block's DMA time)
        F_j >= W_{j-1} + D_j(x)                      (k_{j-1} a DMA operator: last of its block)
        F_j >= W_{j-1} + D_j(x) - U (1 - x_v)        (every first candidate of segment j
                                                      reloads k_{j-1}'s output v if spilled)
        W_j >= F_j                                   (k_j a DMA operator: last of its block)
        W_j >= F_j - sigma_j + c(k_j)                (k_j always loads: only one store follows)
        W_j >= F_j - sigma_j + c(k_j) - U (1 - x_v)  (k_j loads when its input v is spilled)
        M   >= F_last

    with ``sigma_j`` the largest store of segment ``j`` (all outputs spilled) and ``U`` the
    sum of every task's time (no order's times exceed it: a big-M, so these rows hold for
    0/1 ``x`` and relax for fractional ``x``)."""
    in_ptr, in_val, out_ptr, out_val, vis_out = (problem.arrays[k] for k in (4, 5, 6, 7, 13))
    nseg = len(members)
    f0 = lp.var(nseg)
    preds = [problem.pred_idx[problem.pred_ptr[o]:problem.pred_ptr[o + 1]] for o in range(len(problem.nodes))]
    # big-M: every task run one after another bounds any order's times from above
    big = float(c.sum() + e.sum() + s.sum() + cost.sum())

    def store_cols(q: int) -> tuple[list[int], list[float], float]:
        vs = [int(v) for v in out_val[out_ptr[q]:out_ptr[q + 1]] if xi[v] >= 0 and not vis_out[v]]
        return [int(xi[v]) for v in vs], [float(t[v]) for v in vs], float(s[q])

    for j in range(nseg):
        mem = [int(o) for o in members[j]]
        cols, coefs = [], []
        const = 0.0
        for o in mem:
            const += e[o] + (c[o] if problem.kind[o] == DMA else 0.0)
            for v in in_val[in_ptr[o]:in_ptr[o + 1]]:
                cols.append(int(xi[v]))
                coefs.append(float(t[v]))
            if o != closing[j] or j == nseg - 1:
                sc, sk, sconst = store_cols(o)
                cols += sc
                coefs += sk
                const += sconst
        opening = closing[j - 1] if j > 0 else -1
        if opening >= 0:
            sc, sk, sconst = store_cols(opening)
            cols += sc
            coefs += sk
            const += sconst
        prev_f = f0 + j - 1 if j > 0 else -1
        lp.row(cols + [f0 + j, prev_f], coefs + [-1.0, 1.0], -const)
        if opening >= 0 and problem.kind[opening] == DMA:
            lp.row(cols + [f0 + j, w0 + j - 1], coefs + [-1.0, 1.0], -const)
        elif opening >= 0:
            # the first operator issued in segment j has no predecessor in it; when every
            # such one reads v, a spilled v makes the whole block wait for k_{j-1}'s store
            roots = [o for o in mem if not any(seg[p] == j for p in preds[o])]
            for v in out_val[out_ptr[opening]:out_ptr[opening + 1]]:
                if xi[v] >= 0 and roots and all(v in in_val[in_ptr[o]:in_ptr[o + 1]] for o in roots):
                    lp.row(cols + [int(xi[v]), f0 + j, w0 + j - 1], coefs + [big, -1.0, 1.0], big - const)
        k = closing[j]
        if k < 0:
            continue
        sigma = 0.0
        for o in mem:
            if o != k:
                vs = [v for v in out_val[out_ptr[o]:out_ptr[o + 1]] if xi[v] >= 0 and not vis_out[v]]
                sigma = max(sigma, float(s[o]) + float(sum(t[v] for v in vs)))
        ins = [int(v) for v in in_val[in_ptr[k]:in_ptr[k + 1]]]
        if problem.kind[k] == DMA:
            lp.row([f0 + j, w0 + j], [1.0, -1.0], 0.0)
        elif e[k] > 0 or any(vals.forced[v] for v in ins):
            lp.row([f0 + j, w0 + j], [1.0, -1.0], sigma - c[k])
        else:  # k_j loads, so ends its block but for one store, iff one of its inputs is spilled
            for v in ins:
                if xi[v] >= 0:
                    lp.row([f0 + j, w0 + j, int(xi[v])], [1.0, -1.0, big], big + sigma - c[k])
    lp.row([f0 + nseg - 1, mi], [1.0, -1.0], 0.0)
