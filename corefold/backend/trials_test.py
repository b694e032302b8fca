"""The trials' memo of tilings and clusterings (``trials.alternative`` with ``seen``, ``trials.trial_key``)."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path

import corefold.backend.trials as trials
from corefold.backend import lower, save
from corefold.backend.lower import DEFAULT, _prepare
from corefold.frontend.onnx import load_model
from corefold.target import load_target

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "tiny_cnn.onnx"


def _counting(monkeypatch) -> list:
    calls = []
    run = trials.run_trial

    def counted(*args, **kwargs):
        calls.append(1)
        return run(*args, **kwargs)

    monkeypatch.setattr(trials, "run_trial", counted)
    return calls


def test_a_tiling_tried_already_is_not_run_again_and_is_charged_its_instructions(monkeypatch):
    graph, target = load_model(EXAMPLE), load_target("npu")
    calls = _counting(monkeypatch)
    make = partial(_prepare, graph, target, DEFAULT)
    times = {"tile_place": 0.0, trials.EMITTED: 0}
    seen: dict = {}
    first, lg, trial = trials.alternative(make, target, DEFAULT, times, seen=seen)
    assert len(calls) == 1 and lg is not None and trial.emitted > 0
    assert times[trials.EMITTED] == trial.emitted
    again, lg2, trial2 = trials.alternative(make, target, DEFAULT, times, seen=seen)
    assert len(calls) == 1  # not run again
    assert again == first and lg2 is None and trial2 is None
    assert times[trials.EMITTED] == 2 * trial.emitted
    # without the memo it runs, with the same result
    third, _, _ = trials.alternative(make, target, DEFAULT, times)
    assert len(calls) == 2 and third == first


def test_the_memo_changes_the_trials_run_and_nothing_else(monkeypatch, tmp_path):
    """Two pieces counts that tile alike (and, on this graph, a tiling knob that tiles as a
    pieces count did): fewer trials run, and the executable is the one running every trial
    gives, byte for byte (the lowering's times aside)."""
    graph, target = load_model(EXAMPLE), load_target("npu")
    settings = replace(DEFAULT, trial_pieces=(16.0, 16.0 + 1e-9))
    calls = _counting(monkeypatch)
    memo = lower(graph, target, settings)
    with_memo = len(calls)
    monkeypatch.setattr(trials, "trial_key", lambda lg, cl: object())  # never seen
    every = lower(graph, target, settings)
    assert len(calls) - with_memo > with_memo
    for exe, name in ((memo, "memo.cfx"), (every, "every.cfx")):
        exe.meta.pop("lower_seconds", None)
        save(exe, tmp_path / name)
    assert (tmp_path / "memo.cfx").read_bytes() == (tmp_path / "every.cfx").read_bytes()


def test_trials_on_forked_workers_give_the_executable_of_one_process(monkeypatch, tmp_path):
    """``workers`` 2: the clustering pairs', tilings' and seeds' trials run in forked
    children too, and the executable and every trial's report are those of one process,
    byte for byte (the lowering's times aside)."""
    import os

    graph, target = load_model(EXAMPLE), load_target("npu")
    pids = tmp_path / "pids"
    job = trials.trial_job

    def logged(*args, **kwargs):
        with open(pids, "a") as f:
            f.write(f"{os.getpid()}\n")
        return job(*args, **kwargs)

    monkeypatch.setattr(trials, "trial_job", logged)
    one = lower(graph, target, DEFAULT)
    ran_here = pids.read_text().split()
    assert set(ran_here) == {str(os.getpid())}
    pids.unlink()
    two = lower(graph, target, replace(DEFAULT, workers=2))
    ran = pids.read_text().split()
    assert len(ran) == len(ran_here) >= 4  # the same trials: the pairs, tilings and seeds
    assert len(set(ran) - {str(os.getpid())}) >= 1  # in a child too
    assert one.meta["order"] == two.meta["order"]
    assert one.meta["emitted_instructions"] == two.meta["emitted_instructions"]
    for exe, name in ((one, "one.cfx"), (two, "two.cfx")):
        exe.meta.pop("lower_seconds", None)
        save(exe, tmp_path / name)
    assert (tmp_path / "one.cfx").read_bytes() == (tmp_path / "two.cfx").read_bytes()


def test_a_clustering_setting_that_clusters_alike_is_not_run_again(monkeypatch, tmp_path):
    """A spread a hair above the first (``repeats``, which would skip it here, switched off)
    and ``reserve_pieces`` on this small graph cluster as the first setting: their trials
    are not run, they are listed with the first one's latency, their instructions are
    charged, and the executable and every report are those of running every trial, byte
    for byte (the lowering's times aside)."""
    graph, target = load_model(EXAMPLE), load_target("npu")
    settings = replace(DEFAULT, spread=(DEFAULT.spread[0], DEFAULT.spread[0] + 1e-9), headroom=(0.0,),
                       reserve_pieces=(False, True))
    monkeypatch.setattr(trials, "repeats", lambda *args: False)
    calls = _counting(monkeypatch)
    memo = lower(graph, target, settings)
    with_memo = len(calls)
    monkeypatch.setattr(trials, "trial_key", lambda lg, cl: object())  # never seen
    every = lower(graph, target, settings)
    assert len(calls) - with_memo >= with_memo + 2  # the spread and reserve_pieces run only here
    order = memo.meta["order"]
    assert order["clusterings_tried"][0][2] == order["clusterings_tried"][1][2]
    assert order["reserve_pieces_tried"][0][1] == order["reserve_pieces_tried"][1][1]
    assert order == every.meta["order"]
    assert memo.meta["emitted_instructions"] == every.meta["emitted_instructions"]
    for exe, name in ((memo, "memo.cfx"), (every, "every.cfx")):
        exe.meta.pop("lower_seconds", None)
        save(exe, tmp_path / name)
    assert (tmp_path / "memo.cfx").read_bytes() == (tmp_path / "every.cfx").read_bytes()


def test_the_heavy_channels_trial_gives_way_to_the_placement_seeds_it_would_crowd_out():
    """``crowds_out_seeds`` counts the seeds ``placement_seeds`` admits (each admitted while
    the instructions emitted so far plus the seed's and the FOLLOWING builds', each the kept
    size, fit ``trial_budget``) after the ``reserve_pieces`` trials, with and without one
    more trial of the kept size: the knob gives way only where it would leave fewer."""
    from types import SimpleNamespace

    settings = replace(DEFAULT, trial_budget=140_000, trial_seeds=(1, 2, 3), reserve_pieces=(False, True))
    size = 20_000
    trial = SimpleNamespace(emitted=size)

    def seeds_run(emitted: int) -> int:  # placement_seeds' loop, each seed emitting the kept size
        n = 0
        while n < 3 and emitted + (1 + trials.FOLLOWING) * size <= settings.trial_budget:
            emitted, n = emitted + size, n + 1
        return n

    for emitted in range(0, 140_001, 5_000):
        ahead = emitted + size  # the reserve_pieces trial
        fewer = seeds_run(ahead + size) < seeds_run(ahead)
        assert trials.crowds_out_seeds(trial, settings, {trials.EMITTED: emitted}) == fewer, emitted
    assert not trials.crowds_out_seeds(trial, settings, {trials.EMITTED: 0})  # room for all three after it
    assert trials.crowds_out_seeds(trial, settings, {trials.EMITTED: 60_000})  # it would take the only seed
    assert not trials.crowds_out_seeds(trial, settings, {trials.EMITTED: 70_000})  # no seed runs anyway
    assert not trials.crowds_out_seeds(trial, replace(settings, trial_seeds=()), {trials.EMITTED: 60_000})
