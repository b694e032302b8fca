"""DepthToSpace, SpaceToDepth, CenterCropPad and ReverseSequence: ONNX's node cases, ONNX
Runtime on random inputs, and every facet against the kernel."""

from __future__ import annotations

import numpy as np
import pytest

from corefold.ops.facet_checks_test import check_facets
from corefold.ops.onnx_cases_test import case_params, check_case, check_ort

MODULES = ("depthtospace", "spacetodepth", "center_crop_pad", "reversesequence")


@pytest.mark.parametrize("case", case_params(*MODULES))
def test_onnx_node_case(case):
    check_case(case)


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.float16])
def test_depth_to_space(mode, dtype):
    x = np.arange(2 * 18 * 3 * 4).reshape(2, 18, 3, 4).astype(dtype)
    check_ort("DepthToSpace", [x], {"blocksize": 3, "mode": mode})
    check_facets("DepthToSpace", [x], {"blocksize": 3, "mode": mode})


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_space_to_depth(mode):
    x = np.random.default_rng(0).standard_normal((2, 3, 6, 4)).astype(np.float32)
    check_ort("SpaceToDepth", [x], {"blocksize": 2, "mode": mode}, opset=28)
    check_facets("SpaceToDepth", [x], {"blocksize": 2, "mode": mode})
    if mode == "DCR":
        check_ort("SpaceToDepth", [x], {"blocksize": 2})


@pytest.mark.parametrize("shape,axes", [([5, 3], [1, 2]), ([2, 8, 2, 7], None), ([7], [-1]), ([2, 3, 9, 4], None)])
def test_center_crop_pad(shape, axes):
    x = np.random.default_rng(1).standard_normal((2, 3, 6, 5)).astype(np.float32)
    attrs = {} if axes is None else {"axes": axes}
    args = [x, np.array(shape, np.int64)]
    check_ort("CenterCropPad", args, attrs)
    check_facets("CenterCropPad", args, attrs)


@pytest.mark.parametrize("batch_axis,time_axis", [(1, 0), (0, 1), (0, 2), (2, 1)])
def test_reverse_sequence(batch_axis, time_axis):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 5, 6)).astype(np.float32)
    lens = rng.integers(1, x.shape[time_axis] + 1, x.shape[batch_axis]).astype(np.int64)
    attrs = {"batch_axis": batch_axis, "time_axis": time_axis}
    if (batch_axis, time_axis) in ((1, 0), (0, 1)):
        check_ort("ReverseSequence", [x[:, :, 0] if x.ndim == 3 else x, lens[: x.shape[batch_axis]]], attrs)
    check_facets("ReverseSequence", [x, lens], attrs)
    want = x.copy()
    for b, n in enumerate(lens):
        idx = [slice(None)] * 3
        idx[batch_axis] = b
        src = list(idx)
        idx[time_axis], src[time_axis] = slice(0, n), slice(n - 1, None, -1) if n else slice(0, 0)
        want[tuple(idx)] = x[tuple(src)]
    from corefold.ops.ort_oracle_test import run_kernel
    np.testing.assert_array_equal(run_kernel("ReverseSequence", [x, lens], attrs)[0], want)
