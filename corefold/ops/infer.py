"""Reading two facets the same way everywhere: output types (``infer``) and work (``cost``).

:func:`infer_types` is what the importer and ``corefold.ir.infer_shapes`` call; it runs
either the entry's shape function or, for :class:`~corefold.ops.facets.ByKernel`
entries, the kernel itself on stride-0 dummies. :func:`work` is what the cost model
calls. Both are O(rank) per node apart from the entry's own function.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from corefold.errors import ShapeError, UnsupportedOpError
from corefold.ops.arrays import fill
from corefold.ops.facets import ByKernel, prod
from corefold.ops.schema import NONE, Cost, OpDef


def infer_types(entry: OpDef, attrs: dict[str, Any], ins: Sequence[Any], consts: Sequence[np.ndarray | None],
                where: str = "", input_names: Sequence[str | None] = ()) -> list[tuple[tuple[int, ...], np.dtype]]:
    """Output shapes and dtypes of one application of ``entry``.

    Args:
        ins: ``(shape, dtype)`` per input, ``None`` for a missing optional input.
        consts: each input's constant value, ``None`` where it is not a constant.
        where: the node, for messages (``"'y', output of node 'conv1' (Conv)"``).
        input_names: the inputs' names, for messages.

    Raises:
        ShapeError: an input that decides the shape is not a constant, or the shapes do
            not fit the operator.
        UnsupportedOpError: the operator has no shape inference (it never reaches the IR).
    """
    what = where or entry.op_type
    infer = entry.infer
    if infer is NONE or infer is None:
        raise UnsupportedOpError(f"{what}: operator {entry.op_type} has no static shape inference")
    try:
        if isinstance(infer, ByKernel):
            for i in infer.params:
                if i < len(ins) and ins[i] is not None and consts[i] is None:
                    label = f"'{input_names[i]}'" if i < len(input_names) and input_names[i] else str(i)
                    raise ShapeError(f"shape of {what} unknown: it depends on input {label}, which is not a "
                                     "constant at import")
            # only the parameter inputs' values matter: every other input is a zero fill, so the
            # kernel touches no data whatever the tensors' sizes
            args = [None if t is None else (consts[i] if i in infer.params else fill(np.zeros((), t[1]), t[0]))
                    for i, t in enumerate(ins)]
            results = entry.kernel(attrs, args)
            return [(tuple(int(d) for d in r.shape), r.dtype) for r in results]
        return [(tuple(int(d) for d in s), np.dtype(d)) for s, d in infer(attrs, ins, consts)]
    except (ShapeError, UnsupportedOpError):
        raise
    except (ValueError, IndexError, KeyError, TypeError, ZeroDivisionError) as exc:
        raise ShapeError(f"cannot infer the shape of {what} from inputs "
                         f"{[list(t[0]) if t is not None else None for t in ins]}: {exc}") from None


def work(entry: OpDef, attrs: dict[str, Any], ins: Sequence[Any], outs: Sequence[Any]) -> tuple[str, float, int]:
    """``(unit kind, work in that unit's measure, MACs)`` of one application of ``entry``.

    ``ins`` and ``outs`` are ``(shape, dtype)`` pairs (``None`` for missing inputs).

    Raises:
        UnsupportedOpError: the operator has no cost facet.
    """
    cost = entry.cost
    if not isinstance(cost, Cost):
        raise UnsupportedOpError(f"operator {entry.op_type} has no cost model")
    if cost.unit == "free":
        return "free", 0.0, 0
    if cost.work is not None:
        w = float(cost.work(attrs, ins, outs))
    elif cost.unit == "dma":
        w = float(sum(prod(s) * np.dtype(d).itemsize for s, d in outs))
    else:
        w = float(prod(outs[0][0]))
    return cost.unit, w, int(w) if cost.unit == "matrix" else 0
