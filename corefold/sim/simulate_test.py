"""The simulator on hand-built executables: timelines computed by hand, SRAM checks, errors."""

import numpy as np
import pytest

from corefold.backend.executable import (
    Compute,
    Copy,
    DmaLoad,
    DmaStore,
    Recv,
    Send,
    Signal,
    View,
    Wait,
    xy_route,
)
from corefold.errors import DataError, TargetError
from corefold.sim.memory import SramError
from corefold.sim.simulate import run_simulation, simulate
from corefold.sim.testing import ExeBuilder, small_target, striped_copy_exe
from corefold.sim.timed import ProgramError

NS = 1e-9


def _weights_and_rows(seed, names, t=None):
    """The small target (or ``t``), a builder, a 4x4 float weight W resident at address 0
    of core (0,0) and (1, 4) buffers named ``names`` above it (64 bytes apart)."""
    t = t or small_target()
    w = np.random.default_rng(seed).standard_normal((4, 4)).astype(np.float32)
    b = ExeBuilder(t)
    wb = b.buffer((0, 0), (4, 4), offset=0, data=w, name="W")
    rows = [b.buffer((0, 0), (1, 4), offset=64 * (i + 1), name=n) for i, n in enumerate(names)]
    return t, b, w, wb, rows


def _matmul_relu(seed=0):
    """y = Relu(x @ W) on core (0,0) of the small target; x comes from DRAM at router (1,0)."""
    t, b, w, wb, (bx, by, bz) = _weights_and_rows(seed, ("x", "xw", "y"))
    x = b.graph_input("x", (1, 4))
    y = b.graph_output("y", (1, 4))
    mm = b.op("MatMul", [(1, 4), (4, 4)], [(1, 4)], "matrix", 16)
    relu = b.op("Relu", [(1, 4)], [(1, 4)], "vector", 4)
    core = (0, 0)
    b.add(core, DmaLoad("dma0", b.view(x, dram=True), b.view(bx), xy_route((1, 0), core)))
    b.add(core, Compute(mm, "matrix0", (b.view(bx), b.view(wb)), (b.view(by),), deps=(0,)))
    b.add(core, Compute(relu, "vector0", (b.view(by),), (b.view(bz),), deps=(1,)))
    b.add(core, DmaStore("dma0", b.view(bz), b.view(y, dram=True), xy_route(core, (1, 0)), deps=(2,)))
    return b.build(), t, w


def test_one_core_timeline_and_report_by_hand():
    exe, t, w = _matmul_relu()
    x = np.arange(4, dtype=np.float32).reshape(1, 4) - 1.5
    sim = run_simulation(exe, {"x": x}, t)
    np.testing.assert_allclose(sim.outputs["y"], np.maximum(x @ w, 0), rtol=1e-6)
    r = sim.report
    # weight W (64 B) over the 4 B/ns host link: 16 ns; then x (16 B): host 16-20, hop E
    # 16-20 (tail), channel 18-22; the run starts at 22 ns
    assert r.load_s == pytest.approx(16 * NS)
    assert sim.timed.run_start == pytest.approx(22 * NS)
    # load: channel 22-23, hop W 22-24, DMA 24-26 (its 16 B take 1 ns: the DMA engine, a
    # shared resource, is reserved 24-25 and the tail arrives at 26); matmul 16 MAC / 8 =
    # 26-28; relu 28-29; store: DMA 29-30, hop E 29-31, channel 31-33
    assert sim.timed.run_end == pytest.approx(33 * NS)
    assert r.latency_s == pytest.approx(11 * NS)
    # roofline: DRAM (16 + 16 B) / 16 GB/s = 2 ns binds (matrix 0.5 ns, vector 0.25 ns)
    assert r.roofline_s == pytest.approx(2 * NS)
    assert r.instructions == 4 and r.dram_bytes == 32 and r.host_bytes == 32 and r.noc_bytes == 32
    links = np.asarray(r.link_bytes)
    assert links.shape == (2, 2, 4)
    assert links[0, 1, 3] == 16 and links[0, 0, 1] == 16 and links.sum() == 32  # (1,0) W and (0,0) E
    # W + x + xw live from 26 to 28 ns: 96 bytes; other cores hold nothing
    assert r.sram_peak_bytes == [96, 0, 0, 0] and r.sram_capacity_bytes == 4096
    assert r.utilisation == pytest.approx({"matrix": 2 / 44, "vector": 1 / 44, "dma": 2 / 44})
    outputs, report = simulate(exe, {"x": x}, t)
    np.testing.assert_array_equal(outputs["y"], sim.outputs["y"])
    assert report == r


