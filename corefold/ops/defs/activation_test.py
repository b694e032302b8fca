import numpy as np
import pytest

from corefold.ops.ort_oracle_test import check_node, randn


@pytest.mark.parametrize("op,attrs", [
    ("Relu", {}), ("Sigmoid", {}), ("Tanh", {}), ("Erf", {}),
    ("HardSigmoid", {}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
    ("HardSwish", {}), ("LeakyRelu", {}), ("LeakyRelu", {"alpha": 0.2}),
    ("Elu", {}), ("Elu", {"alpha": 0.5}), ("Selu", {}), ("Softplus", {}), ("Softsign", {}),
    ("Gelu", {}), ("Gelu", {"approximate": "tanh"}),
])
def test_activation(op, attrs):
    rng = np.random.default_rng(0)
    x = randn(rng, 2, 3, 4, 5) * np.float32(4)
    check_node(op, [x], attrs)


@pytest.mark.parametrize("bounds", [(None, None), (-0.5, None), (None, 0.7), (-1.0, 1.0)])
def test_clip(bounds):
    rng = np.random.default_rng(1)
    x = randn(rng, 3, 7)
    lo, hi = (None if b is None else np.array(b, dtype=np.float32) for b in bounds)
    check_node("Clip", [x, lo, hi])


def test_prelu():
    rng = np.random.default_rng(2)
    check_node("PRelu", [randn(rng, 2, 3, 4, 4), randn(rng, 3, 1, 1)])
