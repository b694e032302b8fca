"""Moving a minimum cover's cuts to lower the chain's latency: against brute force on stand-in
compilers (latency a function of each range), and on the backend with the timed simulator."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corefold.errors import CompileError
from corefold.passes.serial.balance import _golden, _window, balance_cuts
from corefold.passes.serial.chain import Piece
from corefold.passes.serial.compilers import Outcome
from corefold.passes.serial.fusion import minimum_cover


class _Ranges:
    """A stand-in compile service over ``n`` operators: a range fits when it holds at most
    ``limit`` of them, its "executable" is the range, and every call is counted."""

    def __init__(self, limit: int):
        self.limit = limit
        self.compiled: list[Piece] = []

    def fits(self, p: Piece) -> bool:
        return p.end - p.start <= self.limit

    def compile(self, p: Piece) -> Outcome:
        self.compiled.append(p)
        if not self.fits(p):
            return Outcome(p, None, CompileError("SRAM", "test", p.end - p.start, self.limit))
        return Outcome(p, p)

    def compile_many(self, pieces):
        return [self.compile(p) for p in pieces]


def _best_cover(n: int, k: int, limit: int, latency) -> float:
    """The least summed latency over every cover of ``[0, n)`` by ``k`` ranges that fit."""
    best = math.inf
    for cuts in itertools.combinations(range(1, n), k - 1):
        b = [0, *cuts, n]
        if all(b[i + 1] - b[i] <= limit for i in range(k)):
            best = min(best, sum(latency(Piece(b[i], b[i + 1])) for i in range(k)))
    return best


def test_a_cut_moves_from_the_greedy_end_to_the_balanced_one():
    """20 operators, ranges of at most 12, latency the square of a range's length (a range
    packed full runs slower than its share): the greedy cover [0, 12) [12, 20) costs 144 +
    64; the balancing finds the cut at 10 (100 + 100), keeps the count and says so."""
    svc = _Ranges(12)
    greedy = minimum_cover(0, 20, svc.fits)
    assert greedy == [Piece(0, 12), Piece(12, 20)]
    out, report = balance_cuts(greedy, svc, lambda p: float((p.end - p.start) ** 2), trials=8)
    assert out == [Piece(0, 10), Piece(10, 20)]
    assert report.moved == 1 and report.latency_before_s == 208 and report.latency_after_s == 200
    assert all(svc.fits(p) for p in out)


@settings(max_examples=40, deadline=None)
@given(st.integers(6, 16), st.integers(2, 7), st.integers(0, 2**16))
def test_the_cuts_keep_the_count_every_range_fits_and_the_chain_is_never_slower(n, limit, seed):
    """On random latencies (a weight per operator, a range costing the square of its sum: a
    convex cost, each cut's sum unimodal), the balanced cover has the greedy's count, every
    range fits, its latency is at most the greedy's and, with a budget covering every
    window, the optimum over all covers of that count (brute force) for two ranges."""
    rng = np.random.default_rng(seed)
    w = rng.random(n) + 0.1
    prefix = np.concatenate([[0.0], np.cumsum(w)])

    def latency(p: Piece) -> float:
        return float((prefix[p.end] - prefix[p.start]) ** 2)

    svc = _Ranges(limit)
    greedy = minimum_cover(0, n, svc.fits)
    out, report = balance_cuts(greedy, svc, latency, trials=n)
    assert len(out) == len(greedy) and out[0].start == 0 and out[-1].end == n
    assert all(a.end == b.start for a, b in zip(out, out[1:], strict=False))
    assert all(svc.fits(p) for p in out)
    before, after = sum(latency(p) for p in greedy), sum(latency(p) for p in out)
    assert after <= before + 1e-12
    if len(greedy) > 1:
        assert report.latency_before_s == pytest.approx(before) and report.latency_after_s == pytest.approx(after)
    if len(greedy) == 2:
        assert after == pytest.approx(_best_cover(n, 2, limit, latency))


def test_a_position_that_does_not_compile_is_never_chosen():
    """The fast check admits ranges of up to 12 operators, the compiler only up to 11: a
    position whose range does not compile costs infinity and the cut stays where both
    ranges compiled; the other range of that position is not compiled."""
    class Optimistic(_Ranges):
        def compile(self, p: Piece) -> Outcome:
            self.compiled.append(p)
            if p.end - p.start > 11:
                return Outcome(p, None, CompileError("SRAM", "test", p.end - p.start, 11))
            return Outcome(p, p)

    svc = Optimistic(12)
    out, _ = balance_cuts([Piece(0, 11), Piece(11, 22)], svc, lambda p: float(p.end - p.start), trials=20)
    assert all(p.end - p.start <= 11 for p in out) and len(out) == 2
    # in one process, a first range that did not compile spares its second range's compile
    failed = [p for p in svc.compiled if p.start == 0 and p.end - p.start > 11]
    assert failed and not any(Piece(p.end, 22) in svc.compiled for p in failed)


def test_a_range_that_already_failed_to_compile_bounds_the_window():
    """The fast check admits ranges of up to 12 operators: the cut at 11 of [0, 22) may move
    to 10, 11 or 12. A cached failed compile of [0, 12) (the greedy's search) leaves 12 out;
    one of [10, 22) leaves 10 out; neither moves the cut itself, both of whose ranges
    compiled."""
    svc = _Ranges(12)
    svc.cache = {}
    assert _window(0, 11, 22, svc, None) == [10, 11, 12]
    svc.cache[Piece(0, 12)] = Outcome(Piece(0, 12), None, CompileError("SRAM", "test", 13, 12))
    assert _window(0, 11, 22, svc, None) == [10, 11]
    svc.cache[Piece(10, 22)] = Outcome(Piece(10, 22), None, CompileError("SRAM", "test", 13, 12))
    assert _window(0, 11, 22, svc, None) == [11]
    svc.cache[Piece(0, 11)] = Outcome(Piece(0, 11), Piece(0, 11))  # a success bounds nothing
    assert _window(0, 11, 22, svc, None) == [11]


def test_the_golden_search_evaluates_at_most_its_budget_and_returns_the_best_it_saw():
    """A non-unimodal function: never more than ``budget`` evaluations, the start first,
    and the least value evaluated (ties: the one nearest the start)."""
    xs = list(range(50))
    values = {x: math.sin(x / 3.0) + 0.01 * x for x in xs}
    for budget in (1, 2, 5, 9):
        calls: list[int] = []

        def f(x: int, calls=calls) -> float:
            calls.append(x)
            return values[x]

        best, evaluated = _golden(xs, 49, f, budget)
        assert calls[0] == 49 and len(calls) == len(set(calls)) == evaluated <= budget
        assert values[best] == min(values[c] for c in calls)


def test_on_the_backend_the_balanced_chain_is_faster_and_computes_the_model():
    """Five 160-channel convolutions over 2x2 cores: the greedy packs the first executable
    full (four of them, 119.1 us in all); with the cut balanced on the timed simulation the
    chain keeps its two executables, runs faster (82.9 us; simulated, list-scheduling
    orders as M1 compiles, here linked through DRAM), and computes the executor's outputs
    (within 1e-5 of the output scale: split reductions reassociate)."""
    from corefold.backend.lower_test import _conv_chain
    from corefold.backend.testing import max_relative_error
    from corefold.compile import fits_for, latency_for, link, lower_for
    from corefold.executor import random_inputs, run
    from corefold.passes.serial import SerialSettings, serial_partition
    from corefold.sim import simulate_chain
    from corefold.target import load_target

    target = load_target("npu-2x2")
    results = {}
    for trials in (0, 6):
        g = _conv_chain(160, 14, 5, seed=1)
        res = serial_partition(g, lower_for(target), SerialSettings(balance_trials=trials, reference=False),
                               fits_fn=fits_for(target), latency_fn=latency_for(target))
        feeds = random_inputs(g, 0)
        chain = simulate_chain(link(list(res.outcomes), g), feeds, target)
        assert max_relative_error(run(g, feeds), {k: chain.tensors[k] for k in run(g, feeds)}) <= 1e-5
        results[trials] = (res, chain.report.latency_s)
    (greedy, slow), (balanced, fast) = results[0], results[6]
    assert len(balanced.pieces) == len(greedy.pieces) == 2 and balanced.pieces != greedy.pieces
    assert balanced.balance is not None and balanced.balance.moved == 1 and greedy.balance is None
    assert balanced.balance.latency_after_s < balanced.balance.latency_before_s
    assert fast < slow


def test_a_model_in_one_executable_has_no_cut_to_move_and_its_build_is_written(tmp_path):
    """One executable: nothing to balance (``balance`` None in the result and the manifest),
    and the build folder with its report is written (the report's balance line divided by
    the latency of a balancing that never ran: an internal error of ``corefold compile`` on
    every model that fits the chip)."""
    import json

    from corefold.backend.lower_test import _conv_chain
    from corefold.build_folder import write_build
    from corefold.compile import CompileSettings, compile_model
    from corefold.target import load_target

    build = compile_model(_conv_chain(8, 8, 2), load_target("npu"),
                          settings=CompileSettings(strategies_table=False, polish=False))
    assert len(build.executables) == 1 and build.serial.balance is None
    folder = write_build(build, tmp_path / "build")
    assert json.loads((folder / "manifest.json").read_text())["balance"] is None
    assert (folder / "report.html").stat().st_size > 0
