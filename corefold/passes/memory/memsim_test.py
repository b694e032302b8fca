"""Memory and time simulators against hand-computed profiles."""

import pytest

from corefold.ir import parse
from corefold.passes.memory.memsim import floor_bytes, step_profile, timed_profile
from corefold.passes.memory.program import build_program
from corefold.passes.memory.timesim import simulate
from corefold.target import load_target

# 1 KB = 256 float32. x resident (1 KB). a (4 KB) is read at step 1 and at step 4.
PLAIN = """\
graph p
input x: float32[256]
const s: int64[2] = [4, 256]
node n0 = Tile(x, s) -> (a: float32[4, 256])
node n1 = Relu(a) -> (b: float32[4, 256])
node n2 = Reshape(b, s) -> (bv: float32[4, 256])
node n3 = Neg(bv) -> (c: float32[4, 256])
node n4 = Add(c, a) -> (y: float32[4, 256])
output y
"""

# the same with a swapped out after step 1 (released before n3) and restored after n2
SWAPPED = """\
graph q
input x: float32[256]
const s: int64[2] = [4, 256]
node n0 = Tile(x, s) -> (a: float32[4, 256])
node out = corefold.memory::SwapOut(a) -> (ah: float32[4, 256])
node n1 = Relu(a) -> (b: float32[4, 256])
node n2 = Reshape(b, s) -> (bv: float32[4, 256])
node in = corefold.memory::SwapIn(ah) -> (a1: float32[4, 256]) after(n2)
node n3 = Neg(bv) -> (c: float32[4, 256]) after(out)
node n4 = Add(c, a1) -> (y: float32[4, 256])
output y
"""
KB4 = 4096
RES = 1024 + 16


def test_views_share_storage_and_steps_count_reads_and_writes():
    prog = build_program(parse(PLAIN))
    prof = step_profile(prog)
    # a: steps 0-4; b (with its view bv): 1-3; c: 3-4; y (output): 4
    assert prof.memory.tolist() == [RES + KB4, RES + 2 * KB4, RES + 2 * KB4, RES + 3 * KB4, RES + 3 * KB4]
    assert len([s for s in prog.storages.values() if not s.resident]) == 4
    assert floor_bytes(prog) == (RES + 3 * KB4, 4)


def test_swap_nodes_release_and_restore_on_their_edges():
    prog = build_program(parse(SWAPPED))
    assert [n.name for n in prog.compute] == ["n0", "n1", "n2", "n3", "n4"]
    prof = step_profile(prog)
    by_name = {s.root.name: ab for s, ab in prof.intervals.items()}
    assert by_name["a"] == (0, 2)   # held until the step before n3, which waits for the SwapOut
    # triggered by n2; counted from n3 on, since the only SwapOut n3 waits for (out) is
    # its own data predecessor: it cannot coexist with a in the gap before n3
    assert by_name["a1"] == (3, 4)
    assert "ah" not in by_name      # host memory
    assert prof.memory.tolist() == [RES + KB4, RES + 2 * KB4, RES + 2 * KB4, RES + 3 * KB4, RES + 3 * KB4]


def test_a_restore_counts_from_its_trigger_when_another_swap_may_still_run():
    # b is also swapped out, released at n3, and the restore of a does not wait for it
    text = SWAPPED.replace("node n1 = Relu(a) -> (b: float32[4, 256])",
                           "node n1 = Relu(a) -> (b: float32[4, 256])\n"
                           "node out2 = corefold.memory::SwapOut(b) -> (bh: float32[4, 256])")
    text = text.replace("after(out)", "after(out, out2)")
    prof = step_profile(build_program(parse(text)))
    by_name = {s.root.name: ab for s, ab in prof.intervals.items()}
    assert by_name["a1"] == (2, 4)


def test_timed_profile_and_streams_overlap():
    prog = build_program(parse(SWAPPED))
    names = {n.name: n for n in prog.order}
    dur = {names[k]: 1.0 for k in ("n0", "n1", "n2", "n3", "n4")}
    dur[names["out"]] = 1.5
    dur[names["in"]] = 0.5
    sched = simulate(prog, load_target("gpu"), dur)
    start = {k: sched.start[v] for k, v in names.items()}
    assert start == {"n0": 0, "out": 1, "n1": 1, "n2": 2, "in": 3, "n3": 3, "n4": 4}
    assert sched.makespan == 5 and sched.stall == 0
    timed = timed_profile(prog, sched.start, sched.end)
    assert timed.peak <= step_profile(prog).peak
    # a lives from 0 until out ends at 2.5; a1 from 3 to 5
    life = {s.root.name: t for s, t in timed.lifetimes.items()}
    assert life["a"] == (0, 2.5) and life["a1"] == (3, 5)


def test_a_slow_swap_stalls_the_compute_stream():
    prog = build_program(parse(SWAPPED))
    names = {n.name: n for n in prog.order}
    dur = {n: 1.0 for n in prog.order}
    dur[names["out"]] = 4.0
    sched = simulate(prog, load_target("gpu"), dur)
    assert sched.start[names["n3"]] == 5.0  # waits for the SwapOut (1 + 4)
    assert sched.stall == pytest.approx(2.0)


def test_copy_durations_use_the_host_link():
    prog = build_program(parse(SWAPPED))
    t = load_target("gpu")
    sched = simulate(prog, t)
    out = next(n for n in prog.order if n.name == "out")
    assert sched.end[out] - sched.start[out] == pytest.approx(2e-6 + KB4 / 16e9)
