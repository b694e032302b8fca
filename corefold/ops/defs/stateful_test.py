"""CausalConvWithState and LinearAttention (opset 27, which ONNX Runtime 1.32 does not run):
ONNX's node cases, plain NumPy restatements, and every facet against the kernel."""

from __future__ import annotations

import numpy as np
import pytest

from corefold.ops.facet_checks_test import check_facets
from corefold.ops.onnx_cases_test import case_params, check_case


@pytest.mark.parametrize("case", case_params("causal_conv_with_state", "linear_attention"))
def test_onnx_node_case(case):
    check_case(case)


@pytest.mark.parametrize("activation", ["none", "silu"])
@pytest.mark.parametrize("with_state", [False, True])
def test_causal_conv_with_state(activation, with_state):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 7)).astype(np.float32)
    w = rng.standard_normal((3, 1, 4)).astype(np.float32)
    bias = rng.standard_normal(3).astype(np.float32)
    past = rng.standard_normal((2, 3, 3)).astype(np.float32) if with_state else None
    y, state = check_facets("CausalConvWithState", [x, w, bias, past], {"activation": activation})
    full = np.concatenate([past if with_state else np.zeros((2, 3, 3), np.float32), x], axis=2)
    want = np.stack([[np.convolve(full[n, c], w[c, 0, ::-1], "valid") + bias[c] for c in range(3)] for n in range(2)])
    if activation == "silu":
        want = want / (1 + np.exp(-want))
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(state, full[:, :, -3:])


@pytest.mark.parametrize("rule", ["linear", "gated", "delta", "gated_delta"])
@pytest.mark.parametrize("heads", [(2, 2), (4, 2)])
def test_linear_attention(rule, heads):
    rng = np.random.default_rng(1)
    hq, hkv = heads
    b, t, dk, dv = 2, 5, 4, 3
    q = rng.standard_normal((b, t, hq * dk)).astype(np.float32)
    k = rng.standard_normal((b, t, hkv * dk)).astype(np.float32) * 0.5
    v = rng.standard_normal((b, t, hkv * dv)).astype(np.float32)
    past = rng.standard_normal((b, hkv, dk, dv)).astype(np.float32)
    decay = -np.abs(rng.standard_normal((b, t, hkv))).astype(np.float32) if "gated" in rule else None
    beta = rng.uniform(0, 1, (b, t, hkv)).astype(np.float32) if "delta" in rule else None
    attrs = {"q_num_heads": hq, "kv_num_heads": hkv, "update_rule": rule}
    y, state = check_facets("LinearAttention", [q, k, v, past, decay, beta], attrs, rtol=1e-4, atol=1e-5)
    # the recurrence one head and one step at a time
    s = past.astype(np.float64).copy()
    want = np.zeros((b, t, hq, dv))
    for n in range(b):
        for i in range(t):
            for h in range(hkv):
                kt, vt = k[n, i, h * dk:(h + 1) * dk], v[n, i, h * dv:(h + 1) * dv]
                if decay is not None:
                    s[n, h] *= np.exp(decay[n, i, h])
                if beta is not None:
                    vt = beta[n, i, h] * (vt - s[n, h].T @ kt)
                s[n, h] += np.outer(kt, vt)
            for h in range(hq):
                want[n, i, h] = q[n, i, h * dk:(h + 1) * dk] @ s[n, h // (hq // hkv)] / np.sqrt(dk)
    np.testing.assert_allclose(y, want.reshape(b, t, -1), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(state, s, rtol=1e-4, atol=1e-4)
