"""Array helpers every stage shares: stride-0 *fills*, and float32 operands widened to
float64 (:func:`widen_float32`).

A fill is an array whose strides are all zero (``np.broadcast_to`` of one value): the
importer keeps ConstantOfShape results and other single-value constants in that form so
that a 400 MB weight costs a few bytes, and data-movement kernels map fills to fills
without materialising them, which also lets shapes be inferred by running those kernels
on fill dummies. O(1) each.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np


def is_fill(a: np.ndarray) -> bool:
    """True if ``a`` holds one value broadcast over all its elements (all strides zero)."""
    return a.size > 1 and all(s == 0 for s in a.strides)


def fill(value: np.ndarray | np.generic, shape: Sequence[int], dtype: Any = None) -> np.ndarray:
    """A read-only stride-0 array of ``shape`` holding the single value ``value``."""
    v = np.asarray(value).reshape(-1)[:1].reshape(())
    if dtype is not None:
        v = v.astype(dtype)
    return np.broadcast_to(v, tuple(int(d) for d in shape))


def fill_value(a: np.ndarray) -> np.ndarray:
    """The single value of a fill (or of a one-element array)."""
    return a.reshape(-1)[:1] if a.size == 1 else a[(0,) * a.ndim]


def widen_float32(arrays: Sequence[np.ndarray | None]) -> list[np.ndarray | None]:
    """``arrays`` with every float32 one as float64 (exactly: float64 holds every float32),
    the others and None as they are: how the chip simulator and the integer runner compute
    a float product or a partial sum once, without the host BLAS's blocking in it. O(size)."""
    return [x.astype(np.float64) if x is not None and x.dtype == np.float32 else x for x in arrays]
