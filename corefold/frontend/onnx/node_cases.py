"""ONNX's node conformance cases, generated from the installed onnx and cached.

The onnx wheel ships the generators of its node test suite (not the data):
``onnx.backend.test.case.node.collect_testcases(None)`` builds every case, each a model with
one or more data sets of inputs and expected outputs. Generating them takes about a minute,
so :func:`load_cases` pickles them once under a cache folder, keyed by the onnx version.

The other helpers are what both ``tests/test_node_conformance.py`` and
``bench/conformance.py`` need: which inputs to bind as values (:func:`split_feeds`), how
ONNX Runtime runs a case (:func:`run_ort`) and how outputs are compared
(:func:`compare_outputs`, ONNX's own backend rule).
"""

from __future__ import annotations

import os
import pickle
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from corefold.frontend.onnx.protos import all_nodes

__all__ = ["NodeCase", "load_cases", "split_feeds", "parameter_names", "run_ort", "compare_outputs", "input_names"]


@dataclass
class NodeCase:
    """One node test case: a model and its data sets ``[(inputs, expected outputs), ...]``
    (inputs in the order of the graph's non-initializer inputs; an entry may be a list for
    sequence-typed values or None for an empty optional). ``rtol``/``atol`` are ONNX's
    tolerances for the case (1e-3 and 1e-7 unless the case says otherwise)."""

    name: str
    model_bytes: bytes
    data_sets: list[tuple[list[Any], list[Any]]]
    rtol: float
    atol: float

    @property
    def model(self) -> onnx.ModelProto:
        return onnx.load_from_string(self.model_bytes)


def _cache_file(cache_dir: str | os.PathLike) -> Path:
    return Path(cache_dir) / f"v1-onnx-{onnx.__version__}-numpy-{np.__version__}.pkl"


