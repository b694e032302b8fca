"""Real architectures exported from PyTorch (the ``torch`` extra; skipped without it).

Models come from ``bench/quant_models.py``: torchvision's classifiers, DeepLabV3 and ViT-B/16,
and transformers' BERT and GPT-2 (small configs built in code, nothing downloaded), with
seeded weights (the libraries' default initialisation; ViT's zero-initialised head redrawn),
exported by ``torch.onnx.export`` with ``dynamo=False`` ("script") or ``dynamo=True``. Per
model:

* ``run``: corefold's executor agrees with ONNX Runtime on the float model within 1e-4 of
  the output scale (the largest output magnitude; BLAS reassociation stays far below it);
* ``order`` (slow set only): the reordered model's outputs in ONNX Runtime equal the
  original's within 1e-5 of the output scale;
* ``quantize`` (8 bits, default settings, 4 calibration samples): the QDQ model passes
  ``check_in_onnxruntime`` (ORT loads and runs it, every output finite), and its output
  SQNR against the float model on 4 other samples, run in ONNX Runtime without its integer
  fusions (``qdq_exact``: the ONNX semantics, the same on every CPU), is at least
  ``FLOOR_DB[model]``. The floors sit about 3 dB under the figures measured on this branch
  (``bench/quant.py --models zoo``), so a regression of the quantizer fails the test while
  CPU-dependent float rounding does not.
* In the slow set the same SQNR must also be at least that of ONNX Runtime's
  ``quantize_static`` (QDQ, u8 asymmetric activations, s8 per-channel weights, the same
  calibration samples) minus ``ORT_MARGIN_DB``.
* ``lower`` (``LOWERED``: BERT, GPT-2, MobileNetV3): the backend's float executable on the
  ``npu`` preset computes the executor's outputs within 1e-5 of the output scale, and the
  int8 one simulates equal to the integer runner.

The default set (``FAST``) is a few small models, about a minute on 2 cores with a cold
export cache (exports are cached under ``build/torch_zoo/`` keyed by every library version).
``COREFOLD_SLOW=1`` runs every zoo model with both exporters (about 10 minutes cold).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("torchvision")
pytest.importorskip("transformers")
pytest.importorskip("onnxscript")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import quant_models  # noqa: E402

from corefold.frontend.onnx.check import ort_session  # noqa: E402

SLOW = os.environ.get("COREFOLD_SLOW") == "1"
#: the default set: small models, both exporters on the smallest
FAST = [("resnet18", "script"), ("mobilenet_v3_small", "script"), ("mobilenet_v3_small", "dynamo")]
CASES = FAST + [(m, e) for m in quant_models.ZOO for e in ("script", "dynamo") if (m, e) not in FAST]
#: output SQNR floors in dB (module docstring): measured on this branch minus 3 dB
#: (bench/quant.py --models zoo, both exporters alike: resnet18 33.78, mobilenet_v3_small 25.55,
#: efficientnet_b0 22.47, regnet_y_400mf 31.70, convnext_tiny 29.69, shufflenet_v2_x1_0 48.26,
#: deeplabv3_mobilenet 51.40, vit_b_16 11.94 (script) and 11.97 (dynamo), bert 33.10, gpt2 31.21
#: (dynamo) and 31.49 (script))
FLOOR_DB = {"resnet18": 30.0, "mobilenet_v3_small": 22.0, "efficientnet_b0": 19.0, "regnet_y_400mf": 28.0,
            "convnext_tiny": 26.0, "shufflenet_v2_x1_0": 45.0, "deeplabv3_mobilenet": 48.0, "vit_b_16": 8.5,
            "bert": 29.0, "gpt2": 27.0}
#: known failures, each with its reason (reported as xfail, not run). GPT-2 "script" left it:
#: its causal mask's Where writes -inf, now read float (corefold 30.86 dB, ONNX Runtime's
#: quantize_static 11.50 dB on the same calibration)
KNOWN: dict[tuple[str, str], str] = {}
#: how far under ONNX Runtime's quantize_static SQNR corefold may be (slow set)
ORT_MARGIN_DB = 1.0


def _flat(outputs) -> np.ndarray:
    return np.concatenate([np.asarray(o, np.float64).reshape(-1) for o in outputs])


def _sqnr(ref: list[np.ndarray], got: list[np.ndarray]) -> float:
    r, g = np.concatenate(ref), np.concatenate(got)
    noise = float(np.sum((g - r) ** 2))
    return float("inf") if noise == 0 else 10 * np.log10(float(np.sum(r**2)) / noise)


def _ort_sqnr(src: Path, calib, evals, ref, tmp_path: Path) -> float:
    """ONNX Runtime quantize_static's output SQNR on the same calibration and evaluation data."""
    import logging

    import quant

    logging.getLogger().setLevel(logging.ERROR)
    dst = str(tmp_path / "ort.onnx")
    quant.ort_quantize(str(src), dst, calib, False)
    sess = ort_session(dst, qdq_exact=True)
    return _sqnr(ref, [_flat(sess.run(None, f)) for f in evals])


