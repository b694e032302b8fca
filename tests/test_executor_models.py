"""The reference executor against ONNX Runtime on whole models.

The nine ONNX "light" models (single-value weights, so their final outputs are nearly
uniform) are checked on every intermediate tensor ONNX Runtime can also produce, not just
the final output, so a wrong kernel cannot hide behind a Softmax. A model with dynamic
dimensions is checked after binding them through ``load_model(path, shapes)``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from corefold.executor import random_inputs, run
from corefold.frontend import onnx as frontend

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
MODELS = sorted(p.stem.removeprefix("light_") for p in LIGHT.glob("light_*.onnx"))
RTOL, ATOL = 1e-4, 1e-5


def _ort_session(model: onnx.ModelProto):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def test_all_nine_light_models_present():
    assert len(MODELS) == 9, MODELS


@pytest.mark.parametrize("name", MODELS)
def test_light_model_matches_onnxruntime(name):
    path = LIGHT / f"light_{name}.onnx"
    graph = frontend.load_model(path)
    feeds = random_inputs(graph, seed=0)
    finals = [v.name for v in graph.outputs]

    model = onnx.load(str(path))
    onnx_values = {o for n in model.graph.node for o in n.output}
    inner = [v.name for n in graph.topological_order() for v in n.outputs
             if v.name in onnx_values and v.name not in finals and v.dtype == np.float32]
    del model.graph.output[:]
    model.graph.output.extend(helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in finals + inner)
    sess = _ort_session(model)
    want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {i.name: feeds[i.name] for i in sess.get_inputs()}),
                    strict=True))
    got = run(graph, feeds, outputs=finals + inner)

    for n in finals:
        np.testing.assert_allclose(got[n], want[n], rtol=RTOL, atol=ATOL, err_msg=f"{name}: output {n}")
    assert len(inner) >= len(graph) // 4, f"{name}: too few intermediates to compare ({len(inner)})"
    for n in inner:  # activations reach 1e9 with single-value weights: compare relative to the tensor's scale
        scale = float(np.max(np.abs(want[n]))) if want[n].size else 0.0
        err = float(np.max(np.abs(got[n].astype(np.float64) - want[n]))) if want[n].size else 0.0
        assert got[n].shape == want[n].shape, f"{name}: {n} shape {got[n].shape} != {want[n].shape}"
        assert err <= RTOL * scale + ATOL, f"{name}: intermediate {n} error {err:.3g} at scale {scale:.3g}"


def _dynamic_model(seed: int) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)

    def init(name, shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("BatchNormalization", ["c1", "s", "bb", "m", "v"], ["bn"]),
        helper.make_node("HardSwish", ["bn"], ["h"]),
        helper.make_node("Conv", ["h", "w2"], ["c2"], group=8, pads=[1, 1, 1, 1]),
        helper.make_node("Resize", ["c2", "", "scales"], ["up"], mode="linear"),
        helper.make_node("AveragePool", ["up"], ["ap"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
        helper.make_node("ReduceMean", ["ap", "axes"], ["gm"], keepdims=0),
        helper.make_node("Gemm", ["gm", "wf", "bf"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["y"]),
    ]
    inits = [init("w1", (8, 3, 3, 3)), init("b1", (8,)), init("w2", (8, 1, 3, 3)), init("wf", (10, 8)), init("bf", (10,)),
             init("s", (8,)), init("bb", (8,)), init("m", (8,)),
             numpy_helper.from_array(np.abs(rng.standard_normal(8)).astype(np.float32) + 0.5, "v"),
             numpy_helper.from_array(np.array([1, 1, 1.5, 1.5], np.float32), "scales"),
             numpy_helper.from_array(np.array([2, 3], np.int64), "axes")]
    graph = helper.make_graph(nodes, "dynamic", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


@pytest.mark.parametrize("shape", [(1, 3, 32, 32), (3, 3, 21, 34)])
def test_dynamic_model_bound_by_shapes(tmp_path, shape):
    model = _dynamic_model(seed=1)
    path = tmp_path / "dynamic.onnx"
    onnx.save(model, str(path))
    graph = frontend.load_model(path, {"x": shape})
    feeds = random_inputs(graph, seed=2)
    assert feeds["x"].shape == shape
    got = run(graph, feeds)["y"]
    want = _ort_session(model).run(None, feeds)[0]
    assert got.shape == (shape[0], 10)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
