"""Row bands on ONNX's node conformance cases: every Conv, MaxPool and AveragePool case
of the installed onnx that corefold's executor passes, cut into bands of output rows
(``passes/split/rows.py``, which the split pass uses for an image too large for a core and
the backend for parallelism), must still give the case's expected outputs by ONNX's own
rule. The cases cover what hand-built graphs rarely do: asymmetric and explicit pads,
strides, dilations, ``ceil_mode``, ``count_include_pad``, grouped and 1 x 1 kernels.
Executor only, about a second in all.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_node_conformance import CASES, expected_failures

from corefold.executor import run
from corefold.frontend.onnx import from_onnx
from corefold.frontend.onnx.node_cases import compare_outputs, split_feeds
from corefold.passes.split.rows import cut_rows, row_cuttable

NAMES = sorted(n for n in set(CASES) - set(expected_failures())
               if any(node.op_type in ("Conv", "MaxPool", "AveragePool") for node in CASES[n].model.graph.node))


def _cut_every_row_op(graph) -> int:
    """Cut every row-cuttable node into 2 or 3 bands (as many as its output has rows, up
    to 3); return how many were cut."""
    cut = 0
    for node in list(graph.nodes):
        if row_cuttable(node) and node.outputs[0].shape[2] >= 2:
            cut_rows(graph, node, min(3, node.outputs[0].shape[2]))
            cut += 1
    graph.sort()
    return cut


@pytest.mark.parametrize("name", NAMES)
def test_row_bands_of_a_node_case_give_its_expected_outputs(name: str) -> None:
    case = CASES[name]
    for inputs, expected in case.data_sets:
        feeds, values = split_feeds(case.model, inputs)
        shapes = {k: v.shape for k, v in feeds.items() if isinstance(v, np.ndarray)}
        graph = from_onnx(case.model, shapes, values=values)
        if not _cut_every_row_op(graph):
            pytest.skip("no operator here can be cut in rows (rank 3 or 5, ceil_mode, Indices, one row)")
        with np.errstate(all="ignore"):
            out = run(graph, feeds)
        problem = compare_outputs(expected, [out[v.name] for v in graph.outputs], case.rtol, case.atol)
        assert problem is None, f"{name}: {problem}"


def test_the_cases_cut_in_rows_are_many() -> None:
    """The cases really exercise the cut (26 of the 58 of onnx 1.23: the others are of
    rank 3 or 5, an AveragePool with ``ceil_mode``, a MaxPool with its Indices output, or
    have one output row)."""
    cut = 0
    for name in NAMES:
        case = CASES[name]
        inputs, _ = case.data_sets[0]
        feeds, values = split_feeds(case.model, inputs)
        graph = from_onnx(case.model, {k: v.shape for k, v in feeds.items() if isinstance(v, np.ndarray)},
                          values=values)
        cut += bool(_cut_every_row_op(graph))
    assert len(NAMES) >= 50 and cut >= 20, (len(NAMES), cut)
