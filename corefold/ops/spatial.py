"""Shared helpers for the kernels: attribute defaults, padding and sliding windows.

Attributes arrive in ONNX opset-21 form with defaults *not* filled in, so every kernel
reads them through :func:`attr_str` / :func:`attr_ints` with the ONNX default. Spatial
kernels (Conv, pools) work on ``(N, C, *spatial)`` arrays: :func:`conv_geometry` turns
``auto_pad``/``pads``/``ceil_mode`` into begin/end pads and output sizes, :func:`pad_spatial`
pads, and :func:`windows` returns a read-only strided view ``(N, C, *out, *kernel)`` of every
window, built with ``np.lib.stride_tricks.sliding_window_view`` (no copy).

:func:`packed` gives a BLAS-friendly (C-contiguous) copy of a read-only operand such as a
broadcast constant, made once and kept as long as the constant lives (the executor's
analogue of ONNX Runtime's weight pre-packing).
"""

from __future__ import annotations

import weakref
from typing import Any, Sequence

import numpy as np

from corefold.errors import UnsupportedOpError
from corefold.ops.arrays import is_fill  # noqa: F401 - re-exported for the kernels


def attr_str(attrs: dict[str, Any], name: str, default: str) -> str:
    """A string attribute (``str`` or ``bytes``) or ``default`` when missing."""
    v = attrs.get(name, default)
    return v.decode() if isinstance(v, bytes) else str(v)


def attr_ints(attrs: dict[str, Any], name: str, default: Sequence[int] | None) -> list[int] | None:
    """An int-list attribute as a list, or ``default`` when missing (or empty)."""
    v = attrs.get(name)
    if v is None or len(v) == 0:
        return None if default is None else list(default)
    return [int(i) for i in v]