def _two_senders():
    t = small_target()
    b = ExeBuilder(t)
    a_src = b.buffer((0, 0), (4,), data=np.arange(4), name="a")
    b_src = b.buffer((1, 0), (4,), data=np.arange(4) + 10, name="b")
    a_dst = b.buffer((1, 1), (4,), offset=0, name="a'")
    b_dst = b.buffer((1, 1), (4,), offset=64, name="b'")
    out = b.graph_output("ab", (2, 4))
    b.add((0, 0), Send(1, b.view(a_src), (1, 1), b.view(a_dst), xy_route((0, 0), (1, 1))))
    b.add((1, 0), Send(2, b.view(b_src), (1, 1), b.view(b_dst), xy_route((1, 0), (1, 1))))
    b.add((1, 1), Recv(1, (0, 0), b.view(a_dst)))
    b.add((1, 1), Recv(2, (1, 0), b.view(b_dst)))
    for i, (src, deps) in enumerate(((a_dst, (0,)), (b_dst, (1,)))):
        b.add((1, 1), DmaStore("dma0", b.view(src), View(out, (2, 4), (i, 0), (1, 4)),
                               xy_route((1, 1), (1, 0)), deps=deps))
    return b.build(), t


def test_two_sends_share_one_link_and_queue_only_there():
    exe, t = _two_senders()
    sim = run_simulation(exe, {}, t)
    np.testing.assert_array_equal(sim.outputs["ab"], [[0, 1, 2, 3], [10, 11, 12, 13]])
    s0 = sim.timed.run_start
    # weights: a (16 B) host 0-4 at (0,0); b host 4-8 then hop E 4-8: loaded at 10 ns
    assert s0 == pytest.approx(10 * NS)
    tl = sim.timed.timeline
    send_a, send_b = sim.timed.task[0][0], sim.timed.task[1][0]
    # b reaches link (1,0) S at once: 0-2, done at 4; a crosses (0,0) E 0-2 and reaches
    # (1,0) S at 2, when b has just left it: 2-4, done at 6 (run-relative ns)
    assert tl.finish[send_b] - s0 == pytest.approx(4 * NS)
    assert tl.finish[send_a] - s0 == pytest.approx(6 * NS)
    links = np.asarray(sim.report.link_bytes)
    assert links[0, 0, 1] == 16 and links[0, 1, 2] == 32
    # stores: (1,1) -> (1,0) is one hop N each, 16 B each
    assert links[1, 1, 0] == 32
    assert sim.report.noc_bytes == 16 * 2 + 16 + 2 * 16


def test_a_recv_waits_for_its_send_and_a_wait_for_its_signal():
    t = small_target()
    b = ExeBuilder(t)
    x = b.graph_input("x", (4,))
    y = b.graph_output("y", (4,))
    mid = b.region((4,), name="mid")
    bx = b.buffer((0, 0), (4,), name="x")
    by = b.buffer((0, 1), (4,), name="y")
    # core (0,0): load x, store it to DRAM, signal (0,1); core (0,1): wait, load, store
    b.add((0, 0), DmaLoad("dma0", b.view(x, True), b.view(bx), xy_route((1, 0), (0, 0))))
    b.add((0, 0), DmaStore("dma0", b.view(bx), b.view(mid, True), xy_route((0, 0), (1, 0)), deps=(0,)))
    b.add((0, 0), Signal(7, (0, 1), xy_route((0, 0), (0, 1)), deps=(1,)))
    b.add((0, 1), Wait(7, (0, 0)))
    b.add((0, 1), DmaLoad("dma0", b.view(mid, True), b.view(by), xy_route((1, 0), (0, 1)), deps=(0,)))
    b.add((0, 1), DmaStore("dma0", b.view(by), b.view(y, True), xy_route((0, 1), (1, 0)), deps=(1,)))
    exe = b.build()
    xs = np.array([1, -2, 3, -4], np.float32)
    sim = run_simulation(exe, {"x": xs}, t)
    np.testing.assert_array_equal(sim.outputs["y"], xs)
    tl = sim.timed.timeline
    store, signal = sim.timed.task[0][1], sim.timed.task[0][2]
    wait, load = sim.timed.task[1][0], sim.timed.task[1][1]
    assert tl.finish[signal] - tl.finish[store] == pytest.approx(2 * NS)  # one hop S, no payload
    assert tl.finish[wait] == tl.finish[signal] and tl.start[load] >= tl.finish[wait]