@pytest.mark.parametrize("name,exporter", CASES)
def test_run_quantize(name, exporter, tmp_path):
    from corefold.executor import run
    from corefold.frontend.onnx import load_model, to_onnx
    from corefold.passes.quantize import QuantizeSettings, load_calibration, quantize_graph
    from corefold.passes.quantize.check import check_in_onnxruntime

    if not SLOW and (name, exporter) not in FAST:
        pytest.skip("set COREFOLD_SLOW=1 to run the whole zoo")
    if (name, exporter) in KNOWN:
        pytest.xfail(KNOWN[name, exporter])
    src = quant_models.zoo_model(name, exporter == "dynamo")
    graph = load_model(src)
    calib = quant_models.zoo_inputs(name, src, 4, seed=1)
    evals = quant_models.zoo_inputs(name, src, 4, seed=2)
    sess = ort_session(str(src))
    ref = [_flat(sess.run(None, f)) for f in evals]
    scale = max(float(np.max(np.abs(r))) for r in ref)
    assert scale > 0, "the float model's output is all zero: the SQNR would mean nothing"

    # run: the reference executor against ONNX Runtime on the float model
    for f, r in zip(evals[:2], ref, strict=False):
        mine = _flat(run(graph, f).values())
        assert np.max(np.abs(mine - r)) <= 1e-4 * scale, f"run: {np.max(np.abs(mine - r)) / scale:.2e} of the scale"

    if SLOW:
        # order: the reordered model runs in ONNX Runtime with the same outputs
        from corefold.cli import main

        assert main(["order", str(src), "-o", str(tmp_path / "o.onnx"), "--preset", "fast"]) == 0
        osess = ort_session(str(tmp_path / "o.onnx"))
        for f, r in zip(evals[:2], ref, strict=False):
            assert np.max(np.abs(_flat(osess.run(None, f)) - r)) <= 1e-5 * scale

    # quantize: ORT runs the result, and its SQNR clears the floor
    np.savez(tmp_path / "c.npz", **{k: np.concatenate([f[k] for f in calib]) for k in calib[0]})
    quantize_graph(graph, load_calibration(tmp_path / "c.npz", graph), QuantizeSettings(), progress=False)
    model = to_onnx(graph).SerializeToString()
    check_in_onnxruntime(model, graph, calib[0])  # raises if ORT refuses it or an output is not finite
    qsess = ort_session(model, qdq_exact=True)
    ours = _sqnr(ref, [_flat(qsess.run(None, f)) for f in evals])
    floor = FLOOR_DB[name]
    assert ours >= floor, f"corefold {ours:.2f} dB < floor {floor} dB"
    if SLOW:
        theirs = _ort_sqnr(src, calib, evals, ref, tmp_path)
        assert ours >= theirs - ORT_MARGIN_DB, f"corefold {ours:.2f} dB < ONNX Runtime {theirs:.2f} dB"


#: architectures lowered onto the ``npu`` preset (float and int8): attention (BERT, GPT-2's
#: causal mask) and a CNN with squeeze-excitations, each from one exporter
LOWERED = [("bert", "script"), ("gpt2", "dynamo"), ("mobilenet_v3_small", "dynamo")]


@pytest.mark.parametrize("name,exporter", LOWERED)
def test_lower(name, exporter, tmp_path):
    """``backend.lower`` onto the 8 x 8 ``npu`` preset: the float executable computes the
    executor's outputs within 1e-5 of the output scale (pieces of split reductions
    reassociate), and the model quantized by corefold (default settings) simulates equal
    to the integer runner, element for element."""
    from corefold.backend import lower, run_executable
    from corefold.executor import run
    from corefold.frontend.onnx import load_model
    from corefold.passes.quantize import QuantizeSettings, load_calibration, quantize_graph
    from corefold.passes.quantize.integer import IntegerRunner
    from corefold.sim.simulate import run_simulation
    from corefold.target import load_target

    target = load_target("npu")
    src = quant_models.zoo_model(name, exporter == "dynamo")
    graph = load_model(src)
    feeds = quant_models.zoo_inputs(name, src, 1, seed=2)[0]
    want = run(graph, feeds)
    got = run_executable(lower(graph, target), feeds)
    scale = max(float(np.max(np.abs(w))) for w in want.values())
    assert scale > 0
    for k, w in want.items():
        assert np.max(np.abs(got[k].astype(np.float64) - w)) <= 1e-5 * scale, k
    calib = quant_models.zoo_inputs(name, src, 4, seed=1)
    np.savez(tmp_path / "c.npz", **{k: np.concatenate([f[k] for f in calib]) for k in calib[0]})
    quantize_graph(graph, load_calibration(tmp_path / "c.npz", graph), QuantizeSettings(), progress=False)
    exe = lower(graph, target)
    assert any(b.dtype == "int8" for b in exe.buffers if b.kind == "weight")
    sim = run_simulation(exe, feeds, target)
    for k, w in IntegerRunner(graph).run(feeds).items():
        np.testing.assert_array_equal(sim.outputs[k], w)
