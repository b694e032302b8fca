"""Conv and ConvTranspose (N-D spatial, groups, strides, dilations, pads, auto_pad).

Conv is im2col + batched matmul: the padded input's windows (a strided view from
:func:`~corefold.executor.kernels.spatial.windows`) are copied into ``(G, Cg*K, positions)``
column blocks and multiplied by the ``(G, Mg, Cg*K)`` weights, so grouped and depthwise
convolutions are one ``np.matmul`` over the group axis per block. Work is
O(N * M * Cg * K * P) multiply-adds for P output positions.

ConvTranspose is the adjoint: one matmul gives every (input pixel, kernel tap) product,
then a loop over the K kernel taps (not over pixels) adds each tap's plane into the strided
output positions (col2im).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from corefold.errors import UnsupportedOpError
from corefold.ops.facets import matrix, prod
from corefold.ops.registry import op
from corefold.ops.schema import COMPUTE, NONE, Quant, SplitAxis
from corefold.ops.spatial import (
    attr_ints,
    attr_str,
    conv_geometry,
    is_fill,
    out_sizes,
    packed,
    pad_spatial,
    spatial_pads_normalise,
    windows,
)


# -- facets ------------------------------------------------------------------------------------------
def conv_infer(attrs, ins, consts):
    """Conv's output shape and dtype (input 0's) from the input and weight shapes."""
    (x, dt), (w, _) = ins[0], ins[1]
    if len(x) < 3 or len(w) != len(x):
        raise ValueError(f"input {list(x)} and weight {list(w)} do not fit a convolution")
    kernel = attrs.get("kernel_shape", list(w[2:]))
    if x[1] != w[1] * attrs.get("group", 1):
        raise ValueError(f"input channels {x[1]} != weight channels {w[1]} x group {attrs.get('group', 1)}")
    return [((x[0], w[0], *out_sizes(attrs, x, kernel)), dt)]


def _conv_transpose_infer(attrs, ins, consts):
    (x, dt), (w, _) = ins[0], ins[1]
    n = len(x) - 2
    kernel = attrs.get("kernel_shape", list(w[2:]))
    strides = attrs.get("strides", [1] * n)
    dil = attrs.get("dilations", [1] * n)
    pads = attrs.get("pads", [0] * (2 * n))
    opad = attrs.get("output_padding", [0] * n)
    out = [strides[i] * (x[2 + i] - 1) + opad[i] + (kernel[i] - 1) * dil[i] + 1 - pads[i] - pads[i + n]
           for i in range(n)]
    return [((x[0], w[1] * attrs.get("group", 1), *out), dt)]


def _conv_macs(attrs, ins, outs):
    return prod(outs[0][0]) * prod(ins[1][0][1:])  # w: (M, C/group, k...)


def _conv_transpose_macs(attrs, ins, outs):
    return prod(ins[0][0]) * prod(ins[1][0][1:])  # w: (C, M/group, k...)


def conv_split(attrs, ins, outs, consts):
    """Batch first, then output channels (weights cut on their output channels), then input
    channels with partial sums added (SPEC M3 §7); grouped convs split whole groups."""
    x, w = ins[0][0], ins[1][0]
    has_bias = len(ins) > 2 and ins[2] is not None
    n, c = x[0], x[1]
    m = w[0]
    group = int(attrs.get("group", 1))
    extra = (None,) if has_bias else ()
    axes = []
    if n >= 2:
        axes.append(SplitAxis("batch", n, ((0, 1), None) + extra, (0, 1)))
    if group == 1:
        if m >= 2:
            axes.append(SplitAxis("out_channels", m, (None, (0, 1)) + ((0, 1),) * has_bias, (1, 1)))
        if c >= 2:
            axes.append(SplitAxis("in_channels", c, ((1, 1), (1, 1)) + extra, None, reduce=True))
    elif group >= 2:
        cg, mg = c // group, m // group
        axes.append(SplitAxis("groups", group, ((1, cg), (0, mg)) + ((0, mg),) * has_bias, (1, mg),
                              scales_group=True))
    return axes, True


def _conv_transpose_normalise(imp, n) -> None:
    """``output_shape`` and ``auto_pad`` become explicit ``pads`` (ONNX spec formula)."""
    x, w = n.inputs[0].shape, n.inputs[1].shape
    k = len(x) - 2
    mode = n.attrs.pop("auto_pad", "NOTSET")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    out_shape = n.attrs.pop("output_shape", None)
    if mode == "VALID":
        n.attrs["pads"] = [0] * (2 * k)
    elif out_shape is not None or mode in ("SAME_UPPER", "SAME_LOWER"):
        kernel = n.attrs.get("kernel_shape", list(w[2:]))
        strides = n.attrs.get("strides", [1] * k)
        dil = n.attrs.get("dilations", [1] * k)
        opad = list(n.attrs.get("output_padding", [0] * k))
        if out_shape is None:
            out_shape = [x[2 + i] * strides[i] for i in range(k)]
        out_shape = list(out_shape)[-k:]
        begin, end = [], []
        for i in range(k):
            total = strides[i] * (x[2 + i] - 1) + opad[i] + (kernel[i] - 1) * dil[i] + 1 - out_shape[i]
            if total < 0:  # an output_shape past the full result: zero rows at the end, as ONNX Runtime
                opad[i] -= total
                n.attrs["output_padding"] = opad
                total = 0
            if mode == "SAME_UPPER":
                begin.append(total // 2)
                end.append(total - total // 2)
            else:
                begin.append(total - total // 2)
                end.append(total // 2)
        n.attrs["pads"] = begin + end
    imp.emit(n.op, n.inputs, n.attrs, n.outputs, n.name)


CONV = dict(normalise=spatial_pads_normalise, infer=conv_infer, cost=matrix(_conv_macs), split=conv_split,
            quant=Quant(COMPUTE, integer="linear", weights={1: lambda attrs, shape: 0}, bias=2,
                        fuses_activation=True),
            param_inputs=())
CONV_TRANSPOSE = dict(normalise=_conv_transpose_normalise, infer=_conv_transpose_infer,
                      cost=matrix(_conv_transpose_macs), split=NONE,
                      quant=Quant(COMPUTE, weights={1: lambda attrs, shape: 1}, bias=2, fuses_activation=True),
                      param_inputs=())

#: Output positions per block of im2col columns (rounded to whole rows of the first output
#: axis): few enough that a block stays in cache between its copy and the matmul reading it,
#: enough that BLAS re-packing the weights for every block costs little.
COLUMN_BLOCK = 1024


def _conv_matmul(x: np.ndarray, wm: np.ndarray, group: int, kernel_shape: list[int], strides: list[int],
                 dilations: list[int], begins: list[int], ends: list[int], outs: list[int]) -> np.ndarray:
    """``(G, Mg, N, *outs)``: the weights ``wm (G, Mg, Cg*K)`` times the im2col columns of ``x``.

    The columns ``(G, Cg*K, positions)`` are built block by block (a run of rows of the first
    output axis of one sample at a time, about :data:`COLUMN_BLOCK` positions), each block
    copied from the strided window view and multiplied at once, so the working set stays
    in cache and memory stays O(weights + output + one block).
    """
    n, c = x.shape[:2]
    cg = c // group
    mg = wm.shape[1]
    p = math.prod(outs)
    if all(kk == 1 for kk in kernel_shape) and not any(begins) and not any(ends):
        xs = x[(Ellipsis,) + tuple(slice(0, (o - 1) * s + 1, s) for o, s in zip(outs, strides, strict=True))]
        cols = np.ascontiguousarray(xs.reshape(n, group, cg, p).transpose(1, 2, 0, 3)).reshape(group, cg, n * p)
        return np.matmul(wm, cols).reshape((group, mg, n) + tuple(outs))
    win = windows(pad_spatial(x, begins, ends), kernel_shape, strides, dilations, outs)
    win = win.reshape((n, group, cg) + tuple(outs) + tuple(kernel_shape))  # (N, G, Cg, *O, *K)
    ck = cg * math.prod(kernel_shape)
    rest = math.prod(outs[1:])
    rows = max(1, min(outs[0], COLUMN_BLOCK // max(1, rest)))
    y = np.empty((group, mg, n) + tuple(outs), dtype=np.result_type(x, wm))
    flat = y.reshape(group, mg, n, p)
    taps = list(itertools.product(*(range(kk) for kk in kernel_shape)))
    buf = np.empty((group, cg, len(taps), rows) + tuple(outs[1:]), dtype=x.dtype)
    for b in range(n):
        for r0 in range(0, outs[0], rows):
            r1 = min(outs[0], r0 + rows)
            cols = buf[:, :, :, : r1 - r0]
            # One copy per kernel tap: each has the output row as its contiguous inner loop,
            # where copying the 2k-D window view at once iterates over the short tap axes.
            for i, tap in enumerate(taps):
                cols[:, :, i] = win[(b, slice(None), slice(None), slice(r0, r1)) + (Ellipsis,) + tap]
            cols = cols.reshape(group, ck, (r1 - r0) * rest)
            np.matmul(wm, cols, out=flat[:, :, b, r0 * rest:r1 * rest])  # straight into the output
    return y


def _conv_depthwise_flat(x: np.ndarray, w: np.ndarray, kernel_shape: list[int], strides: list[int],
                         dilations: list[int], begins: list[int], ends: list[int], outs: list[int]) -> np.ndarray:
    """``(N, C, OH, OW)``: 2-D depthwise convolution (one input and one output channel per
    group).

    The padded input is split into ``sh * sw`` stride phases (``xp[py::sh, px::sw]``, one copy;
    with stride 1 the padded input itself), each flattened per channel with row length
    ``Wq``. The output is computed ``Wq`` positions wide, so that kernel tap ``(ty, tx)``
    reads one contiguous slice of its phase at offset ``qy * Wq + qx``, and the tap loop is K
    whole-array multiply-adds with contiguous inner loops (faster than im2col and G tiny
    matmuls). The extra columns are cropped at the end. O(C * OH * Wq * K).
    """
    n, c = x.shape[:2]
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = kernel_shape, strides, dilations, outs
    hp, wp = x.shape[2] + begins[0] + ends[0], x.shape[3] + begins[1] + ends[1]
    wq = -(-wp // sw)
    qx_max = (kw - 1) * dw // sw
    hq = -(-hp // sh) + 1 + qx_max // wq  # a spare row keeps the last tap's slice inside
    if sh == sw == 1:
        phases = pad_spatial(x, begins, [ends[0] + hq - hp, ends[1]]).reshape(n, c, 1, 1, -1)
    else:
        xp = pad_spatial(x, begins, ends)
        buf = np.zeros((n, c, sh, sw, hq, wq), dtype=x.dtype)
        for py in range(sh):
            for px in range(sw):
                ph = xp[:, :, py::sh, px::sw]
                buf[:, :, py, px, : ph.shape[2], : ph.shape[3]] = ph
        phases = buf.reshape(n, c, sh, sw, -1)
    length = oh * wq
    wk = w.reshape(c, kh * kw, 1)
    acc = tmp = None
    for i, (ty, tx) in enumerate(itertools.product(range(kh), range(kw))):
        (qy, py), (qx, px) = divmod(ty * dh, sh), divmod(tx * dw, sw)
        src = phases[:, :, py, px, qy * wq + qx: qy * wq + qx + length]
        if acc is None:
            acc = src * wk[:, i]
            tmp = np.empty_like(acc)
        else:
            np.multiply(src, wk[:, i], out=tmp)
            acc += tmp
    return acc.reshape(n, c, oh, wq)[..., :ow]


def _conv_fill(x: np.ndarray, value, group: int, mg: int, kernel_shape: list[int], strides: list[int],
               dilations: list[int], begins: list[int], ends: list[int], outs: list[int]) -> np.ndarray:
    """``(G, Mg, N, *outs)`` for weights that are all ``value``: every output channel of a
    group is ``value`` times the window sum of the group's channel sum.

    NOTE: computing that one plane and broadcasting it is exact, O(C*S + G*K*P) instead of
    O(M*Cg*K*P), and, more to the point, gives bit-identical channels as ONNX Runtime does.
    Through BLAS the channels differ by an ulp (OpenBLAS rounds a row differently depending
    on its place in the blocking), and the ONNX "light" models, whose weights are all
    single-value fills, end in a Softmax over ~1e9 logits that turns one ulp into a wrong
    probability.
    """
    n, c = x.shape[:2]
    xs = x.reshape((n, group, c // group) + x.shape[2:]).sum(axis=2)  # (N, G, *S)
    win = windows(pad_spatial(xs, begins, ends), kernel_shape, strides, dilations, outs)
    taps = [win[(Ellipsis,) + t] for t in itertools.product(*(range(kk) for kk in kernel_shape))]
    acc = taps[0].copy()
    for t in taps[1:]:
        acc += t
    acc *= acc.dtype.type(value)
    plane = np.moveaxis(acc, 1, 0)[:, None]  # (G, 1, N, *O)
    return np.broadcast_to(plane, (group, mg, n) + tuple(outs))


def _spatial_attrs(attrs: dict, w: np.ndarray, k: int, op: str) -> tuple[list[int], list[int], list[int], int]:
    kernel_shape = attr_ints(attrs, "kernel_shape", w.shape[2:])
    if list(kernel_shape) != list(w.shape[2:]):
        raise UnsupportedOpError(f"{op}: kernel_shape {kernel_shape} does not match weights {list(w.shape)}")
    strides = attr_ints(attrs, "strides", [1] * k)
    dilations = attr_ints(attrs, "dilations", [1] * k)
    group = int(attrs.get("group", 1))
    return kernel_shape, strides, dilations, group


@op("Conv", **CONV)
def conv(attrs, inputs):
    """ONNX Conv: ``X (N, C, *S)``, ``W (M, C/group, *K)``, optional bias ``B (M)``."""
    x, w = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    k = x.ndim - 2
    kernel_shape, strides, dilations, group = _spatial_attrs(attrs, w, k, "Conv")
    n, c = x.shape[:2]
    m = w.shape[0]
    if c % group or m % group or w.shape[1] != c // group:
        raise UnsupportedOpError(f"Conv: input channels {c}, weights {list(w.shape)} and group {group} disagree")
    begins, ends, outs = conv_geometry(x.shape[2:], kernel_shape, strides, dilations,
                                       attr_ints(attrs, "pads", None), attr_str(attrs, "auto_pad", "NOTSET"))
    if k == 2 and group == c == m and not is_fill(w):
        y = np.ascontiguousarray(_conv_depthwise_flat(x, w, kernel_shape, strides, dilations, begins, ends, outs))
        if b is not None:
            y += b.reshape((m,) + (1,) * k)
        return [y]
    if is_fill(w):
        y = _conv_fill(x, w.flat[0], group, m // group, kernel_shape, strides, dilations, begins, ends, outs)
    else:
        wm = packed(w).reshape(group, m // group, -1)
        y = _conv_matmul(x, wm, group, kernel_shape, strides, dilations, begins, ends, outs)
    y = y.reshape((m, n) + tuple(outs))
    y = np.ascontiguousarray(np.moveaxis(y, 0, 1))
    if b is not None:
        y += b.reshape((m,) + (1,) * k)
    return [y]


def _transpose_geometry(attrs: dict, in_sizes, kernel_shape, strides, dilations) -> tuple[list[int], list[int]]:
    """Begin pads and output sizes of ConvTranspose, following the ONNX spec's equations."""
    k = len(in_sizes)
    out_pad = attr_ints(attrs, "output_padding", [0] * k)
    auto_pad = attr_str(attrs, "auto_pad", "NOTSET")
    full = [s * (i - 1) + op + (kk - 1) * d + 1
            for i, s, op, kk, d in zip(in_sizes, strides, out_pad, kernel_shape, dilations, strict=True)]
    out_shape = attr_ints(attrs, "output_shape", None)
    if out_shape is not None:
        outs = list(out_shape[-k:])
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        outs = [i * s for i, s in zip(in_sizes, strides, strict=True)]
    elif auto_pad in ("NOTSET", "", "VALID"):
        pads = attr_ints(attrs, "pads", [0] * (2 * k)) if auto_pad != "VALID" else [0] * (2 * k)
        return pads[:k], [f - pads[i] - pads[k + i] for i, f in enumerate(full)]
    else:
        raise UnsupportedOpError(f"ConvTranspose: unknown auto_pad '{auto_pad}'")
    total = [f - o for f, o in zip(full, outs, strict=True)]
    if auto_pad == "SAME_UPPER":
        begins = [t // 2 for t in total]
    else:
        begins = [t - t // 2 for t in total]
    return begins, outs


@op("ConvTranspose", **CONV_TRANSPOSE)
def conv_transpose(attrs, inputs):
    """ONNX ConvTranspose: ``X (N, C, *S)``, ``W (C, M/group, *K)``, optional bias ``B (M)``."""
    x, w = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    k = x.ndim - 2
    kernel_shape, strides, dilations, group = _spatial_attrs(attrs, w, k, "ConvTranspose")
    n, c = x.shape[:2]
    in_sizes = list(x.shape[2:])
    if c % group or w.shape[0] != c:
        raise UnsupportedOpError(f"ConvTranspose: input channels {c}, weights {list(w.shape)} and group {group} disagree")
    cg, mg = c // group, w.shape[1]
    m = mg * group
    begins, outs = _transpose_geometry(attrs, in_sizes, kernel_shape, strides, dilations)
    if any(o <= 0 for o in outs):
        raise UnsupportedOpError(f"ConvTranspose: output size {outs} is not positive")
    kk = math.prod(kernel_shape)
    p = math.prod(in_sizes)
    xm = np.ascontiguousarray(x.reshape(n, group, cg, p).transpose(1, 2, 0, 3)).reshape(group, cg, n * p)
    wm = packed(w).reshape(group, cg, mg * kk).transpose(0, 2, 1)
    cols = np.matmul(wm, xm).reshape((group, mg) + tuple(kernel_shape) + (n,) + tuple(in_sizes))
    # Buffer covering every position a tap writes and the whole (possibly larger) output window.
    span = [max((i - 1) * s + (kx - 1) * d + 1, bg + o) for i, s, kx, d, bg, o
            in zip(in_sizes, strides, kernel_shape, dilations, begins, outs, strict=True)]
    lo = [min(0, bg) for bg in begins]  # output_shape may ask for more than the full extent
    buf = np.zeros((group, mg, n) + tuple(sp - l for sp, l in zip(span, lo, strict=True)), dtype=np.result_type(x, w))
    for tap in itertools.product(*(range(kx) for kx in kernel_shape)):
        dst = tuple(slice(t * d - l, t * d - l + (i - 1) * s + 1, s)
                    for t, d, l, i, s in zip(tap, dilations, lo, in_sizes, strides, strict=True))
        buf[(slice(None), slice(None), slice(None)) + dst] += cols[(slice(None), slice(None)) + tap]
    crop = tuple(slice(bg - l, bg - l + o) for bg, l, o in zip(begins, lo, outs, strict=True))
    y = buf[(Ellipsis,) + crop].reshape((m, n) + tuple(outs))
    y = np.ascontiguousarray(np.moveaxis(y, 0, 1))
    if b is not None:
        y += b.reshape((m,) + (1,) * k)
    return [y]


def _activation(attrs, y: np.ndarray) -> np.ndarray:
    """The fused ``activation`` of ONNX Runtime's FusedConv on ``y`` (in place)."""
    name = attr_str(attrs, "activation", "")
    params = list(attrs.get("activation_params", []))
    if name == "Relu":
        np.maximum(y, 0, out=y)
    elif name == "Clip":
        np.clip(y, params[0], params[1], out=y)
    elif name == "LeakyRelu":
        y[:] = np.where(y >= 0, y, y * y.dtype.type(params[0] if params else 0.01))
    elif name == "Sigmoid":
        y[:] = 1 / (1 + np.exp(-y))
    elif name == "HardSigmoid":
        alpha, beta = (params + [0.2, 0.5])[:2]
        np.clip(y * y.dtype.type(alpha) + y.dtype.type(beta), 0, 1, out=y)
    elif name == "Tanh":
        np.tanh(y, out=y)
    elif name:
        raise UnsupportedOpError(f"FusedConv: activation '{name}' is not supported")
    return y


@op("FusedConv", domain="com.microsoft", **CONV)
def fused_conv(attrs, inputs):
    """ONNX Runtime's ``com.microsoft::FusedConv``: Conv (+ optional Z added) then a fused
    activation; as ORT's graph optimisations write it."""
    conv_attrs = {k: v for k, v in attrs.items() if k not in ("activation", "activation_params")}
    y = conv(conv_attrs, inputs[:3])[0]
    if len(inputs) > 3 and inputs[3] is not None:
        y += inputs[3]
    return [_activation(attrs, y)]