def _reuse(with_dep: bool):
    """Core (0,0) stores relu(x) from buffer u, then receives core (1,0)'s data into v at
    u's address: safe only when the Recv is posted after the store completed."""
    t = small_target()
    b = ExeBuilder(t)
    x = b.buffer((0, 0), (4,), offset=0, data=[1, -2, 3, -4], name="x")
    u = b.buffer((0, 0), (4,), offset=64, name="u")
    v = b.buffer((0, 0), (4,), offset=64, name="v")  # same address as u
    z = b.buffer((1, 0), (4,), offset=0, data=[5, 6, 7, 8], name="z")
    y = b.graph_output("y", (2, 4))
    relu = b.op("Relu", [(4,)], [(4,)], "vector", 4)
    c = (0, 0)
    b.add(c, Compute(relu, "vector0", (b.view(x),), (b.view(u),)))
    b.add(c, DmaStore("dma0", b.view(u), View(y, (2, 4), (0, 0), (1, 4)), xy_route(c, (1, 0)), deps=(0,)))
    b.add(c, Recv(3, (1, 0), b.view(v), deps=(1,) if with_dep else ()))
    b.add(c, DmaStore("dma0", b.view(v), View(y, (2, 4), (1, 0), (1, 4)), xy_route(c, (1, 0)), deps=(2,)))
    b.add((1, 0), Send(3, b.view(z), c, b.view(v), xy_route((1, 0), c)))
    return b.build(), t


def test_a_reused_address_is_fine_once_ordered():
    exe, t = _reuse(with_dep=True)
    outputs, report = simulate(exe, {}, t)
    np.testing.assert_array_equal(outputs["y"], [[1, 0, 3, 0], [5, 6, 7, 8]])
    assert report.sram_peak_bytes[:2] == [32, 16]


def test_two_live_buffers_at_one_address_are_an_internal_error():
    # unordered, the Recv is posted at once: v is live while u still waits for its store
    exe, t = _reuse(with_dep=False)
    with pytest.raises(SramError, match=r"buffers '(u|v)' \[64, 80\) and '(u|v)' \[64, 80\) are live at once"):
        run_simulation(exe, {}, t)


def test_a_buffer_outside_the_sram_is_an_internal_error():
    t = small_target()
    b = ExeBuilder(t)
    x = b.buffer((0, 0), (8,), offset=4096 - 16, data=np.zeros(8), name="x")
    y = b.graph_output("y", (8,))
    b.add((0, 0), DmaStore("dma0", b.view(x), b.view(y, True), xy_route((0, 0), (1, 0))))
    with pytest.raises(SramError, match="outside the 4096 bytes of SRAM"):
        run_simulation(b.build(), {}, t)


def test_broken_programs_are_internal_errors():
    t = small_target()
    b = ExeBuilder(t)
    a = b.buffer((0, 0), (4,), data=np.zeros(4))
    d = b.buffer((1, 0), (4,))
    b.add((0, 0), Send(1, b.view(a), (1, 0), b.view(d), xy_route((0, 0), (1, 0))))
    with pytest.raises(ProgramError, match="tag 1: a Send without its partner"):
        run_simulation(b.build(), {}, t)
    b.add((1, 0), Recv(1, (0, 0), b.view(d)))
    b.add((1, 0), Copy("dma3", b.view(d), b.view(d)))
    with pytest.raises(ProgramError, match="no engine 'dma3'"):
        run_simulation(b.build(), {}, t)
    b.programs[(1, 0)].instructions[-1] = Copy("matrix0", b.view(d), b.view(d))
    with pytest.raises(ProgramError, match="a copy on engine 'matrix0'"):
        run_simulation(b.build(), {}, t)


