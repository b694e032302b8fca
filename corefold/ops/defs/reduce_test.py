import numpy as np
import pytest

from corefold.ops.ort_oracle_test import check_node, randn

AXES = [None, [1], [-1], [0, 2], [1, 2, 3], []]


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd",
                                "ReduceSumSquare", "ReduceL1", "ReduceL2"])
@pytest.mark.parametrize("axes", AXES)
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce(op, axes, keepdims):
    rng = np.random.default_rng(0)
    x = randn(rng, 2, 3, 4, 5)
    if op == "ReduceProd":
        x = np.float32(1) + x * np.float32(0.1)
    ax = None if axes is None else np.array(axes, dtype=np.int64)
    check_node(op, [x, ax], {"keepdims": keepdims})


@pytest.mark.parametrize("axes", [None, []])
def test_reduce_noop_with_empty_axes(axes):
    rng = np.random.default_rng(1)
    ax = None if axes is None else np.array(axes, dtype=np.int64)
    check_node("ReduceMean", [randn(rng, 2, 3), ax], {"noop_with_empty_axes": 1})


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("attrs", [{}, {"axis": 1, "keepdims": 0}, {"axis": -1, "select_last_index": 1}])
def test_arg(op, attrs):
    x = np.array([[1, 3, 3, 0], [2, 2, 0, 0], [5, 1, 5, 1]], dtype=np.float32)
    check_node(op, [x], attrs)
