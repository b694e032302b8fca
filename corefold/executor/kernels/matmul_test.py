import numpy as np
import pytest

from corefold.executor.kernels.ort_oracle_test import check_node, randn


@pytest.mark.parametrize("attrs", [{}, {"transA": 1}, {"transB": 1}, {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0},
                                   {"beta": 0.0}])
@pytest.mark.parametrize("c_shape", [None, (), (6,), (1, 6), (4, 1), (4, 6)])
def test_gemm(attrs, c_shape):
    rng = np.random.default_rng(0)
    a = randn(rng, 5, 4) if attrs.get("transA") else randn(rng, 4, 5)
    b = randn(rng, 6, 5) if attrs.get("transB") else randn(rng, 5, 6)
    inputs = [a, b] + ([] if c_shape is None else [randn(rng, *c_shape)])
    check_node("Gemm", inputs, attrs)


@pytest.mark.parametrize("shapes", [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((2, 1, 3, 4), (3, 4, 2)),
                                    ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)), ((2, 3, 4), (2, 4, 6))])
def test_matmul(shapes):
    rng = np.random.default_rng(1)
    check_node("MatMul", [randn(rng, *shapes[0]), randn(rng, *shapes[1])])
