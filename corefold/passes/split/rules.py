"""Split rules: along which dimensions an operator may be cut into same-type pieces.

The rules themselves are the operator table's ``split`` facet (``corefold/ops/defs/``),
in the seed's order of preference (SPEC M3 §7): conv, fully connected and depthwise conv
split the batch first, then output channels (weights split on their output channels),
then input channels with the partial results added by ``Sum``; pooling and resize split
batch or channel, never the height and width they reduce over; transpose splits batch
then height (any axis is valid); every other operator splits any dimension it does not
reduce over, the cheapest first. This module reads them for IR nodes.

A split axis counts ``extent`` *units*; a piece covering units ``[s, e)`` reads
``[s * scale, e * scale)`` on input ``i``'s axis ``inputs[i] = (axis, scale)`` (``None``:
the whole input) and writes the same range of its output axis. With ``reduce``, every
piece writes a full-size partial output and the pieces are added.
"""

from __future__ import annotations

from corefold import ops
from corefold.ir import Node
from corefold.ops import SplitAxis

__all__ = ["SplitAxis", "candidate_axes", "has_rule", "is_view"]


def is_view(node: Node) -> bool:
    """Operators that only reinterpret a shape (cost unit ``free``): they move no data."""
    return ops.get(node.op_type, node.domain, where=f"node '{node.name}'").cost.unit == "free"


def has_rule(node: Node) -> bool:
    """Whether the table gives the operator a split rule at all."""
    return callable(ops.get(node.op_type, node.domain, where=f"node '{node.name}'").split)


def candidate_axes(node: Node) -> tuple[list[SplitAxis], bool]:
    """The split axes of ``node`` in preference order, and whether preference (True) or
    the fewest pieces (False, "cheapest") picks among those that fit. An empty list means
    no rule applies (or no dimension is left to cut)."""
    if not node.outputs or node.outputs[0].shape is None:
        return [], True
    rule = ops.get(node.op_type, node.domain, where=f"node '{node.name}'").split
    if not callable(rule):
        return [], False
    ins = [None if v is None or v.shape is None else (v.shape, v.dtype) for v in node.inputs]
    outs = [(v.shape, v.dtype) for v in node.outputs]
    consts = [None if v is None else v.const for v in node.inputs]
    axes, by_preference = rule(node.attrs, ins, outs, consts)
    return [a for a in axes if a is not None], by_preference