def test_programs_that_wait_for_each_other_are_internal_errors():
    """Each core sends only after it received what the other sends only after it received:
    a cycle the timed run names; and a dependency on a later instruction."""
    t = small_target()
    b = ExeBuilder(t)
    a0, d0 = b.buffer((0, 0), (4,), data=np.zeros(4)), b.buffer((0, 0), (4,))
    a1, d1 = b.buffer((1, 0), (4,), data=np.zeros(4)), b.buffer((1, 0), (4,))
    b.add((0, 0), Recv(2, (1, 0), b.view(d0)))
    b.add((0, 0), Send(1, b.view(a0), (1, 0), b.view(d1), xy_route((0, 0), (1, 0)), deps=(0,)))
    b.add((1, 0), Recv(1, (0, 0), b.view(d1)))
    b.add((1, 0), Send(2, b.view(a1), (0, 0), b.view(d0), xy_route((1, 0), (0, 0)), deps=(0,)))
    with pytest.raises(ProgramError, match=r"the programs deadlock: instruction 0 \(numbered over all cores"):
        run_simulation(b.build(), {}, t)
    b.programs[(1, 0)].instructions[1] = Send(2, b.view(a1), (0, 0), b.view(d0), xy_route((1, 0), (0, 0)),
                                              deps=(0, 1))
    with pytest.raises(ProgramError, match="core \\(1, 0\\) instruction 1: dependency 1 is not an earlier"):
        run_simulation(b.build(), {}, t)


def test_a_copy_takes_its_engine_s_time_and_a_vector_engine_counts_elements():
    """On the npu preset (1 GHz): a 4 KiB float32 box copies in 64 ns on the DMA engine (64
    bytes a cycle) and 16 ns on a vector engine (64 elements a cycle); the two run at once
    on their engines, and both copies arrive."""
    from corefold.sim.testing import ExeBuilder as Builder
    from corefold.target import load_target

    t = load_target("npu")
    b = Builder(t)
    src = b.buffer((0, 0), (1, 1024), offset=0, data=np.arange(1024))
    d = [b.buffer((0, 0), (1, 1024), offset=4096 * (i + 1)) for i in range(2)]
    ys = [b.graph_output(f"y{i}", (1, 1024)) for i in range(2)]
    b.add((0, 0), Copy("dma0", b.view(src), b.view(d[0])))
    b.add((0, 0), Copy("vector0", b.view(src), b.view(d[1])))
    for i in range(2):
        b.add((0, 0), DmaStore("dma0", b.view(d[i]), b.view(ys[i], dram=True), xy_route((0, 0), (0, 3)),
                               deps=(i,)))
    sim = run_simulation(b.build(), {}, t)
    for i in range(2):
        np.testing.assert_array_equal(sim.outputs[f"y{i}"], np.arange(1024, dtype=np.float32).reshape(1, 1024))
    run = sim.timed
    c = [p.core for p in b.build().programs].index((0, 0))
    assert run.finish(c, 0) - run.start(c, 0) == pytest.approx(64 * NS)
    assert run.finish(c, 1) - run.start(c, 1) == pytest.approx(16 * NS)
    assert run.start(c, 0) == run.start(c, 1) == run.run_start


def test_bad_inputs_and_targets_are_user_errors():
    exe, t, _w = _matmul_relu()
    with pytest.raises(DataError, match="missing input 'x'"):
        simulate(exe, {}, t)
    with pytest.raises(DataError, match="NaN or infinite"):
        simulate(exe, {"x": np.full((1, 4), np.nan, np.float32)}, t)
    with pytest.raises(DataError, match="dtype float64"):
        simulate(exe, {"x": np.zeros((1, 4))}, t)
    with pytest.raises(DataError, match="shape"):
        simulate(exe, {"x": np.zeros((4,), np.float32)}, t)
    with pytest.raises(TargetError, match="compiled for target 'sim-test'.*not for 'corefold-npu'"):
        simulate(exe, {"x": np.zeros((1, 4), np.float32)}, "npu")
    with pytest.raises(TargetError, match="no bundled preset"):
        simulate(exe, {"x": np.zeros((1, 4), np.float32)})


