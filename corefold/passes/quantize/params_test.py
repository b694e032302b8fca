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
