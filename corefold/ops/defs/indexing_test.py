"""GatherElements, GatherND, ScatterElements (and Scatter), ScatterND, TensorScatter and
OneHot: ONNX's node cases, ONNX Runtime on random inputs, and every facet against the
kernel."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from corefold.executor import run
from corefold.frontend.onnx import from_onnx
from corefold.ops.facet_checks_test import check_facets
from corefold.ops.onnx_cases_test import case_params, check_case, check_ort

MODULES = ("gatherelements", "gathernd", "scatterelements", "scatter", "scatternd", "tensorscatter", "onehot")


@pytest.mark.parametrize("case", case_params(*MODULES))
def test_onnx_node_case(case):
    check_case(case)


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.float16, np.uint8])
def test_gather_elements(axis, dtype):
    rng = np.random.default_rng(0)
    x = rng.integers(-50, 50, (4, 5, 6)).astype(dtype)
    shape = list(x.shape)
    shape[axis] = 3
    idx = rng.integers(-x.shape[axis], x.shape[axis], shape).astype(np.int64)
    check_ort("GatherElements", [x, idx], {"axis": axis})
    check_facets("GatherElements", [x, idx], {"axis": axis})
    check_ort("GatherElements", [x, idx.astype(np.int32)], {"axis": axis})


def test_gather_elements_smaller_indices():
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    idx = np.array([[3, 0], [1, 1]], np.int64)
    check_ort("GatherElements", [x, idx], {"axis": 0})


@pytest.mark.parametrize("batch_dims,data,idx", [
    (0, (4, 5, 6), (3, 2)), (0, (4, 5), (2, 3, 2)), (1, (3, 4, 5), (3, 2, 1)), (1, (3, 4, 5), (3, 2)),
    (2, (2, 3, 4, 5), (2, 3, 1, 1)), (0, (4, 5), (6, 1)),
])
def test_gather_nd(batch_dims, data, idx):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(data).astype(np.float32)
    m = idx[-1]
    limits = np.array(data[batch_dims:batch_dims + m])
    ind = (rng.integers(0, 1 << 30, idx) % limits - (rng.integers(0, 2, idx) * limits)).astype(np.int64)
    check_ort("GatherND", [x, ind], {"batch_dims": batch_dims})
    check_facets("GatherND", [x, ind], {"batch_dims": batch_dims})


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_scatter_elements(reduction, axis):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 5, 3)).astype(np.float32)
    shape = list(x.shape)
    shape[axis] = 2
    if reduction == "none":  # distinct targets per line: ONNX leaves repeated writes undefined
        line = np.stack([rng.permutation(x.shape[axis])[:2] for _ in range(int(np.prod(shape)) // 2)])
        idx = np.moveaxis(line.reshape([s for a, s in enumerate(shape) if a != axis % 3] + [2]), -1, axis % 3)
    else:
        idx = rng.integers(-x.shape[axis], x.shape[axis], shape)
    idx = np.ascontiguousarray(idx).astype(np.int64)
    upd = rng.standard_normal(shape).astype(np.float32)
    attrs = {"axis": axis, "reduction": reduction}
    check_ort("ScatterElements", [x, idx, upd], attrs)
    check_facets("ScatterElements", [x, idx, upd], attrs)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd(reduction):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 5, 6)).astype(np.float32)
    idx = np.array([[[1, 2], [3, 0]], [[0, 4], [1, 2 if reduction != "none" else 1]]], np.int64)
    upd = rng.standard_normal((2, 2, 6)).astype(np.float32)
    check_ort("ScatterND", [x, idx, upd], {"reduction": reduction})
    check_facets("ScatterND", [x, idx, upd], {"reduction": reduction})
    check_ort("ScatterND", [x.astype(np.int64), np.array([[3], [0]]), np.ones((2, 5, 6), np.int64)],
              {"reduction": reduction})


def test_scatter_opset9_imports_as_scatter_elements():
    nodes = [helper.make_node("Scatter", ["x", "i", "u"], ["y"], axis=1)]
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4]),
           helper.make_tensor_value_info("u", TensorProto.FLOAT, [2, 1])]
    init = [helper.make_tensor("i", TensorProto.INT64, [2, 1], [3, 0])]
    model = helper.make_model(helper.make_graph(nodes, "g", ins, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                                                initializer=init), opset_imports=[helper.make_opsetid("", 9)])
    graph = from_onnx(model)
    assert [n.op_type for n in graph.nodes] == ["ScatterElements"]
    y = run(graph, {"x": np.zeros((2, 4), np.float32), "u": np.array([[1.0], [2.0]], np.float32)})["y"]
    assert y.tolist() == [[0, 0, 0, 1], [2, 0, 0, 0]]


@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("axis", [-2, 1, 2])
def test_tensor_scatter(mode, axis):
    rng = np.random.default_rng(4)
    cache = rng.standard_normal((2, 3, 8, 4)).astype(np.float32)
    shape = list(cache.shape)
    shape[axis] = 3
    upd = rng.standard_normal(shape).astype(np.float32)
    n = cache.shape[axis]
    start = np.array([min(1, n - 3), n - 3 if mode == "linear" else n - 1], np.int64)
    attrs = {"mode": mode, "axis": axis}
    check_ort("TensorScatter", [cache, upd, start], attrs, opset=24)
    check_ort("TensorScatter", [cache, upd], attrs, opset=24)
    check_facets("TensorScatter", [cache, upd, start], attrs)


#: (indices, depth, values) type combinations ONNX Runtime's CPU kernel has
ORT_ONE_HOT = [(np.int64, np.int64, np.float32), (np.int64, np.int64, np.int64), (np.int64, np.float32, np.float32),
               (np.int32, np.float32, np.float32), (np.float32, np.int64, np.int64), (np.float32, np.float32, np.float32)]


@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize("types", ORT_ONE_HOT, ids=lambda t: "-".join(np.dtype(d).name for d in t))
def test_one_hot(axis, types):
    it, dt, vt = types
    idx = np.array([[0, 3, -1], [5, -4, 2]]).astype(it)
    args = [idx, np.array(4).astype(dt), np.array([-1.5, 2.0]).astype(vt)]
    check_ort("OneHot", args, {"axis": axis})
    check_facets("OneHot", args, {"axis": axis})
