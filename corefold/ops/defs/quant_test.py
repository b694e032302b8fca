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
