"""Thresholds mode: the seed's rule as given (SPEC M2 §2-5), with no budget.

Timing analysis (:mod:`~corefold.passes.memory.timing`) gives every input's slack; the
candidates are the inputs with ``TTS > thTTS`` and ``bytes > thS``, at most ``N`` of them,
largest first. Each chosen input ``(n, i)`` evicts the use gap of its tensor that ends at
``n`` (one reduction per tensor, one restore per chosen destination: SPEC M2 §4). The
reduction's serialization edge goes to the next compute node after the tensor's last
earlier read (the seed's node P [001 §110]); the restore's trigger Q is the latest node
before the destination such that the compute between them covers the transfer (SPEC M2's
generalised Q [001 §111]), but never before that earlier read. O(V + E + k log k) for k
candidates.
"""

from __future__ import annotations

import numpy as np

from corefold.ops.defs.memory import compress_format
from corefold.passes.memory.evictions import BOTH, COMPRESS, SWAP, Eviction, use_gaps
from corefold.passes.memory.memsim import step_profile
from corefold.passes.memory.planner import compressible
from corefold.passes.memory.program import COMPUTE, Program
from corefold.passes.memory.settings import MemorySettings
from corefold.passes.memory.timesim import copy_seconds, node_seconds
from corefold.passes.memory.timing import Timing, select_candidates, timing_analysis
from corefold.target import Target


def plan_thresholds(program: Program, target: Target, settings: MemorySettings) -> tuple[list[Eviction], Timing]:
    """The seed's evictions for ``program`` (see the module doc), and the timing used."""
    durations = {n: node_seconds(n, program.stream[n], target) for n in program.order}
    order = program.order if settings.slack == "serial" else None
    timing = timing_analysis(program.graph, durations, order)
    gaps = use_gaps(program, step_profile(program).intervals)

    def movable(v) -> bool:
        return program.storage_of[id(v)] in gaps

    chosen = select_candidates(program.graph, timing, settings.th_tts, settings.th_size, settings.max_count,
                               movable)
    per_storage: dict = {}
    for node, _, v in chosen:
        if program.stream[node] != COMPUTE:
            continue
        u = gaps[program.storage_of[id(v)]]
        k = int(np.searchsorted(u.points, program.step[node]))
        if k >= 1 and u.hi(k - 1) - u.lo(k - 1) >= 2:
            per_storage.setdefault(u.storage, (u, set()))[1].add(k - 1)
    S = np.concatenate([[0.0], np.cumsum([durations[c] for c in program.compute])])
    fmt = compress_format(settings.compress_format)
    evictions = []
    for u, gap_set in per_storage.values():
        mode = settings.reduction if settings.reduction != "auto" else SWAP
        if mode in (COMPRESS, BOTH) and not compressible(u.storage, fmt):
            mode = SWAP
        ev = Eviction(u, mode, fmt if mode != SWAP else None, sorted(gap_set))
        lo1 = u.lo(ev.gaps[0])
        ev.release = lo1 + 1
        length = copy_seconds(ev.compressed_bytes(), target)
        start = S[int(u.points[0]) + 1] if mode == SWAP else S[lo1 + 1]
        ev.swap_slot = (start, start + length)
        ev.swap_anchor = int(u.points[0]) if mode == SWAP else lo1
        for g in ev.gaps:
            lo, hi = u.lo(g), u.hi(g)
            # the latest q with S[hi] - S[q + 1] >= transfer, within (lo, hi)
            q = int(np.searchsorted(S, S[hi] - length, side="right")) - 2
            q = min(hi - 1, max(lo + 1, q))
            ev.triggers.append(q)
            ev.restore_slots.append((S[q + 1], S[q + 1] + length))
        evictions.append(ev)
    return evictions, timing
