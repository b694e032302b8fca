r"""Recursive bisection along the target region, one depth at a time, on threads.

Recursive bisection splits a set of *slots* (cores, each with a capacity) into two with a
caller-supplied ``split`` function and bisects the graph in proportion to the two halves'
capacities (:func:`~.initial.bisect` or :func:`~.multilevel.multilevel_bisect`), until
every slot owns one part. When the slots have coordinates, each bisection is biased by
where its vertices' outside neighbours lie (Scotch's dual recursive bipartitioning). This
is METIS's ``pmetis.c`` recursion, with the nodes of one depth on threads.

Complexity: O(log s) rounds over the whole graph.
"""

from __future__ import annotations

import threading
from typing import Callable

import numpy as np
from numba import njit

from corefold.mapping.nets import restrict
from corefold.mapping.parallel import run_indexed
from corefold.mapping.partition.bisection import bisection_cost
from corefold.mapping.partition.fm_nets import cut_nets
from corefold.mapping.partition.initial import bisect
from corefold.mapping.partition.multilevel import multilevel_bisect


def halves(slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Split a list of interchangeable slots in two halves (count-based recursion)."""
    h = slots.size // 2
    return slots[:h], slots[h:]


@njit(cache=True, nogil=True)
def side_subgraph(indptr, indices, weights, side, which):
    """The subgraph induced by ``side == which``, in its own numbering (vertices keep their
    relative order). O(n + m of the input).

    Returns:
        (indptr, indices, weights) of the subgraph.
    """
    n = indptr.shape[0] - 1
    local = np.full(n, -1, np.int64)
    count = 0
    edges = 0
    for v in range(n):
        if side[v] != which:
            continue
        local[v] = count
        count += 1
        for e in range(indptr[v], indptr[v + 1]):
            if side[indices[e]] == which:
                edges += 1
    ptr = np.zeros(count + 1, np.int64)
    idx = np.empty(edges, np.int32)
    w = np.empty(edges, np.float64)
    p = 0
    for v in range(n):
        if side[v] != which:
            continue
        for e in range(indptr[v], indptr[v + 1]):
            u = indices[e]
            if side[u] == which:
                idx[p] = local[u]
                w[p] = weights[e]
                p += 1
        ptr[local[v] + 1] = p
    return ptr, idx, w


@njit(cache=True, nogil=True)
def external_bias(indptr, indices, weights, verts, owner, me, center, c0, c1):
    """Per vertex of ``verts``: sum over edges leaving the node of w * (d(c_u, c0) - d(c_u, c1)).

    ``center[u]`` is the centre of the region u is currently bound to; d is Manhattan;
    ``owner[u] != me`` marks vertices outside the node. This is Scotch's dual recursive
    bipartitioning: a bisection knows which way its vertices' outside neighbours lie.
    O(sum of degrees of verts).
    """
    bias = np.zeros(verts.shape[0])
    for i in range(verts.shape[0]):
        v = verts[i]
        for e in range(indptr[v], indptr[v + 1]):
            u = indices[e]
            if owner[u] != me:
                d0 = abs(center[u, 0] - c0[0]) + abs(center[u, 1] - c0[1])
                d1 = abs(center[u, 0] - c1[0]) + abs(center[u, 1] - c1[1])
                bias[i] += weights[e] * (d0 - d1)
    return bias


class _Parent:
    """A bisected node's subgraph until both children have taken theirs (thread-safe).

    ``graph`` is (indptr, indices, weights) or (indptr, indices, weights, net ptr, pins,
    net weights): with nets, each child takes its side of every net (cut-net splitting).
    ``side`` None: the root, whose one child is the whole graph."""

    def __init__(self, graph, side):
        self._graph, self._side, self._left = graph, side, 2
        self._lock = threading.Lock()

    def child(self, which: int):
        if self._side is None:
            return self._graph
        with self._lock:
            graph, side = self._graph, self._side
            self._left -= 1
            if self._left == 0:
                self._graph = self._side = None
        sub = side_subgraph(*graph[:3], side, which)
        if len(graph) == 3:
            return sub
        return sub + restrict(*graph[3:], side, which)


def recursive_bisection(indptr, indices, weights, loads, slot_caps: np.ndarray,
                        split: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]],
                        rng: np.random.Generator, restarts: int = 4,
                        slot_xy: np.ndarray | None = None, multilevel: bool = False,
                        repeats: int = 4, min_shrink: float = 0.2, progress=None,
                        bias_scale: float = 1.0, top_tries: int = 1, rebalance_moves: int = 0,
                        threads: int = 1, two_hop: bool = False,
                        rebalance_tolerance: float | None = None, coarsest: int = 128, max_levels: int = 40,
                        expansion: bool = False, nets: tuple | None = None) -> np.ndarray:
    """Assign every vertex to a slot by recursive bisection, one depth at a time.

    The nodes of one depth hold disjoint vertex sets and are bisected independently, on
    ``threads`` threads (the Numba kernels release the GIL); each node takes its induced
    subgraph from its parent's (:func:`side_subgraph`) when it is bisected. Node ``i`` (heap numbering:
    root 1, children 2i and 2i + 1) draws from its own generator seeded by (one draw of
    ``rng``, i), so the result does not depend on ``threads`` or on scheduling.

    Args:
        slot_caps: int64 (s, dims) capacity of each slot.
        split: splits an array of slot ids into two non-empty arrays.
        slot_xy: (s, 2) slot coordinates; when given each bisection is biased by where its
            vertices' outside neighbours lie (dual recursive bipartitioning), as bound at
            the end of the previous depth.
        multilevel: bisect with :func:`multilevel_bisect` (else :func:`bisect` directly).
        progress: optional callable(1) after each bisection (there are s - 1).
        top_tries: multilevel bisections tried (cheapest kept) for nodes holding more than
            a quarter of the graph.
        rebalance_moves: cap on :func:`rebalance` moves per call (0 = off).
        threads: worker threads for the nodes of one depth.
        two_hop: 2-hop matching while coarsening (see :func:`.coarsen.two_hop_matching`).
        rebalance_tolerance: rebalance each side to its share of the load times (1 + this)
            (None: to its capacity); see :func:`balance_caps`.
        coarsest, max_levels, expansion: passed to :func:`multilevel_bisect`.
        nets: pin sets ``(ptr, pins, weight)`` on the vertices: every bisection then cuts
            the fewest nets (with cut-net splitting, the recursion minimises the k-way
            connectivity, the multicast objective's partition term).

    Returns:
        int64 slot id per vertex. Complexity O(log s) rounds over the graph.
    """
    n = indptr.shape[0] - 1
    part = np.zeros(n, np.int64)
    base = int(rng.integers(0, 2**63 - 1))
    owner = np.zeros(n, np.int64)
    center = None
    if slot_xy is not None:
        center = np.tile(slot_xy.mean(axis=0), (n, 1)).astype(np.float64)
    # NOTE: a node holds its parent, not its own subgraph: the subgraph is extracted when
    # the node is bisected, and the parent's is dropped once both children have theirs, so
    # a depth never holds all its subgraphs at once (vgg-small peak: 3.14 GiB -> 2.94 GiB;
    # 2.61 GiB with one induced subgraph of the whole graph per node, 0.29 s against 0.16 s
    # of extraction on mobilenet-tiny)
    nodes = [[1, np.arange(n, dtype=np.int64), np.arange(slot_caps.shape[0], dtype=np.int64),
              _Parent((indptr, indices, weights) + (tuple(nets) if nets is not None else ()), None), 0]]

    def bisect_node(node):
        node_id, verts, slots, parent, which = node
        node[3] = None
        graph = parent.child(which)
        del parent
        sptr, sidx, sw = graph[:3]
        snets = graph[3:] if len(graph) > 3 else None
        node_rng = np.random.default_rng([base, node_id])
        s0, s1 = split(slots)
        c0 = c1 = None
        if slot_xy is not None:
            c0 = slot_xy[s0].mean(axis=0).astype(np.float64)
            c1 = slot_xy[s1].mean(axis=0).astype(np.float64)
        if slot_xy is not None and bias_scale != 0.0:
            bias = bias_scale * external_bias(indptr, indices, weights, verts, owner, node_id, center, c0, c1)
        else:
            bias = np.zeros(verts.size)
        caps2 = np.stack([slot_caps[s0].sum(axis=0), slot_caps[s1].sum(axis=0)])
        if nets is not None:
            # NOTE: with nets, each bisection may use only its share of the node's slack,
            # (slack)^(1/depth) as METIS's recursive bisection does: the nodes below keep
            # room to move. lenet, multicast: connectivity 14,914 -> 11,950. For the
            # synapse objective it cost 3.4% traffic on lenet (2.61e5 -> 2.70e5): off there.
            node_total = loads[verts].sum(axis=0)
            room = caps2.sum(axis=0) / np.maximum(node_total, 1)
            depth = max(1.0, np.ceil(np.log2(slots.size)))
            eps = np.maximum(room, 1.0) ** (1.0 / depth)
            share = caps2 / np.maximum(caps2.sum(axis=0), 1)
            caps2 = np.minimum(caps2, np.ceil(share * node_total[None, :] * eps[None, :]).astype(np.int64))
        if multilevel:
            # NOTE: the top bisections shape everything below them; give them extra tries
            tries = top_tries if verts.size * 4 > n else 1
            side, best = None, None
            for _ in range(tries):
                cand = multilevel_bisect(sptr, sidx, sw, loads[verts], caps2, bias, node_rng, restarts, repeats,
                                         min_shrink, rebalance_moves=rebalance_moves, two_hop=two_hop,
                                         rebalance_tolerance=rebalance_tolerance, coarsest=coarsest,
                                         max_levels=max_levels, expansion=expansion, nets=snets)
                if tries == 1:
                    cost = 0.0
                elif snets is None:
                    cost = bisection_cost(sptr, sidx, sw, cand, bias)
                else:
                    cost = cut_nets(*snets, cand) + float(bias[cand == 0].sum())
                if best is None or cost < best:
                    side, best = cand, cost
        else:
            side = bisect(sptr, sidx, sw, loads[verts], caps2, node_rng, restarts, bias=bias,
                          rebalance_moves=rebalance_moves, rebalance_tolerance=rebalance_tolerance, nets=snets)
        me = None if s0.size == 1 and s1.size == 1 else _Parent(graph, side)  # leaves need none
        return side, s0, s1, c0, c1, me

    while nodes:
        work = []
        for node in nodes:
            node_id, verts, slots, _, _ = node
            if slots.size == 1 or verts.size == 0:
                part[verts] = slots[0]
            else:
                owner[verts] = node_id
                work.append(node)
        nodes = None  # the parents go as their children take their subgraphs
        results = run_indexed(lambda i, work=work: bisect_node(work[i]), len(work), threads)
        nodes = []
        for (node_id, verts, _, _, _), (side, s0, s1, c0, c1, me) in zip(work, results, strict=True):
            if center is not None:
                center[verts[side == 0]] = c0
                center[verts[side == 1]] = c1
            nodes.append([2 * node_id, verts[side == 0], s0, me, 0])
            nodes.append([2 * node_id + 1, verts[side == 1], s1, me, 1])
            if progress is not None:
                progress(1)
    return part
