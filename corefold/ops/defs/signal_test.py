"""DFT, STFT, the window functions and MelWeightMatrix: ONNX's node cases, ONNX Runtime on
random inputs, and every facet against the kernel."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from corefold.executor import run
from corefold.frontend.onnx import from_onnx
from corefold.ops.facet_checks_test import check_facets
from corefold.ops.onnx_cases_test import case_params, check_case, check_ort

MODULES = ("dft", "stft", "hannwindow", "hammingwindow", "blackmanwindow", "melweightmatrix")


@pytest.mark.parametrize("case", case_params(*MODULES))
def test_onnx_node_case(case):
    check_case(case)


@pytest.mark.parametrize("attrs", [{}, {"onesided": 1}, {"inverse": 1}, {"inverse": 1, "onesided": 1}])
@pytest.mark.parametrize("axis", [1, 2, -2])
@pytest.mark.parametrize("length", [None, 6, 12])
def test_dft(attrs, axis, length):
    rng = np.random.default_rng(0)
    last = 1 if attrs.get("onesided") and not attrs.get("inverse") else 2
    x = rng.standard_normal((2, 8, 5, last)).astype(np.float32)
    args = [x, None if length is None else np.array(length, np.int64), np.array(axis, np.int64)]
    got = check_facets("DFT", args, attrs, rtol=1e-4, atol=1e-4)[0]
    if attrs.get("inverse") and attrs.get("onesided") and length is not None:
        # an inverse one-sided DFT to a length other than 2 * (bins - 1): ONNX's reference is
        # NumPy's irfft (bins cut or zero-padded to length // 2 + 1); ONNX Runtime differs
        z = x[..., 0].astype(np.float64) + 1j * x[..., 1]
        np.testing.assert_allclose(got[..., 0], np.fft.irfft(z, n=length, axis=axis % 4), rtol=1e-4, atol=1e-5)
        return
    check_ort("DFT", args, attrs, opset=20, rtol=1e-4, atol=1e-4)


def test_dft_opset17_axis_attribute():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6, 1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    model = helper.make_model(helper.make_graph([helper.make_node("DFT", ["x"], ["y"])], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    data = np.random.default_rng(1).standard_normal((2, 6, 1)).astype(np.float32)
    got = run(from_onnx(model), {"x": data})["y"]
    want = np.fft.fft(data[..., 0], axis=1)
    np.testing.assert_allclose(got[..., 0] + 1j * got[..., 1], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("onesided", [0, 1])
@pytest.mark.parametrize("window", [False, True])
def test_stft(onesided, window):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 40, 1)).astype(np.float32)
    args = [x, np.array(6, np.int64), np.hanning(16).astype(np.float32) if window else None,
            None if window else np.array(16, np.int64)]
    check_ort("STFT", args, {"onesided": onesided}, opset=17, rtol=1e-4, atol=1e-4)
    check_facets("STFT", args, {"onesided": onesided}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("attrs", [{}, {"periodic": 0}, {"output_datatype": TensorProto.DOUBLE}])
def test_windows(op, attrs):
    check_ort(op, [np.array(10, np.int64)], attrs, opset=17, atol=1e-6)
    check_facets(op, [np.array(10, np.int64)], attrs)


def test_mel_weight_matrix():
    args = [np.array(8, np.int64), np.array(64, np.int64), np.array(16000, np.int64), np.array(20.0, np.float32),
            np.array(7000.0, np.float32)]
    check_ort("MelWeightMatrix", args, {}, opset=17)
    check_facets("MelWeightMatrix", args, {})
