"""``corefold quantize``: a QDQ model ORT runs plus its JSON; user errors exit 2 in one line."""

import argparse
import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from corefold.cli import main
from corefold.cli.quantize import add_arguments
from corefold.frontend.onnx.check import ort_session


def _model(path, op="Conv"):
    rng = np.random.default_rng(0)
    if op == "Conv":
        nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                 helper.make_node("Relu", ["c"], ["r"]),
                 helper.make_node("Conv", ["r", "w2"], ["y"])]
        inits = [numpy_helper.from_array(rng.standard_normal((4, 2, 3, 3)).astype(np.float32), "w"),
                 numpy_helper.from_array(rng.standard_normal((3, 4, 1, 1)).astype(np.float32), "w2")]
        out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 5, 5])
    else:
        nodes, inits = [helper.make_node(op, ["x"], ["y"], size=3)], []
        out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 5, 5])
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5, 5])], [out], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    onnx.save(m, path)
    return str(path)


def _err(capsys):
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    return err


def test_quantize_writes_model_and_json(tmp_path, capsys):
    import onnxruntime as ort

    model = _model(tmp_path / "m.onnx")
    np.savez(tmp_path / "c.npz", x=np.random.default_rng(1).standard_normal((6, 2, 5, 5)).astype(np.float32))
    out = tmp_path / "q.onnx"
    assert main(["quantize", model, "--calib", str(tmp_path / "c.npz"), "-o", str(out), "--per-channel",
                 "--quiet"]) == 0
    report = json.loads((tmp_path / "q.json").read_text())
    t = report["tensors"]
    assert t["r"]["mode"] == "unsigned" and t["r"]["bits"] == 8 and t["r"]["integer_range"] == [0, 255]
    assert t["x"]["mode"] == "symmetric" and t["w"]["axis"] == 0 and len(t["w"]["k"]) == 4
    sess = ort_session(str(out), qdq_exact=True)  # CPU-independent (see ort_session)
    ops = {n.op_type for n in onnx.load(str(out)).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    x = np.random.default_rng(2).standard_normal((1, 2, 5, 5)).astype(np.float32)
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = sess.run(None, {"x": x})[0]
    assert 10 * np.log10(np.sum(ref**2) / np.sum((got - ref) ** 2)) > 25


@pytest.mark.parametrize("case,needle", [
    ("shape", "shape"), ("dtype", "dtype"), ("missing", "no array for input 'x'"), ("bits", "bits = 5"),
    ("nothing", "nothing to quantize")])
def test_errors_exit_2_in_one_line(tmp_path, capsys, case, needle):
    model = _model(tmp_path / "m.onnx", "LRN" if case == "nothing" else "Conv")
    arrays = {"x": np.zeros((4, 2, 5, 5), np.float32)}
    if case == "shape":
        arrays = {"x": np.zeros((4, 2, 5, 6), np.float32)}
    elif case == "dtype":
        arrays = {"x": np.zeros((4, 2, 5, 5), np.float64)}
    elif case == "missing":
        arrays = {"image": np.zeros((4, 2, 5, 5), np.float32)}
    np.savez(tmp_path / "c.npz", **arrays)
    argv = ["quantize", model, "--calib", str(tmp_path / "c.npz"), "-o", str(tmp_path / "q.onnx"), "--quiet"]
    if case == "bits":
        argv += ["--bits", "5"]
    assert main(argv) == 2
    assert needle in _err(capsys)
    assert not (tmp_path / "q.onnx").exists() and not (tmp_path / "q.json").exists()


@pytest.mark.parametrize("bits,min_sqnr", [(4, 5.0), (16, 60.0)])
def test_4_and_16_bit_models_run_in_onnxruntime(tmp_path, bits, min_sqnr):
    import onnxruntime as ort

    model = _model(tmp_path / "m.onnx")
    np.savez(tmp_path / "c.npz", x=np.random.default_rng(1).standard_normal((6, 2, 5, 5)).astype(np.float32))
    out = tmp_path / "q.onnx"
    assert main(["quantize", model, "--calib", str(tmp_path / "c.npz"), "-o", str(out), "--bits", str(bits),
                 "--quiet"]) == 0
    report = json.loads((tmp_path / "q.json").read_text())
    assert report["tensors"]["r"]["integer_range"] == [0, 2**bits - 1]
    assert report["tensors"]["x"]["integer_range"] == [-(2 ** (bits - 1)), 2 ** (bits - 1) - 1]
    want_dtype = {4: TensorProto.UINT4, 16: TensorProto.UINT16}[bits]
    assert any(t.data_type == want_dtype for t in onnx.load(str(out)).graph.initializer)
    # NOTE: ONNX Runtime 1.31's extended QDQ fusions build an invalid graph for 4-bit
    # DQ -> MaxPool -> Q; its basic level runs the model as written.
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    x = np.random.default_rng(2).standard_normal((1, 2, 5, 5)).astype(np.float32)
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = ort.InferenceSession(str(out), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert 10 * np.log10(np.sum(ref**2) / np.sum((got - ref) ** 2)) > min_sqnr


def test_cli_and_python_share_defaults_and_settings(tmp_path, capsys):
    """--per-channel is on by default on the CLI as in Python; --set and presets reach the pass."""
    from corefold.cli.quantize import settings_from_args
    from corefold.passes.quantize import QuantizeSettings

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    base = ["m.onnx", "--calib", "c.npz", "-o", "q.onnx"]
    assert settings_from_args(parser.parse_args(base)) == QuantizeSettings()
    assert settings_from_args(parser.parse_args(base)).per_channel is True
    assert settings_from_args(parser.parse_args(base + ["--no-per-channel"])).per_channel is False
    s = settings_from_args(parser.parse_args(base + ["--preset", "seed", "--set", "bits=16", "--set",
                                                     "softmax_margin=none"]))
    assert (s.calibration, s.per_channel, s.weight_rounding, s.bits, s.softmax_margin) == (
        "minmax", False, "nearest", 16, None)
    model = _model(tmp_path / "m.onnx")
    np.savez(tmp_path / "c.npz", x=np.random.default_rng(1).standard_normal((6, 2, 5, 5)).astype(np.float32))
    out = tmp_path / "q.onnx"
    assert main(["quantize", model, "--calib", str(tmp_path / "c.npz"), "-o", str(out), "--quiet", "--preset", "seed",
                 "--set", "weight_bits=16"]) == 0
    t = json.loads((tmp_path / "q.json").read_text())["tensors"]
    assert t["w"]["axis"] is None and t["w"]["bits"] == 16 and t["r"]["bits"] == 8
    assert main(["quantize", model, "--calib", str(tmp_path / "c.npz"), "-o", str(out), "--set", "nope=1"]) == 2
    assert "no such setting" in _err(capsys)
    assert main(["quantize", "--help-settings"]) == 0
    text = capsys.readouterr().out
    assert "per_channel (bool) = True" in text and "seed:" in text and "(undocumented)" not in text


def test_fpn_resize_scales_never_quantized(tmp_path, capsys):
    """An FPN top-down path (nearest Resize by constant scales [1, 1, 2, 2] feeding an Add, as
    PaddleOCR's detector has): the scales stay float, so ONNX Runtime runs the model.

    Regression: before the operator table's ``param_inputs``, the scales were quantized as a
    weight (1.0 -> 0.99...), ONNX Runtime refused the model ("broadcast 95 by 96") and
    quantize still exited 0. Mutation check: with Resize's ``param_inputs=()`` in the table
    this test fails (the pipeline's ``verify`` after the pass finds the Resize's scales no
    longer constant: exit 70, see ``test_broken_models_are_never_written``)."""
    rng = np.random.default_rng(0)

    def c(name, shape, s):
        return numpy_helper.from_array((rng.standard_normal(shape) * s).astype(np.float32), name)

    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Conv", ["r2", "l2"], ["p2"]),
             helper.make_node("Resize", ["p2", "", "sc"], ["u2"], mode="nearest"),
             helper.make_node("Conv", ["r1", "l1"], ["p1"]),
             helper.make_node("Add", ["u2", "p1"], ["y"])]
    inits = [c("w1", (96, 3, 3, 3), 0.3), c("w2", (96, 96, 3, 3), 0.05), c("l2", (96, 96, 1, 1), 0.1),
             c("l1", (96, 96, 1, 1), 0.1), numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "sc")]
    g = helper.make_graph(nodes, "fpn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 40, 40])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 96, 20, 20])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, tmp_path / "fpn.onnx")
    xs = rng.uniform(0, 1, (4, 3, 40, 40)).astype(np.float32)
    np.savez(tmp_path / "c.npz", x=xs)
    out = tmp_path / "q.onnx"
    assert main(["quantize", str(tmp_path / "fpn.onnx"), "--calib", str(tmp_path / "c.npz"), "-o", str(out),
                 "--quiet"]) == 0
    report = json.loads((tmp_path / "q.json").read_text())
    assert "sc" not in report["tensors"]
    ref = ort_session(str(tmp_path / "fpn.onnx")).run(None, {"x": xs[:1]})[0]
    got = ort_session(str(out), qdq_exact=True).run(None, {"x": xs[:1]})[0]
    assert got.shape == (1, 96, 20, 20)
    assert 10 * np.log10(np.sum(ref**2) / np.sum((got - ref) ** 2)) > 25  # 8 bits: ~35 dB measured


def test_broken_models_are_never_written(tmp_path, capsys, monkeypatch):
    """The old bug (Resize scales quantized) re-created by hiding the table's parameter inputs
    from the quantizer: the pipeline's ``verify`` after the pass stops it (internal error, exit
    70, nothing written). A model that passes ``verify`` but that ONNX Runtime refuses (here:
    an operator name corrupted on export) exits 2 with nothing written; ``--no-ort-check``
    writes it anyway."""
    import corefold.frontend.onnx as frontend
    import corefold.passes.quantize.qdq as qdq
    import corefold.passes.quantize.select as select

    fpn = tmp_path / "fpn"
    fpn.mkdir()
    test_fpn_resize_scales_never_quantized(fpn, capsys)
    capsys.readouterr()
    argv = ["quantize", str(fpn / "fpn.onnx"), "--calib", str(fpn / "c.npz"), "--quiet"]
    with monkeypatch.context() as mp:
        mp.setattr(select, "param_inputs", lambda node: ())
        mp.setattr(qdq, "param_inputs", lambda node: ())
        assert main(argv + ["-o", str(tmp_path / "a.onnx")]) == 70
        err = _err(capsys)
        assert "left a broken graph" in err and "Resize" in err and "not a constant" in err
    assert not (tmp_path / "a.onnx").exists() and not (tmp_path / "a.json").exists()
    real = frontend.to_onnx

    def corrupt(graph):
        m = real(graph)
        next(n for n in m.graph.node if n.op_type == "Add").op_type = "Addd"
        return m

    monkeypatch.setattr(frontend, "to_onnx", corrupt)
    assert main(argv + ["-o", str(tmp_path / "b.onnx")]) == 2
    assert "ONNX Runtime refuses the quantized model" in _err(capsys)
    assert not (tmp_path / "b.onnx").exists() and not (tmp_path / "b.json").exists()
    assert main(argv + ["-o", str(tmp_path / "b.onnx"), "--no-ort-check"]) == 0
    assert (tmp_path / "b.onnx").exists()


def test_non_finite_output_exits_2(tmp_path, capsys):
    """z / (relu(x) + 1e-6) with float outputs: small inputs quantize to 0, the output is inf."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Add", ["r", "eps"], ["d"]),
             helper.make_node("Div", ["z", "d"], ["y"])]
    inits = [numpy_helper.from_array(np.array(1e-6, np.float32), "eps")]
    g = helper.make_graph(nodes, "inv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8]),
                                         helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    onnx.save(m, tmp_path / "inv.onnx")
    x = np.linspace(-1, 100, 32, dtype=np.float32).reshape(4, 8)
    np.savez(tmp_path / "c.npz", x=x, z=np.ones_like(x))
    argv = ["quantize", str(tmp_path / "inv.onnx"), "--calib", str(tmp_path / "c.npz"), "-o",
            str(tmp_path / "q.onnx"), "--quiet", "--float-outputs"]
    assert main(argv) == 2
    assert "not finite" in _err(capsys)
    assert not (tmp_path / "q.onnx").exists() and not (tmp_path / "q.json").exists()


def _saturating_conv(path):
    """A 16-channel 3x3 conv with u8 input over its full range and full-range s8 weights."""
    rng = np.random.default_rng(0)
    w = rng.uniform(-1, 1, (16, 16, 3, 3)).astype(np.float32)
    w[:, :, 0, 0] = 1.0  # every output channel uses its full range
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Conv", ["r", "w"], ["y"], pads=[1, 1, 1, 1])]
    g = helper.make_graph(nodes, "satconv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 8, 8])],
                          [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    onnx.save(m, path)


def test_fused_int8_saturation_is_a_warning_with_its_remedy(tmp_path, capsys):
    """ORT's fused u8 x s8 Conv saturates on x86 without AVX-VNNI (this CI machine: AVX2): the
    quantizer says so in one warning line and still writes the model; ``--weight-range 7``
    (7-bit weights) makes ORT's fused result exact (tolerance: one quantization step)."""
    from corefold.passes.quantize.check import cpu_has_vnni

    _saturating_conv(tmp_path / "m.onnx")
    x = np.abs(np.random.default_rng(1).standard_normal((4, 16, 8, 8))).astype(np.float32)
    x[:, :, 2:6, 2:6] = 3.0  # full-range patches
    np.savez(tmp_path / "c.npz", x=x)
    base = ["quantize", str(tmp_path / "m.onnx"), "--calib", str(tmp_path / "c.npz"), "--quiet",
            "--calibration", "minmax", "--weight-rounding", "nearest"]
    assert main(base + ["-o", str(tmp_path / "q.onnx")]) == 0
    err = capsys.readouterr().err
    assert (tmp_path / "q.onnx").exists()
    if cpu_has_vnni() is False:
        assert "warning" in err and "--weight-range 7" in err and err.count("\n") == 1
    assert main(base + ["-o", str(tmp_path / "q7.onnx"), "--weight-range", "7"]) == 0
    assert "warning" not in capsys.readouterr().err
    report = json.loads((tmp_path / "q7.json").read_text())
    assert report["tensors"]["w"]["integer_range"] == [-64, 63]
    fused = ort_session(str(tmp_path / "q7.onnx")).run(None, {"x": x[:1]})[0]
    exact = ort_session(str(tmp_path / "q7.onnx"), qdq_exact=True).run(None, {"x": x[:1]})[0]
    step = report["tensors"]["y"]["onnx_scale"]
    assert np.abs(fused - exact).max() <= step * 1.0001
