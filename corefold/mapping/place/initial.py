r"""Target region and initial placement by region bisection (SPEC M4 §7-8).

The region is the rectangle of the board that holds at least ``k`` usable cores with the
smallest score :math:`w + h + 2(\kappa - 1)(\text{chips spanned} - 1)` (a proxy for the
mean hop distance inside it; :math:`\kappa` = inter-chip hop cost), ties broken by area.
Surplus cores, farthest from the centre first, are marked unusable so exactly ``k`` remain.

Region bisection cuts the region across its longer side at the core column (or row)
that splits its cores most evenly, and cuts the group graph with the greedy-growing
bisection so each half gets no more groups than its sub-region has cores; it recurses
until one group per core. Complexity: O(W^2 H^2) for the region search (vectorised over
positions), O((k + nnz(Q)) log k) for the placement.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import scipy.sparse as sp

from corefold.errors import CapacityError
from corefold.mapping.partition.recursive import recursive_bisection


def choose_region(usable: np.ndarray, k: int, width: int, height: int, mesh_width: int,
                  mesh_height: int, interchip_hop_cost: float) -> np.ndarray:
    """The k cores (global (x, y), shape (k, 2)) of the best rectangle, row-major.

    Raises:
        CapacityError: fewer than k usable cores on the board.
    """
    if usable.shape[0] < k:
        raise CapacityError(f"need {k} cores but the target has only {usable.shape[0]} usable cores")
    grid = np.zeros((height, width), np.int64)
    grid[usable[:, 1], usable[:, 0]] = 1
    pre = np.zeros((height + 1, width + 1), np.int64)
    pre[1:, 1:] = grid.cumsum(0).cumsum(1)
    best = None
    for h in range(1, height + 1):
        for w in range(1, width + 1):
            if w * h < k:
                continue
            counts = pre[h:, w:] - pre[:-h, w:] - pre[h:, :-w] + pre[:-h, :-w]  # (H-h+1, W-w+1)
            ys, xs = np.nonzero(counts >= k)
            if ys.size == 0:
                continue
            chips_x = (xs + w - 1) // mesh_width - xs // mesh_width
            chips_y = (ys + h - 1) // mesh_height - ys // mesh_height
            score = w + h + 2.0 * (interchip_hop_cost - 1.0) * (chips_x + chips_y)
            i = int(np.lexsort((xs, ys, score))[0])
            key = (float(score[i]), w * h, int(ys[i]), int(xs[i]))
            if best is None or key < best[0]:
                best = (key, int(xs[i]), int(ys[i]), w, h)
    _, x0, y0, w, h = best
    inside = ((usable[:, 0] >= x0) & (usable[:, 0] < x0 + w) & (usable[:, 1] >= y0) & (usable[:, 1] < y0 + h))
    cores = usable[inside]
    if cores.shape[0] > k:
        cx, cy = x0 + (w - 1) / 2.0, y0 + (h - 1) / 2.0
        far = np.abs(cores[:, 0] - cx) + np.abs(cores[:, 1] - cy)
        keep = np.lexsort((cores[:, 0], cores[:, 1], far))[:k]
        cores = cores[np.sort(keep)]
    order = np.lexsort((cores[:, 0], cores[:, 1]))
    return cores[order].astype(np.int64)


def region_split(xy: np.ndarray) -> Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """A ``split`` for :func:`recursive_bisection` over slots at cores ``xy`` (s, 2).

    Cuts across the longer side of the slots' bounding box at the line that balances the
    two halves best; both halves are non-empty.
    """
    def split(slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        pts = xy[slots]
        span = pts.max(axis=0) - pts.min(axis=0)
        axis = 0 if span[0] >= span[1] else 1
        coord = pts[:, axis]
        values = np.unique(coord)
        if values.size < 2:
            axis = 1 - axis
            coord = pts[:, axis]
            values = np.unique(coord)
        if values.size < 2:  # several slots on one core cannot happen; split by count
            h = slots.size // 2
            return slots[:h], slots[h:]
        below = np.array([(coord < v).sum() for v in values[1:]])
        i = int(np.argmin(np.abs(below - slots.size / 2.0)))
        mask = coord < values[1 + i]
        return slots[mask], slots[~mask]

    return split


def place_groups(q: sp.csr_matrix, slots_xy: np.ndarray, rng: np.random.Generator,
                 restarts: int = 4) -> np.ndarray:
    """Seed placement: group -> slot index (into ``slots_xy``), one group per slot.

    Args:
        q: the group graph (k, k), k <= number of slots.
        slots_xy: (s, 2) cores of the region.

    Returns:
        int64 (k,) slot index per group, all distinct.
    """
    k = q.shape[0]
    s = slots_xy.shape[0]
    loads = np.ones((k, 1), np.int64)
    caps = np.ones((s, 1), np.int64)
    slot = recursive_bisection(q.indptr.astype(np.int64), q.indices.astype(np.int32), q.data.astype(np.float64),
                               loads, caps, region_split(slots_xy), rng, restarts, slot_xy=slots_xy)
    # the bisection targets are floors of exact shares with unit loads, so every slot
    # receives at most one group; check, then fill any leftovers into free slots
    taken = np.zeros(s, bool)
    out = np.full(k, -1, np.int64)
    for g in range(k):
        if not taken[slot[g]]:
            out[g] = slot[g]
            taken[slot[g]] = True
    free = iter(np.flatnonzero(~taken))
    for g in np.flatnonzero(out < 0):
        out[g] = next(free)
    return out
