"""ONNX element types as NumPy dtypes, for operators whose attributes name a type
(EyeLike ``dtype``, the window functions' ``output_datatype``, BitCast ``to``, ...).

The importer turns some such attributes into NumPy dtype names already (Cast ``to``);
the others arrive as ONNX ``TensorProto.DataType`` codes. :func:`attr_dtype` reads either.
Sub-byte and 8-bit float types are ml_dtypes' (which onnx itself depends on). O(1).
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

#: ONNX TensorProto.DataType code -> dtype (strings and complex types left out)
ONNX_ELEM_TYPES: dict[int, np.dtype] = {
    1: np.dtype("float32"), 2: np.dtype("uint8"), 3: np.dtype("int8"), 4: np.dtype("uint16"),
    5: np.dtype("int16"), 6: np.dtype("int32"), 7: np.dtype("int64"), 9: np.dtype("bool"),
    10: np.dtype("float16"), 11: np.dtype("float64"), 12: np.dtype("uint32"), 13: np.dtype("uint64"),
    16: np.dtype(ml_dtypes.bfloat16), 17: np.dtype(ml_dtypes.float8_e4m3fn),
    18: np.dtype(ml_dtypes.float8_e4m3fnuz), 19: np.dtype(ml_dtypes.float8_e5m2),
    20: np.dtype(ml_dtypes.float8_e5m2fnuz), 21: np.dtype(ml_dtypes.uint4), 22: np.dtype(ml_dtypes.int4),
    23: np.dtype(ml_dtypes.float4_e2m1fn),
}
for _code, _name in ((24, "float8_e8m0fnu"), (25, "uint2"), (26, "int2"), (27, "float6_e2m3fn"),
                     (28, "float6_e3m2fn")):
    if hasattr(ml_dtypes, _name):
        ONNX_ELEM_TYPES[_code] = np.dtype(getattr(ml_dtypes, _name))

_BY_NAME = {str(d): d for d in ONNX_ELEM_TYPES.values()}


def attr_dtype(value: Any, default: np.dtype | str | None = None) -> np.dtype:
    """The dtype an element-type attribute names: an ONNX code or a NumPy dtype name.

    Raises:
        ValueError: the code names no type corefold handles (strings, complex, undefined).
    """
    if value is None or (isinstance(value, (int, np.integer)) and int(value) == 0):
        if default is None:
            raise ValueError("element type attribute missing")
        return np.dtype(default) if not isinstance(default, str) or default not in _BY_NAME else _BY_NAME[default]
    if isinstance(value, (int, np.integer)):
        if int(value) not in ONNX_ELEM_TYPES:
            raise ValueError(f"element type {int(value)} is not supported")
        return ONNX_ELEM_TYPES[int(value)]
    name = str(value)
    return _BY_NAME[name] if name in _BY_NAME else np.dtype(name)


def is_float(dtype: np.dtype) -> bool:
    """True for every floating type, the ml_dtypes ones included."""
    return np.dtype(dtype).kind == "f" or str(dtype).startswith(("bfloat16", "float8", "float4", "float6"))
