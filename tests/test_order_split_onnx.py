"""Reordered and split models, exported to ONNX, give ONNX Runtime the original outputs;
``corefold order`` and ``corefold split`` end to end."""

import json
from dataclasses import replace

import numpy as np
import pytest

from corefold.cli import main
from corefold.executor import random_inputs
from corefold.frontend.onnx import load_model, save_model, to_onnx
from corefold.frontend.onnx.check import ort_run
from corefold.passes.order import FAST, order_graph
from corefold.passes.order.random_network import random_network
from corefold.passes.split import split_graph, touched_bytes
from corefold.passes.split.split import needs_fit
from corefold.target import load_target

TARGET = load_target("npu")


@pytest.mark.parametrize("seed", [0, 1])
def test_reordered_model_runs_in_ort_with_the_same_outputs(seed):
    g = random_network(24, seed=seed, channels=16, size=8)
    feeds = random_inputs(g, seed)
    ref = ort_run(to_onnx(g), feeds)
    res = order_graph(g, TARGET, replace(FAST, budget_seconds=0.2))
    assert res.modified
    model = to_onnx(g)
    assert [n.name for n in model.graph.node] == [n.name for n in g.nodes]  # the chosen order
    out = ort_run(model, feeds)
    for k in ref:
        np.testing.assert_array_equal(out[k], ref[k])


@pytest.mark.parametrize("seed,batch", [(0, 1), (3, 2)])
def test_split_model_runs_in_ort_with_the_same_outputs(seed, batch):
    g = random_network(10, seed=seed, channels=32, size=16, batch=batch)
    feeds = random_inputs(g, seed)
    ref = ort_run(to_onnx(g), feeds)
    res = split_graph(g, TARGET, threshold=60_000)
    assert res.modified
    assert all(touched_bytes(n) <= 60_000 for n in g.nodes if needs_fit(n))
    out = ort_run(to_onnx(g), feeds)
    for k in ref:
        np.testing.assert_allclose(out[k], ref[k], rtol=1e-4, atol=1e-4)


