"""`corefold swap` end to end on an ONNX training graph: outputs, report, ONNX Runtime."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest

from corefold.executor import random_inputs
from corefold.frontend.onnx import save_model
from corefold.ir import parse
from corefold.passes.memory.testing import training_mlp
from tests.test_cli import assert_one_line_error, corefold


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("swap") / "mlp.onnx"
    g = training_mlp(layers=8, batch=1024, width=256)
    save_model(g, path)
    return path, random_inputs(g, seed=3)


def _ort(path, feeds):
    s = ort.InferenceSession(str(path))
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds), strict=True))


def test_swap_writes_text_onnx_and_report(model, tmp_path):
    path, feeds = model
    out = tmp_path / "mlp.cf"
    proc = corefold("swap", str(path), "--budget", "20MiB", "--target", "gpu-nvlink", "-o", str(out),
                    "--report", str(tmp_path / "r.json"))
    assert proc.returncode == 0, proc.stderr
    r = json.loads((tmp_path / "r.json").read_text())
    for key in ("peak_before", "peak_after", "floor", "time_before", "time_after", "swapped_bytes",
                "compressed_bytes"):
        assert key in r
    assert r["peak_after"] <= 20 * 2**20 < r["peak_before"] and r["floor"] <= r["peak_after"]
    assert r["swapped_bytes"] > 0 and r["compressed_bytes"] == 0 and r["time_after"] >= r["time_before"]
    text = out.read_text()
    assert "corefold.memory::SwapOut" in text and "after(" in text
    parse(text)  # the text form parses back
    # OUT.onnx runs in ONNX Runtime and gives the original model's outputs, bit for bit
    want, got = _ort(path, feeds), _ort(f"{out}.onnx", feeds)
    for k in want:
        assert np.array_equal(want[k], got[k]), k


def test_compressed_onnx_runs_in_onnx_runtime(model, tmp_path):
    path, feeds = model
    out = tmp_path / "c.cf"
    proc = corefold("swap", str(path), "--budget", "17MiB", "--reduction", "compress", "--compress", "bf16",
                    "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    import onnx

    m = onnx.load(f"{out}.onnx")
    assert {"Cast"} <= {n.op_type for n in m.graph.node}
    want, got = _ort(path, feeds), _ort(f"{out}.onnx", feeds)
    for k in want:
        w = want[k].astype(np.float64)
        noise = np.sum((got[k] - w) ** 2)
        assert noise == 0 or 10 * np.log10(np.sum(w**2) / noise) > 25


def test_budget_below_floor_is_one_line_naming_the_floor(model, tmp_path):
    path, _ = model
    proc = corefold("swap", str(path), "--budget", "1MiB", "-o", str(tmp_path / "x.cf"))
    assert_one_line_error(proc, "below the floor of")
    assert not (tmp_path / "x.cf").exists() and not (tmp_path / "x.cf.onnx").exists()


def test_bad_arguments_are_one_line_errors(model, tmp_path):
    path, _ = model
    assert_one_line_error(corefold("swap", str(path), "--budget", "lots", "-o", str(tmp_path / "x")), "--budget")
    assert_one_line_error(corefold("swap", str(path), "-o", str(tmp_path)), "folder")
    assert_one_line_error(corefold("swap", str(path), "-o", str(path)), "input")
    assert_one_line_error(corefold("swap", str(tmp_path / "none.onnx"), "-o", str(tmp_path / "x")), "none.onnx")
    assert_one_line_error(corefold("swap", "-o", str(tmp_path / "x")), "MODEL")
    assert_one_line_error(corefold("swap", str(path), "--set", "nonsense=1", "-o", str(tmp_path / "x")), "nonsense")


def test_help_settings_lists_every_setting():
    proc = corefold("swap", "--help-settings")
    assert proc.returncode == 0
    for name in ("th_tts", "th_size", "max_count", "reduction", "budget_bytes", "seed:"):
        assert name in proc.stdout


def test_profile_plot(model, tmp_path):
    pytest.importorskip("matplotlib")
    path, _ = model
    proc = corefold("swap", str(path), "--budget", "20MiB", "-o", str(tmp_path / "p.cf"), "--profile",
                    str(tmp_path / "mem.png"))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "mem.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_budget_below_the_floor_cuts_operators_along_the_batch(model, tmp_path):
    path, feeds = model
    out, rep = tmp_path / "cut.cf", tmp_path / "cut.json"
    proc = corefold("swap", str(path), "--budget", "9MiB", "--target", "gpu-nvlink", "-o", str(out),
                    "--report", str(rep))
    assert proc.returncode == 0, proc.stderr
    assert "along the batch" in proc.stdout
    r = json.loads(rep.read_text())
    budget = 9 * 2**20
    assert r["floor"] <= r["peak_after"] <= budget < r["split"]["floor_unsplit"]
    assert r["split"]["ops"] and all(o["pieces"] >= 2 for o in r["split"]["ops"])
    # the overhead counts the cutting: it compares with the graph as given
    assert r["time_after"] >= r["split"]["time_cut"] and r["time_before"] < r["split"]["time_cut"]
    # ONNX Runtime runs the cut graph; cut products and summed pieces reassociate
    want, got = _ort(path, feeds), _ort(f"{out}.onnx", feeds)
    for k, w in want.items():
        assert np.max(np.abs(got[k] - w)) <= 1e-4 * np.max(np.abs(w)), k
    # without cutting the same budget is below the floor
    proc = corefold("swap", str(path), "--budget", "9MiB", "--set", "split=off", "-o", str(tmp_path / "x.cf"))
    assert_one_line_error(proc, "below the floor of")
