r"""Force-directed swaps and exact pairwise-swap search on the group graph (SPEC M4 §9).

Groups a, b with quotient weight :math:`Q_{ab}` at cores :math:`p_a, p_b` pull each other:
the net force on a is :math:`F_a = \sum_b Q_{ab}(p_b - p_a)`. Each iteration visits the
``fraction`` of groups with the largest :math:`|F_a|`, largest first, and tries the cores
within ``radius`` hops in the pulled quadrant (occupied: swap; empty usable: move). The
change of hop-weighted traffic :math:`T = \tfrac12\sum_{a,b} Q_{ab} D(p_a, p_b)` is computed
exactly:

.. math:: \Delta = \sum_{j \ne b} Q_{aj}(D_{p_b p_j} - D_{p_a p_j})
                 + \sum_{j \ne a} Q_{bj}(D_{p_a p_j} - D_{p_b p_j})

and the best negative swap is applied. The pairwise search (beyond the seed) does the same
for every group against every core within ``radius``, in random order.

Complexity: a swap evaluation is O(deg a + deg b) in the group graph; an iteration is
O(fraction * k * radius^2 * deg).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from numba import njit

from corefold.mapping.parallel import run_indexed
from corefold.mapping.partition.refine import ObjectiveMismatch


@njit(cache=True, nogil=True)
def swap_delta(qptr, qidx, qw, pos, occupant, dist, a, cb):
    """Exact change of T when group a moves to core cb (swapping with its occupant)."""
    ca = pos[a]
    b = occupant[cb]
    d = 0.0
    for e in range(qptr[a], qptr[a + 1]):
        j = qidx[e]
        if j == b:
            continue
        d += qw[e] * (dist[cb, pos[j]] - dist[ca, pos[j]])
    if b >= 0:
        for e in range(qptr[b], qptr[b + 1]):
            j = qidx[e]
            if j == a:
                continue
            d += qw[e] * (dist[ca, pos[j]] - dist[cb, pos[j]])
    return d


@njit(cache=True, nogil=True)
def _apply_swap(pos, occupant, a, cb):
    ca = pos[a]
    b = occupant[cb]
    pos[a] = cb
    occupant[cb] = a
    occupant[ca] = b
    if b >= 0:
        pos[b] = ca


@njit(cache=True, nogil=True)
def _best_swap(qptr, qidx, qw, pos, occupant, dist, core_xy, grid, a, radius, sx, sy, directional):
    """The usable core within ``radius`` hops of a's whose swap (or move) lowers T most.

    ``directional``: only cores in the quadrant of the pull (sx, sy in {-1, 0, 1}; 0 keeps
    that axis); else the whole diamond. Returns (delta, core), core -1 when none gains.
    O(radius^2 * (deg a + deg b))."""
    height, width = grid.shape
    xa = core_xy[pos[a], 0]
    ya = core_xy[pos[a], 1]
    best = -1e-9
    best_c = -1
    for dx in range(-radius, radius + 1):
        if directional and dx != 0 and (sx == 0 or (dx > 0) != (sx > 0)):
            continue
        r = radius - abs(dx)
        for dy in range(-r, r + 1):
            if directional and dy != 0 and (sy == 0 or (dy > 0) != (sy > 0)):
                continue
            if dx == 0 and dy == 0:
                continue
            x = xa + dx
            y = ya + dy
            if x < 0 or y < 0 or x >= width or y >= height:
                continue
            c = grid[y, x]
            if c < 0:
                continue
            d = swap_delta(qptr, qidx, qw, pos, occupant, dist, a, c)
            if d < best:
                best = d
                best_c = c
    return best, best_c


@njit(cache=True, nogil=True)
def _force_iterations(qptr, qidx, qw, pos, occupant, dist, core_xy, grid, fraction, iterations, radius):
    k = pos.shape[0]
    total_gain = 0.0
    visit = max(1, int(np.ceil(fraction * k)))
    for _ in range(iterations):
        fx = np.zeros(k)
        fy = np.zeros(k)
        for a in range(k):
            xa = core_xy[pos[a], 0]
            ya = core_xy[pos[a], 1]
            for e in range(qptr[a], qptr[a + 1]):
                j = qidx[e]
                fx[a] += qw[e] * (core_xy[pos[j], 0] - xa)
                fy[a] += qw[e] * (core_xy[pos[j], 1] - ya)
        mag = fx * fx + fy * fy
        order = np.argsort(-mag)[:visit]
        swapped = False
        for a in order:
            if mag[a] <= 0.0:
                break
            sx = 1 if fx[a] > 0 else (-1 if fx[a] < 0 else 0)
            sy = 1 if fy[a] > 0 else (-1 if fy[a] < 0 else 0)
            best, best_c = _best_swap(qptr, qidx, qw, pos, occupant, dist, core_xy, grid, a, radius, sx, sy, True)
            if best_c >= 0:
                _apply_swap(pos, occupant, a, best_c)
                total_gain -= best
                swapped = True
        if not swapped:
            break
    return total_gain


@njit(cache=True, nogil=True)
def _pairwise_pass(qptr, qidx, qw, pos, occupant, dist, core_xy, grid, radius, order):
    gain = 0.0
    for a in order:
        best, best_c = _best_swap(qptr, qidx, qw, pos, occupant, dist, core_xy, grid, a, radius, 0, 0, False)
        if best_c >= 0:
            _apply_swap(pos, occupant, a, best_c)
            gain -= best
    return gain


@njit(cache=True, nogil=True)
def _anneal(qptr, qidx, qw, pos, occupant, dist, core_xy, grid, steps, t0, t1, seed):
    np.random.seed(seed)
    k = pos.shape[0]
    c = occupant.shape[0]
    height, width = grid.shape
    cur = 0.0
    for a in range(k):
        for e in range(qptr[a], qptr[a + 1]):
            cur += qw[e] * dist[pos[a], pos[qidx[e]]]
    cur *= 0.5
    best = cur
    best_pos = pos.copy()
    # geometric cooling t0 -> t1, one multiplication per step
    cool = (t1 / t0) ** (1.0 / max(steps, 1))
    temp = t0 / cool
    for _ in range(steps):
        temp *= cool
        a = np.random.randint(k)
        if qptr[a + 1] > qptr[a] and np.random.random() < 0.8:
            # NOTE: propose a core next to one of a's neighbours (weighted pick): far more
            # useful than a uniform core once the placement is roughly right.
            e = qptr[a] + np.random.randint(qptr[a + 1] - qptr[a])
            j = qidx[e]
            x = core_xy[pos[j], 0] + np.random.randint(-1, 2)
            y = core_xy[pos[j], 1] + np.random.randint(-1, 2)
            if x < 0 or y < 0 or x >= width or y >= height or grid[y, x] < 0:
                continue
            cb = grid[y, x]
        else:
            cb = np.random.randint(c)
        if cb == pos[a]:
            continue
        d = swap_delta(qptr, qidx, qw, pos, occupant, dist, a, cb)
        if d <= 0.0 or np.random.random() < np.exp(-d / temp):
            _apply_swap(pos, occupant, a, cb)
            cur += d
            if cur < best - 1e-9:
                best = cur
                best_pos[:] = pos
    return best, best_pos


def anneal_placement(q: sp.csr_matrix, pos: np.ndarray, dist: np.ndarray, core_xy: np.ndarray,
                     grid: np.ndarray, steps: int, seed: int, chains: int = 1, threads: int = 1) -> float:
    """Simulated annealing over group moves/swaps (beyond the seed); keeps the best seen.

    Proposals move a group next to one of its neighbours (80%) or to a uniform core;
    temperature falls geometrically from the mean |delta| of random swaps to 1/1000 of it.
    ``chains`` independent chains (seeds ``seed + i``) share the ``steps`` and the best end
    is kept; they run on up to ``threads`` threads, with the same result on any number.
    Updates ``pos`` in place; returns the decrease of hop-weighted traffic. O(steps * deg).
    """
    if q.nnz == 0 or steps <= 0:
        return 0.0
    qptr = q.indptr.astype(np.int64)
    qidx = q.indices.astype(np.int64)
    qw = q.data.astype(np.float64)
    num_cores = core_xy.shape[0]
    occupant = np.full(num_cores, -1, np.int64)
    occupant[pos] = np.arange(pos.shape[0])
    before = _traffic(q, pos, dist)
    rng = np.random.default_rng(seed)
    sample = [abs(swap_delta(qptr, qidx, qw, pos, occupant, dist, int(a), int(c)))
              for a, c in zip(rng.integers(0, pos.shape[0], 64), rng.integers(0, num_cores, 64), strict=True)]
    t0 = max(float(np.mean(sample)), 1e-9)
    chains = max(1, chains)
    per = max(1, steps // chains)

    def chain(i: int):
        # NOTE: Numba's np.random state is per thread, and each chain seeds it first
        return _anneal(qptr, qidx, qw, pos.copy(), occupant.copy(), dist, core_xy, grid, per, t0, t0 * 1e-3,
                       seed + i)

    ends = run_indexed(chain, chains, threads)
    best, best_pos = min(ends, key=lambda end: end[0])  # first of equal ends: independent of scheduling
    if best < before:
        pos[:] = best_pos
        return before - best
    return 0.0


def _traffic(q: sp.csr_matrix, pos: np.ndarray, dist: np.ndarray) -> float:
    coo = q.tocoo()
    return float(0.5 * np.sum(coo.data * dist[pos[coo.row], pos[coo.col]]))


def improve_placement(q: sp.csr_matrix, pos: np.ndarray, core_xy: np.ndarray, dist: np.ndarray,
                      width: int, height: int, rng: np.random.Generator, fraction: float = 0.05,
                      iterations: int = 50, swap_passes: int = 3, radius: int = 3,
                      debug: bool = False, anneal_steps: int = 0, anneal_work: float = 0.0,
                      anneal_chains: int = 1, threads: int = 1) -> float:
    """Annealing (optional), force-directed swaps, then exact pairwise swaps; updates ``pos``.

    Args:
        q: group graph (k, k) CSR.
        pos: int64 (k,) index of each group's core in ``core_xy`` (distinct).
        core_xy: (C, 2) every usable core of the board (the cores groups may occupy).
        dist: (C, C) hop distances between those cores.

    Returns:
        the decrease of hop-weighted traffic.

    Raises:
        ObjectiveMismatch: debug only, if the tracked gain disagrees with recomputation.
    """
    qptr = q.indptr.astype(np.int64)
    qidx = q.indices.astype(np.int64)
    qw = q.data.astype(np.float64)
    c = core_xy.shape[0]
    grid = np.full((height, width), -1, np.int64)
    grid[core_xy[:, 1], core_xy[:, 0]] = np.arange(c)
    occupant = np.full(c, -1, np.int64)
    occupant[pos] = np.arange(pos.shape[0])
    before = _traffic(q, pos, dist) if debug else 0.0
    gain = 0.0
    if anneal_work > 0:
        # NOTE: a step costs about twice the mean group degree; cap the total work
        anneal_steps = min(anneal_steps, int(anneal_work / (2.0 * q.nnz / max(q.shape[0], 1) + 1.0)))
    if anneal_steps > 0:
        gain += anneal_placement(q, pos, dist, core_xy, grid, anneal_steps, int(rng.integers(2**31)),
                                 anneal_chains, threads)
        occupant[:] = -1
        occupant[pos] = np.arange(pos.shape[0])
    gain += _force_iterations(qptr, qidx, qw, pos, occupant, dist, core_xy, grid, fraction, iterations, radius)
    for _ in range(swap_passes):
        g = _pairwise_pass(qptr, qidx, qw, pos, occupant, dist, core_xy, grid, radius,
                           rng.permutation(pos.shape[0]).astype(np.int64))
        gain += g
        if g <= 1e-12:
            break
    if debug:
        after = _traffic(q, pos, dist)
        if not np.isclose(before - after, gain, rtol=1e-9, atol=1e-6):
            raise ObjectiveMismatch(f"objective function mismatch: swaps gained {gain}, recomputed {before - after}")
    return gain
