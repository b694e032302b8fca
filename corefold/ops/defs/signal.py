"""Signal processing: DFT, STFT, the Hann, Hamming and Blackman windows and MelWeightMatrix.

Complex tensors are real tensors with a last axis of 2 (real, imaginary); a real signal
has a last axis of 1. DFT and STFT are NumPy FFTs: O(n log n) per transformed line. The
windows and the mel filter bank are O(output) array expressions (their inputs are scalars,
so the importer usually folds them into constants).
"""

from __future__ import annotations

import math

import numpy as np

from corefold.ops.defs.elemtypes import attr_dtype
from corefold.ops.defs.shape import attr_to_input
from corefold.ops.facets import DMA, norm_axis, prod
from corefold.ops.registry import op
from corefold.ops.schema import AS_IS, FLOAT, NONE, Cost, Quant, SplitAxis


def _scalar(a, what: str) -> int:
    a = np.asarray(a).reshape(-1)
    if a.size != 1:
        raise ValueError(f"{what} must hold one value")
    return int(a[0])


def _complex(x: np.ndarray) -> np.ndarray:
    """``(..., 1)`` real or ``(..., 2)`` real/imaginary as a complex array ``(...)``, in single
    precision for float32 and smaller types (NumPy's FFT then runs in single precision, as
    ONNX Runtime's does), else double."""
    real = np.float64 if x.dtype == np.float64 else np.float32
    if x.shape[-1] == 1:
        return x[..., 0].astype(real)
    if x.shape[-1] != 2:
        raise ValueError(f"the last axis must be 1 (real) or 2 (complex), got {x.shape[-1]}")
    z = np.empty(x.shape[:-1], np.complex128 if real is np.float64 else np.complex64)
    z.real, z.imag = x[..., 0], x[..., 1]
    return z


def _interleaved(z: np.ndarray, dtype) -> np.ndarray:
    return np.stack([z.real, z.imag], axis=-1).astype(dtype)


# -- DFT ----------------------------------------------------------------------------------------------
def _dft_normalise(imp, n) -> None:
    """Opset 17's ``axis`` attribute (default 1) is opset 20's input 2 (default -2)."""
    if imp.opset < 20:
        n.attrs.setdefault("axis", 1)
        attr_to_input(imp, n, "axis", 2, "int64")
    imp.emit(n.op, n.inputs, n.attrs, n.outputs, n.name)


def _dft_plan(attrs, x_shape, length, axis_in) -> tuple[int, int, tuple[int, ...]]:
    rank = len(x_shape)
    axis = norm_axis(-2 if axis_in is None else _scalar(axis_in, "axis"), rank)
    if axis == rank - 1:
        raise ValueError("the transformed axis cannot be the last (real/imaginary) one")
    inverse, onesided = bool(attrs.get("inverse", 0)), bool(attrs.get("onesided", 0))
    if length is None:
        n = 2 * (x_shape[axis] - 1) if inverse and onesided else x_shape[axis]
    else:
        n = _scalar(length, "dft_length")
    out = list(x_shape)
    if inverse and onesided:
        out[axis], out[-1] = n, 1
    else:
        out[axis] = n // 2 + 1 if onesided else n
        out[-1] = 2
    return axis, n, tuple(out)


def _dft_infer(attrs, ins, consts):
    x, dt = ins[0]
    for i, what in ((1, "dft_length"), (2, "axis")):
        if len(ins) > i and ins[i] is not None and consts[i] is None:
            raise ValueError(f"{what} is not a constant at import")
    length = consts[1] if len(consts) > 1 else None
    axis = consts[2] if len(consts) > 2 else None
    return [(_dft_plan(attrs, x, length, axis)[2], dt)]


def _dft_split(attrs, ins, outs, consts):
    """Any axis but the transformed one and the last (real/imaginary)."""
    x = ins[0][0]
    axis = norm_axis(-2 if len(consts) < 3 or consts[2] is None else _scalar(consts[2], "axis"), len(x))
    out = outs[0][0]
    return [SplitAxis("batch" if a == 0 else f"axis{a}", out[a], ((a, 1),) + (None,) * (len(ins) - 1), (a, 1))
            for a in range(len(x) - 1) if a != axis and out[a] >= 2], False


