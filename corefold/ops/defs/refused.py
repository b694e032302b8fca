"""Operators corefold refuses at import, each with the reason it names.

corefold's IR is static: every value has a shape known at compile time and is a tensor
computed deterministically from the inputs. Operators whose output shape depends on the
values (NonZero, Unique, Compress, NonMaxSuppression), that draw random numbers, that work
on sequences, optionals or strings, or that decode images of unknown size cannot be
represented; importing one fails with one line naming it and the reason. (If, Loop and
Scan are the importer's: it inlines or unrolls them when their condition or trip count is
known.)
"""

from __future__ import annotations

import numpy as np

from corefold.ops.facets import norm_axis
from corefold.ops.registry import define
from corefold.ops.schema import NONE, OpDef

DATA_DEPENDENT = "its output shape depends on the values of its inputs, and corefold's graphs have static shapes"
RANDOM = "it draws random numbers, and corefold's graphs are deterministic"
SEQUENCE = "it works on tensor sequences, which corefold's graphs (tensors only) do not hold"
OPTIONAL = "it works on optional values, which corefold's graphs (tensors only) do not hold"
STRING = "it works on strings, which corefold does not support"

REFUSED = {
    **dict.fromkeys(("NonZero", "Unique", "NonMaxSuppression"), DATA_DEPENDENT),
    **dict.fromkeys(("RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                     "Bernoulli"), RANDOM),
    **dict.fromkeys(("SequenceAt", "SequenceConstruct", "SequenceEmpty", "SequenceErase", "SequenceInsert",
                     "SequenceLength", "SequenceMap", "ConcatFromSequence", "SplitToSequence"), SEQUENCE),
    **dict.fromkeys(("Optional", "OptionalGetElement", "OptionalHasElement"), OPTIONAL),
    **dict.fromkeys(("StringNormalizer", "RegexFullMatch", "StringSplit", "StringConcat"), STRING),
    "ImageDecoder": "it decodes an encoded image whose size is known only from the data",
}



# Kernels of the data-dependent operators: they can still be evaluated when every input is
# a constant (an importer folding them then needs no static shape), O(elements log elements).
def non_zero(attrs, inputs):
    """The indices of the non-zero elements, ``(rank, count)`` int64, row-major order."""
    x = np.asarray(inputs[0])
    return [np.array(np.nonzero(x if x.ndim else x.reshape(1)), np.int64).reshape(max(x.ndim, 1), -1)]


def compress(attrs, inputs):
    """The slices along ``axis`` (default: the flattened input) where ``condition`` holds."""
    x, cond = inputs[0], np.asarray(inputs[1]).astype(bool).reshape(-1)
    if "axis" not in attrs:
        flat = x.reshape(-1)
        return [flat[: len(cond)][cond[: flat.size]]]
    axis = norm_axis(int(attrs["axis"]), x.ndim)
    keep = np.nonzero(cond[: x.shape[axis]])[0]
    return [np.take(x, keep, axis=axis)]


def unique(attrs, inputs):
    """The unique elements (or slices along ``axis``), sorted (``sorted``, default 1) or in
    order of first occurrence; their first indices, the inverse indices and the counts."""
    x = inputs[0]
    axis = attrs.get("axis")
    data = x.reshape(-1) if axis is None else x
    ax = None if axis is None else norm_axis(int(axis), x.ndim)
    y, first, inverse, counts = np.unique(data, return_index=True, return_inverse=True, return_counts=True, axis=ax)
    inverse = inverse.reshape(-1)
    if not attrs.get("sorted", 1):
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        y = np.take(y, order, axis=0 if ax is None else ax)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    return [y, first.astype(np.int64), inverse.astype(np.int64), counts.astype(np.int64)]


_KERNELS = {"NonZero": non_zero, "Unique": unique}  # Compress: dynamic.py (a Gather once bound)

for _name, _reason in REFUSED.items():
    define(OpDef(_name, normalise=NONE, infer=NONE, kernel=_KERNELS.get(_name, NONE), cost=NONE, split=NONE,
                 quant=NONE, param_inputs=NONE, refuse=_reason))
