"""Every ONNX element type corefold handles, through the import, the kernels and the export.

For each type (float64/32/16, bfloat16, the float8s, int2 to int64, uint2 to uint64, bool)
and each operator of the elementwise, activation, data-movement, reduction, resize and
cast families, a one-node model at opset 25:

* when ONNX's definition accepts the type, corefold's result equals ONNX Runtime's (or,
  where ONNX Runtime has no kernel for the type, ``onnx.reference``'s) within one unit of
  the type's precision, and the exported model passes the full checker (the exporter picks
  the opset the types need);
* when the definition rejects it, the import fails with one ModelError naming the node.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from corefold.errors import ModelError
from corefold.executor import run
from corefold.frontend.onnx import from_onnx, to_onnx
from corefold.frontend.onnx.node_cases import NodeCase, compare_outputs, run_ort
from corefold.frontend.onnx.protos import NUMPY_TO_ONNX
from corefold.frontend.onnx.schemas import accepts

DTYPES = ["float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
          "float8_e5m2fnuz", "float8_e8m0fnu", "int2", "int4", "int8", "int16", "int32", "int64", "uint2", "uint4",
          "uint8", "uint16", "uint32", "uint64", "bool"]
I64 = np.int64

#: (operator, data inputs, parameter initializers, attributes); shapes are (2, 3, 4), (1, 3, 4)
#: for Squeeze and Expand
OPS = [
    ("Identity", 1, {}, {}), ("Add", 2, {}, {}), ("Sub", 2, {}, {}), ("Mul", 2, {}, {}), ("Div", 2, {}, {}),
    ("Neg", 1, {}, {}), ("Abs", 1, {}, {}), ("Relu", 1, {}, {}), ("Sigmoid", 1, {}, {}), ("Tanh", 1, {}, {}),
    ("Exp", 1, {}, {}), ("Sqrt", 1, {}, {}), ("LeakyRelu", 1, {}, {}), ("Elu", 1, {}, {}), ("Selu", 1, {}, {}),
    ("HardSigmoid", 1, {}, {}), ("HardSwish", 1, {}, {}), ("Softplus", 1, {}, {}), ("Softsign", 1, {}, {}),
    ("Gelu", 1, {}, {}), ("Erf", 1, {}, {}), ("Floor", 1, {}, {}), ("Ceil", 1, {}, {}), ("Round", 1, {}, {}),
    ("Max", 2, {}, {}), ("Min", 2, {}, {}), ("Sum", 2, {}, {}), ("Mean", 2, {}, {}), ("Pow", 2, {}, {}),
    ("Mod", 2, {}, {"fmod": 1}), ("Sign", 1, {}, {}), ("Reciprocal", 1, {}, {}), ("Log", 1, {}, {}),
    ("Equal", 2, {}, {}), ("Less", 2, {}, {}), ("Greater", 2, {}, {}), ("And", 2, {}, {}), ("Not", 1, {}, {}),
    ("Where", 3, {}, {}), ("Transpose", 1, {}, {"perm": [1, 0, 2]}), ("Reshape", 1, {"s": I64([6, 4])}, {}),
    ("Flatten", 1, {}, {}), ("Squeeze", 1, {"a": I64([0])}, {}), ("Unsqueeze", 1, {"a": I64([0])}, {}),
    ("Concat", 2, {}, {"axis": 1}), ("Gather", 1, {"i": I64([1, 0])}, {"axis": 1}),
    ("Slice", 1, {"st": I64([0]), "en": I64([2])}, {}), ("Split", 1, {}, {"axis": 2, "num_outputs": 2}),
    ("Expand", 1, {"s": I64([2, 2, 3, 4])}, {}), ("Tile", 1, {"r": I64([1, 2, 1])}, {}),
    ("Pad", 1, {"p": I64([0, 1, 0, 0, 1, 0])}, {"mode": "edge"}), ("Shape", 1, {}, {}),
    ("ReduceSum", 1, {"a": I64([1])}, {}), ("ReduceMax", 1, {"a": I64([1])}, {}),
    ("ReduceMin", 1, {"a": I64([1])}, {}), ("ReduceMean", 1, {"a": I64([1])}, {}),
    ("ReduceProd", 1, {"a": I64([1])}, {}), ("ArgMax", 1, {}, {"axis": 1}), ("Clip", 1, {}, {}),
    ("Softmax", 1, {}, {}), ("Resize", 1, {"sc": np.float32([1, 1, 2])}, {"mode": "nearest"}),
    ("Cast", 1, {}, {"to": T.FLOAT}), ("CastTo", 1, {}, {}), ("Dropout", 1, {}, {}),
]

#: tolerance per type, relative and absolute: two units in the last place (at 1) of the narrow
#: floats, as ONNX's runner allows bfloat16; the oracles compute some of them in the narrow type
#: itself and lose digits where corefold does not (Gelu's tail: ONNX Runtime's float16 -0.00163
#: for -3.33 x Phi(-3.33) = -0.00145, which corefold gives); 1e-5 relative for the others
RTOL = {"bfloat16": 2**-6, "float16": 2**-9, "float8_e4m3fn": 2**-2, "float8_e4m3fnuz": 2**-2,
        "float8_e5m2": 2**-1, "float8_e5m2fnuz": 2**-1}


def _data(dtype: np.dtype, rng: np.random.Generator, shape=(2, 3, 4)) -> np.ndarray:
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.name in ("int4", "int2"):
        return rng.integers(-2, 2, shape).astype(dtype)
    if dtype.name in ("uint4", "uint2"):
        return rng.integers(0, 3, shape).astype(dtype)
    if dtype.kind in "iu":
        return rng.integers(1, 6, shape).astype(dtype)
    if dtype.name == "float8_e8m0fnu":
        return np.exp2(rng.integers(-3, 3, shape)).astype(np.float32).astype(dtype)
    return (rng.standard_normal(shape) * 2).astype(np.float32).astype(dtype)


def _model(op: str, n_data: int, params: dict, attrs: dict, dtype: np.dtype, rng) -> tuple[onnx.ModelProto, dict]:
    code = NUMPY_TO_ONNX[dtype]
    op_type, attrs = ("Cast", {"to": code}) if op == "CastTo" else (op, dict(attrs))
    feeds = {}
    for i, name in enumerate(["x", "y", "z"][:n_data]):
        feeds[name] = _data(np.dtype(bool) if op == "Where" and i == 0 else dtype, rng,
                            (1, 3, 4) if op in ("Squeeze", "Expand") else (2, 3, 4))
    if op in ("Div", "Mod", "Pow") and dtype.kind in "iu" and dtype.itemsize > 1:
        feeds["y"] = np.abs(feeds["y"]).astype(dtype) + dtype.type(1)  # no division by zero, no negative powers
    inputs = list(feeds) + list(params)
    if op == "Resize":
        inputs = ["x", "", "sc"]
    outs = ["o1", "o2"] if op == "Split" else ["o"]
    vis = [helper.make_tensor_value_info(k, NUMPY_TO_ONNX[v.dtype], list(v.shape)) for k, v in feeds.items()]
    g = helper.make_graph([helper.make_node(op_type, inputs, outs, **attrs)], "g", vis,
                          [helper.make_tensor_value_info(o, 0, None) for o in outs],
                          initializer=[numpy_helper.from_array(v, k) for k, v in params.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 25)]), feeds


def _oracle(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    """ONNX Runtime's outputs; without a kernel for the type, onnx.reference's; for booleans
    neither has (nearest Resize), both run on uint8 and the result is cast back."""
    from onnx.reference import ReferenceEvaluator

    try:
        return run_ort(NodeCase("t", model.SerializeToString(), [(list(feeds.values()), [])], 0, 0))
    except Exception:  # noqa: BLE001 - no ONNX Runtime kernel for this type
        pass
    try:
        return [np.asarray(a) for a in ReferenceEvaluator(model).run(None, feeds)]
    except Exception:  # noqa: BLE001 - no reference kernel for this type either
        if not all(v.dtype == np.bool_ for v in feeds.values()):
            raise
    as_u8 = onnx.ModelProto()
    as_u8.CopyFrom(model)
    for vi in as_u8.graph.input:
        vi.type.tensor_type.elem_type = T.UINT8
    wide = _oracle(as_u8, {k: v.astype(np.uint8) for k, v in feeds.items()})
    return [w.astype(np.bool_) for w in wide]


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_operator_on_every_type(dtype):
    dt = np.dtype(dtype)
    rng = np.random.default_rng(7)
    checked = refused = 0
    for op, n_data, params, attrs in OPS:
        model, feeds = _model(op, n_data, params, attrs, dt, rng)
        node = model.graph.node[0]
        typed = [(k, v.dtype) for k, v in feeds.items()] + [(k, v.dtype) for k, v in params.items()]
        if op == "Resize":
            typed = [typed[0], None, typed[1]]
        if not accepts(node.op_type, 25, typed, [], []):
            with pytest.raises(ModelError, match=f"node '{node.op_type.lower()}_0' \\({node.op_type}\\)"):
                from_onnx(model)
            refused += 1
            continue
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            want = _oracle(model, feeds)
            graph = from_onnx(model)
            out = run(graph, feeds)
        tol = RTOL.get(dtype, 1e-5)
        problem = compare_outputs(want, [out[v.name] for v in graph.outputs], tol, tol if dtype in RTOL else 0.0)
        assert problem is None, f"{op} on {dtype}: {problem}"
        onnx.checker.check_model(to_onnx(graph), full_check=True)
        checked += 1
    assert checked >= 10 and checked + refused == len(OPS)
