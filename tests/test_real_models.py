"""Real models shipped inside installed packages, through the CLI as a user runs them.

The only ONNX models an installed dependency ships are onnx's nine "light" model-zoo
networks (Caffe2 exports, opset 9, initializers listed as graph inputs, LRN, Sum,
Dropout, weights stored as ConstantOfShape). Each is run with ``corefold run --check``
(ONNX Runtime, rtol 1e-4, atol 1e-5) and quantized with ``corefold quantize`` (8 bits, 4
seeded random calibration samples, nearest weight rounding, min-max ranges); ONNX
Runtime must run the quantized model, and its output must equal the float model's to
atol 1e-4. Their weights are single values, so every class gets the same logit and the
final Softmax is 1/1000 everywhere; accuracy is therefore measured on the logits (the
last Softmax's input, or the output itself where the network ends without one, as
densenet121 does; they depend on the image): their SQNR against the float model's
must be at least ``MIN_LOGIT_SQNR_DB``. ``tests/test_executor_models.py`` compares every
intermediate tensor of the float run. Skipped when onnx ships no light models.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from corefold.cli import main
from corefold.executor import random_inputs
from corefold.frontend.onnx import load_model

ort = pytest.importorskip("onnxruntime")

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
MODELS = sorted(p.stem.removeprefix("light_") for p in LIGHT.glob("light_*.onnx"))
#: quantized output vs float output, both in ONNX Runtime
QUANT_ATOL = 1e-4
#: the logits of the quantized model against the float model's, in dB (measured: 51.8 on
#: resnet50 to 137.8 on densenet121)
MIN_LOGIT_SQNR_DB = 30.0
#: shufflenet measures 13.0 dB: each of its 16 residual Sums adds a branch of about 0.019
#: (single-value weights after BatchNormalization) to a tensor ranging to 10.9, under half an
#: 8-bit step (0.043), so the branch rounds away and the error compounds (per-tensor SQNR
#: falls from 37 dB at the first unit to 23 at the fifth). ONNX Runtime's quantize_static
#: cannot be compared: its opset converter refuses this opset-9 model.
LOGIT_SQNR_FLOOR_DB = {"shufflenet": 10.0}


def _session(path: Path, extra_output: str):
    """ONNX Runtime on ``path`` with the float tensor ``extra_output`` as a last output."""
    model = onnx.load(str(path))
    if extra_output not in {o.name for o in model.graph.output}:
        model.graph.output.append(onnx.helper.make_tensor_value_info(extra_output, onnx.TensorProto.FLOAT, None))
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


@pytest.mark.skipif(not MODELS, reason="this onnx wheel ships no light models")
@pytest.mark.parametrize("name", MODELS)
def test_real_model_runs_like_onnxruntime_and_quantizes(name, tmp_path, capsys):
    path = LIGHT / f"light_{name}.onnx"
    assert main(["run", str(path), "--check"]) == 0
    assert ": ok (rtol" in capsys.readouterr().out

    graph = load_model(path)
    calib = {v.name: np.concatenate([random_inputs(graph, seed=s)[v.name] for s in range(4)]) for v in graph.inputs}
    np.savez(tmp_path / "calib.npz", **calib)
    q_path = tmp_path / "q.onnx"
    assert main(["quantize", str(path), "--calib", str(tmp_path / "calib.npz"), "-o", str(q_path), "--quiet",
                 "--weight-rounding", "nearest", "--calibration", "minmax"]) == 0
    q = onnx.load(str(q_path))
    assert sum(n.op_type == "QuantizeLinear" for n in q.graph.node) > 0

    float_model = onnx.load(str(path))
    softmax = [n for n in float_model.graph.node if n.op_type == "Softmax"]
    logits = softmax[-1].input[0] if softmax else float_model.graph.output[0].name
    feeds = random_inputs(graph, seed=10)
    float_sess, q_sess = _session(path, logits), _session(q_path, logits)
    *want, want_logits = float_sess.run(None, {i.name: feeds[i.name] for i in float_sess.get_inputs()})
    *got, got_logits = q_sess.run(None, {i.name: feeds[i.name] for i in q_sess.get_inputs()})
    for w, g in zip(want, got, strict=True):
        assert g.shape == w.shape and np.isfinite(g).all()
        if softmax:
            np.testing.assert_allclose(g, w, rtol=0, atol=QUANT_ATOL)
    w, g = want_logits.astype(np.float64), got_logits.astype(np.float64)
    assert np.abs(w).max() > 0 and np.isfinite(g).all()
    sqnr = 10 * np.log10(np.sum(w * w) / max(np.sum((w - g) ** 2), 1e-300))
    print(f"{name}: logits SQNR {sqnr:.1f} dB")
    floor = LOGIT_SQNR_FLOOR_DB.get(name, MIN_LOGIT_SQNR_DB)
    assert sqnr >= floor, f"{name}: logits SQNR {sqnr:.1f} dB < {floor}"
