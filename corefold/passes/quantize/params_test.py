import numpy as np
import pytest

from corefold.passes.quantize.params import (
    SYMMETRIC,
    UNSIGNED,
    QuantizeError,
    check_bits,
    integer_range,
    params_for_range,
    weight_params,
)


def test_seed_examples():
    p = params_for_range(0.0, 6.0, 8)
    assert p.mode == UNSIGNED and (p.qmin, p.qmax) == (0, 255)
    assert float(p.k) == pytest.approx(255 / 6)
    p = params_for_range(-5.0, 3.0, 8)
    assert p.mode == SYMMETRIC and (p.qmin, p.qmax) == (-128, 127)
    assert float(p.k) == pytest.approx(127 / 5)
    # q = round(x * k), clipped
    assert p.quantize(np.array([-5.0, 3.0, 100.0])).tolist() == [-127, round(3 * 127 / 5), 127]


def test_integer_ranges_and_bits():
    assert integer_range(UNSIGNED, 4) == (0, 15)
    assert integer_range(SYMMETRIC, 16) == (-32768, 32767)
    with pytest.raises(QuantizeError):
        check_bits(3)
    assert params_for_range(0.0, 6.0, 8, allow_unsigned=False).mode == SYMMETRIC


def test_per_channel_weights():
    w = np.array([[1.0, -2.0], [0.5, 0.25]], np.float32)
    p = weight_params(w, 8, axis=0)
    assert p.mode == SYMMETRIC
    np.testing.assert_allclose(p.k, [127 / 2, 127 / 0.5])
    q = p.quantize(w)
    assert q.tolist() == [[64, -127], [127, 64]]
    assert np.abs(p.dequantize(q) - w).max() <= 0.5 / p.k.min() + 1e-6


def test_slice_axis_picks_the_least_rounding_error():
    from corefold.passes.quantize.params import slice_axis, weight_params

    rng = np.random.default_rng(0)
    assert slice_axis(rng.standard_normal(16)) is None  # one axis: one scale
    assert slice_axis(np.ones((3, 4))) is None  # no axis strictly better than one scale
    # rows of +-r_i: per-row scales are exact, per-column ones lose the small rows
    rows = np.sign(rng.standard_normal((5, 40))) * np.geomspace(0.01, 1.0, 5)[:, None]
    assert slice_axis(rows) == 0 and slice_axis(rows.T) == 1
    # the pick is the axis of least squared rounding error at 8 bits, measured
    for w in (rows, rng.standard_normal((1, 6, 32)) * np.geomspace(0.05, 2.0, 32),
              rng.standard_normal((4, 3, 3)) * np.array([0.1, 1.0, 10.0])[None, :, None]):
        errs = {}
        for ax in [None] + list(range(w.ndim)):
            p = weight_params(w, 8, axis=ax)
            errs[ax] = float(np.sum((p.dequantize(p.quantize(w)) - w) ** 2))
        best = slice_axis(w)
        assert errs[best] <= 1.05 * min(errs.values()) and errs[best] < errs[None]
