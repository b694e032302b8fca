"""Import -> export of the nine light models under onnx/backend/test/data/light: the exported
model is valid (full checker), opset 21, keeps input/output names, stays small, and ONNX
Runtime gives the same outputs as on the original for the same seeded input
(final outputs and three intermediate convolutions, atol 1e-6 relative to their scale)."""

from __future__ import annotations

import glob
import os

import numpy as np
import onnx
import pytest

from corefold.frontend.onnx import load_model, save_model, to_onnx
from corefold.frontend.onnx.check import ort_session
from corefold.ir import verify

LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
MODELS = sorted(os.path.basename(p) for p in glob.glob(os.path.join(LIGHT_DIR, "*.onnx")))


def test_all_nine_models_present():
    assert len(MODELS) == 9


def _feeds(sess, seed=0):
    rng = np.random.default_rng(seed)
    return {i.name: rng.standard_normal(i.shape).astype(np.float32) for i in sess.get_inputs()}


@pytest.mark.parametrize("name", MODELS)
def test_roundtrip_matches_onnxruntime(name, tmp_path):
    path = os.path.join(LIGHT_DIR, name)
    original = onnx.load(path)
    graph = load_model(path)
    verify(graph)
    exported = to_onnx(graph)
    onnx.checker.check_model(exported, full_check=True)
    assert [o.version for o in exported.opset_import if o.domain == ""] == [21]
    init_names = {t.name for t in original.graph.initializer}
    assert [v.name for v in exported.graph.input] == [v.name for v in original.graph.input if v.name not in init_names]
    assert [v.name for v in exported.graph.output] == [v.name for v in original.graph.output]
    # weights stay ConstantOfShape fills: the export is about as small as the original
    assert exported.ByteSize() < 2 * original.ByteSize() + 10_000
    out = tmp_path / name
    save_model(graph, out)
    # the light models' weights are constant fills, so their final outputs are nearly
    # uniform: also compare the outputs of three convolutions along the network
    convs = [n.outputs[0].name for n in graph.nodes if n.op_type == "Conv"]
    probes = [convs[0], convs[len(convs) // 2], convs[-1]]
    exported_back = onnx.load(str(out))
    for m in (original, exported_back):
        m.graph.output.extend(onnx.ValueInfoProto(name=p) for p in probes)
    a, b = ort_session(original), ort_session(exported_back)
    feeds = _feeds(a)
    want, got = a.run(None, feeds), b.run(None, feeds)
    assert len(want) == len(got)
    for w, g in zip(want, got, strict=True):
        assert w.shape == g.shape and w.dtype == g.dtype
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-6 * max(1.0, float(np.abs(w).max())))


@pytest.mark.parametrize("name", MODELS)
def test_imported_graph_text_form_round_trips(name):
    from corefold.ir import parse, to_text

    graph = load_model(os.path.join(LIGHT_DIR, name))
    text = to_text(graph)
    back = parse(text)
    verify(back)
    assert to_text(back) == text
