import numpy as np
import pytest

from corefold.ops.ort_oracle_test import check_node, randn


@pytest.mark.parametrize("shape", [(2, 4, 5, 6), (3, 4), (2, 4, 7)])
@pytest.mark.parametrize("attrs", [{}, {"epsilon": 1e-3}])
def test_batch_normalization(shape, attrs):
    rng = np.random.default_rng(0)
    c = shape[1]
    var = np.abs(randn(rng, c)) + np.float32(0.1)
    check_node("BatchNormalization", [randn(rng, *shape), randn(rng, c), randn(rng, c), randn(rng, c), var], attrs)


def test_instance_normalization():
    rng = np.random.default_rng(1)
    check_node("InstanceNormalization", [randn(rng, 2, 3, 5, 4), randn(rng, 3), randn(rng, 3)], {"epsilon": 1e-4})


@pytest.mark.parametrize("attrs", [{"size": 5}, {"size": 3, "alpha": 1e-2, "beta": 0.5, "bias": 2.0},
                                   {"size": 1}, {"size": 9}])
def test_lrn(attrs):
    rng = np.random.default_rng(2)
    check_node("LRN", [randn(rng, 2, 6, 4, 5) * np.float32(3)], attrs)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("attrs", [{}, {"axis": 1}, {"axis": 0}, {"axis": -2}])
def test_softmax(op, attrs):
    rng = np.random.default_rng(3)
    check_node(op, [randn(rng, 3, 4, 5) * np.float32(5)], attrs)


@pytest.mark.parametrize("attrs", [{}, {"axis": 1}, {"axis": -2, "epsilon": 1e-3}, {"axis": 0}])
@pytest.mark.parametrize("bias", [True, False])
def test_layer_normalization(attrs, bias):
    rng = np.random.default_rng(4)
    shape = (2, 3, 4, 5)
    axis = attrs.get("axis", -1) % 4
    nshape = shape[axis:]
    inputs = [randn(rng, *shape), randn(rng, *nshape)] + ([randn(rng, *nshape)] if bias else [])
    check_node("LayerNormalization", inputs, attrs, n_outputs=3)
