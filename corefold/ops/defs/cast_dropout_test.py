"""Cast to the narrow types (float8 saturation, E8M0 rounding), training-mode Dropout and
half-precision Range, against ONNX's own reference functions and ONNX Runtime."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from corefold import ops

X = np.float32([0.0, -0.0, 1.0, -3.5, 0.3, 448.0, 500.0, -1e6, 6e4, 1e-9, np.inf, -np.inf, np.nan])
FLOAT8 = ["float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"]


@pytest.mark.parametrize("to", FLOAT8)
@pytest.mark.parametrize("saturate", [1, 0])
def test_cast_to_float8_saturates_like_the_reference(to, saturate):
    dtype = np.dtype(getattr(ml_dtypes, to))
    (got,) = ops.get("Cast").kernel({"to": to, "saturate": saturate}, [X])
    want = onnx.numpy_helper.saturate_cast(X, dtype) if saturate else X.astype(dtype)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))


@pytest.mark.parametrize("mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [True, False])
def test_cast_to_e8m0_rounds_like_the_reference(mode, saturate):
    x = np.float32([1.0, 1.5, 3.0, 0.75, 2**-127, 1e-40, 2**127 * 1.5, 3e38, 7.0, np.inf, np.nan, 0.0])
    (got,) = ops.get("Cast").kernel({"to": "float8_e8m0fnu", "saturate": int(saturate), "round_mode": mode}, [x])
    want = onnx.numpy_helper.to_float8e8m0(x, saturate, mode)
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def test_cast_float8_matches_onnxruntime_and_keeps_fills():
    node = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT8E4M3FN)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [13])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT8E4M3FN, [13])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    from corefold.frontend.onnx.node_cases import NodeCase, run_ort

    (want,) = run_ort(NodeCase("c", m.SerializeToString(), [([X], [])], 0, 0))
    (got,) = ops.get("Cast").kernel({"to": "float8_e4m3fn"}, [X])
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    (f,) = ops.get("Cast").kernel({"to": "bfloat16"}, [np.broadcast_to(np.float32(1000.5), (50, 50))])
    assert ops.is_fill(f) and f.dtype == np.dtype(ml_dtypes.bfloat16)


def test_training_dropout_is_seeded_like_onnx_reference():
    """The mask is ``RandomState(seed).uniform(size) >= ratio``, the reference's generator:
    the same seed gives the same mask, every run."""
    from onnx.backend.test.case.node.dropout import dropout

    x = np.random.default_rng(3).standard_normal((3, 4, 5)).astype(np.float32)
    kernel = ops.get("Dropout").kernel
    for seed, ratio in ((0, 0.5), (7, 0.25)):
        y, mask = kernel({"seed": seed}, [x, np.float32(ratio), np.array(True)])
        want_y, want_mask = dropout(x, ratio, seed=seed, training_mode=True, return_mask=True)
        np.testing.assert_allclose(y, want_y, rtol=1e-6)
        np.testing.assert_array_equal(mask, want_mask)
        again, _ = kernel({"seed": seed}, [x, np.float32(ratio), np.array(True)])
        np.testing.assert_array_equal(y, again)
    y, mask = kernel({}, [x, np.float32(0.0), np.array(True)])  # ratio 0: identity
    np.testing.assert_array_equal(y, x)
    assert mask.all()
    y, mask = kernel({}, [x, np.float32(0.5), np.array(False)])  # inference
    np.testing.assert_array_equal(y, x)
    with pytest.raises(ValueError, match="ratio"):
        kernel({}, [x, np.float32(1.0), np.array(True)])


@pytest.mark.parametrize("stash", [None, 1, 10])
def test_half_precision_range_computes_in_its_stash_type(stash):
    """float16 Range (opset 27): in float32 by default (``stash_type`` 1), in float16 when
    the stash type is float16 itself."""
    s, lim, d = np.float16(0.1), np.float16(3.0), np.float16(0.013)
    (got,) = ops.get("Range").kernel({} if stash is None else {"stash_type": stash}, [s, lim, d])
    wide = stash in (None, 1)
    base, step = (np.float32(s), np.float32(d)) if wide else (s, d)
    want = (base + np.arange(len(got), dtype=base.dtype) * step).astype(np.float16)
    assert got.dtype == np.float16 and len(got) == 224
    np.testing.assert_array_equal(got, want)
    other = (np.float32(s) + np.arange(224, dtype=np.float32) * np.float32(d)).astype(np.float16) if not wide else \
        (s + np.arange(224, dtype=np.float16) * d)
    assert (other != got).sum() > 10  # the two stash types do differ here
