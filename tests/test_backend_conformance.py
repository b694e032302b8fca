"""ONNX's node conformance cases through the backend: lower, run the executable, compare.

Every case of the installed onnx's node test suite that corefold's executor passes
(``test_node_conformance.py``: the same cache, feeds and value bindings) is lowered onto
the 2 x 2 ``npu-2x2`` preset with the fast preset (no order search), and its executable is
run twice: by the executable's reference runner (``backend.run_executable``) and by the
simulator (``sim.run_simulation``, which refuses NaN or infinite inputs as bad data, so
cases that feed them are run by the first only). Every output is compared with the
expected one by ONNX's own rule (the case's rtol and atol), as for the executor.

These cases found four bugs the hand-built graphs had not: a 0-d buffer read as a NumPy
scalar (loss functions reduced to a scalar), the Attention cost when a node lists Y alone,
a Dropout whose mask is a graph output or that runs in training mode (it was lowered as a
copy), and a Reshape of a tensor without elements.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_node_conformance import CASES, expected_failures

from corefold.backend import FAST, lower, run_executable
from corefold.frontend.onnx import from_onnx
from corefold.frontend.onnx.node_cases import compare_outputs, split_feeds
from corefold.sim.simulate import run_simulation
from corefold.target import load_target

TARGET = load_target("npu-2x2")
NAMES = sorted(set(CASES) - set(expected_failures()))


@pytest.mark.parametrize("name", NAMES)
def test_lowered_node_case(name: str) -> None:
    case = CASES[name]
    for inputs, expected in case.data_sets:
        feeds, values = split_feeds(case.model, inputs)
        shapes = {k: v.shape for k, v in feeds.items() if isinstance(v, np.ndarray)}
        graph = from_onnx(case.model, shapes, values=values)
        exe = lower(graph, TARGET, FAST)
        names = [v.name for v in graph.outputs]
        with np.errstate(all="ignore"):  # cases feed inf/NaN-producing data on purpose
            out = run_executable(exe, feeds)
        problem = compare_outputs(expected, [out[k] for k in names], case.rtol, case.atol)
        assert problem is None, f"{name} (run_executable): {problem}"
        if all(_finite(x) for x in feeds.values()):
            with np.errstate(all="ignore"):
                sim = run_simulation(exe, feeds, TARGET)
            problem = compare_outputs(expected, [sim.outputs[k] for k in names], case.rtol, case.atol)
            assert problem is None, f"{name} (run_simulation): {problem}"


def _finite(x) -> bool:
    """No NaN or infinity in ``x`` (integers and booleans have none; float8 and bfloat16
    are widened to float64 to look)."""
    x = np.asarray(x)
    return x.dtype.kind in "biu" or bool(np.isfinite(x.astype(np.float64)).all())


def test_every_case_the_executor_passes_is_lowered() -> None:
    """The backend's list is the executor's: nothing is left out here."""
    assert len(NAMES) >= 1700 and not set(NAMES) & set(expected_failures())