def load_cases(cache_dir: str | os.PathLike) -> list[NodeCase]:
    """Every node case of the installed onnx, from ``cache_dir`` or generated (about a
    minute) and then cached there. Cases are sorted by name.

    The cache is a pickle that only this function writes (atomically) and reads.
    """
    path = _cache_file(cache_dir)
    if path.is_file():
        with open(path, "rb") as f:
            return pickle.load(f)  # noqa: S301 - our own cache file
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        raw = collect_testcases(None)
    cases = sorted((NodeCase(c.name, c.model.SerializeToString(),
                             [(_arrays(ins), _arrays(outs)) for ins, outs in c.data_sets], float(c.rtol), float(c.atol))
                    for c in raw if c.kind == "node"), key=lambda c: c.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        pickle.dump(cases, f, protocol=5)
    os.replace(tmp, path)
    return cases


def _arrays(items: list[Any]) -> list[Any]:
    """Data set entries as NumPy arrays (the generators also give tensor protos, for the
    types NumPy lacks, and NumPy scalars); sequences stay lists, empty optionals None."""
    out: list[Any] = []
    for x in items:
        if isinstance(x, onnx.TensorProto):
            out.append(onnx.numpy_helper.to_array(x))
        elif isinstance(x, (list, tuple)):
            out.append(_arrays(list(x)))
        elif x is None:
            out.append(None)
        else:
            out.append(np.asarray(x))
    return out


def input_names(model: onnx.ModelProto) -> list[str]:
    """The graph's true inputs (not initializers), in order."""
    init = {t.name for t in model.graph.initializer}
    return [vi.name for vi in model.graph.input if vi.name not in init]


#: operators whose output depends only on their input's shape and type, never its values
_SHAPE_ONLY = {"Shape", "Size", "EyeLike", "ConstantOfShape", "RandomNormalLike", "RandomUniformLike"}


def parameter_names(model: onnx.ModelProto) -> set[str]:
    """Values some node reads as a parameter (the operator table's ``param_inputs``:
    shapes, axes, indices, Resize scales, Range bounds, Clip bounds, If conditions, Loop
    trip counts, ...), and every value those are computed from (except through operators
    that read only a shape, such as Shape). O(nodes)."""
    from corefold import ops

    nodes = all_nodes(model.graph)
    names: set[str] = set()
    for n in nodes:
        entry = ops.lookup(n.op_type, n.domain)
        params = entry.param_inputs if entry is not None and isinstance(entry.param_inputs, tuple) else ()
        names.update(n.input[i] for i in params if i < len(n.input) and n.input[i])
    producer = {o: n for n in nodes for o in n.output if o}
    todo = list(names)
    while todo:
        n = producer.get(todo.pop())
        if n is None or n.op_type in _SHAPE_ONLY:
            continue
        for i in n.input:
            if i and i not in names:
                names.add(i)
                todo.append(i)
    return names


def split_feeds(model: onnx.ModelProto, inputs: list[Any]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """``(feeds, values)``: integer and boolean inputs, and inputs that some node reads as a
    parameter, become values bound at import (axes, shapes, indices, ``k``, scales,
    conditions, trip counts: what a compiler specialises on); the rest stay feeds."""
    params = parameter_names(model)
    feeds, values = {}, {}
    for name, array in zip(input_names(model), inputs, strict=False):
        bind = isinstance(array, np.ndarray) and (
            np.issubdtype(array.dtype, np.integer) or array.dtype == np.bool_ or name in params)
        (values if bind else feeds)[name] = array
    return feeds, values


#: ONNX Runtime type strings NumPy lacks: their tensors are passed as raw ONNX bytes
_NARROW = ("bfloat16", "float8", "float4", "int4", "uint4", "int2", "uint2")


def _is_narrow(type_str: str) -> bool:
    return any(t in type_str for t in _NARROW)


def _to_ort_value(array: np.ndarray, elem_type: int):
    """An OrtValue with ``array``'s elements in ONNX's raw encoding (4-bit types packed)."""
    import ctypes

    import onnxruntime as ort

    raw = onnx.numpy_helper.from_array(array).raw_data
    v = ort.OrtValue.ortvalue_from_shape_and_type(list(array.shape), elem_type)
    if len(raw) != v.tensor_size_in_bytes():
        raise ValueError(f"{len(raw)} bytes for a tensor of {v.tensor_size_in_bytes()}")
    if raw:
        ctypes.memmove(v.data_ptr(), raw, len(raw))
    return v


def _from_ort_value(v, elem_type: int) -> np.ndarray:
    """The inverse of :func:`_to_ort_value`: decode the tensor's raw bytes as ONNX does."""
    import ctypes

    shape = list(v.shape())
    t = onnx.TensorProto(data_type=elem_type, dims=shape)
    n = v.tensor_size_in_bytes()
    t.raw_data = ctypes.string_at(v.data_ptr(), n) if n else b""
    return onnx.numpy_helper.to_array(t)


def run_ort(case: NodeCase, data_set: int = 0) -> list[Any]:
    """ONNX Runtime's outputs (CPU provider, one thread) on one data set of ``case``.

    Tensors of types NumPy lacks (bfloat16, float8, 4-bit) go in and come out as raw ONNX
    bytes through OrtValues; everything else through ``InferenceSession.run``.

    Raises:
        Exception: whatever ONNX Runtime raises on a model it refuses.
    """
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 4
    sess = ort.InferenceSession(case.model_bytes, so, providers=["CPUExecutionProvider"])
    inputs, _ = case.data_sets[data_set]
    model = case.model
    feeds = dict(zip(input_names(model), inputs, strict=False))
    feeds = {i.name: feeds[i.name] for i in sess.get_inputs() if i.name in feeds}
    if not any(_is_narrow(t.type) for t in list(sess.get_inputs()) + list(sess.get_outputs())):
        return sess.run(None, feeds)
    types = {vi.name: vi.type.tensor_type.elem_type for vi in list(model.graph.input) + list(model.graph.output)}
    values = {k: _to_ort_value(a, types[k]) for k, a in feeds.items()}
    outs = sess.run_with_ort_values([o.name for o in sess.get_outputs()], values)
    return [_from_ort_value(v, types[o.name]) for v, o in zip(outs, sess.get_outputs(), strict=True)]


def _as_float(a: np.ndarray) -> np.ndarray:
    """NumPy cannot compare ml_dtypes' narrow floats with tolerances: widen them."""
    return a.astype(np.float32) if a.dtype.kind == "V" or a.dtype.name.startswith(("bfloat", "float8", "float4")) else a


def compare_outputs(expected: list[Any], got: list[Any], rtol: float, atol: float) -> str | None:
    """None when ``got`` matches ``expected``, else what differs first.

    ONNX's backend rule: same count, shapes and dtypes; values within
    ``|got - want| <= atol + rtol * |want|`` with NaN equal to NaN (the generators'
    outputs come from NumPy in float64 or float32; a kernel that sums in another order,
    e.g. BLAS, differs by float32 reassociation, far below rtol 1e-3); bfloat16 gets at
    least two of its ulps (2**-6) of relative tolerance, as in ONNX's runner; integers,
    booleans and 4-bit/8-bit types compare exactly (after widening, within the same rule).
    """
    if len(got) != len(expected):
        return f"{len(got)} outputs, expected {len(expected)}"
    for i, (want, out) in enumerate(zip(expected, got, strict=True)):
        if isinstance(want, list):
            if not isinstance(out, list):
                return f"output {i}: a tensor where a sequence is expected"
            msg = compare_outputs(want, out, rtol, atol)
            if msg:
                return f"output {i}: {msg}"
            continue
        want, out = np.asarray(want), np.asarray(out)
        if out.shape != want.shape:
            return f"output {i}: shape {list(out.shape)}, expected {list(want.shape)}"
        if out.dtype != want.dtype:
            return f"output {i}: dtype {out.dtype}, expected {want.dtype}"
        if want.dtype == object:
            if not np.array_equal(out, want):
                return f"output {i}: values differ"
            continue
        r = max(rtol, 2**-6) if want.dtype.name == "bfloat16" else rtol
        w, o = _as_float(want), _as_float(out)
        if w.dtype == np.bool_:
            ok = np.array_equal(w, o)
        else:
            with np.errstate(all="ignore"):
                ok = np.allclose(o, w, rtol=r, atol=atol, equal_nan=w.dtype.kind == "f")
        if not ok:
            with np.errstate(all="ignore"):
                diff = np.abs(o.astype(np.float64) - w.astype(np.float64))
                worst = np.nanmax(diff) if diff.size and not np.all(np.isnan(diff)) else float("nan")
            return f"output {i}: values differ (largest difference {worst:.3g})"
    return None
