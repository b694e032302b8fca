"""The reference executor on the ONNX backend test models of the installed onnx package
(pytorch-converted, pytorch-operator and simple sets, opsets 6-9): for every model the
importer accepts, ``corefold.executor.run`` reproduces the stored expected outputs
(rtol 1e-3, atol 1e-4, the backend tests' own tolerance). Which models the importer must
refuse is tests/test_onnx_conformance.py's business."""

from __future__ import annotations

import glob
import os

import numpy as np
import onnx
from onnx import numpy_helper

from corefold.errors import CorefoldError
from corefold.executor import run
from corefold.frontend.onnx import from_onnx

DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
CASES = sorted(d for s in ("pytorch-converted", "pytorch-operator", "simple")
               for d in glob.glob(os.path.join(DATA, s, "test_*")) if os.path.isdir(os.path.join(d, "test_data_set_0")))


def _tensors(folder: str, prefix: str) -> list[np.ndarray]:
    files = glob.glob(os.path.join(folder, f"{prefix}_*.pb"))
    files.sort(key=lambda p: int(p.rsplit("_", 1)[1][:-3]))
    return [numpy_helper.to_array(onnx.load_tensor(p)) for p in files]


def _case(case: str):
    """(graph, feeds, expected outputs), or None when the importer refuses the model."""
    model = onnx.load(os.path.join(case, "model.onnx"))
    init = {t.name for t in model.graph.initializer}
    real = [vi.name for vi in model.graph.input if vi.name not in init]
    data = os.path.join(case, "test_data_set_0")
    feeds = dict(zip(real, _tensors(data, "input"), strict=True))
    try:
        graph = from_onnx(model, {k: v.shape for k, v in feeds.items()})
    except CorefoldError:
        return None
    return graph, feeds, _tensors(data, "output")


def test_executor_reproduces_backend_test_outputs():
    ran, failures = 0, []
    for case in CASES:
        loaded = _case(case)
        if loaded is None:
            continue
        graph, feeds, expected = loaded
        names = {v.name for v in graph.inputs}
        with np.errstate(all="ignore"):  # some cases feed NaN-producing data on purpose
            got = run(graph, {k: v for k, v in feeds.items() if k in names})
        ran += 1
        for v, want in zip(graph.outputs, expected, strict=True):
            out = got[v.name]
            if out.shape != want.shape or not np.allclose(out, want, rtol=1e-3, atol=1e-4, equal_nan=True):
                failures.append(f"{os.path.basename(case)}: output {v.name}")
    assert ran >= 100, f"only {ran} of {len(CASES)} models imported"
    assert failures == []


def test_a_wrong_kernel_is_caught(monkeypatch):
    import dataclasses

    from corefold import ops
    from corefold.ops.registry import TABLE

    case = os.path.join(DATA, "pytorch-converted", "test_Conv2d")
    entry = ops.get("Conv")
    conv = entry.kernel
    monkeypatch.setitem(TABLE, ("", "Conv"), dataclasses.replace(
        entry, kernel=lambda attrs, inputs: [conv(attrs, inputs)[0] * np.float32(1.01)]))
    graph, feeds, expected = _case(case)
    got = run(graph, feeds)
    assert not all(np.allclose(got[v.name], w, rtol=1e-3, atol=1e-4) for v, w in zip(graph.outputs, expected, strict=True))
