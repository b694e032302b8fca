"""The memory pass's operators (domain ``corefold.memory``, SPEC M2 §4): table entries.

The memory pass writes these nodes into the IR itself, so no ONNX file holds them
(``normalise`` is NONE); they are never split or quantized (``split``, ``quant`` NONE).

* ``SwapOut(x...) -> (h...)``: copy each input to host memory; ``SwapIn(h...) -> (x...)``
  copies back. The values are unchanged (bit-exact): in the reference executor both are
  copies, the placement is what the memory and time simulators account for.
* ``Compress(x) attrs {format}``: ``fp16`` and ``bf16`` round to nearest even into that
  type (one output); ``fp8`` (e4m3, saturating) and ``int8`` scale per tensor first and
  output ``(q, scale)`` with ``scale = max(max|x| / M, FLT_MIN)`` in float32, ``M`` = 448
  (fp8) or 127 (int8), ``q = saturate(x / scale)`` (fp8) or
  ``clip(round_half_even(x / scale), -127, 127)`` (int8).
* ``Decompress(q[, scale]) attrs {format, to}``: back to dtype ``to``, ``q * scale`` when
  scaled.

Error bounds per element (what the pass states and its tests check), for finite ``x``
within the format's range: fp16 ``|x' - x| <= 2^-11 |x| + 2^-25``; bf16 ``<= 2^-8 |x| +
2^-133``; fp8 ``<= 2^-4 |x| + 2^-10 scale``; int8 ``<= scale / 2``. The same arithmetic in
ONNX (Cast pairs; Div, Cast, Mul; QuantizeLinear/DequantizeLinear) gives the same values in
ONNX Runtime (``corefold.passes.memory.export``).
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from corefold.errors import UnsupportedOpError
from corefold.ops.facets import DMA, vector
from corefold.ops.registry import op
from corefold.ops.schema import NONE

#: The domain of the memory pass's nodes (the same string as ``corefold.ir.domains``'s).
MEMORY_DOMAIN = "corefold.memory"

FLT_MIN = np.float32(np.finfo(np.float32).tiny)


@dataclass(frozen=True)
class CompressFormat:
    """One compression format: the stored element type, and the scale's divisor (0: none).

    Attributes:
        name: the ``format`` attribute.
        dtype: element type of the compressed tensor.
        scale_max: largest magnitude of the scaled values (448 fp8, 127 int8); 0 = unscaled.
        rel_error, abs_error: the per-element bound ``|x' - x| <= rel_error |x| + abs_error``
            (``abs_error`` in units of the scale for scaled formats).
    """

    name: str
    dtype: np.dtype
    scale_max: float
    rel_error: float
    abs_error: float

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    def bound(self, x: np.ndarray, scale: float = 1.0) -> np.ndarray:
        """The largest allowed ``|x' - x|`` for each element of ``x``."""
        return self.rel_error * np.abs(x.astype(np.float64)) + self.abs_error * float(scale)


#: The formats ``Compress`` accepts.
COMPRESS_FORMATS = {
    "fp16": CompressFormat("fp16", np.dtype(np.float16), 0.0, 2.0**-11, 2.0**-25),
    "bf16": CompressFormat("bf16", np.dtype(ml_dtypes.bfloat16), 0.0, 2.0**-8, 2.0**-133),
    "fp8": CompressFormat("fp8", np.dtype(ml_dtypes.float8_e4m3fn), 448.0, 2.0**-4, 2.0**-10),
    "int8": CompressFormat("int8", np.dtype(np.int8), 127.0, 0.0, 0.5),
}


def compress_format(name: str) -> CompressFormat:
    """The format called ``name``.

    Raises:
        UnsupportedOpError: no such format.
    """
    if name not in COMPRESS_FORMATS:
        raise UnsupportedOpError(f"Compress format {name!r} is not one of {', '.join(COMPRESS_FORMATS)}")
    return COMPRESS_FORMATS[name]


def tensor_scale(x: np.ndarray, fmt: CompressFormat) -> np.float32:
    """``max(max|x| / scale_max, FLT_MIN)`` in float32 (as ReduceMax(Abs), Div, Max in ONNX)."""
    amax = np.max(np.abs(x)).astype(np.float32) if x.size else np.float32(0)
    return np.maximum(amax / np.float32(fmt.scale_max), FLT_MIN)


def compress(x: np.ndarray, fmt: CompressFormat) -> list[np.ndarray]:
    """``[q]`` or ``[q, scale]``: ``x`` (float32) in format ``fmt``."""
    x = np.asarray(x, dtype=np.float32)
    if not fmt.scale_max:
        return [x.astype(fmt.dtype)]
    scale = tensor_scale(x, fmt)
    y = x / scale
    if fmt.name == "int8":
        q = np.clip(np.round(y), -127, 127).astype(np.int8)
    else:
        q = np.clip(y, -fmt.scale_max, fmt.scale_max).astype(fmt.dtype)  # saturate, as ONNX Cast
    return [q, np.asarray(scale, dtype=np.float32)]


def decompress(q: np.ndarray, scale: np.ndarray | None, fmt: CompressFormat, to: str = "float32") -> np.ndarray:
    """The inverse of :func:`compress` (up to the rounding error)."""
    y = np.asarray(q).astype(np.float32)
    if fmt.scale_max:
        y = y * np.asarray(scale, dtype=np.float32)
    return y.astype(np.dtype(to), copy=False)


def _infer_copy(attrs, ins, consts):
    """Each output has its input's shape and dtype."""
    return list(ins)


def _infer_compress(attrs, ins, consts):
    """``q`` in the format's dtype, plus a float32 scalar scale for scaled formats."""
    fmt = _format_of(attrs)
    out = [(ins[0][0], fmt.dtype)]
    return out + [((), np.dtype(np.float32))] if fmt.scale_max else out


def _infer_decompress(attrs, ins, consts):
    """``q``'s shape in dtype ``to``."""
    _format_of(attrs)
    return [(ins[0][0], np.dtype(attrs.get("to", "float32")))]


def _format_of(attrs) -> CompressFormat:
    try:
        return compress_format(attrs.get("format", "fp16"))
    except UnsupportedOpError as e:
        raise ValueError(str(e)) from None


_FACETS = dict(domain=MEMORY_DOMAIN, normalise=NONE, split=NONE, quant=NONE, param_inputs=(), foldable=False)


@op("SwapOut", "SwapIn", infer=_infer_copy, cost=DMA, **_FACETS)
def copy(attrs, inputs):
    """A bit-exact copy of every input (to or from host memory)."""
    return [np.array(x, copy=True) for x in inputs]


@op("Compress", infer=_infer_compress, cost=vector(2), **_FACETS)
def compress_kernel(attrs, inputs):
    """:func:`compress` of input 0 in format ``attrs["format"]`` (default fp16)."""
    return compress(inputs[0], compress_format(attrs.get("format", "fp16")))


@op("Decompress", infer=_infer_decompress, cost=vector(1), **_FACETS)
def decompress_kernel(attrs, inputs):
    """:func:`decompress` of ``(q[, scale])`` to dtype ``attrs["to"]`` (default float32)."""
    fmt = compress_format(attrs.get("format", "fp16"))
    return [decompress(inputs[0], inputs[1] if len(inputs) > 1 else None, fmt, attrs.get("to", "float32"))]
