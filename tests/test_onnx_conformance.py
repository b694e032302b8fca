"""Import -> export of every model in the installed onnx package's pytorch-converted,
pytorch-operator and simple test sets (opsets 6-9, about 120 models), bound to their test
data's input shapes: the exported model passes the full checker and ONNX Runtime on it
reproduces the stored expected outputs (rtol 1e-3, atol 1e-4, as ONNX's backend tests).
Models that corefold must refuse are listed with the error they must raise."""

from __future__ import annotations

import glob
import os

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from corefold.errors import ShapeError, UnsupportedOpError
from corefold.frontend.onnx import from_onnx, to_onnx
from corefold.frontend.onnx.check import ort_run

DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
CASES = sorted(d for s in ("pytorch-converted", "pytorch-operator", "simple")
               for d in glob.glob(os.path.join(DATA, s, "test_*")) if os.path.isdir(os.path.join(d, "test_data_set_0")))

#: Models corefold must refuse, and how.
REFUSED = {
    **{f"test_expand_shape_model{i}": ShapeError for i in range(1, 5)},  # Expand to a fed shape
    "test_gradient_of_add": UnsupportedOpError, "test_gradient_of_add_and_mul": UnsupportedOpError,
    "test_sequence_model1": UnsupportedOpError, **{f"test_sequence_model{i}": UnsupportedOpError for i in range(2, 9)},
    **{n: UnsupportedOpError for n in (  # string tensors
        "test_strnorm_model_monday_casesensintive_lower", "test_strnorm_model_monday_casesensintive_nochangecase",
        "test_strnorm_model_monday_casesensintive_upper", "test_strnorm_model_monday_empty_output",
        "test_strnorm_model_monday_insensintive_upper_twodim", "test_strnorm_model_nostopwords_nochangecase")},
}


def _tensors(folder: str, prefix: str) -> list[np.ndarray]:
    files = glob.glob(os.path.join(folder, f"{prefix}_*.pb"))
    files.sort(key=lambda p: int(p.rsplit("_", 1)[1][:-3]))
    return [numpy_helper.to_array(onnx.load_tensor(p)) for p in files]


def test_the_test_sets_are_there():
    assert len(CASES) > 100


@pytest.mark.parametrize("case", CASES, ids=os.path.basename)
def test_exported_model_reproduces_expected_outputs(case):
    model = onnx.load(os.path.join(case, "model.onnx"))
    name = os.path.basename(case)
    data = os.path.join(case, "test_data_set_0")
    init = {t.name for t in model.graph.initializer}
    real = [vi.name for vi in model.graph.input if vi.name not in init]
    feeds = dict(zip(real, _tensors(data, "input"), strict=True))
    shapes = {k: v.shape for k, v in feeds.items()}
    if name in REFUSED:
        with pytest.raises(REFUSED[name]):
            from_onnx(model, shapes)
        return
    graph = from_onnx(model, shapes)
    exported = to_onnx(graph)
    onnx.checker.check_model(exported, full_check=True)
    got = ort_run(exported, feeds)
    expected = _tensors(data, "output")
    assert len(expected) == len(model.graph.output)
    for vi, want in zip(model.graph.output, expected, strict=True):
        assert got[vi.name].shape == want.shape, vi.name
        np.testing.assert_allclose(got[vi.name], want, rtol=1e-3, atol=1e-4, err_msg=vi.name)
