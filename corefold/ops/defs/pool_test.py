import numpy as np
import pytest

from corefold.ops.ort_oracle_test import check_node, randn

CASES = [
    {"kernel_shape": [3, 3]},
    {"kernel_shape": [3, 3], "strides": [2, 2]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 0, 1]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1},
    {"kernel_shape": [2, 2], "strides": [3, 3], "ceil_mode": 1},
    {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]},
    {"kernel_shape": [4, 4], "auto_pad": "SAME_LOWER", "strides": [2, 2]},
    {"kernel_shape": [3, 3], "auto_pad": "VALID", "strides": [2, 2]},
    {"kernel_shape": [2, 2], "dilations": [2, 2], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [3, 3], "dilations": [2, 1], "strides": [2, 2], "ceil_mode": 1},
]


@pytest.mark.parametrize("attrs", CASES)
def test_max_pool(attrs):
    rng = np.random.default_rng(0)
    check_node("MaxPool", [randn(rng, 2, 3, 11, 12)], attrs)


@pytest.mark.parametrize("attrs", CASES)
@pytest.mark.parametrize("include_pad", [0, 1])
def test_average_pool(attrs, include_pad):
    rng = np.random.default_rng(1)
    check_node("AveragePool", [randn(rng, 2, 3, 11, 12)], {**attrs, "count_include_pad": include_pad})


def test_pool_1d_3d():
    rng = np.random.default_rng(2)
    check_node("MaxPool", [randn(rng, 1, 2, 9)], {"kernel_shape": [3], "strides": [2], "pads": [1, 1]})
    check_node("AveragePool", [randn(rng, 1, 2, 9)], {"kernel_shape": [3], "strides": [2], "pads": [1, 1]})
    check_node("MaxPool", [randn(rng, 1, 2, 5, 6, 7)], {"kernel_shape": [2, 3, 2], "strides": [2, 2, 2]})
    check_node("AveragePool", [randn(rng, 1, 2, 5, 6, 7)], {"kernel_shape": [2, 3, 2], "pads": [1, 1, 0, 1, 1, 0]})


def test_max_pool_integers():
    rng = np.random.default_rng(3)
    x = rng.integers(-100, 100, (1, 2, 6, 6)).astype(np.int8)
    check_node("MaxPool", [x], {"kernel_shape": [2, 2], "pads": [1, 1, 1, 1], "strides": [2, 2]})


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pool(op):
    rng = np.random.default_rng(4)
    check_node(op, [randn(rng, 2, 5, 7, 6)])
    check_node(op, [randn(rng, 2, 5, 7)])


def test_windows_is_the_strided_sliding_window_view():
    from corefold.ops.spatial import windows
    rng = np.random.default_rng(5)
    xp = randn(rng, 2, 3, 13, 11)
    for kernel, strides, dil in [((3, 3), (1, 1), (1, 1)), ((3, 2), (2, 3), (2, 1)), ((1, 4), (3, 1), (1, 2))]:
        dk = [(k - 1) * d + 1 for k, d in zip(kernel, dil, strict=True)]
        outs = [(n - e) // s + 1 for n, e, s in zip(xp.shape[2:], dk, strides, strict=True)]
        ref = np.lib.stride_tricks.sliding_window_view(xp, dk, axis=(2, 3))
        ref = ref[:, :, ::strides[0], ::strides[1], ::dil[0], ::dil[1]][:, :, :outs[0], :outs[1]]
        got = windows(xp, kernel, strides, dil, outs)
        assert got.shape == ref.shape and np.array_equal(got, ref) and not got.flags.writeable
    with pytest.raises(ValueError):
        windows(xp, (3, 3), (1, 1), (1, 1), (12, 9))
