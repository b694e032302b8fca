"""Facet builders shared by the operator families in ``defs/``.

Shape functions (``same``, ``broadcast``, ``ByKernel``), costs (``FREE``, ``DMA``,
``vector``, ``matrix``), split rules (``split_any``, ``split_leading``) and range rules
(``fixed_range``, ``nonneg_if_data_inputs_are``). Each is O(rank) or O(inputs) per node.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from corefold.ops.schema import (
    NON_NEGATIVE,
    UNKNOWN,
    Cost,
    Ins,
    Interval,
    RangeFn,
    SplitAxis,
)


def prod(shape: Sequence[int]) -> int:
    """The element count of ``shape`` (1 for a scalar), as a Python int. O(rank)."""
    return int(math.prod(shape))


def norm_axis(axis: int, rank: int) -> int:
    """``axis`` in ``[0, rank)``.

    Raises:
        ValueError: out of range.
    """
    if not -rank <= axis < max(rank, 1):
        raise ValueError(f"axis {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


# -- shape inference ---------------------------------------------------------------------------------
def same(attrs, ins, consts):
    """Output 0 has input 0's shape and dtype."""
    return [ins[0]]


def broadcast_shape(ins: Ins) -> tuple[int, ...]:
    shapes = [s for s, _ in (i for i in ins if i is not None)]
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ValueError(f"shapes {[list(s) for s in shapes]} do not broadcast") from None


def broadcast(dtype: str | None = None, dtype_input: int = 0):
    """NumPy broadcasting of every input; dtype ``dtype`` or that of input ``dtype_input``."""

    def infer(attrs, ins, consts):
        dt = np.dtype(dtype) if dtype is not None else ins[dtype_input][1]
        return [(broadcast_shape(ins), dt)]

    return infer


@dataclass(frozen=True)
class ByKernel:
    """Infer by running the operator's own kernel on stride-0 dummies of the inputs (the
    inputs in ``params`` must be constants and are passed as they are). For data-movement
    operators whose kernels map fills to fills, this costs O(rank)."""

    params: tuple[int, ...] = ()


# -- cost -------------------------------------------------------------------------------------------
FREE = Cost("free")
DMA = Cost("dma")


def vector(per_element: float = 1.0) -> Cost:
    """Vector work: ``per_element`` operations per output element."""
    return Cost("vector", lambda attrs, ins, outs: per_element * prod(outs[0][0]))


def vector_in(per_element: float = 1.0) -> Cost:
    """Vector work: ``per_element`` operations per element of input 0 (reductions)."""
    return Cost("vector", lambda attrs, ins, outs: per_element * prod(ins[0][0]))


def variadic_vector() -> Cost:
    """One operation per output element per input after the first (Sum, Max, ...)."""
    return Cost("vector", lambda attrs, ins, outs: prod(outs[0][0]) * max(1, len([i for i in ins if i is not None]) - 1))


def matrix(macs: Callable[[dict[str, Any], Ins, Ins], float]) -> Cost:
    return Cost("matrix", macs)


# -- split rules ------------------------------------------------------------------------------------
def dim_name(axis: int, rank: int) -> str:
    if rank == 4:
        return ("batch", "channel", "height", "width")[axis]
    return "batch" if axis == 0 else f"axis{axis}"


def same_axis(ins: Ins, outs: Ins, axis: int, name: str) -> SplitAxis | None:
    """Cut the output on ``axis``, and every input whose dimension (right-aligned, NumPy
    broadcasting) equals the output's there; broadcast inputs are read whole."""
    out = outs[0][0]
    rank = len(out)
    if out[axis] < 2:
        return None
    cut: list[tuple[int, int] | None] = []
    for t in ins:
        if t is None:
            cut.append(None)
            continue
        shape = t[0]
        a = axis - (rank - len(shape))
        cut.append((a, 1) if a >= 0 and shape[a] == out[axis] else None)
    return SplitAxis(name, out[axis], tuple(cut), (axis, 1))


def split_any(reduced: Callable[[dict[str, Any], int], set[int]] | None = None, whole: Sequence[int] = ()):
    """Every dimension the operator does not reduce over, the cheapest first (SPEC M3 §7's
    rule for "other" operators); inputs listed in ``whole`` (tables, parameters) are never cut."""

    def rule(attrs, ins, outs, consts):
        rank = len(outs[0][0])
        red = reduced(attrs, rank) if reduced else set()
        axes = []
        for a in range(rank):
            if a in red:
                continue
            ax = same_axis(ins, outs, a, dim_name(a, rank))
            if ax is not None:
                if whole:
                    ax = SplitAxis(ax.name, ax.extent, tuple(None if i in whole else c for i, c in enumerate(ax.inputs)),
                                   ax.output)
                axes.append(ax)
        return axes, False

    return rule


def split_leading(n: int = 2, whole_after: int = 1):
    """Batch or channel only (pooling, resize: never the height and width they reduce or
    interpolate over); inputs from ``whole_after`` on are read whole."""

    def rule(attrs, ins, outs, consts):
        rank = len(outs[0][0])
        axes = []
        for a in range(min(n, rank)):
            ax = same_axis(ins, outs, a, dim_name(a, rank))
            if ax is not None:
                axes.append(SplitAxis(ax.name, ax.extent, ax.inputs[:whole_after] + (None,) * (len(ax.inputs) - whole_after),
                                      ax.output))
        return axes, True

    return rule


def reduced_axis_attr(name: str = "axis", default: int = -1):
    """The single axis named by an attribute (Softmax, Concat)."""
    return lambda attrs, rank: {int(attrs.get(name, default)) % rank}


# -- range rules ------------------------------------------------------------------------------------
def fixed_range(lo: float | None, hi: float | None) -> RangeFn:
    iv = Interval(lo, hi)
    return lambda attrs, rngs, consts: iv


NONNEG: RangeFn = fixed_range(0.0, None)


def nonneg_if_data_inputs_are(data: Sequence[int] | None = None) -> RangeFn:
    """Non-negative when every data input (``data``: their indices; None: all) is."""

    def rule(attrs, rngs, consts):
        idx = range(len(rngs)) if data is None else [i for i in data if i < len(rngs)]
        vals = [rngs[i] for i in idx if rngs[i] is not None]
        return NON_NEGATIVE if vals and all(r.non_negative for r in vals) else UNKNOWN

    return rule


def first_input_range(attrs, rngs, consts) -> Interval:
    """The output takes input 0's values (gathers, selections)."""
    return rngs[0] if rngs and rngs[0] is not None else UNKNOWN


#: shape inference by the kernel with no parameter inputs
BY_KERNEL = ByKernel()
