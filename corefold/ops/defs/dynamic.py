"""Compress: data-dependent in general, static once its condition is a bound value.

``Compress(x, condition)`` keeps the slices of ``x`` where ``condition`` holds, so its
output shape depends on the condition's values. When the condition is a constant after
``--value`` bindings (the usual case for a compiler specialising on it), the selection is
fixed indices: the normaliser emits a Gather (of the flattened input when there is no
``axis``). A condition computed from data is refused naming the node and the value. The
other data-dependent, random, sequence and string operators are refused in refused.py.
"""

from __future__ import annotations

import numpy as np

from corefold.errors import UnsupportedOpError
from corefold.ops.registry import define
from corefold.ops.schema import NONE, OpDef


def _compress_normalise(imp, n) -> None:
    """A constant condition selects fixed indices: a Gather. O(condition length)."""
    x, cond = n.inputs[0], n.inputs[1]
    if cond.const is None:
        raise UnsupportedOpError(f"node '{n.name}' (Compress): the condition '{cond.name}' depends on data, and "
                                 f"with it the output shape (bind the input it comes from with --value)")
    axis = n.attrs.get("axis")
    dim = int(np.prod(x.shape, dtype=np.int64)) if axis is None else x.shape[axis]
    picked = np.flatnonzero(np.asarray(cond.const).reshape(-1)[:dim]).astype(np.int64)
    if axis is None:
        x = imp.emit("Reshape", [x, imp.const(np.array([-1], np.int64), f"{n.name}_flat")], {}, [None],
                     f"{n.name}_flatten")[0]
        axis = 0
    imp.emit("Gather", [x, imp.const(picked, f"{n.name}_indices")], {"axis": axis}, n.outputs, n.name)


define(OpDef("Compress", normalise=_compress_normalise, infer=NONE, kernel=NONE, cost=NONE, split=NONE, quant=NONE,
             param_inputs=(1,)))
