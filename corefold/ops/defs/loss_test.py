"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss: ONNX's node cases, ONNX Runtime
on random inputs, and every facet against the kernel."""

from __future__ import annotations

import numpy as np
import pytest

from corefold.ops.facet_checks_test import check_facets
from corefold.ops.onnx_cases_test import case_params, check_case, check_ort


@pytest.mark.parametrize("case", case_params("negativeloglikelihoodloss", "softmax_cross_entropy_loss"))
def test_onnx_node_case(case):
    check_case(case)


@pytest.mark.parametrize("op", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore", [None, 2])
@pytest.mark.parametrize("shape", [(4, 5), (3, 5, 2, 3)])
def test_losses_against_ort(op, reduction, weighted, ignore, shape):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    target = rng.integers(0, shape[1], (shape[0],) + shape[2:]).astype(np.int64)
    args = [x, target] + ([rng.uniform(0.5, 2, shape[1]).astype(np.float32)] if weighted else [])
    attrs = {"reduction": reduction} | ({} if ignore is None else {"ignore_index": ignore})
    n_out = 2 if op == "SoftmaxCrossEntropyLoss" else 1
    check_ort(op, args, attrs, n_outputs=n_out)
    check_facets(op, args, attrs)
