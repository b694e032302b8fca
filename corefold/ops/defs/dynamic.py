"""Operators corefold refuses, each with the reason: their output depends on data in a way
a static IR cannot hold (shapes decided by values), they draw random numbers, or they work
on sequences, optionals or strings.

Importing one fails with one line naming the node, the operator and the reason (the
``refuse`` facet), unless the entry has a kernel and every input of the node is a
constant (after ``--value`` bindings): the importer then folds it into a constant, which
is static whatever its shape (NonZero). Compress with a constant condition is a Gather.
"""

from __future__ import annotations

import numpy as np

from corefold.errors import UnsupportedOpError
from corefold.ops.registry import define
from corefold.ops.schema import AS_IS, NONE, OpDef

_DATA_SHAPE = "its output shape depends on the values of its input (a static IR cannot hold it)"
_RANDOM = "it draws random numbers, which a compiler cannot reproduce across runtimes"
_SEQUENCE = "it works on sequences, which corefold's tensor IR does not represent"
_OPTIONAL = "it works on optional values, which corefold's tensor IR does not represent"
_STRING = "it works on strings, which corefold does not support"

REFUSED = {
    "NonZero": _DATA_SHAPE, "Unique": _DATA_SHAPE,
    "NonMaxSuppression": _DATA_SHAPE, "ImageDecoder": _DATA_SHAPE + " (it decodes an encoded image)",
    "RandomNormal": _RANDOM, "RandomUniform": _RANDOM, "RandomNormalLike": _RANDOM,
    "RandomUniformLike": _RANDOM, "Multinomial": _RANDOM, "Bernoulli": _RANDOM,
    "SequenceConstruct": _SEQUENCE, "SequenceEmpty": _SEQUENCE, "SequenceAt": _SEQUENCE,
    "SequenceErase": _SEQUENCE, "SequenceInsert": _SEQUENCE, "SequenceLength": _SEQUENCE,
    "SequenceMap": _SEQUENCE, "SplitToSequence": _SEQUENCE, "ConcatFromSequence": _SEQUENCE,
    "Optional": _OPTIONAL, "OptionalGetElement": _OPTIONAL, "OptionalHasElement": _OPTIONAL,
    "StringConcat": _STRING, "StringNormalizer": _STRING, "StringSplit": _STRING, "RegexFullMatch": _STRING,
}


def nonzero(attrs, inputs):
    """The indices of the non-zero elements, one row per axis (int64). O(elements)."""
    x = np.asarray(inputs[0])
    return [np.array(np.nonzero(x.reshape(1) if x.ndim == 0 else x), dtype=np.int64).reshape(max(x.ndim, 1), -1)]


KERNELS = {"NonZero": nonzero}


def _compress_normalise(imp, n) -> None:
    """Compress with a constant condition (a bound value) selects fixed indices: a Gather
    (of the flattened input when there is no ``axis``). A condition computed from data
    decides the output shape and is refused. O(condition length)."""
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

for _op, _reason in REFUSED.items():
    define(OpDef(_op, normalise=AS_IS, infer=NONE, kernel=KERNELS.get(_op, NONE), cost=NONE, split=NONE, quant=NONE,
                 param_inputs=NONE, refuse=_reason))
