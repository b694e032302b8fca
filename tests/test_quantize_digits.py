"""End to end on the digits CNN (bench/quant_models.py): corefold's QDQ model runs in ONNX
Runtime, the integer executor agrees with ORT within one step, accuracy and SQNR hold, and
the unsigned rule beats the symmetric-only ablation."""

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sklearn")
import onnx  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import quant_models  # noqa: E402

from corefold.frontend.onnx import load_model, save_model  # noqa: E402
from corefold.frontend.onnx.check import ort_session  # noqa: E402
from corefold.passes.quantize import QuantizeSettings, load_calibration, quantize_graph  # noqa: E402
from corefold.passes.quantize.integer import IntegerRunner  # noqa: E402


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("digits")
    xt, yt, xe, ye = quant_models.digits_data(0)
    p = quant_models.train_digits_cnn(xt, yt, seed=0, epochs=4)
    onnx.save(quant_models.digits_onnx(p), tmp / "m.onnx")
    np.savez(tmp / "calib.npz", image=xt[:64])
    return tmp, xe[:120], ye[:120]


def _sqnr(ref, out):
    return 10 * np.log10(np.sum(np.square(ref, dtype=np.float64)) / np.sum(np.square(out - ref, dtype=np.float64)))


def _quantized(tmp, name, **kw):
    graph = load_model(tmp / "m.onnx")
    res = quantize_graph(graph, load_calibration(tmp / "calib.npz", graph), QuantizeSettings(**kw), progress=False)
    save_model(graph, tmp / f"{name}.onnx")
    return graph, res


def test_digits_integer_matches_ort_and_accuracy_holds(digits):
    import onnxruntime as ort

    tmp, xe, ye = digits
    graph, res = _quantized(tmp, "q", quantize_outputs=True)
    float_sess = ort.InferenceSession(str(tmp / "m.onnx"), providers=["CPUExecutionProvider"])
    q_sess = ort_session(str(tmp / "q.onnx"), qdq_exact=True)  # CPU-independent (see ort_session)
    runner = IntegerRunner(graph)
    assert {"r1_quantize", "p1_quantize", "r2_quantize", "logits_quantize"} <= set(runner.integer_nodes)
    step = 1.0 / float(res.plan["logits"].k)
    ref, got = [], []
    for i in range(len(xe)):
        x = xe[i:i + 1]
        want = q_sess.run(None, {"image": x})[0]
        mine = runner.run({"image": x})["logits"]
        assert np.abs(mine - want).max() <= step * 1.0001
        ref.append(float_sess.run(None, {"image": x})[0])
        got.append(want)
    ref, got = np.concatenate(ref), np.concatenate(got)
    assert _sqnr(ref, got) > 30
    assert np.mean(got.argmax(1) == ye) >= np.mean(ref.argmax(1) == ye) - 0.02


def test_digits_unsigned_rule_beats_symmetric(digits):
    import onnxruntime as ort

    tmp, xe, _ = digits
    float_sess = ort.InferenceSession(str(tmp / "m.onnx"), providers=["CPUExecutionProvider"])
    ref = np.concatenate([float_sess.run(None, {"image": xe[i:i + 1]})[0] for i in range(len(xe))])
    sq = {}
    for unsigned in (True, False):
        name = f"u{int(unsigned)}"
        _, res = _quantized(tmp, name, unsigned_rule=unsigned)
        assert res.plan["r1"].mode == ("unsigned" if unsigned else "symmetric")
        s = ort_session(str(tmp / f"{name}.onnx"), qdq_exact=True)
        sq[unsigned] = _sqnr(ref, np.concatenate([s.run(None, {"image": xe[i:i + 1]})[0] for i in range(len(xe))]))
    assert sq[True] > sq[False] + 0.5
