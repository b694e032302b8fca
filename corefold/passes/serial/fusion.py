"""Fusing serially adjacent subgraphs that all compiled (SPEC M1 §7, seed 000 §73-133).

Every strategy takes the chain of pieces (each compiled) and returns a coarser chain in
which every piece compiled; a fused candidate is kept only if it compiles.

* ``a``, attribute groups [000 §89-95]: consecutive pieces are grouped while the group's
  summed compute, weights and node count stay within [min, max]; a group of two or more
  is fused; a failing group of three or more is retried without its last piece, the rest
  staying as they are [000 §86-87].
* ``b``, pairs [000 §96-98]: pieces (1, 2), (3, 4), ... are fused, each pair independently.
* ``c``, forward greedy [000 §99-118]: fuse current + next; on failure the current piece is
  final and the next becomes current; on success the fused piece is final and the piece
  after the next becomes current.
* ``d``, bidirectional [000 §120-131]: ``c`` from the head forward and from the tail
  backward at the same time; on a failure the forward walk finalises the earlier piece,
  the backward walk the later one; the walks stop where they meet.

The seed applies a strategy once; ``rounds`` repeats it on the result until a round fuses
nothing (each round at least halves nothing it cannot), which is what makes pairwise
strategies reach few executables.

``optimal`` is the reference the strategies are measured against: the minimum number of
executables over all ways to group a chain into contiguous ranges that fit. If a range
fits, so does every range inside it (feasibility is monotone: assumed, as for any sane
compiler; it holds for corefold's backend), so the ranges reachable from each start form
a prefix and ``reach(i)`` never decreases with ``i``. The DP
``f(j) = 1 + min over i with reach(i) >= j of f(i)`` is then solved by greedy accumulation
from the head (an exchange argument): :func:`minimum_chain` finds every ``reach`` with a
two-pointer sweep (O(m) feasibility checks) and runs the DP; :func:`minimum_cover` takes
the greedy steps directly over single operators, finding each step's furthest end by
galloping and binary search: O(k log(n / k)) checks for k executables of n operators, so
the reference ranges over every cut position of the order, not only the chain's.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from typing import Callable, Sequence

from corefold.errors import CompileError
from corefold.passes.serial.chain import Attributes, Piece
from corefold.passes.serial.compilers import CompileService
from corefold.passes.serial.cuts import clean_ends

STRATEGIES = ("a", "b", "c", "d", "optimal", "none")


@dataclass(frozen=True)
class GroupLimits:
    """Strategy a's thresholds: a group's summed MACs, weight bytes and node count must lie
    within [min, max] (max None: no bound)."""

    min_macs: float = 0.0
    max_macs: float | None = None
    min_weight_bytes: float = 0.0
    max_weight_bytes: float | None = None
    min_nodes: float = 0.0
    max_nodes: float | None = None

    def within_max(self, attrs: Attributes, piece: Piece) -> bool:
        for what, hi in (("macs", self.max_macs), ("weights", self.max_weight_bytes), ("nodes", self.max_nodes)):
            if hi is not None and attrs.total(what, piece) > hi:
                return False
        return True

    def above_min(self, attrs: Attributes, piece: Piece) -> bool:
        return (attrs.total("macs", piece) >= self.min_macs and attrs.total("weights", piece) >= self.min_weight_bytes
                and attrs.total("nodes", piece) >= self.min_nodes)


def _span(chain: list[Piece], i: int, j: int) -> Piece:
    return Piece(chain[i].start, chain[j - 1].end)


def fuse_attribute_groups(chain: list[Piece], svc: CompileService, attrs: Attributes,
                          limits: GroupLimits) -> list[Piece]:
    """Strategy a. Groups are formed in one scan, then compiled together."""
    groups: list[tuple[int, int]] = []
    i = 0
    while i < len(chain):
        j = i + 1
        while j < len(chain) and limits.within_max(attrs, _span(chain, i, j + 1)):
            j += 1
        groups.append((i, j))
        i = j
    # each group tries its full span, then one piece shorter each time it fails (while it
    # still holds three or more); all groups' attempts of one step compile together
    fused: dict[tuple[int, int], list[Piece]] = {}
    active = {(i, j): j for i, j in groups if j - i >= 2 and limits.above_min(attrs, _span(chain, i, j))}
    while active:
        keys = list(active)
        outcomes = svc.compile_many([_span(chain, i, active[(i, j)]) for i, j in keys])
        retry = {}
        for (i, j), out in zip(keys, outcomes, strict=True):
            end = active[(i, j)]
            if out.ok:
                fused[(i, j)] = [out.piece] + chain[end:j]
            elif end - i >= 3:
                retry[(i, j)] = end - 1
        active = retry
    result: list[Piece] = []
    for i, j in groups:
        result.extend(fused.get((i, j), chain[i:j]))
    return result


def fuse_pairs(chain: list[Piece], svc: CompileService) -> list[Piece]:
    """Strategy b: (1, 2), (3, 4), ... each fused when it compiles; independent compiles."""
    pairs = [(i, i + 2) for i in range(0, len(chain) - 1, 2)]
    outcomes = svc.compile_many([_span(chain, i, j) for i, j in pairs])
    result: list[Piece] = []
    for (i, j), out in zip(pairs, outcomes, strict=True):
        result.extend([out.piece] if out.ok else chain[i:j])
    if len(chain) % 2:
        result.append(chain[-1])
    return result


def fuse_forward(chain: list[Piece], svc: CompileService) -> list[Piece]:
    """Strategy c: forward greedy, one compile at a time."""
    result: list[Piece] = []
    i = 0
    while i < len(chain):
        if i + 1 >= len(chain):
            result.append(chain[i])
            break
        out = svc.compile(chain[i] + chain[i + 1])
        if out.ok:
            result.append(out.piece)
            i += 2
        else:
            result.append(chain[i])
            i += 1
    return result


def fuse_bidirectional(chain: list[Piece], svc: CompileService) -> list[Piece]:
    """Strategy d: strategy c from both ends at once (two compiles per step), until the
    walks meet."""
    head: list[Piece] = []
    tail: list[Piece] = []
    f, b = 0, len(chain) - 1  # next piece of the forward walk, of the backward walk
    while f <= b:
        if f == b:
            head.append(chain[f])
            break
        want_f = f + 1 < b  # the forward pair (f, f+1) must not use the backward walk's piece b
        want_b = b - 1 > f + (1 if want_f else 0)
        asks = ([chain[f] + chain[f + 1]] if want_f else []) + ([chain[b - 1] + chain[b]] if want_b else [])
        if not asks:  # f + 1 == b: the walks meet on one pair, tried once
            out = svc.compile(chain[f] + chain[b])
            head.extend([out.piece] if out.ok else [chain[f], chain[b]])
            break
        outs = svc.compile_many(asks)
        if want_f:
            out = outs.pop(0)
            if out.ok:
                head.append(out.piece)
                f += 2
            else:
                head.append(chain[f])
                f += 1
        if want_b:
            out = outs.pop(0)
            if out.ok:
                tail.append(out.piece)
                b -= 2
            else:
                tail.append(chain[b])
                b -= 1
    return head + tail[::-1]


def minimum_chain(chain: list[Piece], svc: CompileService) -> list[Piece]:
    """The fewest contiguous ranges of ``chain`` that each fit (module docstring). Uses
    ``svc.fits`` (the fast check when there is one)."""
    m = len(chain)
    reach = [0] * m
    j = 1
    for i in range(m):
        j = max(j, i + 1)
        while j < m and svc.fits(_span(chain, i, j + 1)):
            j += 1
        reach[i] = j  # [i, reach[i]) fits, [i, reach[i] + 1) does not (or is the end)
    # f[j]: fewest ranges covering chain[:j]; back[j]: where the last range starts
    inf = m + 1
    f = [0] + [inf] * m
    back = [0] * (m + 1)
    for i in range(m):
        if f[i] == inf:
            continue
        for jj in range(i + 1, reach[i] + 1):
            if f[i] + 1 < f[jj]:
                f[jj], back[jj] = f[i] + 1, i
    cuts = []
    j = m
    while j > 0:
        cuts.append((back[j], j))
        j = back[j]
    return [_span(chain, i, j) for i, j in reversed(cuts)]


def _candidates(s: int, end: int, ends: Sequence[int] | None) -> Sequence[int]:
    """The end positions a range from ``s`` may take, ascending: those of ``ends`` inside
    ``(s, end)``, then ``end``; every position when ``ends`` is None. O(log n + answer)."""
    if ends is None:
        return range(s + 1, end + 1)
    return [*ends[bisect_right(ends, s):bisect_left(ends, end)], end]


def _furthest(s: int, cand: Sequence[int], fits: Callable[[Piece], bool]) -> int | None:
    """The furthest ``e`` of ``cand`` (ascending) with ``[s, e)`` fitting, or None when the
    first does not fit: galloping then binary search, O(log k) checks for the k-th."""
    if not cand or not fits(Piece(s, cand[0])):
        return None
    lo, step = 0, 1  # lo: an index known to fit
    hi = None  # an index known not to fit
    while hi is None:
        probe = min(lo + step, len(cand) - 1)
        if probe == lo:
            break
        if fits(Piece(s, cand[probe])):
            lo, step = probe, step * 2
        else:
            hi = probe
    if hi is not None:
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if fits(Piece(s, cand[mid])):
                lo = mid
            else:
                hi = mid
    return cand[lo]


def _step(s: int, end: int, ends: Sequence[int] | None, fits: Callable[[Piece], bool]) -> int | None:
    """The furthest end from ``s`` that ``fits``, among ``ends`` (:func:`_candidates`), else
    among every position; None when not even ``[s, s + 1)`` fits."""
    e = _furthest(s, _candidates(s, end, ends), fits)
    if e is None and ends is not None:
        e = _furthest(s, _candidates(s, end, None), fits)
    return e


def minimum_cover(start: int, end: int, fits: Callable[[Piece], bool],
                  ends: Sequence[int] | None = None) -> list[Piece]:
    """The fewest ranges covering ``[start, end)`` of the order that each fit (module
    docstring), single operators being the finest grain. With ``ends``
    (:func:`~corefold.passes.serial.cuts.clean_ends`), a range ends at one of them whenever
    one fits, else at any position.

    Raises:
        ValueError: a single operator does not fit (nothing covers it).
    """
    out: list[Piece] = []
    s = start
    while s < end:
        e = _step(s, end, ends, fits)
        if e is None:
            raise ValueError(f"operator at position {s} does not fit on its own")
        out.append(Piece(s, e))
        s = e
    return out


def compiled_cover(start: int, end: int, svc: CompileService, ends: Sequence[int] | None = None) -> list[Piece]:
    """The fewest ranges covering ``[start, end)`` that each *compile*: the greedy of
    :func:`minimum_cover` with every step checked by a full compile. A step the fast check
    overestimated (it fits but does not compile) is shortened by binary search with full
    compiles over the same candidate ends, so the step is again the furthest that compiles
    and the greedy stays optimal for a monotone compiler. O(k log(n / k)) fast checks plus
    k compiles, and O(log(step)) compiles more for each overestimated step.

    Raises:
        CompileError: a single operator that does not compile.
    """
    out: list[Piece] = []
    s = start

    def compiles(p: Piece) -> bool:
        return svc.compile(p).ok

    while s < end:
        e = _step(s, end, ends, svc.fits)
        if e is None:
            e = s + 1
        if not compiles(Piece(s, e)):
            # the candidates below e: the clean ends first, then every position
            shorter = [c for c in _candidates(s, end, ends) if c < e]
            found = _furthest(s, shorter, compiles)
            if found is None and ends is not None:
                found = _furthest(s, range(s + 1, min([*shorter[:1], e])), compiles)
            if found is None:
                raise alone(svc, s)
            e = found
        out.append(Piece(s, e))
        s = e
    return out


def alone(svc: CompileService, position: int, error: CompileError | None = None) -> CompileError:
    """The compiler's error for the operator at ``position`` on its own (``error`` if
    already known), naming the operator: what every strategy raises when one operator
    cannot compile even after operator splitting."""
    e = error if error is not None else svc.compile(Piece(position, position + 1)).error
    node = svc.order[position]
    return CompileError(e.resource, e.where, e.need, e.limit,
                        f"operator '{node.name}' ({node.op_type}) alone, after operator splitting")


def repair_cover(cover: list[Piece], chain: list[Piece], svc: CompileService) -> list[Piece]:
    """``cover`` with every range that fits but does not compile (feasibility was not
    monotone for this compiler) cut again: at the split chain's cut points inside it, else
    in halves, until each part compiles. The result still covers every operator once, in
    order. O(len(cover) + compiles of the failing ranges' parts).

    Raises:
        CompileError: a single operator that does not compile.
    """
    cuts = sorted({p.start for p in chain} | {chain[-1].end}) if chain else []
    out: list[Piece] = []
    todo = list(reversed(cover))  # a stack: the next range to place is on top
    while todo:
        batch = list(reversed(todo))
        todo.clear()
        outcomes = svc.compile_many(batch)
        for i, o in enumerate(outcomes):
            if o.ok:
                out.append(o.piece)
                continue
            p = o.piece
            if p.end - p.start == 1:
                raise alone(svc, p.start, o.error)
            inner = [c for c in cuts if p.start < c < p.end] or [(p.start + p.end) // 2]
            bounds = [p.start, *inner, p.end]
            parts = [Piece(a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
            # the failing range's parts, then the rest of the batch, are compiled next
            todo.extend(reversed(batch[i + 1:]))
            todo.extend(reversed(parts))
            break
    return out


def fuse(strategy: str, chain: list[Piece], svc: CompileService, attrs: Attributes, limits: GroupLimits,
         rounds: int = 0) -> list[Piece]:
    """Apply ``strategy`` (``a``, ``b``, ``c``, ``d``, ``optimal`` or ``none``) for at most
    ``rounds`` rounds (0: until a round fuses nothing).

    Raises:
        ValueError: unknown strategy.
    """
    step: dict[str, Callable[[list[Piece]], list[Piece]]] = {
        "a": lambda c: fuse_attribute_groups(c, svc, attrs, limits),
        "b": lambda c: fuse_pairs(c, svc),
        "c": lambda c: fuse_forward(c, svc),
        "d": lambda c: fuse_bidirectional(c, svc),
    }
    if strategy == "none":
        return list(chain)
    if strategy == "optimal":
        if len(chain) <= 2:
            return repair_cover(minimum_chain(chain, svc), chain, svc)
        return compiled_cover(chain[0].start, chain[-1].end, svc, clean_ends(svc.order))
    if strategy not in step:
        raise ValueError(f"unknown fusion strategy {strategy!r} (choose from {', '.join(STRATEGIES)})")
    done = 0
    while True:
        fused = step[strategy](chain)
        done += 1
        if len(fused) == len(chain) or (rounds and done >= rounds):
            return fused
        chain = fused