def _fft_cost(attrs, ins, outs):
    out = outs[0][0]
    return 5 * prod(out) * max(1.0, math.log2(max(out) or 1))


@op("DFT", normalise=_dft_normalise, infer=_dft_infer, cost=Cost("vector", _fft_cost), split=_dft_split,
    quant=Quant(FLOAT), param_inputs=(1, 2))
def dft(attrs, inputs):
    """The discrete Fourier transform along the ``axis`` input (opset 20; default -2) of
    length ``dft_length`` (default the axis' size; the signal is cut or zero-padded);
    ``onesided`` keeps the ``n // 2 + 1`` non-redundant frequencies of a real signal;
    ``inverse`` is the inverse transform, divided by n (inverse and onesided: a real
    signal from one-sided frequencies)."""
    x = inputs[0]
    length = inputs[1] if len(inputs) > 1 else None
    axis_in = inputs[2] if len(inputs) > 2 else None
    axis, n, _ = _dft_plan(attrs, x.shape, length, axis_in)
    z = _complex(x)
    inverse, onesided = bool(attrs.get("inverse", 0)), bool(attrs.get("onesided", 0))
    if inverse and onesided:
        return [np.fft.irfft(z, n=n, axis=axis)[..., None].astype(x.dtype)]
    if inverse:
        return [_interleaved(np.fft.ifft(z, n=n, axis=axis), x.dtype)]
    y = np.fft.fft(z, n=n, axis=axis)
    if onesided:
        y = np.take(y, np.arange(n // 2 + 1), axis=axis)
    return [_interleaved(y, x.dtype)]


# -- STFT ---------------------------------------------------------------------------------------------
def _stft_plan(attrs, x_shape, step, window_shape, length) -> tuple[int, int, int, tuple[int, ...]]:
    if len(x_shape) != 3:
        raise ValueError(f"signal must be (batch, length, 1 or 2), got {list(x_shape)}")
    step = _scalar(step, "frame_step")
    if length is not None:
        n = _scalar(length, "frame_length")
    elif window_shape is not None:
        n = window_shape[0]
    else:
        n = x_shape[1]
    frames = 1 + (x_shape[1] - n) // step
    onesided = bool(attrs.get("onesided", 1))
    bins = n // 2 + 1 if onesided else n
    if step < 1 or frames < 1:
        raise ValueError(f"frame_step {step} and frame_length {n} do not fit a signal of {x_shape[1]}")
    return step, n, frames, (x_shape[0], frames, bins, 2)


def _stft_infer(attrs, ins, consts):
    x, dt = ins[0]
    if consts[1] is None or (len(ins) > 3 and ins[3] is not None and consts[3] is None):
        raise ValueError("frame_step and frame_length must be constants at import")
    window = ins[2][0] if len(ins) > 2 and ins[2] is not None else None
    length = consts[3] if len(consts) > 3 else None
    return [(_stft_plan(attrs, x, consts[1], window, length)[3], dt)]


def _stft_split(attrs, ins, outs, consts):
    b = ins[0][0][0]
    if b < 2:
        return [], False
    return [SplitAxis("batch", b, ((0, 1),) + (None,) * (len(ins) - 1), (0, 1))], False


@op("STFT", normalise=AS_IS, infer=_stft_infer, cost=Cost("vector", _fft_cost), split=_stft_split, quant=Quant(FLOAT), param_inputs=(1, 3))
def stft(attrs, inputs):
    """Short-time Fourier transform (opset 17): frames of ``frame_length`` (default the
    window's length) every ``frame_step`` samples, times the ``window`` (default ones),
    each transformed; ``onesided`` (default 1) keeps ``n // 2 + 1`` frequencies.
    Output ``(batch, frames, bins, 2)``."""
    x, step = inputs[0], inputs[1]
    window = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
    length = inputs[3] if len(inputs) > 3 and inputs[3] is not None else None
    step, n, frames, _ = _stft_plan(attrs, x.shape, step, None if window is None else window.shape, length)
    z = _complex(x)  # (B, L)
    idx = np.arange(frames)[:, None] * step + np.arange(n)[None, :]  # (F, n)
    framed = z[:, idx]  # (B, F, n)
    if window is not None:
        framed = framed * window.astype(framed.real.dtype)
    y = np.fft.fft(framed, n=n, axis=-1)
    if attrs.get("onesided", 1):
        y = y[..., : n // 2 + 1]
    return [_interleaved(y, x.dtype)]


# -- windows -----------------------------------------------------------------------------------------
def _window_infer(attrs, ins, consts):
    if consts[0] is None:
        raise ValueError("size is not a constant at import")
    return [((_scalar(consts[0], "size"),), attr_dtype(attrs.get("output_datatype"), "float32"))]


def _window(fn):
    def kernel(attrs, inputs):
        size = _scalar(inputs[0], "size")
        periodic = bool(attrs.get("periodic", 1))
        span = size if periodic else size - 1
        k = np.arange(size, dtype=np.float64)
        y = fn(k, span) if span > 0 else np.ones(size)
        return [y.astype(attr_dtype(attrs.get("output_datatype"), "float32"))]
    return kernel


_WINDOW = dict(normalise=AS_IS, infer=_window_infer, cost=DMA, split=NONE, quant=Quant(FLOAT), param_inputs=(0,))


def _define_window(name: str, fn, doc: str) -> None:
    kernel = _window(fn)
    kernel.__name__ = name.lower()
    kernel.__doc__ = doc
    op(name, **_WINDOW)(kernel)


_define_window("HannWindow", lambda k, n: np.sin(np.pi * k / n) ** 2,
               "``sin^2(pi k / N)``, N the size (``periodic``, default 1) or size - 1.")
_define_window("HammingWindow", lambda k, n: 25 / 46 - (21 / 46) * np.cos(2 * np.pi * k / n),
               "``25/46 - 21/46 cos(2 pi k / N)``, N as HannWindow's.")
_define_window("BlackmanWindow", lambda k, n: 0.42 - 0.5 * np.cos(2 * np.pi * k / n) + 0.08 * np.cos(4 * np.pi * k / n),
               "``0.42 - 0.5 cos(2 pi k / N) + 0.08 cos(4 pi k / N)``, N as HannWindow's.")


# -- MelWeightMatrix ---------------------------------------------------------------------------------
def _mel_infer(attrs, ins, consts):
    if consts[0] is None or consts[1] is None:
        raise ValueError("num_mel_bins and dft_length must be constants at import")
    bins, length = _scalar(consts[0], "num_mel_bins"), _scalar(consts[1], "dft_length")
    return [((length // 2 + 1, bins), attr_dtype(attrs.get("output_datatype"), "float32"))]


@op("MelWeightMatrix", normalise=AS_IS, infer=_mel_infer, cost=DMA, split=NONE, quant=Quant(FLOAT),
    param_inputs=(0, 1, 2, 3, 4))
def mel_weight_matrix(attrs, inputs):
    """The ``(dft_length // 2 + 1, num_mel_bins)`` triangular mel filter bank between
    ``lower_edge_hertz`` and ``upper_edge_hertz`` at ``sample_rate``, with the band edges
    of ONNX's reference (mel step: the range over num_mel_bins + 2)."""
    bins, length = _scalar(inputs[0], "num_mel_bins"), _scalar(inputs[1], "dft_length")
    rate = float(np.asarray(inputs[2]).reshape(-1)[0])
    lo_hz, hi_hz = (float(np.asarray(a).reshape(-1)[0]) for a in inputs[3:5])
    lo_mel = 2595 * np.log1p(lo_hz / 700) / np.log(10)
    hi_mel = 2595 * np.log1p(hi_hz / 700) / np.log(10)
    edges = np.arange(bins + 2) * ((hi_mel - lo_mel) / (bins + 2)) + lo_mel
    edges = 700 * np.expm1(edges / 2595 * np.log(10))
    edges = (((length + 1) * edges) // rate).astype(np.int64)
    left, centre, right = edges[:-2][None, :], edges[1:-1][None, :], edges[2:][None, :]
    j = np.arange(length // 2 + 1)[:, None]
    rising = (j >= left) & (j <= centre)
    up = np.where(centre > left, (j - left) / np.maximum(centre - left, 1), 1.0)
    out = np.where(rising & ((centre > left) | (j == centre)), up, 0.0)
    falling = (j >= centre) & (j < right)
    out = np.where(falling, (right - j) / np.maximum(right - centre, 1), out)
    return [out.astype(attr_dtype(attrs.get("output_datatype"), "float32"))]
