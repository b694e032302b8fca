"""GridSample, AffineGrid, RoiAlign and MaxRoiPool: ONNX's node cases, ONNX Runtime on
random inputs, and every facet against the kernel."""

from __future__ import annotations

import numpy as np
import pytest

from corefold.ops.facet_checks_test import check_facets
from corefold.ops.onnx_cases_test import case_params, check_case, check_ort


@pytest.mark.parametrize("case", case_params("gridsample", "affinegrid", "roialign"))
def test_onnx_node_case(case):
    check_case(case)


@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_2d(mode, padding, align):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 5, 6)).astype(np.float32)
    grid = rng.uniform(-1.4, 1.4, (2, 4, 7, 2)).astype(np.float32)
    attrs = {"mode": mode, "padding_mode": padding, "align_corners": align}
    check_ort("GridSample", [x, grid], attrs, opset=20, rtol=1e-4, atol=1e-4)
    check_facets("GridSample", [x, grid], attrs)
    old = {"mode": {"linear": "bilinear", "cubic": "bicubic"}.get(mode, mode), "padding_mode": padding,
           "align_corners": align}
    check_ort("GridSample", [x, grid], old, opset=16, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", ["linear", "nearest"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_grid_sample_3d(mode, padding):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 2, 4, 5, 3)).astype(np.float32)
    grid = rng.uniform(-1.2, 1.2, (1, 3, 2, 4, 3)).astype(np.float32)
    attrs = {"mode": mode, "padding_mode": padding}
    check_ort("GridSample", [x, grid], attrs, opset=20, rtol=1e-4, atol=1e-4)
    check_facets("GridSample", [x, grid], attrs)


@pytest.mark.parametrize("align", [0, 1])
@pytest.mark.parametrize("size", [(2, 3, 4, 5), (2, 1, 3, 4, 2)])
def test_affine_grid(align, size):
    rng = np.random.default_rng(2)
    k = len(size) - 2
    theta = rng.standard_normal((2, k, k + 1)).astype(np.float32)
    args = [theta, np.array(size, np.int64)]
    check_ort("AffineGrid", args, {"align_corners": align}, opset=20)
    check_facets("AffineGrid", args, {"align_corners": align})


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("transform", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize("ratio", [0, 2])
def test_roi_align(mode, transform, ratio):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 10, 12)).astype(np.float32)
    corners = rng.uniform(-2, 12, (5, 2, 2))
    rois = np.concatenate([corners.min(axis=1), corners.max(axis=1)], axis=1).astype(np.float32)
    idx = rng.integers(0, 2, 5).astype(np.int64)
    attrs = {"mode": mode, "coordinate_transformation_mode": transform, "sampling_ratio": ratio,
             "output_height": 3, "output_width": 4, "spatial_scale": 0.8}
    check_ort("RoiAlign", [x, rois, idx], attrs, rtol=1e-4, atol=1e-5)
    check_facets("RoiAlign", [x, rois, idx], attrs)


def test_max_roi_pool():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 9, 11)).astype(np.float32)
    rois = np.array([[0, 1, 1, 6, 7], [1, 0, 0, 10, 8], [0, 3, 2, 3, 2], [1, 2.4, 1.6, 9.3, 5.5]], np.float32)
    for attrs in ({"pooled_shape": [2, 3]}, {"pooled_shape": [3, 3], "spatial_scale": 0.5}):
        check_ort("MaxRoiPool", [x, rois], attrs)
        check_facets("MaxRoiPool", [x, rois], attrs)
