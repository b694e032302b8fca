"""Trigonometric, hyperbolic, predicate, bitwise and activation operators, Hardmax and Det:
ONNX's node cases, ONNX Runtime on random inputs (several dtypes and attributes), and
every facet against the kernel."""

from __future__ import annotations

import numpy as np
import pytest

from corefold.ops.facet_checks_test import check_facets
from corefold.ops.onnx_cases_test import case_params, check_case, check_ort

MODULES = ("sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "isnan", "isinf",
           "bitshift", "bitwiseand", "bitwiseor", "bitwisexor", "bitwisenot", "mish", "swish", "celu",
           "thresholdedrelu", "shrink", "hardmax", "det", "swiglu")


@pytest.mark.parametrize("case", case_params(*MODULES))
def test_onnx_node_case(case):
    check_case(case)


TRIG = {"Sin": 3.0, "Cos": 3.0, "Tan": 1.2, "Asin": 0.99, "Acos": 0.99, "Atan": 5.0, "Sinh": 3.0, "Cosh": 3.0,
        "Asinh": 5.0, "Atanh": 0.99}


@pytest.mark.parametrize("op", sorted(TRIG) + ["Acosh"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_trigonometric_against_ort(op, dtype):
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (3, 4, 5)) * TRIG.get(op, 1.0)
    if op == "Acosh":
        x = 1 + np.abs(x) * 4
    if dtype == np.float32 or op in ("Sin", "Cos"):  # ONNX Runtime's CPU kernels: float (and double for these)
        check_ort(op, [x.astype(dtype)])
    y = check_facets(op, [x.astype(dtype)])[0]
    assert y.dtype == dtype


def test_float16_keeps_its_type():
    x = np.linspace(-1, 1, 12, dtype=np.float16).reshape(3, 4)
    y = check_facets("Sin", [x])[0]
    assert y.dtype == np.float16
    np.testing.assert_allclose(y, np.sin(x.astype(np.float32)), atol=1e-3)


@pytest.mark.parametrize("attrs", [{}, {"detect_negative": 0}, {"detect_positive": 0},
                                   {"detect_negative": 0, "detect_positive": 0}])
def test_isinf_isnan(attrs):
    x = np.array([[np.inf, -np.inf, np.nan, 1.0, -2.0, 0.0]], np.float32)
    check_ort("IsInf", [x], attrs)
    check_ort("IsNaN", [x.astype(np.float64)])
    check_facets("IsInf", [x], attrs)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.uint32, np.int32, np.int64, np.uint64])
def test_bitwise(dtype):
    rng = np.random.default_rng(1)
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max, (3, 4), dtype=dtype, endpoint=True)
    b = rng.integers(info.min, info.max, (4,), dtype=dtype, endpoint=True)
    for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor"):
        check_ort(op, [a, b])
        check_facets(op, [a, b])
    check_ort("BitwiseNot", [a])


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64])
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bit_shift(dtype, direction):
    rng = np.random.default_rng(2)
    width = np.dtype(dtype).itemsize * 8
    x = rng.integers(0, np.iinfo(dtype).max, (2, 5), dtype=dtype, endpoint=True)
    y = rng.integers(0, width, (2, 5)).astype(dtype)
    check_ort("BitShift", [x, y], {"direction": direction})
    check_facets("BitShift", [x, y], {"direction": direction})


def test_bit_shift_signed_and_too_far():
    x = np.array([-8, 4, -1, 100], np.int32)
    y = np.array([1, 40, 31, 2], np.int32)
    check_ort("BitShift", [x, y], {"direction": "RIGHT"}, opset=28)
    check_ort("BitShift", [x, y], {"direction": "LEFT"}, opset=28)


@pytest.mark.parametrize("op,attrs,opset", [
    ("Mish", {}, 21), ("Celu", {}, 21), ("Celu", {"alpha": 0.5}, 21), ("ThresholdedRelu", {}, 21),
    ("ThresholdedRelu", {"alpha": 0.3}, 21), ("Shrink", {}, 21), ("Shrink", {"lambd": 1.0, "bias": 0.4}, 21),
    ("Swish", {}, 24), ("Swish", {"alpha": 1.7}, 24),
])
def test_activations_against_ort(op, attrs, opset):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((2, 3, 4, 5)) * 3).astype(np.float32)
    check_ort(op, [x], attrs, opset=opset)
    check_facets(op, [x], attrs)


def test_shrink_on_integers():
    x = np.arange(-5, 6, dtype=np.int8)
    check_ort("Shrink", [x], {"lambd": 1.5, "bias": 1.0})
    check_ort("Shrink", [x.astype(np.int32)], {"lambd": 2.0, "bias": 1.0})


@pytest.mark.parametrize("axis", [-1, 0, 1, 2])
def test_hardmax(axis):
    rng = np.random.default_rng(4)
    x = rng.integers(-3, 3, (3, 4, 5)).astype(np.float32)  # ties: the first maximum wins
    check_ort("Hardmax", [x], {"axis": axis})
    check_facets("Hardmax", [x], {"axis": axis})


def test_det():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    check_ort("Det", [x], rtol=1e-4, atol=1e-4)
    check_ort("Det", [x[0, 0]], rtol=1e-4, atol=1e-4)
    check_facets("Det", [x], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("alpha", [None, 1.702])
def test_swiglu(alpha):
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((2, 3, 8)).astype(np.float32), rng.standard_normal((2, 3, 8)).astype(np.float32)
    attrs = {} if alpha is None else {"alpha": alpha}
    y = check_facets("SwiGLU", [a, b], attrs)[0]
    al = 1.0 if alpha is None else alpha
    np.testing.assert_allclose(y, a / (1 + np.exp(-al * a)) * b, rtol=1e-6, atol=1e-6)