def test_dram_copy_reads_and_writes_the_channel_and_moves_the_box():
    from corefold.backend.executable import DmaCopy

    t = small_target()
    b = ExeBuilder(t)
    x = b.graph_input("x", (2, 8))
    y = b.graph_output("y", (2, 8))
    # the rows swapped, one 32-byte DRAM copy each, by core (0, 0)'s DMA engine
    b.add((0, 0), DmaCopy("dma0", View(x, (2, 8), (0, 0), (1, 8)), View(y, (2, 8), (1, 0), (1, 8)), ()))
    b.add((0, 0), DmaCopy("dma0", View(x, (2, 8), (1, 0), (1, 8)), View(y, (2, 8), (0, 0), (1, 8)), ()))
    xs = np.arange(16, dtype=np.float32).reshape(2, 8)
    sim = run_simulation(b.build(), {"x": xs}, t)
    np.testing.assert_array_equal(sim.outputs["y"], xs[::-1])
    # each copy: DMA 32 B / 16 B/ns = 2 ns; the one channel read (2 ns) then written (2 ns):
    # first copy 0-4 ns, the second one's read waits for the channel until 4, writes 6-8 ns
    assert sim.timed.run_end - sim.timed.run_start == pytest.approx(8 * NS)
    assert sim.report.dram_bytes == 128 and sim.report.noc_bytes == 0
    assert sim.report.sram_peak_bytes == [0, 0, 0, 0]


def test_an_interleaved_region_moves_a_share_through_every_channel():
    """Striped over both channels, each channel carries half of each transfer (32 B of the
    load, 32 B of the store: 4 ns each at 8 GB/s) along its own XY route, and the run is
    shorter than through one channel, where the channel carries all 64 B (8 ns) each way."""
    xs = np.arange(16, dtype=np.float32)
    runs = {}
    for n in (1, 2):
        exe, t = striped_copy_exe(n)
        sim = run_simulation(exe, {"x": xs}, t)
        np.testing.assert_array_equal(sim.outputs["y"], xs)
        tl, m = sim.timed.timeline, sim.timed.machine
        lo, hi = sim.timed.run_start, sim.timed.run_end
        busy = [float(np.sum((np.clip(tl.stage_end, lo, hi) - np.clip(tl.stage_start, lo, hi))
                             [tl.stage_resource == r])) for r in m.channels]
        runs[n] = hi - lo
        links = np.asarray(sim.report.link_bytes)
        if n == 1:
            assert busy == pytest.approx([16 * NS, 0.0])  # 64 B in, 64 B out
            assert links[0, 1, 3] == 64 and links[0, 0, 1] == 64 and links.sum() == 128
        else:
            assert busy == pytest.approx([8 * NS, 8 * NS])
            # (1,0) W and (0,0) E carry the first channel's halves, (0,1) N and (0,0) S the second's
            assert links[0, 1, 3] == 32 and links[0, 0, 1] == 32 and links[1, 0, 0] == 32 and links[0, 0, 2] == 32
            assert links.sum() == 128
        assert sim.report.dram_bytes == 128 and sim.report.noc_bytes == 128
    assert runs[2] < runs[1]


def test_a_route_on_an_interleaved_region_is_an_internal_error():
    from dataclasses import replace

    from corefold.backend.check import ExecutableError, check_executable

    exe, t = striped_copy_exe(2)
    check_executable(exe, t)
    load = exe.programs[0].instructions[0]
    exe.programs[0].instructions[0] = replace(load, route=xy_route((1, 0), (0, 0)))
    with pytest.raises(ExecutableError, match="interleaved region 0 has a route"):
        check_executable(exe, t)


def test_the_functional_probe_sees_each_compute_s_inputs_before_it_runs():
    from corefold.sim.functional import run_functional

    exe, t, w = _matmul_relu()
    x = np.arange(4, dtype=np.float32).reshape(1, 4) - 1.5
    sim = run_simulation(exe, {"x": x}, t)
    seen = []
    outputs = run_functional(exe, t, sim.timed, {"x": x}, probe=lambda op, arrays: seen.append((op.op_type, arrays)))
    assert [s[0] for s in seen] == ["MatMul", "Relu"]
    np.testing.assert_array_equal(seen[0][1][0], x)
    np.testing.assert_array_equal(seen[0][1][1], w)
    np.testing.assert_allclose(seen[1][1][0], x @ w, rtol=1e-6)  # the pre-activation values
    np.testing.assert_array_equal(outputs["y"], sim.outputs["y"])
    again = []
    run_simulation(exe, {"x": x}, t, probe=lambda op, arrays: again.append(arrays[0]))  # passed on
    np.testing.assert_array_equal(again[1], seen[1][1][0])


