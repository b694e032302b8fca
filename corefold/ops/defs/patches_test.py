"""Col2Im and DeformConv: ONNX's node cases, ONNX Runtime on random inputs, and every
facet against the kernel."""

from __future__ import annotations

import numpy as np
import pytest

from corefold.ops.facet_checks_test import check_facets
from corefold.ops.onnx_cases_test import case_params, check_case, check_ort


@pytest.mark.parametrize("case", case_params("col2im", "deformconv"))
def test_onnx_node_case(case):
    check_case(case)


@pytest.mark.parametrize("attrs", [{}, {"strides": [2, 1]}, {"pads": [1, 0, 1, 2]}, {"dilations": [2, 2]},
                                   {"strides": [2, 2], "pads": [1, 1, 1, 1], "dilations": [1, 2]}])
def test_col2im(attrs):
    rng = np.random.default_rng(0)
    image, block = [7, 8], [3, 2]
    k = 2
    dil = attrs.get("dilations", [1] * k)
    pads = attrs.get("pads", [0] * 2 * k)
    st = attrs.get("strides", [1] * k)
    blocks = np.prod([(image[i] + pads[i] + pads[i + k] - dil[i] * (block[i] - 1) - 1) // st[i] + 1 for i in range(k)])
    x = rng.standard_normal((2, 3 * 6, int(blocks))).astype(np.float32)
    args = [x, np.array(image, np.int64), np.array(block, np.int64)]
    check_ort("Col2Im", args, attrs, opset=18)
    check_facets("Col2Im", args, attrs)


@pytest.mark.parametrize("attrs", [{}, {"pads": [1, 1, 1, 1], "strides": [2, 2]}, {"group": 2, "offset_group": 2},
                                   {"dilations": [2, 1], "offset_group": 4}])
@pytest.mark.parametrize("with_mask", [False, True])
def test_deform_conv(attrs, with_mask):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 4, 7, 8)).astype(np.float32)
    w = rng.standard_normal((6, 4 // attrs.get("group", 1), 3, 3)).astype(np.float32)
    st, pads, dil = attrs.get("strides", [1, 1]), attrs.get("pads", [0] * 4), attrs.get("dilations", [1, 1])
    outs = [(x.shape[2 + i] + pads[i] + pads[i + 2] - dil[i] * 2 - 1) // st[i] + 1 for i in range(2)]
    og = attrs.get("offset_group", 1)
    offset = (rng.standard_normal((2, og * 9 * 2, *outs)) * 1.5).astype(np.float32)
    args = [x, w, offset, rng.standard_normal(6).astype(np.float32)]
    if with_mask:
        args.append(rng.uniform(0, 1, (2, og * 9, *outs)).astype(np.float32))
    a = {"kernel_shape": [3, 3], **attrs}
    check_ort("DeformConv", args, a, opset=19, rtol=1e-4, atol=1e-4)
    check_facets("DeformConv", args, a, rtol=1e-5, atol=1e-5)
