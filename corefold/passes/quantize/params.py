"""Quantization parameters: the seed's mode, integer range and scale rules (SPEC M5 §2-5).

A tensor quantized with ``bits`` = n is stored as integers ``q = clip(round(x * k))``:

* mode ``unsigned`` (the tensor's minimum is >= 0): q in [0, 2^n - 1];
* mode ``symmetric`` (otherwise): q in [-2^(n-1), 2^(n-1) - 1];
* ``k = qmax / m`` with ``m = max(|min|, |max|)`` (or a clipped ``m`` from calibration) and
  ``qmax`` the range's largest integer. Example: [0, 6] at 8 bits -> k = 255/6;
  [-5, 3] at 8 bits -> k = 127/5.

ONNX's ``QuantizeLinear`` scale is the inverse, ``x = scale * q``, so ``onnx_scale = 1 / k``.
There is never a zero point (it is 0 of the integer type).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from corefold.errors import CorefoldError

UNSIGNED = "unsigned"
SYMMETRIC = "symmetric"
#: bit widths with an ONNX integer type for both modes
SUPPORTED_BITS = (4, 8, 16)


class QuantizeError(CorefoldError):
    """A quantization request that cannot be honoured (bits out of range, nothing to quantize)."""


def check_bits(bits: int, what: str = "bits") -> int:
    """Return ``bits`` if it is a supported width.

    Raises:
        QuantizeError: ``bits`` is not 4, 8 or 16.
    """
    if int(bits) not in SUPPORTED_BITS:
        raise QuantizeError(f"{what} = {bits} is out of range: supported widths are "
                            f"{', '.join(map(str, SUPPORTED_BITS))}")
    return int(bits)


def integer_range(mode: str, bits: int) -> tuple[int, int]:
    """The integer range ``(qmin, qmax)`` of ``mode`` at ``bits`` (SPEC M5 §3)."""
    if mode == UNSIGNED:
        return 0, (1 << bits) - 1
    if mode == SYMMETRIC:
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    raise ValueError(f"unknown quantization mode {mode!r}")


def choose_mode(minimum: float, allow_unsigned: bool = True) -> str:
    """Unsigned iff the minimum is >= 0 (and the unsigned rule is on), else symmetric."""
    return UNSIGNED if allow_unsigned and minimum >= 0 else SYMMETRIC


def scale_factor(magnitude: np.ndarray | float, mode: str, bits: int) -> np.ndarray:
    """``k = qmax / m`` elementwise; a zero magnitude (an all-zero tensor) gives k = qmax."""
    m = np.asarray(magnitude, dtype=np.float64)
    qmax = integer_range(mode, bits)[1]
    return np.where(m > 0, qmax / np.where(m > 0, m, 1.0), float(qmax))


def onnx_int_dtype(mode: str, bits: int) -> np.dtype:
    """The NumPy dtype of the integers (ml_dtypes' int4/uint4 at 4 bits)."""
    if bits == 4:
        import ml_dtypes

        return np.dtype(ml_dtypes.uint4 if mode == UNSIGNED else ml_dtypes.int4)
    return np.dtype(f"{'u' if mode == UNSIGNED else ''}int{bits}")


@dataclass(frozen=True)
class QuantParams:
    """How one tensor is quantized.

    ``k`` holds one scale factor per tensor (shape ()) or one per slice along ``axis``
    (per-channel weights). ``minimum``/``maximum`` are the observed or known range.
    """

    mode: str
    bits: int
    k: np.ndarray
    axis: int | None = None
    minimum: float = 0.0
    maximum: float = 0.0
    source: str = field(default="calibration", compare=False)
    #: for a weight: its integers when chosen by something better than nearest rounding
    integers: np.ndarray | None = field(default=None, compare=False, repr=False)

    @property
    def qmin(self) -> int:
        return integer_range(self.mode, self.bits)[0]

    @property
    def qmax(self) -> int:
        return integer_range(self.mode, self.bits)[1]

    @property
    def onnx_scale(self) -> np.ndarray:
        """ONNX's ``y_scale`` (float32): ``1 / k``."""
        return (1.0 / np.asarray(self.k, dtype=np.float64)).astype(np.float32)

    @property
    def dtype(self) -> np.dtype:
        return onnx_int_dtype(self.mode, self.bits)

    def _broadcast(self, a: np.ndarray, ndim: int) -> np.ndarray:
        if self.axis is None or a.ndim == 0:
            return a
        shape = [1] * ndim
        shape[self.axis] = -1
        return a.reshape(shape)

    def quantize(self, x: np.ndarray) -> np.ndarray:
        """Integers ``clip(round_half_even(x / onnx_scale))`` as int64, as ONNX computes them."""
        s = self._broadcast(self.onnx_scale, np.ndim(x))
        q = np.rint(np.asarray(x, dtype=np.float32) / s)
        return np.clip(q, self.qmin, self.qmax).astype(np.int64)

    def dequantize(self, q: np.ndarray) -> np.ndarray:
        return (np.asarray(q, dtype=np.float32) * self._broadcast(self.onnx_scale, np.ndim(q))).astype(np.float32)

    def fake_quantize(self, x: np.ndarray) -> np.ndarray:
        return self.dequantize(self.quantize(x))

    def weight_integers(self, w: np.ndarray) -> np.ndarray:
        """The stored integers of constant ``w``: :attr:`integers` if set, else rounded."""
        return self.integers if self.integers is not None else self.quantize(w)

    def to_json(self) -> dict:
        k = np.asarray(self.k, dtype=np.float64)
        return {
            "mode": self.mode, "bits": self.bits, "axis": self.axis,
            "k": k.tolist(), "onnx_scale": self.onnx_scale.astype(np.float64).tolist(),
            "integer_range": [self.qmin, self.qmax],
            "min": float(self.minimum), "max": float(self.maximum), "source": self.source,
            **({"rounding": "gptq"} if self.integers is not None else {}),
        }


def params_for_range(minimum: float, maximum: float, bits: int, *, magnitude: float | None = None,
                     allow_unsigned: bool = True, source: str = "calibration") -> QuantParams:
    """Per-tensor parameters from a range (the seed's rule); ``magnitude`` overrides
    ``m = max(|min|, |max|)`` with a clipped value."""
    mode = choose_mode(minimum, allow_unsigned)
    m = max(abs(minimum), abs(maximum)) if magnitude is None else magnitude
    return QuantParams(mode, bits, scale_factor(m, mode, bits), None, float(minimum), float(maximum), source)


def weight_params(w: np.ndarray, bits: int, *, axis: int | None = None, allow_unsigned: bool = True) -> QuantParams:
    """Parameters for a constant: the same rule, with per-slice scales along ``axis``.

    The mode is per tensor (one ONNX integer type), the magnitude per slice.
    """
    w = np.asarray(w, dtype=np.float32)
    lo, hi = float(w.min(initial=0.0)), float(w.max(initial=0.0))
    mode = choose_mode(lo, allow_unsigned)
    if axis is None:
        m = np.abs(w).max(initial=0.0)
    else:
        axis = axis % w.ndim
        m = np.abs(np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)).max(axis=1, initial=0.0)
    return QuantParams(mode, bits, scale_factor(m, mode, bits), axis, lo, hi, "weights")
