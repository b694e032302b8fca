"""Conversions between ONNX protos and corefold's Python/NumPy forms: dtypes, tensors,
attributes."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, numpy_helper

from corefold.errors import ModelError, UnsupportedOpError

#: ONNX element types corefold handles, to NumPy dtypes: every numeric type of onnx's
#: TensorProto; the narrow ones (bfloat16, float8, float6, float4, int4/uint4, int2/uint2)
#: are ml_dtypes' NumPy types, which onnx itself decodes to. Strings and complex numbers
#: are refused.
ONNX_TO_NUMPY: dict[int, np.dtype] = {}
for _name, _code in TensorProto.DataType.items():
    if _name in ("UNDEFINED", "STRING", "COMPLEX64", "COMPLEX128"):
        continue
    try:
        ONNX_TO_NUMPY[_code] = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(_code))
    except (KeyError, TypeError, ValueError):  # a type this onnx cannot decode
        continue
NUMPY_TO_ONNX: dict[np.dtype, int] = {v: k for k, v in ONNX_TO_NUMPY.items()}

#: (op_type, attribute) pairs whose value is an element type: NumPy dtype names in the IR.
DTYPE_ATTRS = {("Cast", "to"), ("QuantizeLinear", "output_dtype"), ("DequantizeLinear", "output_dtype"),
               ("QuantizeLinear", "precision")}


def all_nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """The nodes of ``graph`` and of all its subgraphs (If branches, Loop and Scan bodies),
    depth first. O(nodes)."""
    out = []
    for n in graph.node:
        out.append(n)
        for a in n.attribute:
            for sub in ([a.g] if a.type == AttributeProto.GRAPH else list(a.graphs)):
                out.extend(all_nodes(sub))
    return out


def numpy_dtype(elem_type: int, what: str) -> np.dtype:
    """The NumPy dtype of an ONNX element type.

    Raises:
        UnsupportedOpError: the type (string, complex) is not handled.
    """
    if elem_type not in ONNX_TO_NUMPY:
        name = TensorProto.DataType.Name(elem_type) if elem_type in TensorProto.DataType.values() else str(elem_type)
        raise UnsupportedOpError(f"{what} has element type {name}, which corefold does not support")
    return ONNX_TO_NUMPY[elem_type]


def onnx_dtype_code(dtype: np.dtype | str) -> int | None:
    """The ONNX element type of a NumPy dtype, or None."""
    return NUMPY_TO_ONNX.get(np.dtype(dtype))


def onnx_dtype(dtype: np.dtype | str, what: str) -> int:
    dt = np.dtype(dtype)
    if dt not in NUMPY_TO_ONNX:
        raise UnsupportedOpError(f"{what} has dtype {dt}, which ONNX export does not support")
    return NUMPY_TO_ONNX[dt]


def tensor_to_numpy(t: TensorProto, what: str, base_dir: str | None = None) -> np.ndarray:
    """Decode a tensor proto (raw, typed or external data)."""
    numpy_dtype(t.data_type, what)
    try:
        a = numpy_helper.to_array(t, base_dir or "")
    except Exception as exc:  # noqa: BLE001 - protobuf/IO errors of a malformed file
        raise ModelError(f"{what}: cannot decode tensor data ({exc})") from None
    return np.asarray(a)


def numpy_to_tensor(a: np.ndarray, name: str) -> TensorProto:
    onnx_dtype(a.dtype, f"constant '{name}'")
    return numpy_helper.from_array(np.asarray(a), name)  # tobytes() writes C order, no copy needed


def attribute_value(op_type: str, a: AttributeProto, what: str) -> Any:
    """An attribute proto as Python: int, float, str, list of those, np.ndarray, or the
    ``GraphProto`` of a subgraph."""
    t = a.type
    if t == AttributeProto.INT:
        v: Any = int(a.i)
    elif t == AttributeProto.FLOAT:
        v = float(a.f)
    elif t == AttributeProto.STRING:
        v = a.s.decode("utf-8", errors="replace")
    elif t == AttributeProto.INTS:
        v = [int(x) for x in a.ints]
    elif t == AttributeProto.FLOATS:
        v = [float(x) for x in a.floats]
    elif t == AttributeProto.STRINGS:
        v = [s.decode("utf-8", errors="replace") for s in a.strings]
    elif t == AttributeProto.TENSOR:
        v = tensor_to_numpy(a.t, f"{what} attribute '{a.name}'")
    elif t == AttributeProto.GRAPH:
        v = a.g  # a subgraph (If branches, Loop and Scan bodies): the importer inlines it
    else:
        raise UnsupportedOpError(f"{what}: attribute '{a.name}' of type "
                                 f"{AttributeProto.AttributeType.Name(t)} is not supported")
    if (op_type, a.name) in DTYPE_ATTRS and v != 0:  # 0: unset (QuantizeLinear's output_dtype)
        v = numpy_dtype(int(v), f"{what} attribute '{a.name}'").name
    return v


def make_attribute(op_type: str, key: str, value: Any, what: str) -> AttributeProto:
    """The inverse of :func:`attribute_value`."""
    if (op_type, key) in DTYPE_ATTRS:
        return onnx.helper.make_attribute(key, onnx_dtype(value, f"{what} attribute '{key}'"))
    if isinstance(value, np.ndarray):
        return onnx.helper.make_attribute(key, numpy_to_tensor(value, key))
    if isinstance(value, (bool, np.bool_, np.integer)):
        value = int(value)
    elif isinstance(value, np.floating):
        value = float(value)
    if isinstance(value, (list, tuple)):
        items = [x.item() if isinstance(x, np.generic) else x for x in value]
        if not items:
            return onnx.helper.make_attribute(key, [], attr_type=AttributeProto.INTS)
        if all(isinstance(x, str) for x in items):
            return onnx.helper.make_attribute(key, items, attr_type=AttributeProto.STRINGS)
        if any(isinstance(x, float) for x in items):
            return onnx.helper.make_attribute(key, [float(x) for x in items], attr_type=AttributeProto.FLOATS)
        return onnx.helper.make_attribute(key, [int(x) for x in items], attr_type=AttributeProto.INTS)
    if isinstance(value, (int, float, str)):
        return onnx.helper.make_attribute(key, value)
    raise ModelError(f"{what}: attribute '{key}' has a value of type {type(value).__name__} that ONNX cannot hold")