def conv_geometry(in_sizes: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
                  dilations: Sequence[int], pads: Sequence[int] | None, auto_pad: str,
                  ceil_mode: bool = False, op: str = "Conv") -> tuple[list[int], list[int], list[int]]:
    """Begin pads, end pads and output sizes of a sliding-window op, per spatial axis.

    ``pads`` is ONNX's ``[b1, ..., bk, e1, ..., ek]`` (``None``: zeros). With ``ceil_mode`` the
    output rounds up, but (like ONNX Runtime and PyTorch) a window must start inside the
    input or the begin padding. End pads returned here do not include the extra tail that
    ``ceil_mode`` may read; :func:`tail_extra` gives that.

    Raises:
        UnsupportedOpError: an unknown ``auto_pad`` value.
    """
    k = len(in_sizes)
    dk = [(kk - 1) * d + 1 for kk, d in zip(kernel, dilations, strict=True)]
    if auto_pad in ("NOTSET", ""):
        p = list(pads) if pads is not None else [0] * (2 * k)
        begins, ends = p[:k], p[k:]
        outs = []
        for i in range(k):
            span = in_sizes[i] + begins[i] + ends[i] - dk[i]
            if ceil_mode:
                o = -(-span // strides[i]) + 1
                if (o - 1) * strides[i] >= in_sizes[i] + begins[i]:
                    o -= 1
            else:
                o = span // strides[i] + 1
            outs.append(o)
    elif auto_pad == "VALID":
        begins, ends = [0] * k, [0] * k
        outs = [(in_sizes[i] - dk[i]) // strides[i] + 1 for i in range(k)]
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        outs = [-(-in_sizes[i] // strides[i]) for i in range(k)]
        total = [max(0, (outs[i] - 1) * strides[i] + dk[i] - in_sizes[i]) for i in range(k)]
        if auto_pad == "SAME_UPPER":
            begins = [t // 2 for t in total]
        else:
            begins = [t - t // 2 for t in total]
        ends = [t - b for t, b in zip(total, begins, strict=True)]
    else:
        raise UnsupportedOpError(f"{op}: unknown auto_pad '{auto_pad}'")
    if any(o <= 0 for o in outs):
        raise UnsupportedOpError(f"{op}: window {list(kernel)} (dilations {list(dilations)}) does not fit "
                                 f"input {list(in_sizes)} with pads {begins + ends}")
    return begins, ends, outs


def tail_extra(in_sizes: Sequence[int], begins: Sequence[int], ends: Sequence[int], outs: Sequence[int],
               kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int]) -> list[int]:
    """Elements past ``in + begin + end`` that the last window reads (non-zero only in ceil mode)."""
    return [max(0, (o - 1) * s + (kk - 1) * d + 1 - (n + b + e))
            for n, b, e, o, kk, s, d in zip(in_sizes, begins, ends, outs, kernel, strides, dilations, strict=True)]


def pad_spatial(x: np.ndarray, begins: Sequence[int], ends: Sequence[int], value: float = 0.0) -> np.ndarray:
    """``x`` padded with ``value`` on its trailing ``len(begins)`` axes (no copy if no padding)."""
    if not any(begins) and not any(ends):
        return x
    lead = x.ndim - len(begins)
    shape = list(x.shape[:lead]) + [n + b + e for n, b, e in zip(x.shape[lead:], begins, ends, strict=True)]
    out = np.full(shape, value, dtype=x.dtype)
    out[(Ellipsis,) + tuple(slice(b, b + n) for b, n in zip(begins, x.shape[lead:], strict=True))] = x
    return out


def windows(xp: np.ndarray, kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
            outs: Sequence[int]) -> np.ndarray:
    """Read-only view ``(N, C, *outs, *kernel)`` of the windows of padded ``xp``.

    Window ``o`` along an axis starts at ``o * stride`` and reads every ``dilation``-th element.
    This is ``sliding_window_view(xp, dilated kernel)[..., ::stride, ::dilation]`` built
    directly with ``as_strided`` (a third of the call overhead, which matters for the many
    small convolutions of a CNN); the bounds are checked here instead.
    """
    k = len(kernel)
    lead = xp.ndim - k
    sp = xp.strides[lead:]
    for n, o, kk, s, d in zip(xp.shape[lead:], outs, kernel, strides, dilations, strict=True):
        if o < 1 or (o - 1) * s + (kk - 1) * d >= n:
            raise ValueError(f"window {list(kernel)} x {list(outs)} does not fit padded input {list(xp.shape)}")
    shape = tuple(xp.shape[:lead]) + tuple(outs) + tuple(kernel)
    st = (tuple(xp.strides[:lead]) + tuple(a * s for a, s in zip(sp, strides, strict=True))
          + tuple(a * d for a, d in zip(sp, dilations, strict=True)))
    return np.lib.stride_tricks.as_strided(xp, shape, st, writeable=False)


# id(constant) -> (weak reference to the constant, its contiguous copy)
_PACKED: dict[int, tuple[weakref.ref, np.ndarray]] = {}




def packed(a: np.ndarray) -> np.ndarray:
    """``a`` in a BLAS-friendly layout: itself, or for a read-only non-contiguous array (a
    constant) a contiguous copy made once and reused while the constant lives.

    Writeable arrays (kernel outputs and their views) come back as they are: BLAS takes
    any usual, e.g. transposed, layout. NumPy's matmul falls back to a slow non-BLAS loop on
    zero-stride operands (the importer's single-value constants), and copying a large
    broadcast on every run costs as much as the matmul, hence the cache: the executor's
    analogue of ONNX Runtime's weight pre-packing.
    """
    if a.flags.c_contiguous or a.flags.writeable:
        return a
    key = id(a)
    hit = _PACKED.get(key)
    if hit is not None and hit[0]() is a:
        return hit[1]
    copy = np.ascontiguousarray(a)
    try:
        ref = weakref.ref(a, lambda _r, key=key: _PACKED.pop(key, None))
    except TypeError:
        return copy
    _PACKED[key] = (ref, copy)
    return copy


def out_sizes(attrs: dict[str, Any], x: Sequence[int], kernel: Sequence[int], *, ceil: bool = False) -> list[int]:
    """Spatial output sizes of a sliding-window op on input shape ``x`` (N, C, *S), from
    explicit ``pads`` (the importer has already replaced ``auto_pad``). O(rank).

    Raises:
        ValueError: an output size would be <= 0.
    """
    n = len(x) - 2
    strides = attrs.get("strides", [1] * n)
    dil = attrs.get("dilations", [1] * n)
    pads = attrs.get("pads", [0] * (2 * n))
    out = []
    for i in range(n):
        eff = (kernel[i] - 1) * dil[i] + 1
        span = x[2 + i] + pads[i] + pads[i + n] - eff
        if ceil:
            o = -(-span // strides[i]) + 1
            if (o - 1) * strides[i] >= x[2 + i] + pads[i]:  # last window starts in the padding
                o -= 1
        else:
            o = span // strides[i] + 1
        if o <= 0:
            raise ValueError(f"spatial output size {o} <= 0 for input {list(x)}")
        out.append(o)
    return out


def spatial_pads_normalise(imp, n) -> None:
    """Replace ``auto_pad`` by explicit ``pads`` (shapes are static at import); the kernel
    size is ``kernel_shape`` or, for Conv, the weight's spatial shape."""
    if "kernel_shape" in n.attrs:
        kernel = list(n.attrs["kernel_shape"])
    else:
        kernel = list(n.inputs[1].shape[2:])
    mode = n.attrs.pop("auto_pad", "NOTSET")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("NOTSET", ""):
        x = n.inputs[0].shape
        k = len(x) - 2
        if mode == "VALID":
            n.attrs["pads"] = [0] * (2 * k)
        elif mode in ("SAME_UPPER", "SAME_LOWER"):
            strides = n.attrs.get("strides", [1] * k)
            dil = n.attrs.get("dilations", [1] * k)
            begin, end = [], []
            for i in range(k):
                out = -(-x[2 + i] // strides[i])
                total = max((out - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - x[2 + i], 0)
                small, big = total // 2, total - total // 2
                begin.append(small if mode == "SAME_UPPER" else big)
                end.append(big if mode == "SAME_UPPER" else small)
            n.attrs["pads"] = begin + end
        else:
            raise UnsupportedOpError(f"node '{n.name}' ({n.op}): auto_pad={mode} is not supported")
    imp.emit(n.op, n.inputs, n.attrs, n.outputs, n.name)
