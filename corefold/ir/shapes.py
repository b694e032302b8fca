"""Shape inference on the IR: every node's output shapes and dtypes from the operator table.

Passes that create nodes call :func:`infer_shapes` (or :func:`infer_node`) instead of
writing shapes by hand; :func:`corefold.ir.verify` checks that stored shapes equal the
inferred ones. O(V) table look-ups plus each operator's shape function.
"""

from __future__ import annotations

import numpy as np

from corefold import ops
from corefold.ir.graph import Graph
from corefold.ir.nodes import Node


def inferred_types(node: Node) -> list[tuple[tuple[int, ...], np.dtype]] | None:
    """The output ``(shape, dtype)`` pairs the table gives for ``node``; None when its
    entry has no shape function (shapes recorded by the producer are then authoritative).

    Raises:
        UnsupportedOpError: the operator is not in the table.
        ShapeError: the inputs do not fit the operator, or a shape-deciding input is not
            a constant.
    """
    entry = ops.get(node.op_type, node.domain, where=f"node '{node.name}'")
    if entry.infer is ops.NONE:
        return None
    ins = [None if v is None else (v.shape, v.dtype) for v in node.inputs]
    consts = [None if v is None else v.const for v in node.inputs]
    what = f"'{node.outputs[0].name}', output of node '{node.name}' ({node.op_type})" if node.outputs else node.name
    return ops.infer_types(entry, node.attrs, ins, consts, what, [None if v is None else v.name for v in node.inputs])


def infer_node(node: Node) -> None:
    """Set the shape and dtype of ``node``'s outputs from its inputs'."""
    types = inferred_types(node)
    if types is None:
        return
    for v, (shape, dtype) in zip(node.outputs, types, strict=False):
        v.shape = tuple(int(d) for d in shape)
        v.dtype = np.dtype(dtype)


def infer_shapes(graph: Graph) -> None:
    """Set every node output's shape and dtype, in topological order."""
    for node in graph.topological_order():
        infer_node(node)
