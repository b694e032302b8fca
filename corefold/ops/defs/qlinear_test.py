"""ConvInteger, MatMulInteger, QLinearConv and QLinearMatMul: ONNX's node cases, ONNX
Runtime (bit-exact integers) on random inputs, and every facet against the kernel."""

from __future__ import annotations

import numpy as np
import pytest

from corefold.ops.facet_checks_test import check_facets
from corefold.ops.onnx_cases_test import case_params, check_case, check_ort

MODULES = ("convinteger", "matmulinteger", "qlinearconv", "qlinearmatmul")


@pytest.mark.parametrize("case", case_params(*MODULES))
def test_onnx_node_case(case):
    check_case(case)


def _ints(rng, dtype, shape, seven_bits: bool = False):
    """Random integers of ``dtype``; ``seven_bits`` keeps int8 weights in [-64, 63]: ONNX
    Runtime's u8 x s8 kernels on AVX2 without VNNI sum pairs of products in int16 and
    saturate when both operands span the full 8 bits (see corefold.frontend.onnx.check)."""
    info = np.iinfo(dtype)
    lo, hi = (-64, 63) if seven_bits and dtype == np.int8 else (info.min, info.max)
    return rng.integers(lo, hi, shape, endpoint=True).astype(dtype)


@pytest.mark.parametrize("attrs", [{}, {"pads": [1, 1, 1, 1], "strides": [2, 2]}, {"group": 2, "dilations": [2, 1]},
                                   {"auto_pad": "SAME_UPPER"}])
@pytest.mark.parametrize("x_dtype,w_dtype", [(np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.int8)])
def test_conv_integer(attrs, x_dtype, w_dtype):
    rng = np.random.default_rng(0)
    x, w = _ints(rng, x_dtype, (2, 4, 7, 6)), _ints(rng, w_dtype, (6, 4 // attrs.get("group", 1), 3, 3))
    args = [x, w, np.array(_ints(rng, x_dtype, ())), np.array(_ints(rng, w_dtype, ()))]
    if x_dtype == np.uint8:  # ONNX Runtime's ConvInteger kernel: uint8 input only
        check_ort("ConvInteger", args, attrs)
    facets_attrs = {k: v for k, v in attrs.items() if k != "auto_pad"}
    check_facets("ConvInteger", args, facets_attrs)


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("attrs", [{}, {"pads": [1, 1, 1, 1], "strides": [2, 2]}, {"group": 2}])
@pytest.mark.parametrize("x_dtype,w_dtype,y_dtype", [(np.uint8, np.int8, np.uint8), (np.int8, np.int8, np.int8),
                                                     (np.uint8, np.uint8, np.uint8)])
def test_qlinear_conv(per_channel, attrs, x_dtype, w_dtype, y_dtype):
    rng = np.random.default_rng(1)
    x = _ints(rng, x_dtype, (2, 4, 7, 6))
    w = _ints(rng, w_dtype, (6, 4 // attrs.get("group", 1), 3, 3), seven_bits=x_dtype == np.uint8)
    m = w.shape[0]
    w_scale = rng.uniform(0.001, 0.01, m if per_channel else ()).astype(np.float32)
    w_zp = np.zeros(m if per_channel else (), w_dtype) if w_dtype == np.int8 else _ints(rng, w_dtype, m if per_channel else ())
    bias = rng.integers(-5000, 5000, m).astype(np.int32)
    args = [x, np.float32(0.05), np.array(_ints(rng, x_dtype, ())), w, w_scale, np.asarray(w_zp),
            np.float32(0.2), np.array(_ints(rng, y_dtype, ())), bias]
    check_ort("QLinearConv", args, attrs, atol=0, rtol=0)
    check_facets("QLinearConv", args, attrs, atol=1.0, rtol=0)  # a split may move a rounding by one step


@pytest.mark.parametrize("shapes", [((3, 5), (5, 4)), ((2, 3, 5), (5, 4)), ((2, 3, 5), (2, 5, 4))])
@pytest.mark.parametrize("per_axis", [False, True])
def test_matmul_integer(shapes, per_axis):
    rng = np.random.default_rng(2)
    a, b = _ints(rng, np.uint8, shapes[0]), _ints(rng, np.int8, shapes[1], seven_bits=True)
    a_zp = np.asarray(_ints(rng, np.uint8, shapes[0][-2] if per_axis and len(shapes[0]) == 2 else ()))
    b_zp = np.asarray(_ints(rng, np.int8, shapes[1][-1] if per_axis and len(shapes[1]) == 2 else ()))
    if a_zp.ndim == 0:  # ONNX Runtime takes A's zero point per tensor only
        check_ort("MatMulInteger", [a, b, a_zp, b_zp])
    check_ort("MatMulInteger", [a, b])
    got = check_facets("MatMulInteger", [a, b, a_zp, b_zp])[0]
    want = (a.astype(np.int64) - (a_zp[:, None] if a_zp.ndim else a_zp)) @ (b.astype(np.int64) - b_zp)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtypes", [(np.uint8, np.uint8, np.uint8), (np.int8, np.int8, np.int8),
                                    (np.uint8, np.int8, np.uint8)])
@pytest.mark.parametrize("per_column", [False, True])
def test_qlinear_matmul(dtypes, per_column):
    rng = np.random.default_rng(3)
    a, b = _ints(rng, dtypes[0], (2, 3, 6)), _ints(rng, dtypes[1], (6, 5), seven_bits=dtypes[0] == np.uint8)
    b_scale = rng.uniform(0.01, 0.02, 5 if per_column else ()).astype(np.float32)
    b_zp = np.zeros(5 if per_column else (), dtypes[1]) if dtypes[1] == np.int8 else _ints(rng, dtypes[1], 5 if per_column else ())
    args = [a, np.float32(0.03), np.array(_ints(rng, dtypes[0], ())), b, b_scale, np.asarray(b_zp), np.float32(0.1),
            np.array(_ints(rng, dtypes[2], ()))]
    check_ort("QLinearMatMul", args, atol=0, rtol=0)
    check_facets("QLinearMatMul", args, atol=1.0, rtol=0)
