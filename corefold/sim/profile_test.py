"""The per-operator profile: by hand on a small executable, and its sums on a lowered model."""

import csv
from dataclasses import replace
from importlib import resources

import numpy as np
import pytest

from corefold.backend.executable import Compute
from corefold.sim.critical import critical_path
from corefold.sim.profile import COLUMNS, operator_name, operator_profile, summary
from corefold.sim.simulate import run_simulation
from corefold.sim.simulate_test import _matmul_relu

NS = 1e-9
MODEL = str(resources.files("corefold.examples").joinpath("tiny_cnn.onnx"))


@pytest.mark.parametrize("piece, name", [
    ("conv", "conv"), ("conv_rows3", "conv"), ("conv_part1_rows3", "conv"), ("n8_part1_part12", "n8"),
    ("/layer1/layer1.0/conv1/Conv_int_rows12_part0", "/layer1/layer1.0/conv1/Conv_int"),
    ("x_rows_concat", "x_rows_concat"),  # a join the split pass adds is an operator of its own
    ("rows2", "rows2"), ("a_part", "a_part"), ("a_rows2b", "a_rows2b"),
])
def test_an_operator_is_its_pieces_name_without_the_row_and_part_suffixes(piece, name):
    assert operator_name(piece) == name


def test_one_core_profile_timed_by_hand():
    """The run of simulate_test's hand-timed matmul and relu: matmul 4-6 ns, relu 6-7 ns
    (run-relative), both on the critical path; renamed as pieces of two operators."""
    exe, t, _ = _matmul_relu()
    exe.ops[0] = replace(exe.ops[0], name="mm_part0_rows1")
    exe.ops[1] = replace(exe.ops[1], name="act_rows0")
    sim = run_simulation(exe, {"x": np.ones((1, 4), np.float32)}, t)
    prof = operator_profile(exe, sim.timed)
    assert [o.name for o in prof] == ["mm", "act"]  # the longest on the critical path first
    mm, act = prof
    assert (mm.op_type, mm.pieces, mm.cores, act.op_type) == ("MatMul", 1, 1, "Relu")
    assert [mm.start_s / NS, mm.end_s / NS, mm.busy_s / NS, mm.longest_s / NS, mm.critical_s / NS] == \
        pytest.approx([4, 6, 2, 2, 2])
    assert [act.start_s / NS, act.end_s / NS, act.span_s / NS, act.critical_s / NS] == pytest.approx([6, 7, 1, 1])
    assert act.row()["critical_us"] == pytest.approx(0.001)
    assert summary(prof, 1) == "mm 0.002 us (MatMul, 1 piece on 1 core)"


@pytest.fixture(scope="module")
def lowered():
    from corefold.backend.lower import FAST, lower
    from corefold.backend.testing import small_target
    from corefold.frontend.onnx import load_model

    graph = load_model(MODEL)
    target = small_target()
    exe = lower(graph, target, FAST)
    sim = run_simulation(exe, None, target, functional=False)
    return graph, exe, sim


def test_a_lowered_models_profile_adds_up_to_its_instructions_and_its_critical_path(lowered):
    graph, exe, sim = lowered
    run = sim.timed
    path = critical_path(run)
    prof = operator_profile(exe, run, path)
    computes = [(c, j, exe.ops[ins.op]) for c, p in enumerate(exe.programs)
                for j, ins in enumerate(p.instructions) if isinstance(ins, Compute)]
    assert sum(o.pieces for o in prof) == len(computes)
    assert any(o.pieces > 1 for o in prof), "the small target cuts some operator into pieces"
    # every operator is a node of the model, or a part of one the tile step rewrote (the
    # global average pool, summed over row bands, as gap_1_sum and gap_1_mean)
    nodes = {n.name for n in graph.nodes}
    assert {o.name for o in prof} - nodes == {"gap_1_sum", "gap_1_mean"} and "gap_1" in nodes
    compute = path.by_category()["compute"]
    assert sum(o.critical_s for o in prof) == pytest.approx(compute[0] + compute[1], rel=1e-12)
    for o in prof:
        mine = [(run.start(c, j), run.finish(c, j), exe.programs[c].core) for c, j, op in computes
                if operator_name(op.name) == o.name]
        assert o.busy_s == pytest.approx(sum(f - s for s, f, _ in mine), rel=1e-12)
        assert o.start_s == pytest.approx(min(s for s, _, _ in mine) - run.run_start)
        assert o.end_s == pytest.approx(max(f for _, f, _ in mine) - run.run_start)
        assert o.cores == len({core for *_, core in mine}) <= o.pieces
        assert o.longest_s <= min(o.busy_s, o.span_s) + 1e-15
        assert 0 <= o.critical_s <= o.busy_s + 1e-15  # a piece is on the path for its service (and waits: none here)
    keys = [(-o.critical_s, -o.busy_s) for o in prof]
    assert keys == sorted(keys)


def test_sim_writes_the_profile_as_csv_and_names_the_longest_operator(tmp_path, capsys):
    from corefold.backend.cfx import save
    from corefold.backend.lower import FAST, lower
    from corefold.cli import main
    from corefold.frontend.onnx import load_model
    from corefold.target import load_target

    target = load_target("npu")
    exe = lower(load_model(MODEL), target, FAST)
    cfx, out = tmp_path / "m.cfx", tmp_path / "ops.csv"
    save(exe, cfx)
    code = main(["sim", str(cfx), "--profile", str(out)])
    text = capsys.readouterr().out
    assert code == 0, text
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == COLUMNS
    prof = operator_profile(exe, run_simulation(exe, None, target, functional=False).timed)
    assert [r["operator"] for r in rows] == [o.name for o in prof]
    assert [int(r["pieces"]) for r in rows] == [o.pieces for o in prof]
    assert [float(r["busy_us"]) for r in rows] == pytest.approx([o.busy_s * 1e6 for o in prof], abs=1e-4)
    assert any(o.pieces > 1 for o in prof)
    assert f"longest on it {prof[0].name} " in text and f"wrote {out} ({len(prof)} operators)" in text
    # a profile over the executable it reads is refused before any work
    code = main(["sim", str(cfx), "--profile", str(cfx)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--profile" in err
