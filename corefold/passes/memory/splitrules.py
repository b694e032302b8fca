"""Batch-split rules: how one operator is cut into pieces along a batch-like axis.

Used by :mod:`corefold.passes.memory.batchsplit` to lower the memory floor. A region of
operators is cut into ``k`` pieces; every value of the region is then *split* (piece ``j``
holds a contiguous range of one axis), *partial* (every piece holds a full-size term and
the pieces are summed) or *whole*. Given the states of an operator's inputs (None for a
value from outside the region: whole), :func:`cut_of` says on which axis each input must
be cut (None: read whole), what each output becomes, and how a piece's attributes or
recorded aten arguments change.

ONNX operators reuse the operator table's split facet (the M3 rules of
:mod:`corefold.passes.split.rules`: batch, rows, inner dimension with partial sums, ...),
restricted to cuts consistent with the inputs already split. Views (Reshape, aten
``alias`` and ``t``), ``ReduceSum`` over the split axis and the aten operators of training
graphs that have no ONNX counterpart (log-softmax and softmax backward, NLL loss forward and
backward, ReLU, max-pool and convolution backward) have rules here. Every rule is O(rank).

A Reshape piece is sound only on axis 0 (a leading-axis range of a row-major tensor is one
contiguous byte range, the same under any reshape); the caller also cuts every value
in proportion to one common unit count, so the pieces of a Reshape's input and output
cover the same bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from corefold.ir import Node
from corefold.ir.domains import ATEN_DOMAIN
from corefold.passes.split.rules import candidate_axes

SPLIT, PARTIAL, WHOLE, NLL = "split", "partial", "whole", "nll"


@dataclass(frozen=True)
class State:
    """A region value's state: ``split`` on ``axis``, ``partial`` (summed), ``whole``, or
    ``nll`` (an NLL-loss piece output ``axis`` = 0 loss sum, 1 total weight)."""

    kind: str
    axis: int = -1


@dataclass
class Cut:
    """How to cut one operator.

    Attributes:
        inputs: per input, the axis it is cut on (None: every piece reads it whole).
        outputs: per output, its :class:`State`.
        args: replacements for the piece's recorded aten arguments (index -> value).
        reduction: NLL loss forward: the original reduction (1 mean, 2 sum).
    """

    inputs: list[int | None]
    outputs: list[State]
    args: dict[int, Any] = field(default_factory=dict)
    reduction: int = 0


#: aten operators applied element by element to same-shape tensors.
ATEN_ELEMENTWISE = frozenset({"threshold_backward", "gelu_backward", "sigmoid_backward", "tanh_backward",
                              "native_dropout_backward", "le", "lt", "gt", "ge", "where", "relu"})


def _axis_of(states: list[State | None]) -> int | None:
    """The one axis the split inputs share (None: none split).

    Raises:
        ValueError: inputs split on different axes, or a partial input.
    """
    axes = {s.axis for s in states if s is not None and s.kind == SPLIT}
    if any(s is not None and s.kind not in (SPLIT, WHOLE) for s in states):
        raise ValueError("partial input")
    if len(axes) > 1:
        raise ValueError("inputs split on different axes")
    return axes.pop() if axes else None


def _tensor_arg(node: Node, index: int) -> int | None:
    """The IR input a recorded aten argument refers to (``{"t": k}``), or None."""
    args = node.meta.get("args", [])
    if index < len(args) and isinstance(args[index], dict) and "t" in args[index]:
        return int(args[index]["t"])
    return None


def _arg(node: Node, index: int, default: Any = None) -> Any:
    args = node.meta.get("args", [])
    return args[index] if index < len(args) else default


def _elementwise(node: Node, states: list[State | None], axis: int) -> Cut | None:
    out = node.outputs[0].shape
    rank = len(out)
    cut: list[int | None] = []
    for v, s in zip(node.inputs, states, strict=True):
        if v is None or v.shape is None:
            cut.append(None)
            continue
        a = axis - (rank - len(v.shape))
        if a >= 0 and v.shape[a] == out[axis]:
            cut.append(a)
        elif s is not None and s.kind == SPLIT:
            return None
        else:
            cut.append(None)
    return Cut(cut, [State(SPLIT, axis)] * len(node.outputs))


def _view(node: Node, states: list[State | None], axis: int | None) -> Cut | None:
    op = node.op_type
    if axis is None:
        return None
    rest = [None] * (len(node.inputs) - 1)
    if op in ("alias", "Identity") or (op == "Reshape" and axis == 0):
        return Cut([axis, *rest], [State(SPLIT, axis)])
    if op == "t" and len(node.inputs[0].shape) == 2:
        return Cut([axis], [State(SPLIT, 1 - axis)])
    return None


def _reduce_sum(node: Node, states: list[State | None], axis: int) -> Cut | None:
    x = node.inputs[0]
    if len(node.inputs) > 1 and node.inputs[1] is not None:
        if node.inputs[1].const is None:
            return None
        axes = [int(a) % len(x.shape) for a in node.inputs[1].const.reshape(-1)]
    else:
        axes = [int(a) % len(x.shape) for a in node.attrs.get("axes", range(len(x.shape)))]
    rest = [None] * (len(node.inputs) - 1)
    if axis in axes:
        return Cut([axis, *rest], [State(PARTIAL)])
    keep = int(node.attrs.get("keepdims", 1))
    out_axis = axis if keep else axis - sum(1 for a in axes if a < axis)
    return Cut([axis, *rest], [State(SPLIT, out_axis)])


def _onnx(node: Node, states: list[State | None], axis: int | None, batch: int | None = None) -> Cut | None:
    """The operator table's split facet, restricted to cuts the split inputs agree with;
    with no input cut, the first row-like cut whose output axis is a multiple of ``batch``
    (else axis 0)."""
    if node.op_type == "MaxPool" and len(node.outputs) > 1 and "aten" not in node.meta:
        return None  # ONNX's indices count across the batch; aten's (per plane) do not
    try:
        cands, _ = candidate_axes(node)
    except Exception:  # noqa: BLE001 - an operator the table cannot describe is not cut
        return None
    if axis is None and batch:  # the axes whose length is a multiple of the batch first
        out = node.outputs[0].shape
        cands = sorted(cands, key=lambda a: a.output is None or out[a.output[0]] % batch != 0)
    for ax in cands:
        if ax.scales_group:
            continue
        ok = True
        for s, c in zip(states, ax.inputs, strict=False):
            if s is not None and s.kind == SPLIT and (c is None or c[0] != s.axis):
                ok = False
        if not ok:
            continue
        if axis is None and (ax.reduce or ax.output is None
                             or (ax.output[0] != 0 and not (batch and node.outputs[0].shape[ax.output[0]] % batch == 0))):
            continue  # a region's first operator is cut on its batch (rows)
        cut = [None if c is None else c[0] for c in ax.inputs]
        cut += [None] * (len(node.inputs) - len(cut))
        if ax.reduce:
            if len(node.outputs) != 1 or (node.op_type == "Gemm" and len(node.inputs) > 2):
                continue  # a bias would be added once per piece
            return Cut(cut, [State(PARTIAL)])
        oa = ax.output[0]
        outs = []
        for v in node.outputs:
            if v.shape is not None and len(v.shape) > oa and v.shape[oa] == node.outputs[0].shape[oa]:
                outs.append(State(SPLIT, oa))
            else:
                ok = False
        if ok:
            return Cut(cut, outs)
    return None


def _aten(node: Node, states: list[State | None], axis: int | None) -> Cut | None:
    op = node.op_type
    n_in = len(node.inputs)
    if op in ATEN_ELEMENTWISE:
        return _elementwise(node, states, 0 if axis is None else axis)
    if op in ("_log_softmax_backward_data", "_softmax_backward_data"):
        rank = len(node.outputs[0].shape)
        a = 0 if axis is None else axis
        if int(_arg(node, 2, -1)) % rank == a:
            return None
        return Cut([a if i < 2 else None for i in range(n_in)], [State(SPLIT, a)])
    if op in ("nll_loss_forward", "nll_loss_backward"):
        self_i, target_i = (0, 1) if op == "nll_loss_forward" else (1, 2)
        if axis not in (None, 0) or len(node.inputs[self_i].shape) != 2:
            return None
        reduction = int(_arg(node, 3 if op == "nll_loss_forward" else 4, 1))
        if reduction not in (1, 2):
            return None
        weight = _tensor_arg(node, 2 if op == "nll_loss_forward" else 3)
        cut = [None] * n_in
        cut[_tensor_arg(node, self_i)] = 0
        cut[_tensor_arg(node, target_i)] = 0
        if weight is not None and states[weight] is not None:
            return None
        if op == "nll_loss_forward":
            return Cut(cut, [State(NLL, 0), State(NLL, 1)], {3: 2}, reduction)
        return Cut(cut, [State(SPLIT, 0)])
    if op == "max_pool2d_with_indices" and axis in (None, 0):
        return Cut([0] + [None] * (n_in - 1), [State(SPLIT, 0)] * len(node.outputs))
    if op == "max_pool2d_with_indices_backward" and axis in (None, 0):
        return Cut([0] * n_in, [State(SPLIT, 0)])  # grad, self, indices: per-plane indices
    if op == "convolution_backward" and axis in (None, 0):
        picks = node.meta.get("outputs", [0])
        outs = [State(SPLIT, 0) if p == 0 else State(PARTIAL) for p in picks]
        return Cut([0, 0] + [None] * (n_in - 2), outs)
    return None


def cut_of(node: Node, states: list[State | None], batch: int | None = None) -> Cut | None:
    """How to cut ``node`` given its inputs' states (None: from outside the region, whole),
    or None when no rule applies. A node none of whose inputs is split (the first of a
    region) is cut on an axis whose length is a multiple of ``batch`` (the region seed's
    leading dimension), else on axis 0. O(rank) (O(rank + table rule) for ONNX operators)."""
    try:
        axis = _axis_of(states)
    except ValueError:
        if node.domain or node.meta.get("view") or any(s is not None and s.kind != SPLIT for s in states):
            return None
        # an ONNX operator may read inputs cut on different axes (a product's inner
        # dimension); the table's rule says which combinations are sound
        axis = next(s.axis for s in states if s is not None)
    if any(v is not None and v.shape is None for v in list(node.inputs) + list(node.outputs)):
        return None
    if node.meta.get("view") or (not node.domain and node.op_type in ("Reshape", "Identity")):
        return _view(node, states, axis)
    if node.domain == ATEN_DOMAIN:
        return _aten(node, states, axis)
    if node.domain:
        return None
    if node.op_type == "ReduceSum":
        return _reduce_sum(node, states, 0 if axis is None else axis)
    return _onnx(node, states, axis, batch)
