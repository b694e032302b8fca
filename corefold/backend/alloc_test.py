"""The SRAM layout of one core's activation buffers: the least-recently-used layout."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from corefold.backend import run_executable
from corefold.backend.executable import ALIGNMENT, Recv
from corefold.backend.lower import DEFAULT, lower
from corefold.backend.lower_test import _conv_chain
from corefold.executor import random_inputs, run
from corefold.sim import run_simulation
from corefold.target import load_target

alloc = importlib.import_module("corefold.backend.alloc")


def _random_buffers(rng, n: int) -> tuple[dict, dict]:
    life, size = {}, {}
    for b in range(n):
        lo = int(rng.integers(0, 3 * n))
        life[b] = (lo, lo + int(rng.integers(0, n // 2 + 1)))
        size[b] = ALIGNMENT * int(rng.integers(1, 9))
    return life, size


def _clashes(life, size, offsets) -> list[tuple[int, int]]:
    out = []
    for a in life:
        for b in life:
            if a < b and not (life[a][1] < life[b][0] or life[b][1] < life[a][0]):
                if offsets[a] < offsets[b] + size[b] and offsets[b] < offsets[a] + size[a]:
                    out.append((a, b))
    return out


def _least_recent_numpy(life: dict[int, tuple[int, int]], size: dict[int, int], base: int,
                  limit: int) -> tuple[dict[int, int], int] | None:
    """The NumPy loop the compiled layout replaced (the oracle): O(B^2) array work."""
    order = sorted(life, key=lambda b: (life[b][0], -size[b], b))
    n = len(order)
    his = np.empty(n, np.int64)
    offs = np.empty(n, np.int64)
    ends = np.empty(n, np.int64)
    offsets: dict[int, int] = {}
    top = base
    for k, b in enumerate(order):
        lo, hi = life[b]
        s = size[b]
        live = his[:k] >= lo  # every placed buffer started no later than b
        lo_off, lo_end = offs[:k][live], ends[:k][live]
        last = (limit - s) // ALIGNMENT * ALIGNMENT
        cand = np.unique(np.concatenate(([base, last], lo_end, (lo_off - s) // ALIGNMENT * ALIGNMENT)))
        cand = cand[(cand >= base) & (cand <= last)]
        if len(lo_off):
            clash = (lo_off[None, :] < cand[:, None] + s) & (cand[:, None] < lo_end[None, :])
            cand = cand[~clash.any(axis=1)]
        if not len(cand):
            return None
        dead = ~live
        d_off, d_end, d_hi = offs[:k][dead], ends[:k][dead], his[:k][dead]
        if len(d_off):
            touch = (d_off[None, :] < cand[:, None] + s) & (cand[:, None] < d_end[None, :])
            recent = np.where(touch, d_hi[None, :], -1).max(axis=1)
        else:
            recent = np.full(len(cand), -1)
        c = int(cand[np.lexsort((cand, recent))[0]])
        offsets[b] = c
        his[k], offs[k], ends[k] = hi, c, c + s
        top = max(top, c + s)
    return offsets, top


@pytest.mark.parametrize("seed", range(40))
def test_the_compiled_layout_is_the_numpy_loop(seed):
    """The same offsets and top (or None) as the loop it replaced, on random buffers with
    tight, roomy and too small limits, sizes unaligned too."""
    rng = np.random.default_rng(seed)
    life, size = _random_buffers(rng, int(rng.integers(1, 60)))
    if seed % 3 == 0:
        size = {b: s - int(rng.integers(0, ALIGNMENT)) for b, s in size.items()}
    base = int(rng.integers(0, 4)) * ALIGNMENT
    _, compact_top = alloc._best_fit_in_time(life, size, base)
    for limit in (compact_top, base + (compact_top - base) * 3 // 2, base + (compact_top - base) // 2):
        assert alloc._least_recent(life, size, base, limit) == _least_recent_numpy(life, size, base, limit)
    assert alloc._least_recent({}, {}, base, base) == ({}, base)


@pytest.mark.parametrize("seed", range(20))
def test_the_layout_keeps_live_buffers_apart_within_the_limit(seed):
    """On random lifetimes and sizes, with the room the compact layout needs and with 1.5x
    it: no two buffers live at once share a byte, every offset is aligned and every buffer
    ends within the limit; None only when some buffer found no room."""
    rng = np.random.default_rng(seed)
    life, size = _random_buffers(rng, 40)
    base = 4 * ALIGNMENT
    _, compact_top = alloc._best_fit_in_time(life, size, base)
    for limit in (compact_top, base + (compact_top - base) * 3 // 2):
        got = alloc._least_recent(life, size, base, limit)
        if got is None:
            assert limit == compact_top  # with half as much room again, every buffer finds room
            continue
        offsets, top = got
        assert _clashes(life, size, offsets) == []
        assert all(o % ALIGNMENT == 0 and base <= o and o + size[b] <= limit for b, o in offsets.items())
        assert top == max(o + size[b] for b, o in offsets.items())


def test_a_buffer_takes_the_bytes_freed_longest_ago():
    """A (events 0-1) and B (2-3) are dead when C (6-7) starts; with room for two buffers,
    C takes A's bytes, freed first, not B's; with room for three it takes bytes no one
    used. The compact best fit gives C B's bytes (the smallest gap, the last freed)."""
    k = ALIGNMENT
    life = {0: (0, 1), 1: (2, 3), 2: (6, 7), 9: (0, 9)}  # 9 lives throughout, at the bottom
    size = {0: 4 * k, 1: 4 * k, 2: 4 * k, 9: k}
    offsets, _ = alloc._least_recent(life, size, 0, 9 * k)
    assert offsets[0] != offsets[1]
    assert offsets[2] == offsets[0]
    offsets, _ = alloc._least_recent(life, size, 0, 13 * k)
    assert {offsets[2], offsets[2] + 4 * k - 1}.isdisjoint(range(offsets[0], offsets[0] + 4 * k))
    assert {offsets[2], offsets[2] + 4 * k - 1}.isdisjoint(range(offsets[1], offsets[1] + 4 * k))


