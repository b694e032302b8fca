"""The quantizer around the newer operator families: a small network through Conv,
DepthToSpace, GatherElements, TopK, ScatterND, CumSum, GroupNormalization, Einsum and an
LSTM is quantized (8 bits) and written; ONNX Runtime runs the result; no input that
carries indices, shapes or k is quantized; data movement shares its input's scale; and the
quantized outputs stay close to the float ones."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from corefold.executor import run
from corefold.frontend.onnx import from_onnx, save_model
from corefold.frontend.onnx.check import ort_session
from corefold.passes.quantize import QuantizeSettings, load_calibration, quantize_graph


def _model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    f32 = lambda *s: (rng.standard_normal(s) * 0.3).astype(np.float32)  # noqa: E731
    init = {
        "w": f32(8, 3, 3, 3), "gidx": rng.integers(0, 8, (1, 2, 8, 8)).astype(np.int64), "k": np.array([4], np.int64),
        "sidx": np.array([[0, 1], [0, 0]], np.int64), "supd": f32(2, 8, 4), "axis": np.array(3, np.int64),
        "gs": np.ones(2, np.float32), "gb": np.zeros(2, np.float32), "ew": f32(4, 6),
        "lw": f32(1, 16, 6), "lr": f32(1, 16, 4), "shape": np.array([1, 8, 8], np.int64),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("DepthToSpace", ["r"], ["d"], blocksize=2),  # (1, 2, 8, 8)
        helper.make_node("GatherElements", ["d", "gidx"], ["g"], axis=3),
        helper.make_node("TopK", ["g", "k"], ["tv", "ti"], axis=3),  # (1, 2, 8, 4)
        helper.make_node("ScatterND", ["tv", "sidx", "supd"], ["s"]),
        helper.make_node("CumSum", ["s", "axis"], ["cs"]),
        helper.make_node("GroupNormalization", ["cs", "gs", "gb"], ["gn"], num_groups=2),
        helper.make_node("Reshape", ["gn", "shape"], ["seq"]),  # (1, 8, 8): batch 1, 8 steps, 8 features
        helper.make_node("Einsum", ["seq", "ew"], ["e"], equation="bti,ij->btj"),  # x (1, 8, 4) @ (4, 6)? see below
        helper.make_node("LSTM", ["e2", "lw", "lr"], ["ly", "lh"], hidden_size=4),  # 1 step, batch 8
        helper.make_node("Tanh", ["lh"], ["y"]),
    ]
    # Einsum reads the first 4 features: (1, 8, 4) @ (4, 6)
    nodes[9] = helper.make_node("Slice", ["seq", "s0", "s4", "s2"], ["seq4"])
    nodes.insert(10, helper.make_node("Einsum", ["seq4", "ew"], ["e2"], equation="bti,ij->btj"))
    init.update({"s0": np.array([0], np.int64), "s4": np.array([4], np.int64), "s2": np.array([2], np.int64)})
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("ti", TensorProto.INT64, None)],
                          initializer=[numpy_helper.from_array(v, k) for k, v in init.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])


def test_quantized_model_runs_in_ort_and_stays_close(tmp_path):
    model = _model()
    graph = from_onnx(model)
    rng = np.random.default_rng(1)
    np.savez(tmp_path / "calib.npz", x=rng.standard_normal((8, 3, 4, 4)).astype(np.float32))
    feeds = {"x": rng.standard_normal((1, 3, 4, 4)).astype(np.float32)}
    want = run(graph, feeds)
    res = quantize_graph(graph, load_calibration(tmp_path / "calib.npz", graph), QuantizeSettings(), progress=False)
    q = res.graph
    # parameter inputs are never quantized: every DequantizeLinear output read by a node is read as data
    from corefold import ops

    for n in q.nodes:
        params = ops.get(n.op_type).param_inputs
        for i, v in enumerate(n.inputs):
            if v is not None and i in params and v.producer is not None:
                assert v.producer.op_type != "DequantizeLinear", f"{n.op_type} input {i} is quantized"
    # data movement shares its input's scale
    for name in ("d", "g", "tv"):
        assert name in res.selection.groups or any(name in m for m in res.selection.members().values())
    rep = res.selection.groups
    assert rep.get("g", "g") == rep.get("d", "d") == rep.get("tv", "tv")
    save_model(q, tmp_path / "q.onnx")
    got = ort_session(str(tmp_path / "q.onnx"), qdq_exact=True).run(None, feeds)
    ours = run(q, feeds)  # the quantized graph on corefold's kernels: TopK breaks the same ties
    np.testing.assert_array_equal(got[1], ours["ti"])
    np.testing.assert_allclose(got[0], ours["y"], rtol=1e-4, atol=1e-5)
    scale = float(np.abs(want["y"]).max())
    assert np.abs(got[0] - want["y"]).max() <= 0.1 * scale