def _two_matmuls(t, seed: int, first_activation: float, second_activation: float):
    """Two MatMuls of x (1, 4) by a resident 4x4 W on matrix0 of core (0,0) of ``t``, one
    after the other (2 ns each on the small target), into graph outputs y and z, with a
    fused Relu of the given vector work (0: none) on each. Returns (executable, W, ops)."""
    from dataclasses import replace

    _, b, w, wb, (bx, by, bz) = _weights_and_rows(seed, ("x", "y", "z"), t)
    x = b.graph_input("x", (1, 4))
    y = b.graph_output("y", (1, 4))
    z = b.graph_output("z", (1, 4))
    ids = []
    for work in (first_activation, second_activation):
        ids.append(b.op("MatMul", [(1, 4), (4, 4)], [(1, 4)], "matrix", 16))
        if work:
            b.ops[ids[-1]] = replace(b.ops[ids[-1]], activation="Relu", activation_work=work)
    core = (0, 0)
    b.add(core, DmaLoad("dma0", b.view(x, dram=True), b.view(bx), xy_route((1, 0), core)))
    for op, buf in zip(ids, (by, bz), strict=True):
        b.add(core, Compute(op, "matrix0", (b.view(bx), b.view(wb)), (b.view(buf),), deps=(0,)))
    for i, (buf, out) in enumerate(((by, y), (bz, z))):
        b.add(core, DmaStore("dma0", b.view(buf), b.view(out, dram=True), xy_route(core, (1, 0)), deps=(i + 1,)))
    return b.build(), w, [b.ops[op] for op in ids]


def _assert_in_turn(tm, first_done_ns: float) -> None:
    """Core 0's first MatMul (instruction 1) runs from 4 ns after the start (x loaded) to
    ``first_done_ns``, and the second follows it for its 2 ns."""
    assert (tm.start(0, 1) - tm.run_start, tm.finish(0, 1) - tm.run_start) == (pytest.approx(4 * NS),
                                                                              pytest.approx(first_done_ns * NS))
    assert tm.start(0, 2) == pytest.approx(tm.finish(0, 1))
    assert tm.finish(0, 2) - tm.start(0, 2) == pytest.approx(2 * NS)


def _vector_busy(tm, core, engine: str) -> list[tuple[float, float]]:
    """(start, finish) of every task that holds ``engine`` of ``core``."""
    vector = tm.machine.units[(core, engine)]
    return [(tm.timeline.start[k], tm.timeline.finish[k]) for k in range(len(tm.engine.tasks))
            if any(s.resource == vector for s in tm.engine.tasks[k].stages)]


def test_a_fused_activation_streams_through_a_vector_engine_beside_the_matrix_work():
    t = small_target()
    exe, w, _ = _two_matmuls(t, 1, 40.0, 0.0)  # 10 ns of vector work on the first
    xv = np.arange(4, dtype=np.float32).reshape(1, 4) - 1.5
    sim = run_simulation(exe, {"x": xv}, t)
    np.testing.assert_allclose(sim.outputs["y"], np.maximum(xv @ w, 0), rtol=1e-6)
    np.testing.assert_allclose(sim.outputs["z"], xv @ w, rtol=1e-6)
    # x is in SRAM at 26 ns (as in the test above); the MatMul's 16 MAC take matrix0 for
    # 26-28 while its Relu streams through vector0 for 26-36 (10 ns): done at 36, not at
    # 38 as one engine would take (2 + 10 ns); the next matrix instruction follows it
    _assert_in_turn(sim.timed, 14)
    assert len(_vector_busy(sim.timed, (0, 0), "vector0")) == 1


