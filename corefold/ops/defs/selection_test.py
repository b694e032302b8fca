"""TopK, CumSum, CumProd, Trilu, EyeLike, Size, CastLike and BitCast: ONNX's node cases,
ONNX Runtime on random inputs, and every facet against the kernel."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from corefold.executor import run
from corefold.frontend.onnx import from_onnx
from corefold.ops.facet_checks_test import check_facets
from corefold.ops.onnx_cases_test import case_params, check_case, check_ort

MODULES = ("topk", "cumsum", "cumprod", "trilu", "eyelike", "size", "castlike", "bitcast")

I64 = lambda *v: np.array(v, np.int64)  # noqa: E731


def _cast_saturates() -> bool:
    """Whether the Cast entry (another family's) saturates float8 casts yet."""
    import ml_dtypes  # noqa: F401 - registers the float8 dtype names

    from corefold import ops

    y = ops.get("Cast").kernel({"to": "float8_e4m3fn"}, [np.array([1e6], np.float32)])[0]
    return bool(np.isfinite(y.astype(np.float32))[0])


@pytest.mark.parametrize("case", case_params(*MODULES))
def test_onnx_node_case(case):
    if "castlike" in case.name and "FLOAT8" in case.name and "no_saturate" not in case.name and not _cast_saturates():
        pytest.skip("CastLike imports as Cast, whose float8 saturation is the Cast entry's")
    check_case(case)


@pytest.mark.parametrize("attrs", [{}, {"axis": 0}, {"axis": 1, "largest": 0}, {"largest": 0, "axis": -2},
                                   {"sorted": 1, "axis": 2}])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.uint8])
def test_topk(attrs, dtype):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 6, (4, 5, 6)).astype(dtype)  # many ties: lower index first
    axis = attrs.get("axis", -1)
    k = I64(min(3, x.shape[axis]))
    check_ort("TopK", [x, k], attrs, n_outputs=2)
    check_facets("TopK", [x, k], attrs)


def test_topk_opset1_attribute_and_import():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 7])
    v = helper.make_tensor_value_info("v", TensorProto.FLOAT, None)
    i = helper.make_tensor_value_info("i", TensorProto.INT64, None)
    model = helper.make_model(helper.make_graph([helper.make_node("TopK", ["x"], ["v", "i"], k=2)], "g", [x], [v, i]),
                              opset_imports=[helper.make_opsetid("", 9)])
    graph = from_onnx(model)
    data = np.random.default_rng(1).standard_normal((3, 7)).astype(np.float32)
    out = run(graph, {"x": data})
    want = np.sort(data, axis=1)[:, ::-1][:, :2]
    np.testing.assert_array_equal(out["v"], want)
    assert graph.value("i").shape == (3, 2)


@pytest.mark.parametrize("attrs", [{}, {"exclusive": 1}, {"reverse": 1}, {"exclusive": 1, "reverse": 1}])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_cumsum(attrs, dtype):
    rng = np.random.default_rng(2)
    x = rng.integers(-5, 5, (3, 4, 5)).astype(dtype)
    for axis in (0, -1, np.int32(1)):
        check_ort("CumSum", [x, np.array(axis)], attrs)
        check_facets("CumSum", [x, np.array(axis)], attrs)


@pytest.mark.parametrize("attrs", [{}, {"exclusive": 1}, {"reverse": 1}, {"exclusive": 1, "reverse": 1}])
def test_cumprod(attrs):
    x = np.random.default_rng(3).uniform(0.5, 1.5, (3, 4)).astype(np.float32)
    check_ort("CumProd", [x, np.array(1)], attrs, opset=26)
    check_facets("CumProd", [x, np.array(0)], attrs)


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, -2, 0, 1, 5])
def test_trilu(upper, k):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    args = [x] if k is None else [x, np.array(k, np.int64)]
    check_ort("Trilu", args, {"upper": upper})
    check_facets("Trilu", args, {"upper": upper})
    check_ort("Trilu", [x[0, 0].astype(np.int64)] + args[1:], {"upper": upper})


@pytest.mark.parametrize("attrs", [{}, {"k": 1}, {"k": -2}, {"dtype": TensorProto.INT32}, {"dtype": TensorProto.DOUBLE,
                                                                                               "k": 3}])
def test_eye_like(attrs):
    x = np.zeros((4, 6), np.float32)
    check_ort("EyeLike", [x], attrs)
    check_facets("EyeLike", [x], attrs)


def test_size_and_castlike():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 10.5
    check_ort("Size", [x])
    check_facets("Size", [x])
    for like in (np.zeros(1, np.int32), np.zeros(1, np.float16), np.zeros(1, np.uint8), np.zeros(1, bool)):
        check_ort("CastLike", [x, like])
        check_facets("CastLike", [x, like])


def test_castlike_imports_as_cast():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    like = helper.make_tensor_value_info("like", TensorProto.INT64, [1])
    y = helper.make_tensor_value_info("y", TensorProto.INT64, None)
    model = helper.make_model(helper.make_graph([helper.make_node("CastLike", ["x", "like"], ["y"])], "g", [x, like], [y]),
                              opset_imports=[helper.make_opsetid("", 21)])
    graph = from_onnx(model)
    assert [n.op_type for n in graph.nodes] == ["Cast"] and graph.nodes[0].attrs["to"] == "int64"
    out = run(graph, {"x": np.array([[1.7, -2.2, 3.0]] * 2, np.float32), "like": np.zeros(1, np.int64)})
    assert out["y"].tolist() == [[1, -2, 3]] * 2


@pytest.mark.parametrize("src,to", [(np.float32, TensorProto.INT32), (np.int64, TensorProto.DOUBLE),
                                    (np.uint16, TensorProto.FLOAT16), (np.int8, TensorProto.UINT8)])
def test_bit_cast(src, to):
    x = np.arange(-3, 9).astype(src).reshape(3, 4)
    want = check_facets("BitCast", [x], {"to": to})[0]
    assert want.dtype == onnx.helper.tensor_dtype_to_np_dtype(to)
    np.testing.assert_array_equal(want.view(src), x)
    check_ort("BitCast", [x], {"to": to}, opset=26)
