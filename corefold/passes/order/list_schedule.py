"""Compiled order builders on top of the simulator: list schedules and local search.

All work on a *segment*: a set of node indices whose predecessors outside the set are
already issued in the simulator state ``S``. Each function updates ``S`` (or a copy) by
issuing the nodes it orders.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from corefold.passes.order.simulator import earliest_slot, run_order, score, step


@njit(cache=True)
def start_time(P, S, i):
    """When node i would start if issued now (read-only twin of ``step``'s first half); issuing
    other nodes first never makes it earlier, so it bounds every continuation from below."""
    (kind, duration, external_load, output_store, in_ptr, in_val, out_ptr, out_val, ctrl_ptr,
     ctrl_src, vbytes, vload, vuses, vis_out, kind_first, kind_count, budget, release) = P
    free, ready, resident, remaining, end, scal = S
    t_data = release[i]
    load = external_load[i]
    load_after = release[i] if external_load[i] > 0.0 else 0.0
    pending_end = 0.0
    if scal[4] >= 0:
        d = earliest_slot(free, kind_first[0], kind_count[0])
        pending_end = max(free[d], scal[3]) + scal[2]
    for k in range(in_ptr[i], in_ptr[i + 1]):
        v = in_val[k]
        if resident[v] == 1:
            t_data = max(t_data, ready[v])
        else:
            load += vload[v]
            load_after = max(load_after, ready[v] if ready[v] >= 0.0 else pending_end)
    for k in range(ctrl_ptr[i], ctrl_ptr[i + 1]):
        t_data = max(t_data, end[ctrl_src[k]])
    if load > 0.0:
        d = earliest_slot(free, kind_first[0], kind_count[0])
        t_data = max(t_data, max(free[d], load_after) + load)
    u = kind[i]
    slot = earliest_slot(free, kind_first[u], kind_count[u])
    return max(t_data, free[slot])


@njit(cache=True)
def list_schedule(P, S, members, member_mask, pred_ptr, pred_idx, succ_ptr, succ_idx, prio, greedy):
    """Issue ``members`` by list scheduling and return the order.

    Among ready members (all predecessors issued) pick the highest ``prio``; with
    ``greedy``, first the one that would start earliest, then the highest ``prio``.
    Ties go to the earlier member. O(m * w * deg) for m members and ready-set width w.
    """
    m = members.shape[0]
    n = member_mask.shape[0]
    indeg = np.zeros(n, np.int64)
    for j in range(m):
        i = members[j]
        for k in range(pred_ptr[i], pred_ptr[i + 1]):
            if member_mask[pred_idx[k]]:
                indeg[i] += 1
    ready = np.empty(m, np.int64)
    nready = 0
    for j in range(m):
        if indeg[members[j]] == 0:
            ready[nready] = members[j]
            nready += 1
    order = np.empty(m, np.int64)
    rec = np.zeros(9)
    prec = np.zeros(9)
    for t in range(m):
        best = 0
        best_start = 0.0
        if greedy:
            best_start = start_time(P, S, ready[0])
        for r in range(1, nready):
            i = ready[r]
            if greedy:
                st = start_time(P, S, i)
                if st < best_start or (st == best_start and prio[i] > prio[ready[best]]):
                    best, best_start = r, st
            elif prio[i] > prio[ready[best]]:
                best = r
        i = ready[best]
        for r in range(best, nready - 1):  # keep the ready list in arrival order
            ready[r] = ready[r + 1]
        nready -= 1
        order[t] = i
        step(P, S, i, rec, prec)
        for k in range(succ_ptr[i], succ_ptr[i + 1]):
            s = succ_idx[k]
            if member_mask[s]:
                indeg[s] -= 1
                if indeg[s] == 0:
                    ready[nready] = s
                    nready += 1
    return order


@njit(cache=True)
def _copy(S0):
    return (S0[0].copy(), S0[1].copy(), S0[2].copy(), S0[3].copy(), S0[4].copy(), S0[5].copy())


@njit(cache=True)
def random_list_schedules(P, S0, members, member_mask, pred_ptr, pred_idx, succ_ptr, succ_idx, prio,
                          samples, spread, seed, uniform):
    """Monte Carlo: ``samples`` list schedules with priorities ``prio * exp(spread * N(0,1))``,
    or with ``uniform`` independent U(0,1) priorities (each step then issues a ready member
    chosen uniformly at random); returns the best order and its (makespan, mean
    busy-until) from ``S0``. O(samples * m * w * deg)."""
    np.random.seed(seed)
    best_order = members.copy()
    best_ms = np.inf
    best_busy = np.inf
    noisy = prio.copy()
    for _ in range(samples):
        for j in range(members.shape[0]):
            i = members[j]
            if uniform:
                noisy[i] = np.random.random()
            else:
                noisy[i] = prio[i] * np.exp(spread * np.random.standard_normal())
        S = _copy(S0)
        order = list_schedule(P, S, members, member_mask, pred_ptr, pred_idx, succ_ptr, succ_idx,
                              noisy, False)
        ms, busy = score(P, S)
        if ms < best_ms or (ms == best_ms and busy < best_busy):
            best_ms, best_busy = ms, busy
            best_order = order
    return best_order, best_ms, best_busy


@njit(cache=True)
def carry_move(cur, a, b, pred_ptr, pred_idx, succ_ptr, succ_idx, mark, trial):
    """Move the node at position a to position b, carrying what the edges force along.

    Moving x = cur[a] earlier (b < a) takes with it every node in [b, a) that is an
    ancestor of x (through nodes in that range, which is every path from there to x); they
    go right before x in their current relative order, the rest of [b, a) right after.
    Moving later (b > a) is the mirror: the descendants of x in (a, b] follow x to the end
    of the range. No edge is broken: a node left behind has no edge into the carried group
    (it would be carried) on the side the group moves past. A plain insertion is the case
    of a group of one; pulling a whole chain (a branch's convolution with its
    normalisation ops) in front of another branch needs this move, since every single
    insertion on the way is blocked by an edge. ``mark`` (bool per node) must be all False
    and is left so. Writes ``trial``; O(|b - a| * deg).
    """
    m = cur.shape[0]
    x = cur[a]
    mark[x] = True
    lo, hi = min(a, b), max(a, b)
    if b < a:
        for p in range(a - 1, b - 1, -1):
            y = cur[p]
            for k in range(succ_ptr[y], succ_ptr[y + 1]):
                if mark[succ_idx[k]]:
                    mark[y] = True
                    break
    else:
        for p in range(a + 1, b + 1):
            y = cur[p]
            for k in range(pred_ptr[y], pred_ptr[y + 1]):
                if mark[pred_idx[k]]:
                    mark[y] = True
                    break
    trial[:lo] = cur[:lo]
    q = lo
    for first in (b < a, b > a):  # carried group first when moving earlier, last when later
        for p in range(lo, hi + 1):
            if mark[cur[p]] == first:
                trial[q] = cur[p]
                q += 1
    trial[hi + 1:m] = cur[hi + 1:m]
    for p in range(lo, hi + 1):
        mark[cur[p]] = False


@njit(cache=True)
def local_search(P, S0, order, pred_ptr, pred_idx, succ_ptr, succ_idx, n_nodes, iters, seed, target,
                 carry):
    """Random moves that keep every edge, accepting non-worsening ones.

    Each try picks a position a at random; with probability ``carry`` it is a
    :func:`carry_move` to a position b drawn from the whole order, otherwise a plain
    insertion: moving the node at a to b is valid iff no predecessor lies in [b, a)
    (b < a) or no successor lies in (a, b] (b > a), so b is drawn from that range. Each
    try re-simulates the order from ``S0``: O(iters * m) (a carry move's O(|b - a| * deg)
    is within that). Stops early once the makespan is at most ``target`` (pass a negative
    ``target`` to run every iteration). Returns (order, makespan, mean busy-until).
    """
    np.random.seed(seed)
    m = order.shape[0]
    cur = order.copy()
    S = _copy(S0)
    run_order(P, S, cur)
    cur_ms, cur_busy = score(P, S)
    if m < 2:
        return cur, cur_ms, cur_busy
    pos = np.full(n_nodes, -1, np.int64)
    for j in range(m):
        pos[cur[j]] = j
    mark = np.zeros(n_nodes, np.bool_)
    trial = np.empty(m, np.int64)
    for _ in range(iters):
        if cur_ms <= target:
            break
        a = np.random.randint(0, m)
        x = cur[a]
        if carry > 0.0 and np.random.random() < carry:
            b = np.random.randint(0, m)
            if b == a:
                continue
            carry_move(cur, a, b, pred_ptr, pred_idx, succ_ptr, succ_idx, mark, trial)
        else:
            lo = 0
            for k in range(pred_ptr[x], pred_ptr[x + 1]):
                lo = max(lo, pos[pred_idx[k]] + 1)
            hi = m - 1
            for k in range(succ_ptr[x], succ_ptr[x + 1]):
                p = pos[succ_idx[k]]
                if p >= 0:
                    hi = min(hi, p - 1)
            if hi <= lo:
                continue
            b = np.random.randint(lo, hi + 1)
            if b == a:
                continue
            if b < a:
                trial[:b] = cur[:b]
                trial[b] = x
                trial[b + 1:a + 1] = cur[b:a]
                trial[a + 1:] = cur[a + 1:]
            else:
                trial[:a] = cur[:a]
                trial[a:b] = cur[a + 1:b + 1]
                trial[b] = x
                trial[b + 1:] = cur[b + 1:]
        S = _copy(S0)
        run_order(P, S, trial)
        ms, busy = score(P, S)
        if ms < cur_ms or (ms == cur_ms and busy <= cur_busy):
            cur_ms, cur_busy = ms, busy
            cur[:] = trial
            for j in range(min(a, b), max(a, b) + 1):
                pos[cur[j]] = j
    return cur, cur_ms, cur_busy


@njit(cache=True)
def iterated_local_search(P, S0, order, pred_ptr, pred_idx, succ_ptr, succ_idx, n_nodes, iters, seed,
                          round_iters, kicks, carry):
    """Local search restarted from kicked copies of the best order (iterated local search).

    Round 0 runs :func:`local_search` (``carry`` as there) from ``order`` for
    ``round_iters`` tries; every later round applies ``kicks`` random :func:`carry_move`
    moves to the best order so far, accepted whatever they cost, then local search again;
    a round's result replaces the best if no worse (makespan, then mean busy-until).
    Insertion and carry moves stall in local optima where the better order needs several
    moves that each cost time on their own (e.g. swapping which branch's weights the DMA
    queue fetches first); the kicks step over them. ``round_iters <= 0`` or ``kicks <= 0``
    is one plain local search. O(iters * m) for m nodes, deterministic for a seed.
    Returns (order, makespan, mean busy-until).
    """
    if round_iters <= 0 or kicks <= 0 or round_iters >= iters:
        return local_search(P, S0, order, pred_ptr, pred_idx, succ_ptr, succ_idx, n_nodes, iters, seed, -1.0,
                            carry)
    best, best_ms, best_busy = local_search(P, S0, order, pred_ptr, pred_idx, succ_ptr, succ_idx, n_nodes,
                                            round_iters, seed, -1.0, carry)
    m = order.shape[0]
    if m < 3:
        return best, best_ms, best_busy
    mark = np.zeros(n_nodes, np.bool_)
    kicked = np.empty(m, np.int64)
    trial = np.empty(m, np.int64)
    for r in range(1, iters // round_iters):
        np.random.seed(seed + 65537 * r)
        kicked[:] = best
        for _ in range(kicks):
            a = np.random.randint(0, m)
            b = np.random.randint(0, m)
            if a != b:
                carry_move(kicked, a, b, pred_ptr, pred_idx, succ_ptr, succ_idx, mark, trial)
                kicked[:] = trial
        cur, ms, busy = local_search(P, S0, kicked, pred_ptr, pred_idx, succ_ptr, succ_idx, n_nodes, round_iters,
                                     seed + 65537 * r + 1, -1.0, carry)
        if ms < best_ms or (ms == best_ms and busy <= best_busy):
            best, best_ms, best_busy = cur, ms, busy
    return best, best_ms, best_busy


@njit(cache=True)
def beam_over_ideals(P, S0, members, pred_mask, width, per_ideal):
    """Dynamic program over sets of finished members (ideals), pruned to a beam.

    Layer t holds partial orders of t members; each is extended by every ready member
    (all its in-segment predecessors finished, ``pred_mask`` bit sets over member
    positions, so at most 63 members). Of the extensions, the ``width`` best by makespan
    so far (ties: mean busy-until) are kept, at most ``per_ideal`` per set of finished
    members, since two partial orders of the same set face the same remaining problem.
    Exact when nothing is pruned; O(m * width * w) simulator steps (w: ready width), plus
    a state copy per kept entry. Returns the best complete order of member indices.
    """
    m = members.shape[0]
    rec = np.zeros(9)
    prec = np.zeros(9)
    orders = np.zeros((1, m), np.int64)
    masks = np.zeros(1, np.int64)
    states = [_copy(S0)]
    for t in range(m):
        k = len(states)
        cap = k * m
        c_parent = np.empty(cap, np.int64)
        c_op = np.empty(cap, np.int64)
        c_ms = np.empty(cap)
        c_busy = np.empty(cap)
        nc = 0
        for e in range(k):
            mask = masks[e]
            for j in range(m):
                if (mask >> j) & 1 == 0 and (pred_mask[j] & ~mask) == 0:
                    S = _copy(states[e])
                    step(P, S, members[j], rec, prec)
                    ms, busy = score(P, S)
                    c_parent[nc] = e
                    c_op[nc] = j
                    c_ms[nc] = ms
                    c_busy[nc] = busy
                    nc += 1
        key = c_ms[:nc] + c_busy[:nc] * 1e-6
        rank = np.argsort(key, kind="mergesort")
        # at most per_ideal entries per set of finished members, best first
        c_mask = np.empty(nc, np.int64)
        for r in range(nc):
            c = rank[r]
            c_mask[r] = masks[c_parent[c]] | (np.int64(1) << c_op[c])
        by_mask = np.argsort(c_mask, kind="mergesort")  # stable: rank order within a mask
        allowed = np.zeros(nc, np.bool_)
        run = 0
        for q in range(nc):
            if q > 0 and c_mask[by_mask[q]] == c_mask[by_mask[q - 1]]:
                run += 1
            else:
                run = 0
            allowed[by_mask[q]] = run < per_ideal
        sel = np.empty(min(width, nc), np.int64)
        ns = 0
        for r in range(nc):
            if allowed[r]:
                sel[ns] = rank[r]
                ns += 1
                if ns == sel.shape[0]:
                    break
        new_orders = np.empty((ns, m), np.int64)
        new_masks = np.empty(ns, np.int64)
        new_states = []
        for s in range(ns):
            c = sel[s]
            e = c_parent[c]
            new_orders[s, :] = orders[e, :]
            new_orders[s, t] = members[c_op[c]]
            new_masks[s] = masks[e] | (np.int64(1) << c_op[c])
            S = _copy(states[e])
            step(P, S, members[c_op[c]], rec, prec)
            new_states.append(S)
        orders = new_orders
        masks = new_masks
        states = new_states
    best = 0
    best_ms, best_busy = score(P, states[0])
    for e in range(1, len(states)):
        ms, busy = score(P, states[e])
        if ms < best_ms or (ms == best_ms and busy < best_busy):
            best, best_ms, best_busy = e, ms, busy
    return orders[best]
