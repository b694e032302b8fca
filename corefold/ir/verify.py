"""``verify(graph)``: check every invariant of the IR; passes' tests call it after each pass."""

from __future__ import annotations

import numpy as np

from corefold.errors import InternalError
from corefold.ir.graph import Graph
from corefold.ir.values import Usage


class VerifyError(InternalError):
    """An IR invariant is broken: a corefold bug, not a user error."""


def verify(graph: Graph, *, require_shapes: bool = True) -> None:
    """Check the graph's invariants, raising :class:`VerifyError` on the first broken one.

    Checked: unique names; every value has at most one producer and graph inputs and
    constants have none; every input of a node is a graph input, a constant or an output of
    a node in this graph; each value's uses are exactly the (node, index) pairs that read
    it; control edges are symmetric and stay inside the graph; the graph is acyclic over
    data and control edges; graph outputs are defined; constants' data match their shape
    and dtype; with ``require_shapes``, every value has a static shape and every node's
    output shapes and dtypes are the ones the operator table infers from its inputs.
    O(V + E log V).
    """
    nodes = graph.nodes
    node_set = set(nodes)
    defined: dict[int, str] = {}
    names: set[str] = set()

    def define(v, what: str) -> None:
        if id(v) in defined:
            raise VerifyError(f"value '{v.name}' defined twice ({defined[id(v)]} and {what})")
        if v.name in names:
            raise VerifyError(f"name '{v.name}' is used by two values")
        defined[id(v)] = what
        names.add(v.name)

    for v in graph.inputs:
        if v.producer is not None or v.is_constant:
            raise VerifyError(f"graph input '{v.name}' has a producer or data")
        define(v, "graph input")
    for k, v in graph.constants.items():
        if k != v.name:
            raise VerifyError(f"constant key '{k}' differs from its value's name '{v.name}'")
        if not v.is_constant or v.producer is not None:
            raise VerifyError(f"constant '{v.name}' has no data or has a producer")
        if tuple(v.const.shape) != tuple(v.shape) or v.const.dtype != v.dtype:
            raise VerifyError(f"constant '{v.name}' data {v.const.dtype}{list(v.const.shape)} "
                              f"differs from its type {v.dtype}{list(v.shape)}")
        define(v, "constant")
    node_names: set[str] = set()
    for n in nodes:
        if n.graph is not graph:
            raise VerifyError(f"node '{n.name}' does not point back to the graph")
        if n.name in node_names:
            raise VerifyError(f"node name '{n.name}' is used twice")
        node_names.add(n.name)
        for i, v in enumerate(n.outputs):
            if v.producer is not n or v.output_index != i:
                raise VerifyError(f"output {i} '{v.name}' of '{n.name}' does not name it as producer")
            define(v, f"output of '{n.name}'")
    for n in nodes:
        for i, v in enumerate(n.inputs):
            if v is None:
                continue
            if id(v) not in defined:
                raise VerifyError(f"input {i} '{v.name}' of '{n.name}' is defined nowhere in the graph")
            if Usage(n, i) not in v._uses:
                raise VerifyError(f"'{v.name}' does not list its use by '{n.name}' input {i}")
        for p in n.control_preds:
            if p not in node_set or n not in p.control_succs:
                raise VerifyError(f"control edge '{p.name}' => '{n.name}' is dangling or one-sided")
        for s in n.control_succs:
            if s not in node_set or n not in s.control_preds:
                raise VerifyError(f"control edge '{n.name}' => '{s.name}' is dangling or one-sided")
    for v in graph.values():
        for u in v._uses:
            if u.node not in node_set or u.index >= len(u.node.inputs) or u.node.inputs[u.index] is not v:
                raise VerifyError(f"'{v.name}' lists a stale use ({u.node.name}, {u.index})")
    for v in graph.outputs:
        if id(v) not in defined:
            raise VerifyError(f"graph output '{v.name}' is defined nowhere")
    try:
        graph.topological_order()
    except ValueError as exc:
        raise VerifyError(str(exc)) from None
    if require_shapes:
        for v in graph.values():
            if not v.has_static_shape:
                raise VerifyError(f"value '{v.name}' has no static shape ({v.shape})")
            if not isinstance(v.dtype, np.dtype):
                raise VerifyError(f"value '{v.name}' has no dtype")
        check_shapes(graph)


def check_shapes(graph: Graph) -> None:
    """Every node's stored output shapes and dtypes equal what the operator table infers
    from its inputs (nodes whose operator has no shape function are taken as they are).

    Raises:
        VerifyError: a stored shape or dtype differs, or inference fails.
    """
    from corefold.errors import CorefoldError
    from corefold.ir.shapes import inferred_types

    for n in graph.topological_order():
        try:
            types = inferred_types(n)
        except CorefoldError as exc:
            raise VerifyError(f"node '{n.name}' ({n.op_type}): {exc}") from None
        if types is None:
            continue
        if len(types) < len(n.outputs):
            raise VerifyError(f"node '{n.name}' ({n.op_type}) has {len(n.outputs)} outputs, the operator gives {len(types)}")
        for v, (shape, dtype) in zip(n.outputs, types, strict=False):
            if tuple(v.shape) != tuple(shape) or v.dtype != dtype:
                raise VerifyError(f"'{v.name}', output of node '{n.name}' ({n.op_type}), is stored as "
                                  f"{v.dtype}{list(v.shape)} but its inputs give {np.dtype(dtype)}{list(shape)}")
