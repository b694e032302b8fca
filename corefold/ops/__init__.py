"""The operator table: everything corefold knows about each operator, in one entry.

``get(op_type, domain)`` returns an :class:`OpDef` whose facets every stage reads: the
importer (``normalise``, ``infer``), shape inference on the IR (``infer``), the executor
(``kernel``), the cost model (``cost``), operator splitting (``split``) and the quantizer
(``quant``, ``param_inputs``). An operator the table lacks raises
:class:`~corefold.errors.UnsupportedOpError` wherever it is met. This package knows
nothing of the IR: facets take attributes, shapes, dtypes and constants.
"""

from corefold.ops.arrays import fill, fill_value, is_fill, widen_float32
from corefold.ops.infer import infer_types, work
from corefold.ops.registry import define, entries, get, load_all, lookup, op
from corefold.ops.schema import (
    AS_IS,
    COMPUTE,
    FLOAT,
    MISSING,
    MOVEMENT,
    NON_NEGATIVE,
    NONE,
    UNKNOWN,
    Cost,
    Interval,
    OnnxNode,
    OpDef,
    Quant,
    SplitAxis,
)

__all__ = [
    "get", "lookup", "entries", "load_all", "define", "op", "infer_types", "work", "OpDef", "Cost", "Quant",
    "SplitAxis", "Interval", "OnnxNode", "NONE", "MISSING", "AS_IS", "COMPUTE", "MOVEMENT", "FLOAT",
    "UNKNOWN", "NON_NEGATIVE", "fill", "fill_value", "is_fill",
    "widen_float32",
]
