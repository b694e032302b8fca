"""``corefold lower`` end to end: the executable it writes runs in ``corefold sim`` with the
ONNX Runtime check passing, ``corefold inspect`` reads it back with the executable's own
counts, a target that is too small is one line naming the resource, and bad output paths
are refused before any work."""

from __future__ import annotations

import contextlib
import io
import json
import re
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from corefold.backend.cfx import load
from corefold.backend.executable import INSTRUCTION_TYPES, instruction_kind
from corefold.cli import main

MODEL = str(resources.files("corefold.examples").joinpath("tiny_cnn.onnx"))
PRESET_2X2 = resources.files("corefold.target").joinpath("presets/npu-2x2.toml").read_text()


@pytest.fixture(scope="module", params=["npu-2x2", "npu"])
def lowered(request, tmp_path_factory):
    """(target, .cfx path, report dict, stdout) of ``corefold lower`` on tiny_cnn."""
    folder = tmp_path_factory.mktemp("lower")
    cfx, report = folder / "tiny.cfx", folder / "lower.json"
    out = io.StringIO()  # a module-scoped fixture has no capsys
    with contextlib.redirect_stdout(out):
        code = main(["lower", MODEL, "--target", request.param, "--preset", "fast", "-o", str(cfx),
                     "--report", str(report)])
    assert code == 0, out.getvalue()
    return request.param, str(cfx), json.loads(report.read_text()), out.getvalue()


def test_lower_prints_the_executables_own_numbers(lowered):
    target, cfx, report, text = lowered
    exe = load(cfx)
    assert exe.target.name == {"npu-2x2": "corefold-npu-2x2", "npu": "corefold-npu"}[target]
    n = sum(len(p.instructions) for p in exe.programs)
    assert f"{len(exe.programs)} of {exe.target.width * exe.target.height} used" in text
    assert re.search(rf"^instructions {n} \(", text, re.M), text
    assert f"{exe.weight_bytes():,} bytes resident" in text
    assert report["cores_used"] == len(exe.programs) and report["instructions"] == n
    assert report["instructions_per_core"] == [len(p.instructions) for p in exe.programs]
    assert report["sram_extent_bytes"] == [max(b.end for b in exe.buffers if b.core == c) for c in exe.cores]
    assert max(report["sram_extent_bytes"]) <= report["sram_capacity_bytes"]
    assert report["weight_bytes"] == sum(w.data.nbytes for w in exe.weights.values()) > 0
    # what the fast preset chose: its first clustering and tiling, seed 0, nothing tried
    from corefold.backend.lower import FAST

    trials = report["trials"]
    assert (trials["spread"], trials["headroom"], trials["seed"]) == (FAST.spread[0], FAST.headroom[0], FAST.seed)
    assert not any(k.endswith("_tried") and isinstance(v, list) for k, v in trials.items())
    assert trials["shared_tried"] is False and "tuning" not in report


def test_the_executable_runs_in_sim_and_matches_onnx_runtime(lowered, capsys):
    _, cfx, _, _ = lowered
    code = main(["sim", cfx, "--check", MODEL])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "check probs: max abs error" in text and "MISMATCH" not in text


def test_sim_prints_and_reports_where_the_critical_path_spends_the_latency(lowered, capsys, tmp_path):
    _, cfx, _, _ = lowered
    report = tmp_path / "r.json"
    assert main(["sim", cfx, "--report", str(report)]) == 0
    text = capsys.readouterr().out
    doc = json.loads(report.read_text())
    path = doc["critical_path"]
    total = sum(path["service_s"].values()) + sum(path["wait_s"].values())
    assert total == pytest.approx(doc["latency_s"], rel=1e-9)
    assert "compute" in path["service_s"] and path["steps"] >= 3
    assert 1 <= len(path["longest"]) <= 10
    line = next(t for t in text.splitlines() if t.startswith("critical path "))
    assert f"{path['steps']} steps:" in line and "compute" in line


