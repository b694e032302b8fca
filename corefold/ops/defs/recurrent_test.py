"""RNN, GRU and LSTM: ONNX's node cases, ONNX Runtime on random inputs over directions,
sequence lengths, layouts, clipping, activations, peepholes, linear_before_reset and
input_forget, and every facet against the kernel."""

from __future__ import annotations

import numpy as np
import pytest

from corefold.ops.facet_checks_test import check_facets
from corefold.ops.onnx_cases_test import case_params, check_case, check_ort


@pytest.mark.parametrize("case", case_params("rnn", "gru", "lstm"))
def test_onnx_node_case(case):
    check_case(case)


GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _inputs(op, rng, direction="forward", layout=0, lens=False, initial=False, peepholes=False, t=5, b=3, i=4, h=6):
    d = 2 if direction == "bidirectional" else 1
    g = GATES[op]
    x = rng.standard_normal((b, t, i) if layout else (t, b, i)).astype(np.float32)
    w = (rng.standard_normal((d, g * h, i)) * 0.5).astype(np.float32)
    r = (rng.standard_normal((d, g * h, h)) * 0.5).astype(np.float32)
    bias = (rng.standard_normal((d, 2 * g * h)) * 0.2).astype(np.float32)
    seq = rng.integers(1, t + 1, b).astype(np.int32) if lens else None
    state = (b, d, h) if layout else (d, b, h)
    h0 = rng.standard_normal(state).astype(np.float32) if initial else None
    args = [x, w, r, bias, seq, h0]
    if op == "LSTM":
        args.append(rng.standard_normal(state).astype(np.float32) if initial else None)
        args.append((rng.standard_normal((d, 3 * h)) * 0.3).astype(np.float32) if peepholes else None)
    while args[-1] is None:
        args.pop()
    return args, {"hidden_size": h, "direction": direction, "layout": layout}


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("lens", [False, True])
def test_recurrent_against_ort(op, direction, layout, lens):
    rng = np.random.default_rng(0)
    args, attrs = _inputs(op, rng, direction, layout, lens, initial=True, peepholes=True)
    outs = 3 if op == "LSTM" else 2
    if layout == 0:
        check_ort(op, args, attrs, n_outputs=outs, rtol=1e-4, atol=1e-5)
    else:  # ONNX Runtime has no batch-first kernel: compare with its sequence-first result
        from corefold.ops.ort_oracle_test import run_kernel, run_ort

        seq_first = [np.swapaxes(a, 0, 1) if i in (0, 5, 6) and a is not None else a for i, a in enumerate(args)]
        want = run_ort(op, seq_first, {**attrs, "layout": 0}, outs)
        got = run_kernel(op, args, attrs)
        np.testing.assert_allclose(got[0], np.transpose(want[0], (2, 0, 1, 3)), rtol=1e-4, atol=1e-5)
        for g, w in zip(got[1:], want[1:], strict=True):
            np.testing.assert_allclose(g, np.swapaxes(w, 0, 1), rtol=1e-4, atol=1e-5)
    check_facets(op, args, attrs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op,attrs", [
    ("RNN", {"activations": ["Relu"]}), ("RNN", {"activations": ["LeakyRelu"], "activation_alpha": [0.2]}),
    ("RNN", {"clip": 0.5}), ("GRU", {"linear_before_reset": 1}),
    ("GRU", {"activations": ["HardSigmoid", "Softsign"], "activation_alpha": [0.3], "activation_beta": [0.4]}),
    ("LSTM", {"input_forget": 1}), ("LSTM", {"clip": 0.7}),
    ("LSTM", {"activations": ["HardSigmoid", "Tanh", "Softplus"]}),
    ("GRU", {"direction": "bidirectional", "activations": ["Sigmoid", "Tanh", "Sigmoid", "Relu"]}),
])
def test_recurrent_attributes(op, attrs):
    rng = np.random.default_rng(1)
    args, base = _inputs(op, rng, attrs.get("direction", "forward"), lens=True, initial=True)
    a = {**base, **attrs}
    check_ort(op, args, a, n_outputs=3 if op == "LSTM" else 2, rtol=1e-4, atol=1e-5)
    check_facets(op, args, a)


def test_lstm_without_optional_inputs():
    rng = np.random.default_rng(2)
    args, attrs = _inputs("LSTM", rng)
    check_ort("LSTM", args[:3], attrs, n_outputs=3, rtol=1e-4, atol=1e-5)
    check_facets("LSTM", args[:3], attrs)


def test_steps_past_a_sequence_length_keep_the_state_and_write_zeros():
    from corefold.ops.ort_oracle_test import run_kernel

    rng = np.random.default_rng(3)
    args, attrs = _inputs("GRU", rng, "bidirectional", lens=True, initial=True, t=6, b=2)
    args[4] = np.array([6, 2], np.int32)
    y, yh = run_kernel("GRU", args, attrs)
    assert np.all(y[2:, :, 1] == 0)
    np.testing.assert_array_equal(yh[0, 1], y[1, 0, 1])  # forward: last valid step
    np.testing.assert_array_equal(yh[1, 1], y[0, 1, 1])  # backward: its first step
