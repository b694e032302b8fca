"""What ONNX's own operator definitions (``onnx.defs``) say about a node: the element
types each input accepts at an opset, the attributes it knows, and when an operator last
changed. The importer refuses nodes whose types the definition rejects (ONNX Runtime
refuses them too); the exporter picks the lowest opset that accepts every node it writes.
Each lookup is cached per (operator, opset); a check is O(inputs).
"""

from __future__ import annotations

import functools
from typing import Sequence

import numpy as np
import onnx

from corefold.errors import ModelError
from corefold.frontend.onnx.protos import onnx_dtype_code

#: (accepted type strings, type parameter name or "" , variadic, type parameter shared by all
#: inputs bound to it: False only for heterogeneous variadic inputs such as Loop's and Scan's)
Formal = tuple[frozenset[str], str, bool, bool]


@functools.lru_cache(maxsize=None)
def schema(op_type: str, opset: int) -> onnx.defs.OpSchema | None:
    """The default-domain definition of ``op_type`` in force at ``opset``, or None."""
    try:
        return onnx.defs.get_schema(op_type, opset, "")
    except Exception:  # noqa: BLE001 - onnx raises SchemaError for unknown operators
        return None


def since(op_type: str, opset: int) -> int | None:
    """The opset version of ``op_type``'s definition in force at ``opset`` (None: none)."""
    s = schema(op_type, opset)
    return None if s is None else int(s.since_version)


@functools.lru_cache(maxsize=None)
def _formals(op_type: str, opset: int, outputs: bool) -> tuple[list[Formal], list[Formal]] | None:
    s = schema(op_type, opset)
    if s is None:
        return None
    constraints = {c.type_param_str: frozenset(c.allowed_type_strs) for c in s.type_constraints}

    def formal(f) -> Formal:
        variadic = f.option == onnx.defs.OpSchema.FormalParameterOption.Variadic
        return (constraints.get(f.type_str, frozenset([f.type_str])), f.type_str if f.type_str in constraints else "",
                variadic, not variadic or f.is_homogeneous)

    return [formal(f) for f in s.inputs], [formal(f) for f in s.outputs]


def type_string(dtype: np.dtype) -> str:
    """ONNX's name of a tensor type, e.g. ``tensor(float)``, ``tensor(bfloat16)``."""
    code = onnx_dtype_code(dtype)
    return f"tensor({onnx.TensorProto.DataType.Name(code).lower()})" if code is not None else str(dtype)


def _type_problem(op_type: str, opset: int, typed: Sequence[tuple[str, np.dtype] | None], outputs: bool) -> str | None:
    """Why the (name, dtype) list does not fit the formal inputs (outputs), or None."""
    known = _formals(op_type, opset, outputs)
    if known is None:
        return None
    formals = known[1] if outputs else known[0]
    what = "output" if outputs else "input"
    bound: dict[str, np.dtype] = {}
    for i, t in enumerate(typed):
        if t is None or not formals:
            continue
        if i < len(formals):
            accepted, param, _, shared = formals[i]
        elif formals[-1][2]:
            accepted, param, _, shared = formals[-1]
        else:
            continue
        name, dtype = t
        ts = type_string(dtype)
        if accepted and not any(a == ts or a.endswith(f"({ts})") for a in accepted):
            return f"{what} {i} '{name}' has type {np.dtype(dtype)}, which {op_type}-{since(op_type, opset)} does not accept"
        if param and shared:
            if param in bound and bound[param] != dtype:
                return (f"{what} {i} '{name}' has type {np.dtype(dtype)}, another {what} of the same type parameter "
                        f"{param} has {bound[param]}")
            bound.setdefault(param, dtype)
    return None


def check_input_types(op_type: str, opset: int, ins: Sequence[tuple[str, np.dtype] | None], node: str) -> None:
    """Refuse a node whose inputs ``(name, dtype)`` have element types its ONNX definition
    at ``opset`` does not accept, or that differ where one type parameter binds them.

    Raises:
        ModelError: naming the node, the input, its type and the definition.
    """
    problem = _type_problem(op_type, opset, ins, outputs=False)
    if problem:
        raise ModelError(f"node '{node}' ({op_type}): {problem}")


def accepts(op_type: str, opset: int, ins: Sequence[tuple[str, np.dtype] | None],
            outs: Sequence[tuple[str, np.dtype] | None], attrs: Sequence[str]) -> bool:
    """Whether ``op_type`` exists at ``opset`` and its definition there takes these input
    and output types and these attribute names."""
    s = schema(op_type, opset)
    if s is None or any(a not in s.attributes for a in attrs):
        return False
    return _type_problem(op_type, opset, ins, False) is None and _type_problem(op_type, opset, outs, True) is None
