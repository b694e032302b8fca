import numpy as np
import pytest

from corefold.ops.ort_oracle_test import check_node, randn


@pytest.mark.parametrize("attrs,group,kernel", [
    ({}, 1, (3, 3)),
    ({"pads": [1, 1, 1, 1]}, 1, (3, 3)),
    ({"strides": [2, 2], "pads": [1, 0, 2, 1]}, 1, (3, 3)),
    ({"dilations": [2, 1], "pads": [2, 1, 2, 1]}, 1, (3, 3)),
    ({"auto_pad": "SAME_UPPER", "strides": [2, 2]}, 1, (4, 4)),
    ({"auto_pad": "SAME_LOWER", "strides": [2, 2]}, 1, (4, 4)),
    ({"auto_pad": "VALID", "strides": [3, 2]}, 1, (3, 2)),
    ({"group": 2, "pads": [1, 1, 1, 1]}, 2, (3, 3)),
    ({"group": 6, "pads": [1, 1, 1, 1], "strides": [2, 2]}, 6, (3, 3)),
    ({"group": 3}, 3, (1, 1)),
    ({"strides": [2, 2]}, 1, (1, 1)),
    ({"kernel_shape": [5, 5], "pads": [2, 2, 2, 2], "dilations": [1, 2], "strides": [1, 2]}, 1, (5, 5)),
])
@pytest.mark.parametrize("bias", [False, True])
def test_conv2d(attrs, group, kernel, bias):
    rng = np.random.default_rng(0)
    c, m = 6, 12
    x = randn(rng, 2, c, 11, 13)
    w = randn(rng, m, c // group, *kernel)
    inputs = [x, w] + ([randn(rng, m)] if bias else [])
    if group != 1:
        attrs = {**attrs, "group": group}
    check_node("Conv", inputs, attrs)


def test_conv_depthwise_multiplier():
    rng = np.random.default_rng(1)
    x = randn(rng, 1, 8, 9, 9)
    w = randn(rng, 16, 1, 3, 3)
    check_node("Conv", [x, w, randn(rng, 16)], {"group": 8, "pads": [1, 1, 1, 1], "strides": [2, 2]})


@pytest.mark.parametrize("attrs", [{}, {"pads": [2, 1], "strides": [2], "dilations": [2]},
                                   {"auto_pad": "SAME_UPPER", "strides": [3]}, {"group": 2}])
def test_conv1d(attrs):
    rng = np.random.default_rng(2)
    x = randn(rng, 2, 4, 17)
    w = randn(rng, 6, 4 // attrs.get("group", 1), 3)
    check_node("Conv", [x, w, randn(rng, 6)], attrs)


def test_conv3d():
    rng = np.random.default_rng(3)
    x = randn(rng, 1, 3, 6, 7, 8)
    w = randn(rng, 4, 3, 3, 2, 3)
    check_node("Conv", [x, w], {"pads": [1, 0, 1, 1, 1, 0], "strides": [1, 2, 2]})


@pytest.mark.parametrize("attrs,group", [
    ({}, 1),
    ({"strides": [2, 2]}, 1),
    ({"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}, 1),
    ({"strides": [3, 2], "pads": [1, 2, 1, 2]}, 1),
    ({"strides": [2, 2], "dilations": [2, 1]}, 1),
    ({"strides": [2, 2], "group": 2}, 2),
    ({"strides": [2, 2], "output_shape": [11, 12]}, 1),
    ({"strides": [2, 2], "output_shape": [9, 10]}, 1),
    ({"strides": [2, 2], "output_shape": [9, 10], "auto_pad": "SAME_LOWER"}, 1),
    ({"strides": [2, 2], "output_shape": [10, 10], "auto_pad": "SAME_UPPER"}, 1),
    ({"strides": [2, 2], "auto_pad": "SAME_UPPER"}, 1),
    ({"strides": [2, 2], "auto_pad": "SAME_LOWER"}, 1),
    ({"strides": [2, 2], "auto_pad": "VALID"}, 1),
])
def test_conv_transpose(attrs, group):
    rng = np.random.default_rng(4)
    c = 4
    x = randn(rng, 2, c, 5, 5)
    w = randn(rng, c, 3, 3, 3)
    check_node("ConvTranspose", [x, w, randn(rng, 3 * group)], attrs)


def test_conv_transpose_1d():
    rng = np.random.default_rng(5)
    check_node("ConvTranspose", [randn(rng, 1, 2, 7), randn(rng, 2, 3, 4)], {"strides": [3], "pads": [1, 2]})


def test_conv_reads_broadcast_weights():
    rng = np.random.default_rng(6)
    x = randn(rng, 1, 3, 8, 8)
    w = np.broadcast_to(np.float32(0.5), (4, 3, 3, 3))
    from corefold.ops.defs.conv import conv
    got = conv({}, [x, w])[0]
    check_node("Conv", [x, np.ascontiguousarray(w)], {})
    want = check_node("Conv", [x, np.ascontiguousarray(w)], {})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("attrs,group", [({"pads": [1, 1, 1, 1]}, 1), ({"strides": [2, 2], "dilations": [1, 2]}, 1),
                                         ({"group": 3, "pads": [0, 1, 1, 0]}, 3), ({}, 1)])
def test_conv_single_value_weights_give_identical_channels(attrs, group):
    from corefold.ops.defs.conv import conv
    rng = np.random.default_rng(7)
    x = randn(rng, 2, 6, 9, 10) * np.float32(1e3)
    kernel = (3, 3) if attrs else (1, 1)
    w = np.broadcast_to(np.float32(0.37), (12, 6 // group) + kernel)
    b = randn(rng, 12)
    attrs = {**attrs, "group": group} if group > 1 else attrs
    got = conv(attrs, [x, w, b])[0]
    want = check_node("Conv", [x, np.ascontiguousarray(w), b], attrs, rtol=1e-5, atol=1e-2)[0]
    assert got.shape == want.shape and got.flags.writeable
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-2)
    plain = conv(attrs, [x, w])[0].reshape(2, group, 12 // group, *got.shape[2:])
    assert np.all(plain == plain[:, :, :1]), "channels of one group must be identical"


def test_conv_transpose_3d_grouped_dilated():
    rng = np.random.default_rng(8)
    x = randn(rng, 1, 4, 3, 4, 3)
    w = randn(rng, 4, 2, 2, 3, 2)
    check_node("ConvTranspose", [x, w, randn(rng, 4)],
               {"group": 2, "strides": [2, 1, 2], "dilations": [1, 2, 1], "pads": [0, 1, 1, 1, 0, 0],
                "output_padding": [1, 0, 1]})


@pytest.mark.parametrize("attrs,kernel", [({"pads": [1, 1, 1, 1]}, (3, 3)), ({}, (3, 3)), ({"pads": [2, 0, 1, 2]}, (5, 3)),
                                          ({"dilations": [2, 3], "pads": [2, 3, 2, 3]}, (3, 3)),
                                          ({"auto_pad": "SAME_UPPER"}, (4, 2)), ({"pads": [0, 3, 0, 3]}, (1, 7)),
                                          ({"strides": [2, 2], "pads": [1, 1, 1, 1]}, (3, 3)),
                                          ({"strides": [2, 3], "pads": [0, 1, 2, 1], "dilations": [2, 1]}, (3, 3)),
                                          ({"strides": [3, 2], "auto_pad": "SAME_LOWER"}, (5, 4)),
                                          ({"strides": [2, 1]}, (1, 1))])
@pytest.mark.parametrize("n", [1, 2])
def test_depthwise(attrs, kernel, n):
    rng = np.random.default_rng(9)
    c = 5
    x = randn(rng, n, c, 9, 7)
    check_node("Conv", [x, randn(rng, c, 1, *kernel), randn(rng, c)], {**attrs, "group": c})
