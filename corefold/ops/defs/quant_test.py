import numpy as np

from corefold.ops.defs.quant import dequantize_linear, quantize_linear


def test_quantize_matches_onnx_semantics():
    x = np.array([-3.0, -0.25, 0.25, 0.75, 1.0, 200.0], np.float32)
    q = quantize_linear({}, [x, np.float32(0.5), np.int8(0)])[0]
    assert q.dtype == np.int8 and q.tolist() == [-6, 0, 0, 2, 2, 127]  # half to even
    u = quantize_linear({}, [x, np.float32(0.5), np.uint8(0)])[0]
    assert u.tolist() == [0, 0, 0, 2, 2, 255]
    y = dequantize_linear({}, [q, np.float32(0.5), np.int8(0)])[0]
    assert y.dtype == np.float32 and y.tolist() == [-3.0, 0.0, 0.0, 1.0, 1.0, 63.5]


def test_per_axis_and_int4():
    import ml_dtypes

    w = np.array([[1.0, -1.0], [4.0, -8.0]], np.float32)
    s = np.array([0.5, 1.0], np.float32)
    q = quantize_linear({"axis": 0}, [w, s, np.zeros(2, ml_dtypes.int4)])[0]
    assert q.dtype == np.dtype(ml_dtypes.int4)
    assert q.astype(np.int64).tolist() == [[2, -2], [4, -8]]
    back = dequantize_linear({"axis": 0}, [q, s, np.zeros(2, ml_dtypes.int4)])[0]
    np.testing.assert_array_equal(back, [[1.0, -1.0], [4.0, -8.0]])


def test_output_dtype_without_zero_point():
    q = quantize_linear({"output_dtype": "int8"}, [np.array([-1.0, 2.0], np.float32), np.float32(0.5)])[0]
    assert q.dtype == np.int8 and q.tolist() == [-2, 4]


# -- blocked, 16-bit, float8 and the other quantized operators ----------------------------------------
import pytest  # noqa: E402

from corefold.ops.facet_checks_test import check_facets  # noqa: E402
from corefold.ops.onnx_cases_test import case_params, check_case, check_ort  # noqa: E402


@pytest.mark.parametrize("case", case_params("quantizelinear", "dequantizelinear", "dynamicquantizelinear"))
def test_onnx_node_case(case):
    check_case(case)


@pytest.mark.parametrize("axis,block", [(0, 2), (1, 3), (-1, 4), (1, 8)])
@pytest.mark.parametrize("zp_dtype", [np.int8, np.uint8, np.int16])
def test_blocked_quantization(axis, block, zp_dtype):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((4, 7, 8)) * 20).astype(np.float32)
    shape = list(x.shape)
    shape[axis] = -(-shape[axis] // block)
    scale = rng.uniform(0.05, 0.5, shape).astype(np.float32)
    zp = rng.integers(0, 10, shape).astype(zp_dtype)
    attrs = {"axis": axis, "block_size": block}
    q = check_ort("QuantizeLinear", [x, scale, zp], attrs)[0]
    check_facets("QuantizeLinear", [x, scale, zp], attrs)
    check_ort("DequantizeLinear", [q, scale, zp], attrs)
    check_facets("DequantizeLinear", [q, scale, zp], attrs)


def test_blocked_int4_weights():
    import ml_dtypes

    rng = np.random.default_rng(1)
    q = rng.integers(-8, 8, (6, 32)).astype(ml_dtypes.int4)
    scale = rng.uniform(0.1, 1, (6, 2)).astype(np.float32)
    y = dequantize_linear({"axis": 1, "block_size": 16}, [q, scale])[0]
    want = q.astype(np.float32) * np.repeat(scale, 16, axis=1)
    np.testing.assert_array_equal(y, want)


def test_sixteen_bit_and_float8():
    import ml_dtypes

    x = np.array([-70000.0, -3.3, 0.26, 1.5, 99999.0, np.nan], np.float32)
    check_ort("QuantizeLinear", [x[:5], np.float32(0.5), np.int16(3)])
    check_ort("QuantizeLinear", [x[:5], np.float32(0.5), np.uint16(3)])
    f8 = quantize_linear({}, [x, np.float32(2.0), np.zeros((), ml_dtypes.float8_e4m3fn)])[0]
    assert f8.dtype == np.dtype(ml_dtypes.float8_e4m3fn)
    np.testing.assert_array_equal(f8.astype(np.float32)[:5], [-448, -1.625, 0.125, 0.75, 448])  # saturated
    assert np.isnan(f8.astype(np.float32)[5])
    wide = quantize_linear({"saturate": 0}, [x[:1] * 10, np.float32(2.0), np.zeros((), ml_dtypes.float8_e5m2)])[0]
    assert np.isinf(wide.astype(np.float32)[0])
    back = dequantize_linear({"output_dtype": 10}, [f8, np.float32(2.0)])[0]
    assert back.dtype == np.float16


def test_dynamic_quantize_linear():
    rng = np.random.default_rng(2)
    for x in (rng.standard_normal((3, 5)).astype(np.float32) * 4, np.abs(rng.standard_normal(7)).astype(np.float32),
              -np.abs(rng.standard_normal(7)).astype(np.float32), np.zeros(4, np.float32)):
        check_ort("DynamicQuantizeLinear", [x], n_outputs=3)
        check_facets("DynamicQuantizeLinear", [x])
