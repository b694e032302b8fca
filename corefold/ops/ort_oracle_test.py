"""ONNX Runtime as the oracle for kernel tests.

:func:`check_node` builds a one-node opset-21 model with ``onnx.helper``, runs it in ONNX
Runtime and through the registered kernel (attributes passed as given, i.e. ONNX defaults
not filled in, as the importer delivers them) and asserts every output agrees.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np
import onnx
import pytest
from onnx import helper

from corefold import ops
from corefold.ops.registry import TABLE

RTOL, ATOL = 1e-4, 1e-5
_SESSION_OPTIONS = None


def _ort_options():
    global _SESSION_OPTIONS
    if _SESSION_OPTIONS is None:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        _SESSION_OPTIONS = so
    return _SESSION_OPTIONS


def run_ort(op: str, inputs: Sequence[np.ndarray | None], attrs: dict[str, Any], n_outputs: int = 1,
            opset: int = 21) -> list[np.ndarray]:
    """Outputs of a single ``op`` node in ONNX Runtime (``None`` inputs are omitted optionals)."""
    import onnxruntime as ort

    names, vinfos, feeds = [], [], {}
    for i, a in enumerate(inputs):
        if a is None:
            names.append("")
            continue
        name = f"in{i}"
        names.append(name)
        a = np.asarray(a)
        vinfos.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape))
        feeds[name] = a
    while names and names[-1] == "":
        names.pop()
    outs = [f"out{i}" for i in range(n_outputs)]
    node = helper.make_node(op, names, outs, **attrs)
    graph = helper.make_graph([node], "g", vinfos, [onnx.ValueInfoProto(name=o) for o in outs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    inferred = {v.name: v.type.tensor_type.elem_type for v in onnx.shape_inference.infer_shapes(model).graph.output}
    del model.graph.output[:]
    model.graph.output.extend(helper.make_tensor_value_info(o, inferred.get(o) or onnx.TensorProto.FLOAT, None)
                              for o in outs)
    sess = ort.InferenceSession(model.SerializeToString(), _ort_options(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def run_kernel(op: str, inputs: Sequence[np.ndarray | None], attrs: dict[str, Any]) -> list[np.ndarray]:
    ops.load_all()
    frozen = []
    for a in inputs:
        if a is not None:
            a = np.array(a)
            a.flags.writeable = False  # kernels must never write their inputs
        frozen.append(a)
    return ops.get(op).kernel(dict(attrs), frozen)


def check_node(op: str, inputs: Sequence[np.ndarray | None], attrs: dict[str, Any] | None = None,
               n_outputs: int = 1, rtol: float = RTOL, atol: float = ATOL) -> list[np.ndarray]:
    """Assert the corefold kernel of ``op`` matches ONNX Runtime on ``inputs``; return ORT's outputs."""
    attrs = attrs or {}
    want = run_ort(op, inputs, attrs, n_outputs)
    got = run_kernel(op, inputs, attrs)
    assert len(got) >= n_outputs, f"{op} returned {len(got)} outputs, expected {n_outputs}"
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.shape == w.shape, f"{op} output {i}: shape {g.shape} != ORT {w.shape}"
        assert g.dtype == w.dtype, f"{op} output {i}: dtype {g.dtype} != ORT {w.dtype}"
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"{op} output {i} attrs {attrs}")
    return want


def randn(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def test_oracle_detects_a_wrong_kernel(monkeypatch):
    ops.load_all()
    monkeypatch.setitem(TABLE, ("", "Relu"), dataclasses.replace(ops.get("Relu"),
                                                                 kernel=lambda attrs, inputs: [np.abs(inputs[0])]))
    x = np.array([[-1.0, 2.0]], dtype=np.float32)
    with pytest.raises(AssertionError):
        check_node("Relu", [x])
