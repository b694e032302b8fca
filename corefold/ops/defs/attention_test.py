"""Attention and RotaryEmbedding: ONNX's node cases, ONNX Runtime on random inputs, and
every facet against the kernel."""

from __future__ import annotations

import numpy as np
import pytest

from corefold.ops.facet_checks_test import check_facets
from corefold.ops.onnx_cases_test import case_params, check_case, check_ort


@pytest.mark.parametrize("case", case_params("attention", "rotaryembedding"))
def test_onnx_node_case(case):
    check_case(case)


def _qkv(rng, b=2, hq=4, hkv=4, sq=3, skv=5, d=8, dv=8, three_d=False):
    q = rng.standard_normal((b, hq, sq, d)).astype(np.float32)
    k = rng.standard_normal((b, hkv, skv, d)).astype(np.float32)
    v = rng.standard_normal((b, hkv, skv, dv)).astype(np.float32)
    if three_d:
        q, k, v = (a.transpose(0, 2, 1, 3).reshape(a.shape[0], a.shape[2], -1) for a in (q, k, v))
    return [q, k, v]


CASES = {
    "plain": ({}, {}, {}),
    "gqa": ({"hkv": 2}, {}, {}),
    "three_d": ({"three_d": True, "hkv": 2}, {"q_num_heads": 4, "kv_num_heads": 2}, {}),
    "causal": ({"sq": 5}, {"is_causal": 1}, {}),
    "scale_softcap": ({}, {"scale": 0.3, "softcap": 2.0}, {}),
    "float_mask": ({}, {}, {"mask": "float"}),
    "bool_mask": ({}, {}, {"mask": "bool"}),
    "short_mask": ({}, {}, {"mask": "short"}),
    "past": ({}, {}, {"past": 3}),
    "past_causal": ({"sq": 2}, {"is_causal": 1}, {"past": 4}),
    "qk_mode1": ({}, {"qk_matmul_output_mode": 1, "softcap": 3.0}, {}),
    "qk_mode2": ({}, {"qk_matmul_output_mode": 2}, {"mask": "float"}),
    "qk_mode3": ({}, {"qk_matmul_output_mode": 3}, {"mask": "bool"}),
    "value_dim": ({"dv": 5}, {}, {}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_attention_against_ort(name):
    shape, attrs, extra = CASES[name]
    rng = np.random.default_rng(0)
    args = _qkv(rng, **shape)
    b, sq, skv = 2, shape.get("sq", 3), shape.get("skv", 5)
    total = skv + extra.get("past", 0)
    mask = extra.get("mask")
    if mask == "float":
        args.append(rng.standard_normal((sq, total)).astype(np.float32))
    elif mask == "bool":
        m = rng.random((b, 1, sq, total)) > 0.3
        m[..., 0] = True
        args.append(m)
    elif mask == "short":
        args.append(rng.standard_normal((1, sq, total - 2)).astype(np.float32))
    if "past" in extra:
        hkv = shape.get("hkv", 4)
        if mask is None:
            args.append(None)
        args.append(rng.standard_normal((b, hkv, extra["past"], 8)).astype(np.float32))
        args.append(rng.standard_normal((b, hkv, extra["past"], shape.get("dv", 8))).astype(np.float32))
    n_out = 4 if "qk_matmul_output_mode" in attrs else (3 if "past" in extra else 1)
    if mask == "short":  # ONNX Runtime wants the full key length: the padding is "masked" keys
        padded = np.concatenate([args[3], np.full((1, sq, 2), -np.inf, np.float32)], axis=-1)
        want = check_ort("Attention", args[:3] + [padded], attrs, n_outputs=n_out, opset=23)
        np.testing.assert_allclose(check_facets("Attention", args, attrs)[0], want[0], rtol=1e-5, atol=1e-6)
        return
    check_ort("Attention", args, attrs, n_outputs=n_out, opset=23)
    check_facets("Attention", args, attrs)


def test_attention_nonpad_kv_seqlen():
    rng = np.random.default_rng(1)
    args = _qkv(rng, sq=2, skv=6) + [None, None, None, np.array([6, 3], np.int64)]
    check_ort("Attention", args, {}, opset=24)
    check_ort("Attention", args, {"is_causal": 1}, opset=24)
    check_facets("Attention", args, {"is_causal": 1})


def test_attention_softmax_precision_and_fully_masked_rows():
    rng = np.random.default_rng(2)
    args = _qkv(rng)
    mask = np.ones((3, 5), bool)
    mask[1] = False  # a query that sees no key: zeros
    y = check_ort("Attention", args + [mask], {"softmax_precision": 1}, opset=23)[0]
    assert np.all(y[:, :, 1] == 0)
    check_facets("Attention", args + [mask], {"softmax_precision": 11})


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("layout", ["3d", "4d"])
@pytest.mark.parametrize("positions", [True, False])
@pytest.mark.parametrize("rot_dim", [0, 4])
def test_rotary_embedding(interleaved, layout, positions, rot_dim):
    rng = np.random.default_rng(3)
    b, s, h, d = 2, 5, 3, 8
    half = (rot_dim or d) // 2
    x = rng.standard_normal((b, h, s, d) if layout == "4d" else (b, s, h * d)).astype(np.float32)
    if positions:
        angles = rng.uniform(0, 6, (11, half))
        args = [x, np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32),
                rng.integers(0, 11, (b, s)).astype(np.int64)]
    else:
        angles = rng.uniform(0, 6, (b, s, half))
        args = [x, np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)]
    attrs = {"interleaved": interleaved, "rotary_embedding_dim": rot_dim}
    if layout == "3d":
        attrs["num_heads"] = h
    check_ort("RotaryEmbedding", args, attrs, opset=23)
    check_facets("RotaryEmbedding", args, attrs)