def test_order_cli_writes_model_report_and_gantt(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    g = random_network(16, seed=4, channels=16, size=8)
    src = tmp_path / "net.onnx"
    save_model(g, src)
    out, rep, png = tmp_path / "o.onnx", tmp_path / "r.json", tmp_path / "g.png"
    assert main(["order", str(src), "-o", str(out), "--budget-seconds", "0.2", "--report", str(rep),
                 "--gantt", str(png)]) == 0
    text = capsys.readouterr().out
    assert "makespan  before" in text and "binding:" in text
    r = json.loads(rep.read_text())
    for key in ("makespan_before", "makespan_after", "lower_bound", "binding_bound", "search_seconds"):
        assert key in r
    assert r["lower_bound"] <= r["makespan_after"] <= r["makespan_before"]
    assert png.stat().st_size > 1000
    feeds = random_inputs(g, 0)
    a, b = ort_run(str(src), feeds), ort_run(str(out), feeds)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert len(load_model(out).nodes) == len(g)


def test_split_cli_and_capacity_error(tmp_path, capsys):
    g = random_network(6, seed=1, channels=64, size=56)  # 800 KB activations: convs exceed 960 KiB
    src = tmp_path / "net.onnx"
    save_model(g, src)
    out = tmp_path / "s.onnx"
    assert main(["split", str(src), "-o", str(out)]) == 0
    assert "pieces" in capsys.readouterr().out
    feeds = random_inputs(g, 0)
    a, b = ort_run(str(src), feeds), ort_run(str(out), feeds)
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=1e-4, atol=1e-4)
    tiny = tmp_path / "tiny.toml"
    tiny.write_text(_tiny_target())
    assert main(["split", str(src), "-o", str(tmp_path / "t.onnx"), "--target", str(tiny)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "CapacityError" not in err and "touches" in err and "bytes" in err
    assert not (tmp_path / "t.onnx").exists()


def test_order_cli_rejects_a_negative_budget(tmp_path, capsys):
    g = random_network(4, seed=1, channels=8, size=8)
    src = tmp_path / "net.onnx"
    save_model(g, src)
    assert main(["order", str(src), "-o", str(tmp_path / "o.onnx"), "--budget-seconds", "-1"]) == 2
    assert "--budget-seconds" in capsys.readouterr().err


def _tiny_target() -> str:
    return """
[target]
name = "tiny"
clock_mhz = 100
[mesh]
width = 1
height = 1
[core]
sram_kib = 1
[core.units.dma]
bytes_per_cycle = 8
[core.units.matrix]
macs_per_cycle = 8
[core.units.vector]
elements_per_cycle = 8
[noc]
link_bytes_per_cycle = 8
[memory]
dram_gbps = 1
host_link_gbps = 1
"""


def _net(tmp_path, n=6, seed=1):
    g = random_network(n, seed=seed, channels=16, size=8)
    src = tmp_path / "net.onnx"
    save_model(g, src)
    return src


def _one_line(capsys, *needles):
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    for n in needles:
        assert n in err, (n, err)


def test_order_cli_settings_are_reachable(tmp_path, capsys):
    src = _net(tmp_path)
    assert main(["order", str(src), "-o", str(tmp_path / "o.onnx"), "--help-settings"]) == 0
    text = capsys.readouterr().out
    for field in ("exhaustive_limit", "samples", "beam_width", "sampling", "target_makespan", "seed:"):
        assert field in text
    rep = tmp_path / "r.json"
    assert main(["order", str(src), "-o", str(tmp_path / "o.onnx"), "--preset", "fast", "--budget-seconds", "0.1",
                 "--set", "exhaustive_limit=3", "--set", "beam_width=0", "--set", "sampling=random",
                 "--report", str(rep)]) == 0
    s = json.loads(rep.read_text())["settings"]
    assert (s["exhaustive_limit"], s["beam_width"], s["sampling"], s["budget_seconds"], s["samples"]) == \
        (3, 0, "random", 0.1, 16)
    assert main(["order", str(src), "-o", str(tmp_path / "o.onnx"), "--set", "exhaustive_limit=-3"]) == 2
    _one_line(capsys, "exhaustive_limit")
    assert main(["order", str(src), "-o", str(tmp_path / "o.onnx"), "--set", "beam=3"]) == 2
    _one_line(capsys, "beam", "--help-settings")


def test_order_cli_target_makespan(tmp_path, capsys):
    src = _net(tmp_path)
    rep = tmp_path / "r.json"
    assert main(["order", str(src), "-o", str(tmp_path / "o.onnx"), "--budget-seconds", "0.1",
                 "--target-makespan", "1e9", "--report", str(rep)]) == 0
    assert "reached, search stopped" in capsys.readouterr().out
    r = json.loads(rep.read_text())
    assert r["reached_target"] and r["target_makespan"] == pytest.approx(1e3)


@pytest.mark.parametrize("option,name", [("--report", "r.json"), ("--gantt", "g.png"), ("-o", "o.onnx")])
def test_order_cli_checks_every_output_before_the_work(tmp_path, capsys, option, name):
    src = _net(tmp_path)
    out = tmp_path / "o.onnx"
    args = ["order", str(src), "-o", str(out), "--budget-seconds", "0.05"]
    if option == "-o":
        args[3] = str(tmp_path / "nodir" / name)
    else:
        args += [option, str(tmp_path / "nodir" / name)]
    assert main(args) == 2
    _one_line(capsys, option, "nodir")
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["net.onnx"]


@pytest.mark.parametrize("command", ["order", "split"])
def test_cli_refuses_to_overwrite_its_input(tmp_path, capsys, command):
    src = _net(tmp_path)
    before = src.read_bytes()
    assert main([command, str(src), "-o", str(src)]) == 2
    _one_line(capsys, "-o", "input")
    assert src.read_bytes() == before
    assert main([command, str(src), "-o", str(tmp_path)]) == 2
    _one_line(capsys, "-o", "folder")


def test_split_cli_threshold_setting(tmp_path, capsys):
    g = random_network(6, seed=1, channels=32, size=16)
    src = tmp_path / "net.onnx"
    save_model(g, src)
    assert main(["split", str(src), "-o", str(tmp_path / "x.onnx"), "--help-settings"]) == 0
    assert "threshold" in capsys.readouterr().out
    out = tmp_path / "s.onnx"
    assert main(["split", str(src), "-o", str(out), "--set", "threshold=60000"]) == 0
    text = capsys.readouterr().out
    assert "threshold 60000 bytes" in text and "pieces" in text
    split = load_model(out)
    assert all(touched_bytes(n) <= 60_000 for n in split.nodes if needs_fit(n))
    feeds = random_inputs(g, 0)
    a, b = ort_run(str(src), feeds), ort_run(str(out), feeds)
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=1e-4, atol=1e-4)
    assert main(["split", str(src), "-o", str(tmp_path / "t.onnx"), "--set", "threshold=0"]) == 2
    _one_line(capsys, "threshold")
