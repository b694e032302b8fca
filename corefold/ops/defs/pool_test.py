import numpy as np
import pytest

from corefold.ops.ort_oracle_test import check_node, randn

CASES = [
    {"kernel_shape": [3, 3]},
    {"kernel_shape": [3, 3], "strides": [2, 2]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 0, 1]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1},
    {"kernel_shape": [2, 2], "strides": [3, 3], "ceil_mode": 1},
    {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]},
    {"kernel_shape": [4, 4], "auto_pad": "SAME_LOWER", "strides": [2, 2]},
    {"kernel_shape": [3, 3], "auto_pad": "VALID", "strides": [2, 2]},
    {"kernel_shape": [2, 2], "dilations": [2, 2], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [3, 3], "dilations": [2, 1], "strides": [2, 2], "ceil_mode": 1},
]


@pytest.mark.parametrize("attrs", CASES)
def test_max_pool(attrs):
    rng = np.random.default_rng(0)
    check_node("MaxPool", [randn(rng, 2, 3, 11, 12)], attrs)


@pytest.mark.parametrize("attrs", CASES)
@pytest.mark.parametrize("include_pad", [0, 1])
def test_average_pool(attrs, include_pad):
    rng = np.random.default_rng(1)
    check_node("AveragePool", [randn(rng, 2, 3, 11, 12)], {**attrs, "count_include_pad": include_pad})


def test_pool_1d_3d():
    rng = np.random.default_rng(2)
    check_node("MaxPool", [randn(rng, 1, 2, 9)], {"kernel_shape": [3], "strides": [2], "pads": [1, 1]})
    check_node("AveragePool", [randn(rng, 1, 2, 9)], {"kernel_shape": [3], "strides": [2], "pads": [1, 1]})
    check_node("MaxPool", [randn(rng, 1, 2, 5, 6, 7)], {"kernel_shape": [2, 3, 2], "strides": [2, 2, 2]})
    check_node("AveragePool", [randn(rng, 1, 2, 5, 6, 7)], {"kernel_shape": [2, 3, 2], "pads": [1, 1, 0, 1, 1, 0]})


def test_max_pool_integers():
    rng = np.random.default_rng(3)
    x = rng.integers(-100, 100, (1, 2, 6, 6)).astype(np.int8)
    check_node("MaxPool", [x], {"kernel_shape": [2, 2], "pads": [1, 1, 1, 1], "strides": [2, 2]})


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pool(op):
    rng = np.random.default_rng(4)
    check_node(op, [randn(rng, 2, 5, 7, 6)])
    check_node(op, [randn(rng, 2, 5, 7)])


def test_windows_is_the_strided_sliding_window_view():
    from corefold.ops.spatial import windows
    rng = np.random.default_rng(5)
    xp = randn(rng, 2, 3, 13, 11)
    for kernel, strides, dil in [((3, 3), (1, 1), (1, 1)), ((3, 2), (2, 3), (2, 1)), ((1, 4), (3, 1), (1, 2))]:
        dk = [(k - 1) * d + 1 for k, d in zip(kernel, dil, strict=True)]
        outs = [(n - e) // s + 1 for n, e, s in zip(xp.shape[2:], dk, strides, strict=True)]
        ref = np.lib.stride_tricks.sliding_window_view(xp, dk, axis=(2, 3))
        ref = ref[:, :, ::strides[0], ::strides[1], ::dil[0], ::dil[1]][:, :, :outs[0], :outs[1]]
        got = windows(xp, kernel, strides, dil, outs)
        assert got.shape == ref.shape and np.array_equal(got, ref) and not got.flags.writeable
    with pytest.raises(ValueError):
        windows(xp, (3, 3), (1, 1), (1, 1), (12, 9))


# -- MaxPool's Indices, LpPool, GlobalLpPool, MaxUnpool ----------------------------------------------
from corefold.ops.facet_checks_test import check_facets  # noqa: E402
from corefold.ops.onnx_cases_test import case_params, check_case, check_ort  # noqa: E402


@pytest.mark.parametrize("case", case_params("maxpool", "lppool", "maxunpool", "globalmaxpool", "averagepool"))
def test_onnx_node_case(case):
    check_case(case)


@pytest.mark.parametrize("attrs", CASES[:7] + CASES[10:])
@pytest.mark.parametrize("storage_order", [0, 1])
def test_max_pool_indices(attrs, storage_order):
    rng = np.random.default_rng(6)
    x = rng.integers(-4, 4, (2, 3, 11, 12)).astype(np.float32)  # ties: the first maximum in window order
    a = {**attrs, "storage_order": storage_order}
    check_ort("MaxPool", [x], a, n_outputs=2)
    check_facets("MaxPool", [x], a)


def test_max_pool_indices_3d_and_through_the_importer():
    import onnx
    from onnx import TensorProto, helper

    from corefold.executor import run
    from corefold.frontend.onnx import from_onnx

    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 2, 5, 6, 7)).astype(np.float32)
    check_ort("MaxPool", [x], {"kernel_shape": [2, 3, 2], "strides": [2, 2, 1], "storage_order": 0}, n_outputs=2)
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("i", TensorProto.INT64, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 12)])
    data = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    got = run(from_onnx(model), {"x": data})
    from corefold.frontend.onnx.check import ort_run
    want = ort_run(onnx.load_from_string(model.SerializeToString()), {"x": data})
    np.testing.assert_array_equal(got["i"], want["i"])
    np.testing.assert_array_equal(got["y"], want["y"])
    # unused Indices: the importer drops them, and the node computes values only
    g2 = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                           [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    graph = from_onnx(helper.make_model(g2, opset_imports=[helper.make_opsetid("", 12)]))
    assert len(graph.nodes[0].outputs) == 1 and "storage_order" not in graph.nodes[0].attrs


@pytest.mark.parametrize("attrs", [{"kernel_shape": [3, 3]}, {"kernel_shape": [3, 3], "p": 3, "strides": [2, 2]},
                                   {"kernel_shape": [2, 3], "p": 1, "pads": [1, 0, 1, 1]},
                                   {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
                                   {"kernel_shape": [2, 2], "dilations": [2, 2]}])
def test_lp_pool(attrs):
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 3, 9, 10)).astype(np.float32)
    check_ort("LpPool", [x], attrs)
    check_facets("LpPool", [x], attrs)


@pytest.mark.parametrize("p", [1, 2, 3])
def test_global_lp_pool(p):
    x = np.random.default_rng(9).standard_normal((2, 3, 5, 4)).astype(np.float32)
    check_ort("GlobalLpPool", [x], {"p": p})
    check_facets("GlobalLpPool", [x], {"p": p})


def test_max_unpool_inverts_max_pool():
    rng = np.random.default_rng(10)
    x = rng.standard_normal((2, 3, 8, 6)).astype(np.float32)
    pool = {"kernel_shape": [2, 2], "strides": [2, 2]}
    y, idx = check_ort("MaxPool", [x], {**pool, "storage_order": 0}, n_outputs=2)
    check_ort("MaxUnpool", [y, idx], pool)
    check_facets("MaxUnpool", [y, idx], pool)
    check_facets("MaxUnpool", [y, idx, np.array([2, 3, 9, 7], np.int64)], pool)
