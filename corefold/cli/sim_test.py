"""``corefold sim`` end to end on the bundled example model, lowered onto the npu preset."""

import json
from importlib import resources

import numpy as np
import pytest

from corefold.cli import main

MODEL = str(resources.files("corefold.examples").joinpath("tiny_cnn.onnx"))


@pytest.fixture(scope="module")
def cfx(tmp_path_factory):
    from corefold.backend.cfx import save
    from corefold.backend.lower import FAST, lower
    from corefold.frontend.onnx import load_model
    from corefold.target import load_target

    path = tmp_path_factory.mktemp("cfx") / "tiny.cfx"
    save(lower(load_model(MODEL), load_target("npu"), FAST), path)
    return str(path)


def test_sim_checks_against_ort_and_writes_every_output(cfx, tmp_path, capsys):
    jsonschema = pytest.importorskip("jsonschema")
    pytest.importorskip("matplotlib")
    out, rep, trace, png = (tmp_path / n for n in ("out.npz", "r.json", "t.json", "links.png"))
    code = main(["sim", cfx, "--check", MODEL, "-o", str(out), "--report", str(rep), "--trace", str(trace),
                 "--heatmap", str(png)])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "check probs: max abs error" in text and "MISMATCH" not in text
    assert "latency / roofline" in text
    report = json.loads(rep.read_text())
    # the keys in its order, then where the critical path spends the latency
    assert list(report) == ["latency_s", "roofline_s", "load_s", "sram_peak_bytes", "sram_capacity_bytes",
                            "noc_bytes", "link_bytes", "dram_bytes", "host_bytes", "instructions", "utilisation",
                            "critical_path"]
    assert len(report["sram_peak_bytes"]) == 64 and np.asarray(report["link_bytes"]).shape == (8, 8, 4)
    assert report["latency_s"] >= report["roofline_s"] > 0
    assert max(report["sram_peak_bytes"]) <= report["sram_capacity_bytes"]
    assert report["noc_bytes"] >= np.asarray(report["link_bytes"]).sum() > 0
    from corefold.sim.trace import schema

    doc = json.loads(trace.read_text())
    jsonschema.validate(doc, schema())
    assert sum(ev["ph"] == "X" for ev in doc["traceEvents"]) >= report["instructions"] - 1
    with np.load(out) as z:
        assert z["probs"].shape == (1, 10)
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_sim_refuses_bad_paths_before_any_work(cfx, tmp_path, capsys):
    code = main(["sim", cfx, "-o", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "is a folder" in err
    code = main(["sim", cfx, "--report", cfx])
    err = capsys.readouterr().err
    assert code == 2 and "is an input of the command" in err


def test_sim_refuses_a_corrupt_executable_in_one_line(cfx, tmp_path, capsys):
    data = bytearray(open(cfx, "rb").read())
    data[len(data) // 2] ^= 0xFF
    bad = tmp_path / "bad.cfx"
    bad.write_bytes(bytes(data))
    report = tmp_path / "r.json"
    code = main(["sim", str(bad), "--report", str(report)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "checksum" in err
    assert not report.exists()


def test_sim_refuses_inputs_that_do_not_fit(cfx, tmp_path, capsys):
    inputs = tmp_path / "in.npz"
    np.savez(inputs, nope=np.zeros(3, np.float32))
    code = main(["sim", cfx, "--inputs", str(inputs)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "'nope' is not an input" in err