def test_inspect_prints_the_cfx_contents(lowered, capsys, tmp_path):
    _, cfx, _, _ = lowered
    exe = load(cfx)
    assert main(["inspect", cfx]) == 0
    text = capsys.readouterr().out
    assert "format version 4" in text and exe.target.digest[:16] in text  # fused Conv + Relu
    assert "channels 0-3 interleaved" in text
    assert f"{len(exe.ops)} ops on {len(exe.programs)} cores" in text
    rows = {m.group(1): [int(v) for v in m.group(2).split()]
            for m in re.finditer(rf"^\((\d+,\d+)\)\s+((?:\d+\s+){{{len(INSTRUCTION_TYPES) + 1}}}\d+)", text, re.M)}
    assert len(rows) == len(exe.programs)
    for p in exe.programs:
        kinds = [instruction_kind(i) for i in p.instructions]
        want = [len(p.instructions)] + [kinds.count(k) for k in INSTRUCTION_TYPES]
        want.append(sum(1 for b in exe.buffers if b.core == p.core))
        assert rows[f"{p.core[0]},{p.core[1]}"] == want
    assert "inputs       image: float32[1, 3, 64, 64]" in text and "outputs      probs: float32[1, 10]" in text
    # recognised by its magic bytes whatever the suffix
    other = tmp_path / "model.bin"
    other.write_bytes(Path(cfx).read_bytes())
    assert main(["inspect", str(other)]) == 0
    assert "format version 4" in capsys.readouterr().out


