"""What a plan is made of: the use gaps of a storage, and the eviction of some of them.

A device storage produced at step ``p`` and read at steps ``u_1 < ... < u_m`` has *points*
``[p, u_1, ..., u_m]`` and *gaps* ``k = 0..m-1`` between consecutive points
``(lo_k, hi_k)``. Evicting a set ``G`` of gaps splits the reads into clusters: cluster 0
(up to the first evicted gap) reads the original; cluster ``j`` (after the ``j``-th evicted
gap) reads a restored copy. One reduction serves every restore (SPEC M2 §4: a reduced
tensor may be restored more than once). With ``B`` the storage's bytes and ``C`` its
compressed bytes, an :class:`Eviction` holds, in compute steps (SPEC M2 §6's profile):

=========  ====================================================================
mode       live ranges
=========  ====================================================================
swap       original ``[p, s-1]``; copy ``j``: ``[q_j + 1, last_j]``
compress   original ``[p, lo_1]``; compressed ``[lo_1, first_J]``; copy ``j``:
           ``[first_j, last_j]``
both       original ``[p, lo_1]``; compressed ``[lo_1, s-1]``; restored compressed
           ``j``: ``[q_j + 1, first_j]``; copy ``j``: ``[first_j, last_j]``
=========  ====================================================================

where ``s`` is the *release* step (the SwapOut must end before step ``s`` starts: the
seed's serialization edge [001 §110]), ``q_j`` the *trigger* of restore ``j`` (it may
start once step ``q_j`` ends, and once the SwapOuts released at ``q_j + 1`` are done: the
prefetch edge [001 §111]), ``first_j`` and ``last_j`` the
cluster's first and last reads (``last`` is the final step for a graph output). Compress
runs on the compute stream right after ``lo_1``; decompress right before ``first_j``.
These ranges are exactly what :func:`corefold.passes.memory.memsim.step_profile` gives
the transformed graph (or more), so a plan that fits in this model fits there.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field

import numpy as np

from corefold.ops.defs.memory import CompressFormat
from corefold.passes.memory.program import COMPUTE, Program, Storage, is_view

SWAP, COMPRESS, BOTH = "swap", "compress", "both"


@dataclass(eq=False)
class UseGaps:
    """The points and gaps of one storage (see the module doc).

    Attributes:
        storage: the storage.
        points: ``[p, u_1, ..., u_m]``, ascending compute steps.
        end: the last step it is live without a plan (``n - 1`` for a graph output).
    """

    storage: Storage
    points: np.ndarray
    end: int

    @property
    def nbytes(self) -> int:
        return self.storage.nbytes

    def gap_at(self, step: int) -> int | None:
        """The gap strictly containing ``step`` (``lo < step < hi``), or None."""
        k = bisect_right(self.points.tolist(), step) - 1
        if k < 0 or k + 1 >= len(self.points) or self.points[k] == step:
            return None
        return k

    def lo(self, gap: int) -> int:
        return int(self.points[gap])

    def hi(self, gap: int) -> int:
        return int(self.points[gap + 1])

    def cluster_last(self, gaps: list[int], j: int) -> int:
        """Last read of cluster ``j`` (0 = before the first evicted gap)."""
        if j < len(gaps):
            return int(self.points[gaps[j]])
        return self.end


@dataclass(eq=False)
class Eviction:
    """The plan for one storage.

    Attributes:
        uses: its points and gaps.
        mode: ``swap``, ``compress`` or ``both`` (compress, then swap the compressed form).
        fmt: the compression format (compress and both).
        gaps: evicted gaps, ascending.
        release: ``s``, the first step after the reduction has freed the device copy
            (swap and both).
        triggers: ``q_j`` for each evicted gap (swap and both).
        swap_slot: reserved (start, end) of the SwapOut on the device-to-host link.
        swap_anchor: the step after which the SwapOut is issued.
        restore_slots: reserved (start, end) of each SwapIn on the host-to-device link.
    """

    uses: UseGaps
    mode: str
    fmt: CompressFormat | None = None
    gaps: list[int] = field(default_factory=list)
    release: int = 0
    triggers: list[int] = field(default_factory=list)
    swap_slot: tuple[float, float] = (0.0, 0.0)
    swap_anchor: int = 0
    restore_slots: list[tuple[float, float]] = field(default_factory=list)

    @property
    def storage(self) -> Storage:
        return self.uses.storage

    @property
    def moves(self) -> bool:
        """Whether it crosses the host link (swap or both)."""
        return self.mode in (SWAP, BOTH)

    def compressed_bytes(self) -> int:
        """Bytes of the compressed form (scale included), or of the original for swap."""
        if self.fmt is None or self.mode == SWAP:
            return self.uses.nbytes
        elements = self.uses.nbytes // self.storage.root.dtype.itemsize
        return elements * self.fmt.itemsize + (4 if self.fmt.scale_max else 0)

    def first(self, j: int) -> int:
        """First read of cluster ``j + 1`` (the one after evicted gap ``gaps[j]``)."""
        return self.uses.hi(self.gaps[j])

    def intervals(self) -> list[tuple[int, int, int]]:
        """Live ranges ``(a, b, bytes)`` on the device, as the module doc's table."""
        u, g = self.uses, self.gaps
        p, lo1 = int(u.points[0]), u.lo(g[0])
        big, small = u.nbytes, self.compressed_bytes()
        out: list[tuple[int, int, int]] = []
        if self.mode == SWAP:
            out.append((p, self.release - 1, big))
        elif self.mode == COMPRESS:
            out += [(p, lo1, big), (lo1, self.first(len(g) - 1), small)]
        else:
            out += [(p, lo1, big), (lo1, self.release - 1, small)]
        for j in range(len(g)):
            first, last = self.first(j), u.cluster_last(g, j + 1)
            if self.mode == SWAP:
                out.append((self.triggers[j] + 1, last, big))
            elif self.mode == COMPRESS:
                out.append((first, last, big))
            else:
                out += [(self.triggers[j] + 1, first, small), (first, last, big)]
        return out


def use_gaps(program: Program, intervals: dict[Storage, tuple[int, int]]) -> dict[Storage, UseGaps]:
    """The points and gaps of every storage a plan may evict: on the device, not
    resident, not a graph output, with at least one gap that has a step strictly inside it, and whose views
    can be rebuilt from a restored copy (single-output view nodes with no other non-constant
    input; no in-place writer). O(V + E)."""
    out: dict[Storage, UseGaps] = {}
    for s, (_, end) in intervals.items():
        if s.host or s.resident or s.output or program.stream[s.root.producer] != COMPUTE:
            continue
        if not _rebuildable(s):
            continue
        steps = {program.step[s.root.producer]}
        for node, _, _ in s.uses():
            if program.stream[node] != COMPUTE:
                break
            steps.add(program.step[node])
        else:
            points = np.array(sorted(steps), dtype=np.int64)
            if len(points) >= 2 and int(np.max(np.diff(points))) >= 2:
                out[s] = UseGaps(s, points, end)
    return out


def _rebuildable(s: Storage) -> bool:
    for m in s.members[1:]:
        node = m.producer
        if node is None or not is_view(node) or node.meta.get("inplace") or len(node.outputs) != 1:
            return False
        if any(v is not None and not v.is_constant for v in node.inputs[1:]):
            return False
    return True