def test_an_epilogue_longer_than_the_matrix_work_is_dealt_over_the_vector_engines():
    from corefold.backend.executable import compute_stages
    from corefold.sim.testing import SMALL_TARGET
    from corefold.target.load import parse_target

    two = SMALL_TARGET.replace("[core.units.vector]\ncount = 1", "[core.units.vector]\ncount = 2")
    assert two != SMALL_TARGET
    t = parse_target(two, "two vector engines")
    exe, w, (long_epilogue, short_epilogue) = _two_matmuls(t, 2, 40.0, 8.0)  # 10 ns and 2 ns of vector work
    # the engines and shares, by hand: 10 ns over 2 ns of work takes both engines, 5 ns each;
    # 2 ns keeps up with the work on one; matrix engine 1 starts at vector engine 1
    assert compute_stages(long_epilogue, "matrix0", t) == [
        ("matrix0", pytest.approx(2 * NS)), ("vector0", pytest.approx(5 * NS)), ("vector1", pytest.approx(5 * NS))]
    assert compute_stages(long_epilogue, "matrix1", t) == [
        ("matrix1", pytest.approx(2 * NS)), ("vector1", pytest.approx(5 * NS)), ("vector0", pytest.approx(5 * NS))]
    assert compute_stages(short_epilogue, "matrix0", t) == [
        ("matrix0", pytest.approx(2 * NS)), ("vector0", pytest.approx(2 * NS))]
    assert compute_stages(long_epilogue, "matrix0", small_target()) == [
        ("matrix0", pytest.approx(2 * NS)), ("vector0", pytest.approx(10 * NS))]
    xv = np.arange(4, dtype=np.float32).reshape(1, 4) - 1.5
    sim = run_simulation(exe, {"x": xv}, t)
    np.testing.assert_allclose(sim.outputs["y"], np.maximum(xv @ w, 0), rtol=1e-6)
    np.testing.assert_allclose(sim.outputs["z"], np.maximum(xv @ w, 0), rtol=1e-6)
    # x is in SRAM at 4 ns from the start (as in the test above); the first MatMul's Relu
    # takes both vector engines for 5 ns each: done at 9 ns, not at 14 as on one engine;
    # the second follows on matrix0 and vector0 for 2 ns each
    tm = sim.timed
    _assert_in_turn(tm, 9)
    at = [(pytest.approx(tm.run_start + a * NS), pytest.approx(tm.run_start + b * NS)) for a, b in ((4, 9), (9, 11))]
    assert _vector_busy(tm, (0, 0), "vector0") == at
    assert _vector_busy(tm, (0, 0), "vector1") == at[:1]


def _fan_out():
    """Core (0,0) sends one 64-byte weight to (1,0) and to (1,1): XY routes share the hop
    (0,0) E; each receiver stores what it got."""
    t = small_target()
    b = ExeBuilder(t)
    src = b.buffer((0, 0), (16,), data=np.arange(16), name="w")
    out = b.graph_output("y", (2, 16))
    for i, dst in enumerate(((1, 0), (1, 1))):
        buf = b.buffer(dst, (16,), name=f"w{i}")
        b.add((0, 0), Send(i + 1, b.view(src), dst, b.view(buf), xy_route((0, 0), dst)))
        r = b.add(dst, Recv(i + 1, (0, 0), b.view(buf)))
        b.add(dst, DmaStore("dma0", b.view(buf), View(out, (2, 16), (i, 0), (1, 16)), xy_route(dst, (1, 0)),
                            deps=(r,)))
    return b.build(), t


def test_what_if_counts_a_resource_as_free_on_the_same_executable():
    """A diagnostic: each ``what_if`` runs the same executable with that resource free."""
    from corefold.sim.timed import time_executable

    exe, t, _ = _matmul_relu()

    def latency(exe, t, what_if=frozenset()):
        run = time_executable(exe, t, frozenset(what_if))
        return (run.run_end - run.run_start) / NS

    # by hand (test_one_core_timeline_and_report_by_hand): load 4 ns, matmul 2, relu 1, store 4;
    # the load's and the store's 16 B take 2 ns on their 8 B/ns hop, which bounds them, then
    # 2 ns of hop latency remain
    assert latency(exe, t) == pytest.approx(11)
    assert latency(exe, t, {"compute"}) == pytest.approx(8)  # matmul and relu take no time
    assert latency(exe, t, {"dram"}) == pytest.approx(11)  # channel and DMA were not the bottleneck
    assert latency(exe, t, {"noc"}) == pytest.approx(9)  # load and store 3 ns each: channel or DMA 1 ns
    assert latency(exe, t, {"noc", "dram"}) == pytest.approx(7)  # load and store: their hop latency
    assert latency(exe, t, {"compute", "noc", "dram"}) == pytest.approx(4)
    # the fan-out: both sends start at once and queue on the shared hop (0,0) E, 8 ns each
    # (plus 2 ns per hop); as one multicast the second skips that hop: done at 10 ns too
    fan, t = _fan_out()
    for what_if, ends in ((frozenset(), [10, 20]), (frozenset({"multicast"}), [10, 10])):
        run = time_executable(fan, t, what_if)
        assert [(run.timeline.finish[run.task[0][i]] - run.run_start) / NS for i in (0, 1)] == pytest.approx(ends)
    with pytest.raises(ValueError, match="what_if"):
        time_executable(exe, t, frozenset({"cache"}))