def test_inspect_refuses_a_corrupt_cfx_in_one_line(lowered, capsys, tmp_path):
    _, cfx, _, _ = lowered
    data = bytearray(Path(cfx).read_bytes())
    data[-10] ^= 0xFF
    bad = tmp_path / "bad.cfx"
    bad.write_bytes(bytes(data))
    assert main(["inspect", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "checksum" in err and "bad.cfx" in err


@pytest.mark.parametrize("edits,resource", [
    ({"instruction_kib = 256": "instruction_kib = 1"}, "instruction memory of core"),
    # 48 KiB: at 64 KiB the tasks packed onto the one core by SRAM fit (stop 46)
    ({"width = 2 ": "width = 1 ", "height = 2 ": "height = 1 ", "sram_kib = 1024": "sram_kib = 48",
      "sram_reserved_kib = 64": "sram_reserved_kib = 8", "dram_attach = [[0, 0], [0, 1], [1, 0], [1, 1]]":
      "dram_attach = [[0, 0]]"}, "core count of target"),
])
def test_a_target_too_small_is_one_line_naming_the_resource(tmp_path, capsys, edits, resource):
    text = PRESET_2X2
    for old, new in edits.items():
        assert old in text
        text = text.replace(old, new)
    target = tmp_path / "small.toml"
    target.write_text(text)
    out = tmp_path / "m.cfx"
    code = main(["lower", MODEL, "--target", str(target), "--preset", "fast", "-o", str(out),
                 "--report", str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("corefold lower: error: ") and resource in err, err
    assert re.search(r"needed, .* available", err), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small.toml"]


@pytest.mark.parametrize("case", ["folder", "input", "report-is-output"])
def test_bad_output_paths_are_refused_before_any_work(tmp_path, capsys, case):
    model = tmp_path / "m.onnx"
    model.write_bytes(Path(MODEL).read_bytes())
    (tmp_path / "dir").mkdir()
    argv = {"folder": ["-o", str(tmp_path / "dir")], "input": ["-o", str(model)],
            "report-is-output": ["-o", str(tmp_path / "a.cfx"), "--report", str(tmp_path / "a.cfx")]}[case]
    before = {p.name: p.read_bytes() if p.is_file() else None for p in tmp_path.iterdir()}
    code = main(["lower", str(model), *argv])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert {"folder": "is a folder", "input": "is an input", "report-is-output": "also the output"}[case] in err
    assert {p.name: p.read_bytes() if p.is_file() else None for p in tmp_path.iterdir()} == before


@pytest.mark.parametrize("setting", ["spread=0", "spread=2.5,-1", "headroom=-0.5", "min_rows=0", "min_rows=2,1.5"])
def test_a_bad_clustering_setting_ends_in_one_line_before_anything_is_written(tmp_path, capsys, setting):
    out = tmp_path / "m.cfx"
    code = main(["lower", MODEL, "--preset", "fast", "-o", str(out), "--set", setting])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and setting.split("=")[0] in err
    assert not out.exists()


def test_workers_write_the_executable_one_process_writes(tmp_path, capsys):
    """``--workers 2`` (the default preset's trials forked) writes the same programs,
    buffers, weights and trial reports as ``--workers 1``; only the lowering's times differ."""
    from corefold.target import load_target

    exes = []
    for n in ("1", "2"):
        out = tmp_path / f"w{n}.cfx"
        assert main(["lower", MODEL, "-o", str(out), "--workers", n, "--quiet"]) == 0
        exes.append(load(out, load_target("npu")))
    one, two = exes
    assert one.programs == two.programs and one.buffers == two.buffers and one.regions == two.regions
    assert one.weights.keys() == two.weights.keys()
    assert all(np.array_equal(one.weights[b].data, two.weights[b].data) for b in one.weights)
    assert one.meta["order"] == two.meta["order"] and len(one.meta["order"].get("seeds_tried", [])) > 1


@pytest.mark.parametrize("argv", [["--workers", "-1"], ["--set", "workers=-2"]])
def test_a_negative_worker_count_ends_in_one_line_before_anything_is_written(tmp_path, capsys, argv):
    out = tmp_path / "m.cfx"
    code = main(["lower", MODEL, "--preset", "fast", "-o", str(out), *argv])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "workers" in err
    assert not out.exists()


def test_plot_writes_the_placement_png(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out, png = tmp_path / "m.cfx", tmp_path / "placed.png"
    assert main(["lower", MODEL, "--target", "npu-2x2", "--preset", "fast", "-o", str(out), "--plot", str(png)]) == 0
    assert "wrote" in capsys.readouterr().out
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width > 200 and height > 200
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.cfx", "placed.png"]


def test_a_quantized_model_lowers_and_runs_in_sim(tmp_path, capsys):
    import numpy as np

    calib, q, cfx = tmp_path / "calib.npz", tmp_path / "q.onnx", tmp_path / "q.cfx"
    np.savez(calib, image=np.random.default_rng(0).standard_normal((2, 3, 64, 64)).astype(np.float32))
    assert main(["quantize", MODEL, "--calib", str(calib), "-o", str(q), "--quiet"]) == 0
    assert main(["lower", str(q), "--target", "npu-2x2", "--preset", "fast", "-o", str(cfx)]) == 0
    assert "int8" in capsys.readouterr().out
    code = main(["sim", str(cfx), "--check", str(q)])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "MISMATCH" not in out.out


def test_on_a_terminal_one_line_shows_the_step_lowering_is_at_and_quiet_shows_none(tmp_path, monkeypatch, capsys):
    """The progress line goes to stderr only on a terminal (the lowering's steps, as
    ``lower(progress=...)`` names them), never under ``--quiet``; stdout is the same."""
    import sys

    from corefold.cli.lower import _progress

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    for quiet in (False, True):
        screen = Terminal()
        monkeypatch.setattr(sys, "stderr", screen)
        with _progress(quiet) as step:
            step("tile and cluster (8 pieces per core)")
            step("order search (1 s budget)")
        text = screen.getvalue()
        shown = ["lower: tile and cluster (8 pieces per core) [", "lower: order search (1 s budget) ["]
        assert all(line in text for line in shown) != quiet, text
        assert (text == "") == quiet
    monkeypatch.undo()
    outs = []
    for extra in ([], ["--quiet"]):
        cfx = tmp_path / f"tiny{len(extra)}.cfx"
        assert main(["lower", MODEL, "--target", "npu-2x2", "-o", str(cfx), *extra]) == 0
        out = capsys.readouterr()
        assert out.err == ""  # not a terminal: no progress line either way
        outs.append(re.sub(r"lower time .*|wrote .*", "", out.out))
    assert outs[0] == outs[1]


def test_a_model_list_scheduling_cannot_place_is_packed_onto_the_cores_by_sram(tmp_path, capsys):
    """On one 64 KiB core list scheduling asks for a second core; ``lower`` then packs the
    tasks onto the one core by SRAM, says so, and the executable matches ONNX Runtime."""
    text = PRESET_2X2
    for old, new in {"width = 2 ": "width = 1 ", "height = 2 ": "height = 1 ", "sram_kib = 1024": "sram_kib = 64",
                     "sram_reserved_kib = 64": "sram_reserved_kib = 8",
                     "dram_attach = [[0, 0], [0, 1], [1, 0], [1, 1]]": "dram_attach = [[0, 0]]"}.items():
        assert old in text
        text = text.replace(old, new)
    target = tmp_path / "one.toml"
    target.write_text(text)
    out, rep = tmp_path / "m.cfx", tmp_path / "r.json"
    code = main(["lower", MODEL, "--target", str(target), "--preset", "fast", "-o", str(out), "--report", str(rep)])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "1 of 1 used" in text and "tasks packed onto cores by SRAM" in text
    assert json.loads(rep.read_text())["trials"]["packed"] is True
    assert main(["sim", str(out), "--target", str(target), "--check", MODEL]) == 0
    assert "MISMATCH" not in capsys.readouterr().out