def _lowered(monkeypatch, layout: bool):
    if not layout:
        monkeypatch.setattr(alloc, "_least_recent", lambda *a: None)
    g = _conv_chain(16, 40, 6)
    exe = lower(g, load_target("npu"), DEFAULT)
    monkeypatch.undo()
    return g, exe


def test_receives_post_without_waiting_for_reused_bytes_and_the_run_is_faster(monkeypatch):
    """Six row-cut convolutions lowered on the 8 x 8 preset (1 MiB per core, far more than
    the chain's buffers). Packed as low as it goes, 194 of the 228 Recvs wait for the
    buffer before them at their addresses and the timed run takes 9.38 us; with the
    least-recently-used layout 6 wait, and it takes 7.28 us. Both executables compute the
    executor's outputs in both runners (the simulator asserts that live buffers never
    share a byte)."""
    from corefold.sim.timed import time_executable

    target = load_target("npu")
    waiting, latency = {}, {}
    for layout in (False, True):
        g, exe = _lowered(monkeypatch, layout)
        recvs = [ins for p in exe.programs for ins in p.instructions if isinstance(ins, Recv)]
        assert len(recvs) > 100
        waiting[layout] = sum(1 for r in recvs if r.deps) / len(recvs)
        run_ = time_executable(exe, target)
        latency[layout] = run_.run_end - run_.run_start
        feeds = random_inputs(g, 0)
        want = run(g, feeds)
        for got in (run_executable(exe, feeds), run_simulation(exe, feeds, target).outputs):
            for k, v in want.items():
                assert float(np.abs(got[k] - v).max()) <= 1e-5 * float(np.abs(v).max())
    assert waiting[False] > 0.5 and waiting[True] < 0.1
    assert latency[True] < 0.9 * latency[False]


def test_an_overflow_never_caps_an_event_below_the_buffers_it_accesses():
    """A 6-unit buffer received alone (event 0), laid out above a 4-unit one that lives at
    event 1 only, ends 2 units over the 8-unit SRAM. The next spill is asked for room at
    every event of the big buffer's lifetime, but never below what an event accesses itself:
    at event 0, the receive into the big buffer alone, the cap stays at its 6 units (it was
    set to 4 minus the alignment, which no spill can reach: onnx's light DenseNet-121 was
    refused a range that fits); at event 1 the small buffer must make room."""
    from corefold.backend.plan import CorePlan, Event, PBuffer, Plan

    unit = ALIGNMENT
    big = PBuffer(0, (0, 0), (6 * unit,), np.dtype(np.uint8), "activation", "big")
    small = PBuffer(1, (0, 0), (4 * unit,), np.dtype(np.uint8), "activation", "small")
    view = lambda b: (b.id, b.shape, (0,), b.shape)  # noqa: E731 - the whole buffer
    events = [Event(("recv",), "recv", writes=[view(big)]),
              Event(("compute",), "compute", writes=[view(small)]),
              Event(("send",), "send", reads=[view(big)])]
    cp = CorePlan((0, 0), events, [0, 1])
    plan = Plan({(0, 0): cp}, [big, small], {}, 0)
    small.offset, big.offset = 0, 4 * unit
    limits: dict = {}
    assert alloc.overflow_limits(plan, cp, 8 * unit, 8 * unit, limits)
    assert limits[events[0]] == 6 * unit and limits[events[2]] == 6 * unit
    # at event 1 the live bytes (capped at the SRAM) less the excess and an alignment
    assert limits[events[1]] == 8 * unit - 2 * unit - unit
