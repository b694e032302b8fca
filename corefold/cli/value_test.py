"""``--value NAME=FILE.npy`` on the commands that load models: the input becomes a constant
folded at import (a Reshape target, a Slice start, an If condition), and bad files are one
stderr line with exit 2."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper


def corefold(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "corefold", *args], capture_output=True, text=True, timeout=300)


@pytest.fixture
def model(tmp_path):
    """``y = Reshape(Relu(x), shape)`` with ``shape`` an int64 graph input."""
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6]),
           helper.make_tensor_value_info("shape", TensorProto.INT64, [2])]
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Reshape", ["r", "shape"], ["y"])],
                          "g", ins, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_value_binds_a_shape_input_and_run_checks_against_onnxruntime(model, tmp_path):
    np.save(tmp_path / "shape.npy", np.array([3, 4], np.int64))
    out = tmp_path / "out.npz"
    proc = corefold("run", str(model), "--value", f"shape={tmp_path / 'shape.npy'}", "--check", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "y: float32[3, 4]" in proc.stdout and "ok" in proc.stdout
    with np.load(out) as z:
        assert z["y"].shape == (3, 4) and z["y"].min() >= 0
    proc = corefold("inspect", str(model), "--value", f"shape={tmp_path / 'shape.npy'}")
    assert proc.returncode == 0, proc.stderr


def test_without_the_value_the_shape_is_unknown_in_one_line(model):
    proc = corefold("run", str(model))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "depends on input 'shape'" in proc.stderr


@pytest.mark.parametrize("make, needle", [
    (lambda d: str(d / "missing.npy"), "no such file"),
    (lambda d: str(d), "is a folder"),
    (lambda d: (d / "junk.npy").write_bytes(b"not numpy") and str(d / "junk.npy"), "not a NumPy .npy array"),
    (lambda d: np.save(d / "f.npy", np.float32([3, 4])) or str(d / "f.npy"), "dtype float32, the input is int64"),
    (lambda d: np.save(d / "r.npy", np.int64([2, 3, 2])) or str(d / "r.npy"), "dimension 0 is fixed at 2"),
])
def test_bad_value_files_are_one_line_errors(model, tmp_path, make, needle):
    proc = corefold("run", str(model), "--value", f"shape={make(tmp_path)}")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert needle in proc.stderr and "shape" in proc.stderr


def test_value_argument_needs_name_and_file(model):
    proc = corefold("run", str(model), "--value", "shape")
    assert proc.returncode == 2 and "expected NAME=FILE.npy" in proc.stderr
