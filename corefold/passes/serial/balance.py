"""Moving the cuts of a minimum cover to where the chain runs fastest (beyond the seed).

The greedy cover (:func:`~corefold.passes.serial.fusion.compiled_cover`) reaches the
fewest executables by ending every range as far as it still compiles, so its ranges are
packed full from the head and the last one takes what is left. A range that barely fits
runs slowly: its weights leave little SRAM for activations, which then spill to DRAM, and
the backend cuts fewer pieces for the mesh (the float ResNet-18 on ``npu``: two
executables, 1234.8 + 18.3 us with the cut at operator 212 of 226, 661.2 + 186.5 us at
operator 142). Keeping the count, the cuts ``c_1 < ... < c_{k-1}`` of ``[c_0, c_k)`` move to

    minimise   sum_i latency([c_{i-1}, c_i))     over ranges that each compile,

``latency`` being the timed simulation of the range's executable (a callable the caller
gives: M1 itself never imports the simulator). Coordinate descent: each cut in turn, from
the last to the first (``sweeps`` 2: and back), moves within its *window*, the positions
``x`` between its neighbours ``a < x < b`` for which both ``[a, x)`` and ``[x, b)`` pass
the fast check (both bounds by binary search, feasibility taken as monotone), among the
clean ends (:func:`~corefold.passes.serial.cuts.clean_ends`) when the window holds any, and
short of the nearest range on either side that the service already failed to compile
(where the greedy's search found its range stop compiling: the fast check admits more, and
is not monotone everywhere). Inside the
window a golden-section search over the candidates, from the current cut, evaluates at
most ``trials`` positions, each two compiles and two timed runs (cached by range; in one
process the second range is not compiled when the first does not compile), and the
cut goes to the fastest position evaluated, which is never slower than where it was. The
latency need not be unimodal in the cut; the search then finds a local improvement, no
worse than the greedy's cuts.

Complexity: per cut and sweep O(log n) fast checks and at most ``trials`` evaluations.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from corefold.passes.serial.chain import Piece
from corefold.passes.serial.compilers import CompileService

#: 1 / golden ratio: the share of an interval a golden-section step keeps.
_INV_PHI = (math.sqrt(5) - 1) / 2


@dataclass
class Balance:
    """What the balancing did: cuts moved, positions tried, the full compiles it added to
    the cover's, and the summed latency of the ranges before and after (the latency
    callable's figures: M1's candidate executables)."""

    moved: int = 0
    evaluations: int = 0
    compiles: int = 0
    latency_before_s: float | None = None
    latency_after_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"moved": self.moved, "evaluations": self.evaluations, "compiles": self.compiles,
                "latency_before_s": self.latency_before_s, "latency_after_s": self.latency_after_s}


def balance_cuts(pieces: Sequence[Piece], svc: CompileService, latency: Callable[[Any], float],
                 ends: Sequence[int] | None = None, trials: int = 6, sweeps: int = 1) -> tuple[list[Piece], Balance]:
    """The cover ``pieces`` (contiguous, each compiled) with its cuts moved as the module
    docstring says, and what moved. ``latency(executable)`` gives seconds; ``ends`` the
    clean ends (None: any position). The count of ranges never changes."""
    report = Balance()
    if len(pieces) < 2 or trials <= 0:
        return list(pieces), report
    bounds = [pieces[0].start, *(p.end for p in pieces)]
    calls = getattr(svc, "calls", 0)

    def cost(p: Piece) -> float:
        out = svc.compile(p)
        if not out.ok:
            return math.inf
        if out.latency_s is None:
            out.latency_s = latency(out.executable)
        return out.latency_s

    def total() -> float:
        return sum(cost(Piece(a, b)) for a, b in zip(bounds, bounds[1:], strict=False))

    report.latency_before_s = total()
    inner = list(range(1, len(bounds) - 1))
    # from the tail (the greedy packed the head full); a second sweep back, for the windows
    # a neighbour's move changed, gained 0 to 0.9% more on BERT, SqueezeNet and ResNet-18
    # on npu-2x2 for 18-53% more of the balancing's compiles, so it is not the default
    for sweep in ((inner[::-1], inner) if len(inner) > 1 else (inner,))[:sweeps]:
        for i in sweep:
            a, c, b = bounds[i - 1], bounds[i], bounds[i + 1]
            window = _window(a, c, b, svc, ends)
            if len(window) < 2:
                continue

            def both(x: int, a: int = a, b: int = b) -> float:
                if _parallel(svc):
                    svc.compile_many([Piece(a, x), Piece(x, b)])  # at once
                # in one process, a range that does not compile spares the other's compile
                # (onnx's light DenseNet-121: 3 of 6 positions `fits` admitted did not)
                first = cost(Piece(a, x))
                return math.inf if first == math.inf else first + cost(Piece(x, b))

            best, evaluated = _golden(window, window.index(c), both, trials)
            report.evaluations += evaluated
            if best != c:
                bounds[i] = best
                report.moved += 1
    report.latency_after_s = total()
    report.compiles = getattr(svc, "calls", 0) - calls
    return [Piece(a, b) for a, b in zip(bounds, bounds[1:], strict=False)], report


def _parallel(svc: CompileService) -> bool:
    """Whether ``svc`` compiles several ranges at once (a pool of processes or Ray)."""
    workers = getattr(svc, "workers", 1)
    return bool(getattr(svc, "ray", None)) or workers != 1


def _window(a: int, c: int, b: int, svc: CompileService, ends: Sequence[int] | None) -> list[int]:
    """The positions ``x`` in ``(a, b)`` where both ``[a, x)`` and ``[x, b)`` pass the fast
    check, the clean ones when any (``c`` itself always, both its ranges compiled),
    ascending, and none beyond the nearest position on either side whose range the service
    already failed to compile. O(log n) checks (``[x, b)`` fits from some ``x`` on, ``[a,
    x)`` up to some) and O(n) cache lookups."""
    cand = list(range(a + 1, b)) if ends is None else list(ends[bisect_right(ends, a):bisect_left(ends, b)])
    if c not in cand:
        cand = sorted({*cand, c})
    k = cand.index(c)
    # first index from which [x, b) fits (c fits: search below it)
    lo, hi = 0, k
    while lo < hi:
        mid = (lo + hi) // 2
        if svc.fits(Piece(cand[mid], b)):
            hi = mid
        else:
            lo = mid + 1
    first = lo
    # last index up to which [a, x) fits (c fits: search above it)
    lo, hi = k, len(cand) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if svc.fits(Piece(a, cand[mid])):
            lo = mid
        else:
            hi = mid - 1
    window = cand[first:lo + 1]
    # the fast check is not monotone everywhere (a range that starts inside a DenseNet
    # block receives the block's every feature map): a range the service already failed to
    # compile (the greedy's own search, an earlier sweep) bounds the window on its side
    cache = getattr(svc, "cache", None) or {}

    def failed(p: Piece) -> bool:
        out = cache.get(p)
        return out is not None and not out.ok

    above = min((x for x in window if x > c and failed(Piece(a, x))), default=b)
    below = max((x for x in window if x < c and failed(Piece(x, b))), default=a)
    return [x for x in window if below < x < above]


def _golden(xs: list[int], start: int, f: Callable[[int], float], budget: int) -> tuple[int, int]:
    """The element of ``xs`` with the least ``f`` among at most ``budget`` evaluated (ties:
    the nearest ``xs[start]``), and how many were: a golden-section search over the indices
    (the minimum assumed unimodal), ``xs[start]`` evaluated first. O(budget) evaluations."""
    seen: dict[int, float] = {}

    def at(i: int) -> float:
        if i not in seen:
            seen[i] = f(xs[i])
        return seen[i]

    at(start)
    lo, hi = 0, len(xs) - 1
    while hi - lo >= 2 and len(seen) < budget:
        m1 = hi - round(_INV_PHI * (hi - lo))
        m2 = lo + round(_INV_PHI * (hi - lo))
        if m1 >= m2:
            m1, m2 = lo + (hi - lo) // 2, lo + (hi - lo) // 2 + 1
        if len(seen) + (m1 not in seen) + (m2 not in seen) > budget:
            break
        f1, f2 = at(m1), at(m2)
        if f1 < f2:
            hi = m2 - 1
        elif f1 > f2:
            lo = m1 + 1
        else:
            lo, hi = m1, m2  # each branch narrows [lo, hi]: m1 > lo and m2 <= hi
    if hi - lo < 2 and len(seen) < budget:
        for i in range(lo, hi + 1):
            if len(seen) >= budget:
                break
            at(i)
    best = min(seen, key=lambda i: (seen[i], abs(i - start)))
    return xs[best], len(seen)
