"""Checking an import/export against ONNX Runtime (used by tests and bench scripts)."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import onnx
from onnx import ModelProto


def ort_session(model: ModelProto | bytes | str, threads: int = 1, *, qdq_exact: bool = False):
    """An ONNX Runtime CPU session (imported lazily) with quiet logging.

    ``qdq_exact`` keeps ORT from fusing DequantizeLinear -> op -> QuantizeLinear into its
    integer kernels (graph optimisation level BASIC): the model then runs as written, in
    float between DQ and Q, which is exactly the ONNX semantics on every CPU.

    NOTE: on x86 CPUs without AVX-VNNI (AVX2 only), ORT's fused int8 Conv/MatMul sums
    pairs of u8 x s8 products in int16 (``vpmaddubsw``) and saturates once both operands
    use their full 8-bit range: measured 19 steps off on a 16-channel 3x3 conv with
    ORT 1.32. With VNNI the fused result is exact. Tests that compare integers with
    ORT therefore use ``qdq_exact``.
    """
    import onnxruntime as ort

    so = ort.SessionOptions()
    if qdq_exact:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    if isinstance(model, ModelProto):
        model = model.SerializeToString()
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def ort_run(model: ModelProto | bytes | str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Outputs by name of ``model`` on ``feeds``."""
    sess = ort_session(model)
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds), strict=True))


def roundtrip(model: ModelProto, feeds: dict[str, np.ndarray],
              shapes: dict[str, Sequence[int]] | None = None):
    """Import ``model``, export it, check it, and run both in ONNX Runtime.

    Returns:
        (graph, exported model, original outputs, exported outputs), outputs by name.
    """
    from corefold.frontend.onnx import from_onnx, to_onnx
    from corefold.ir import verify

    graph = from_onnx(model, shapes)
    verify(graph)
    exported = to_onnx(graph)
    onnx.checker.check_model(exported, full_check=True)
    return graph, exported, ort_run(model, feeds), ort_run(exported, feeds)


def ort_tensors(model: ModelProto | bytes | str, feeds: dict[str, np.ndarray], op_type: str,
                *, qdq_exact: bool = True) -> dict[str, np.ndarray]:
    """The graph outputs and the first output of every ``op_type`` node of ``model``, by
    name, as ONNX Runtime computes them on ``feeds`` (``qdq_exact``: see :func:`ort_session`).
    O(one run)."""
    model = _copy(model)
    return ort_values(model, feeds, [n.output[0] for n in model.graph.node if n.op_type == op_type and n.output],
                      qdq_exact=qdq_exact)


def ort_values(model: ModelProto | bytes | str, feeds: dict[str, np.ndarray], names: list[str],
               *, qdq_exact: bool = True) -> dict[str, np.ndarray]:
    """The graph outputs and the tensors ``names`` of ``model`` that some node outputs (made
    graph outputs of a copy; others are left out: the importer names the tensors it adds
    itself), by name, as ONNX Runtime computes them on ``feeds`` (``qdq_exact``: see
    :func:`ort_session`). O(one run)."""
    model = _copy(model)
    have = {o.name for o in model.graph.output}
    made = {o for n in model.graph.node for o in n.output}
    for name in names:
        if name not in have and name in made:
            model.graph.output.append(onnx.ValueInfoProto(name=name))
            have.add(name)
    sess = ort_session(model, qdq_exact=qdq_exact)
    out = [o.name for o in sess.get_outputs()]
    return dict(zip(out, sess.run(out, feeds), strict=True))


def _copy(model: ModelProto | bytes | str) -> ModelProto:
    if isinstance(model, str):
        return onnx.load(model)
    if isinstance(model, bytes):
        return onnx.load_from_string(model)
    return onnx.ModelProto.FromString(model.SerializeToString())
