"""End-to-end tests of `corefold inspect` and `corefold run`, including bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from corefold.examples import example_path

EXAMPLE = str(example_path("tiny_cnn"))


def corefold(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "corefold", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


def assert_one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])


def test_inspect_prints_table_with_hand_checked_totals():
    proc = corefold("inspect", EXAMPLE)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    # parameters of tools/make_example.py's network, counted by hand:
    # stem 16*3*9+16, bn 4*16, a1 16*16+16, a2 24*16*9+24, b1 8*16*9+8, b2 8*8*9+8,
    # proj 16*32+16, c3 32*16*9+32, fc 10*32+10
    params = (16 * 27 + 16) + 64 + (256 + 16) + (24 * 144 + 24) + (8 * 144 + 8) + (576 + 8) + (512 + 16) \
        + (32 * 144 + 32) + 330
    assert f"parameters          {params:,}" in out
    for op in ("Conv", "Relu", "Concat", "Gemm", "Softmax"):
        assert op in out
    assert "matrix" in out and "vector" in out


def test_run_check_matches_onnxruntime_and_writes_npz(tmp_path):
    out = tmp_path / "out.npz"
    proc = corefold("run", EXAMPLE, "--check", "-o", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ok" in proc.stdout
    with np.load(out) as z:
        probs = z["probs"]
    assert probs.shape == (1, 10)
    np.testing.assert_allclose(probs.sum(), 1.0, rtol=1e-5)


def test_run_with_inputs_file(tmp_path):
    x = np.random.default_rng(3).standard_normal((1, 3, 64, 64)).astype(np.float32)
    np.savez(tmp_path / "in.npz", image=x)
    import onnxruntime as ort

    want = ort.InferenceSession(EXAMPLE).run(None, {"image": x})[0]
    proc = corefold("run", EXAMPLE, "--inputs", str(tmp_path / "in.npz"), "-o", str(tmp_path / "o.npz"))
    assert proc.returncode == 0, proc.stderr
    with np.load(tmp_path / "o.npz") as z:
        np.testing.assert_allclose(z["probs"], want, rtol=1e-4, atol=1e-5)


def test_not_onnx_and_truncated_files(tmp_path):
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"this is not a model at all \x00\x01\x02" * 10)
    assert_one_line_error(corefold("run", str(junk)), "junk.onnx")
    data = Path(EXAMPLE).read_bytes()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(data[: len(data) // 2])
    assert_one_line_error(corefold("inspect", str(cut)), "cut.onnx")
    assert_one_line_error(corefold("run", str(tmp_path / "missing.onnx")), "missing.onnx")


def test_unsupported_operator_names_node_and_op(tmp_path):
    node = helper.make_node("NonZero", ["x"], ["y"], name="the_nonzero")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.INT64, None)])
    path = tmp_path / "nonzero.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    assert_one_line_error(corefold("run", str(path)), "the_nonzero", "NonZero")


def _dynamic_model(path: Path) -> None:
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 3, 3, 3], np.linspace(-1, 1, 108).astype(np.float32))
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    g = helper.make_graph(nodes, "dyn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, "H", "W"])], [w])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8  # what ONNX Runtime 1.17+ loads
    onnx.save(model, path)


def test_unbound_dynamic_dimension_is_one_line(tmp_path):
    path = tmp_path / "dyn.onnx"
    _dynamic_model(path)
    assert_one_line_error(corefold("run", str(path)), "x")
    proc = corefold("run", str(path), "--shape", "x=2,3,10,12", "--check")
    assert proc.returncode == 0, proc.stderr
    assert "y: float32[2, 4, 10, 12]" in proc.stdout


def test_bad_inputs_file_and_target(tmp_path):
    np.savez(tmp_path / "wrong.npz", image=np.zeros((1, 3, 8, 8), np.float32))
    assert_one_line_error(corefold("run", EXAMPLE, "--inputs", str(tmp_path / "wrong.npz")), "image")
    assert_one_line_error(corefold("inspect", EXAMPLE, "--target", str(tmp_path / "nochip.toml")), "nochip.toml")
    bad = tmp_path / "bad.toml"
    from importlib import resources

    preset = resources.files("corefold.target").joinpath("presets/npu.toml").read_text()
    bad.write_text(preset.replace("width = 8 ", "width = 0 ", 1))
    assert_one_line_error(corefold("inspect", EXAMPLE, "--target", str(bad)), "mesh.width")


def test_failed_run_leaves_no_output(tmp_path):
    out = tmp_path / "o.npz"
    np.savez(tmp_path / "wrong.npz", image=np.zeros((2, 3, 64, 64), np.float32))
    proc = corefold("run", EXAMPLE, "--inputs", str(tmp_path / "wrong.npz"), "-o", str(out))
    assert proc.returncode == 2
    assert list(tmp_path.iterdir()) == [tmp_path / "wrong.npz"]


def test_a_closed_pipe_ends_quietly(monkeypatch, capsys):
    """``corefold ... | head``: the reader goes away; exit 141 (SIGPIPE's status), no
    'internal error' line."""
    import corefold.cli.inspect as inspect_cmd
    from corefold.cli import main

    def broken(args):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(inspect_cmd, "run", broken)
    assert main(["inspect", str(example_path("tiny_cnn.onnx"))]) == 141
    assert "internal error" not in capsys.readouterr().err


def test_every_target_preset_is_named_in_the_target_help():
    from corefold.cli.common import TARGET_PRESETS
    from corefold.target import PRESETS

    assert set(TARGET_PRESETS) == set(PRESETS)
    for sub in ("lower", "order", "swap", "compile"):
        out = subprocess.run([sys.executable, "-m", "corefold", sub, "--help"], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        text = " ".join(out.stdout.split())
        for name in PRESETS:
            assert name in text, (sub, name)
