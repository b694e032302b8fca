"""BatchNormalization (inference), InstanceNormalization, LRN, LayerNormalization, Softmax,
LogSoftmax, GroupNormalization, RMSNormalization (and ONNX Runtime's SimplifiedLayerNormalization),
LpNormalization and MeanVarianceNormalization. All O(elements)."""

from __future__ import annotations

import numpy as np

from corefold.errors import UnsupportedOpError
from corefold.ops.facets import fixed_range, prod, reduced_axis_attr, same, split_any, vector
from corefold.ops.registry import op
from corefold.ops.schema import AS_IS, COMPUTE, FLOAT, Cost, Quant, SplitAxis


# -- facets ------------------------------------------------------------------------------------------
def _channel_tables_split(reduced):
    """Split like :func:`split_any`; per-channel tables (inputs 1...) are cut with the
    channel axis and read whole otherwise."""
    base = split_any(reduced)

    def rule(attrs, ins, outs, consts):
        axes, pref = base(attrs, ins, outs, consts)
        return [SplitAxis(a.name, a.extent, (a.inputs[0],) + tuple((0, 1) if a.output == (1, 1) else None
                                                                    for _ in a.inputs[1:]), a.output)
                for a in axes], pref

    return rule


def _batch_norm_normalise(imp, n) -> None:
    """Old attributes go. Training mode (opset 14+, ``training_mode=1``) keeps its running
    mean and variance outputs; before opset 14 the training outputs (mean, var, saved
    mean and variance) are refused when something reads them."""
    for k in ("consumed_inputs", "is_test"):
        n.attrs.pop(k, None)
    spatial = n.attrs.pop("spatial", 1)
    if not spatial and any(v is not None and len(v.shape) != 1 for v in n.inputs[1:]):
        raise UnsupportedOpError(f"node '{n.name}' (BatchNormalization): spatial=0 is not supported")
    if n.attrs.get("training_mode", 0):
        imp.emit("BatchNormalization", n.inputs, n.attrs, n.outputs[:3], n.name)
        return
    n.attrs.pop("training_mode", None)
    for extra in n.outputs[1:]:
        if extra and imp.is_used(extra):
            raise UnsupportedOpError(f"node '{n.name}' (BatchNormalization): training outputs such as "
                                     f"'{extra}' are not supported")
    imp.emit("BatchNormalization", n.inputs, n.attrs, n.outputs[:1], n.name)


def _softmax_normalise(imp, n) -> None:
    """Opset < 13: softmax over the flattened dims [axis:], i.e. Flatten -> Softmax -> Reshape."""
    x = n.inputs[0]
    rank = len(x.shape)
    if imp.opset >= 13:
        imp.emit(n.op, n.inputs, n.attrs, n.outputs, n.name)
        return
    axis = n.attrs.get("axis", 1)
    axis = axis + rank if axis < 0 else axis
    if axis == rank - 1:
        imp.emit(n.op, [x], {"axis": -1}, n.outputs, n.name)
        return
    (flat,) = imp.emit("Flatten", [x], {"axis": axis}, [None], f"{n.name}_flatten")
    (soft,) = imp.emit(n.op, [flat], {"axis": -1}, [None], n.name)
    shape = imp.const(np.array(x.shape, np.int64), f"{n.name}_shape")
    imp.emit("Reshape", [soft, shape], {}, n.outputs, f"{n.name}_reshape")


def _layer_norm_infer(attrs, ins, consts):
    x, dt = ins[0]
    axis = attrs.get("axis", -1)
    axis = axis + len(x) if axis < 0 else axis
    stat = tuple(x[:axis]) + (1,) * (len(x) - axis)
    stash = np.dtype("float32") if attrs.get("stash_type", 1) == 1 else dt
    return [(x, dt), (stat, stash), (stat, stash)]


def _layer_norm_reduced(attrs, rank):
    return set(range(int(attrs.get("axis", -1)) % rank, rank))


def _norm(per_element, split, quant, normalise=AS_IS, infer=same):
    return dict(normalise=normalise, infer=infer, cost=vector(per_element), split=split, quant=quant, param_inputs=())


def _channel_shape(x: np.ndarray) -> tuple[int, ...]:
    """Shape that broadcasts a per-channel (axis 1) vector over ``x``."""
    return (-1,) + (1,) * (x.ndim - 2)


def _batch_norm_infer(attrs, ins, consts):
    if not attrs.get("training_mode", 0):
        return [ins[0]]
    (x, dt), (stat, sdt) = ins[0], ins[3]
    return [(x, dt), (stat, sdt), (stat, ins[4][1])]


_INFERENCE_BN_SPLIT = _channel_tables_split(None)


def _batch_norm_split(attrs, ins, outs, consts):
    """Inference: any axis, per-channel tables cut with the channels. Training mode reduces
    over every axis but the channel and writes per-channel statistics: no split."""
    if attrs.get("training_mode", 0):
        return [], True
    return _INFERENCE_BN_SPLIT(attrs, ins, outs, consts)


def _batch_norm_training(attrs, x, scale, bias, mean, var) -> list[np.ndarray]:
    """Training mode (opset 14+): normalise with the batch's own per-channel mean and
    (population) variance; running statistics ``input * momentum + batch * (1 - momentum)``
    (momentum 0.9 by default). O(elements)."""
    axes = tuple(a for a in range(x.ndim) if a != 1)
    eps, momentum = attrs.get("epsilon", 1e-5), attrs.get("momentum", 0.9)
    cur_mean, cur_var = x.mean(axis=axes), x.var(axis=axes)
    shape = _channel_shape(x)
    y = scale.reshape(shape) * (x - cur_mean.reshape(shape)) / np.sqrt(cur_var.reshape(shape) + x.dtype.type(eps))
    y = y + bias.reshape(shape)
    running_mean = mean * mean.dtype.type(momentum) + cur_mean * mean.dtype.type(1 - momentum)
    running_var = var * var.dtype.type(momentum) + cur_var * var.dtype.type(1 - momentum)
    return [y.astype(x.dtype), running_mean.astype(mean.dtype), running_var.astype(var.dtype)]


@op("BatchNormalization", normalise=_batch_norm_normalise, infer=_batch_norm_infer, cost=vector(2),
    split=_batch_norm_split, quant=Quant(COMPUTE, fuses_activation=True), param_inputs=())
def batch_normalization(attrs, inputs):
    """Inference form: ``(x - mean) / sqrt(var + epsilon) * scale + B`` per channel (axis 1);
    ``training_mode=1``: see :func:`_batch_norm_training`."""
    x, scale, bias, mean, var = inputs[:5]
    if attrs.get("training_mode", 0):
        return _batch_norm_training(attrs, x, scale, bias, mean, var)
    eps = x.dtype.type(attrs.get("epsilon", 1e-5))
    a = (scale / np.sqrt(var + eps)).astype(x.dtype, copy=False)
    b = (bias - mean * a).astype(x.dtype, copy=False)
    y = x * a.reshape(_channel_shape(x))
    y += b.reshape(_channel_shape(x))
    return [y]


@op("InstanceNormalization", **_norm(1, _channel_tables_split(lambda attrs, rank: set(range(2, rank))),
                                          Quant(COMPUTE, fuses_activation=True)))
def instance_normalization(attrs, inputs):
    """Normalise each (sample, channel) over its spatial axes, then per-channel scale and bias."""
    x, scale, bias = inputs
    eps = x.dtype.type(attrs.get("epsilon", 1e-5))
    axes = tuple(range(2, x.ndim))
    d = x - x.mean(axis=axes, keepdims=True, dtype=x.dtype)
    var = np.mean(d * d, axis=axes, keepdims=True, dtype=x.dtype)
    y = d * (scale.reshape(_channel_shape(x)) / np.sqrt(var + eps))
    y += bias.reshape(_channel_shape(x))
    return [y]


@op("LRN", normalise=AS_IS, infer=same, split=split_any(lambda attrs, rank: {1}), quant=Quant(FLOAT), param_inputs=(),
    cost=Cost("vector", lambda attrs, ins, outs: prod(outs[0][0]) * (int(attrs.get("size", 1)) + 3)))
def lrn(attrs, inputs):
    """Local response normalisation across channels:
    ``x / (bias + alpha / size * sum of squares over the channel window) ** beta``.
    The window of channel c is ``[c - floor((size-1)/2), c + ceil((size-1)/2)]``; O(elements * size).
    """
    x = inputs[0]
    if "size" not in attrs:
        raise UnsupportedOpError("LRN: missing required attribute 'size'")
    size = int(attrs["size"])
    alpha = x.dtype.type(attrs.get("alpha", 1e-4))
    beta = x.dtype.type(attrs.get("beta", 0.75))
    bias = x.dtype.type(attrs.get("bias", 1.0))
    c = x.shape[1]
    before = (size - 1) // 2
    sq = x * x
    acc = np.zeros_like(sq)
    for off in range(-before, size - before):
        lo, hi = max(0, -off), min(c, c - off)  # channels whose window includes c + off
        if lo < hi:
            acc[:, lo:hi] += sq[:, lo + off:hi + off]
    acc *= alpha / x.dtype.type(size)
    acc += bias
    return [x / acc ** beta]


@op("Softmax", **_norm(5, split_any(reduced_axis_attr()), Quant(COMPUTE, fixed_range(0.0, 1.0)),
                        normalise=_softmax_normalise))
def softmax(attrs, inputs):
    """Opset-13 Softmax: along one ``axis`` (default -1)."""
    x = inputs[0]
    axis = int(attrs.get("axis", -1))
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    e /= e.sum(axis=axis, keepdims=True)
    return [e]


@op("LogSoftmax", **_norm(5, split_any(reduced_axis_attr()), Quant(FLOAT), normalise=_softmax_normalise))
def log_softmax(attrs, inputs):
    """Opset-13 LogSoftmax: along one ``axis`` (default -1)."""
    x = inputs[0]
    axis = int(attrs.get("axis", -1))
    d = x - x.max(axis=axis, keepdims=True)
    return [d - np.log(np.exp(d).sum(axis=axis, keepdims=True))]


@op("LayerNormalization", **_norm(8, split_any(_layer_norm_reduced, whole=(1, 2)), Quant(COMPUTE),
                                   infer=_layer_norm_infer))
def layer_normalization(attrs, inputs):
    """Normalise over axes ``[axis, rank)``; outputs Y, Mean and InvStdDev (reduced axes kept as 1)."""
    x, scale = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    axis = int(attrs.get("axis", -1))
    if axis < 0:
        axis += x.ndim
    eps = attrs.get("epsilon", 1e-5)
    stash = np.float64 if attrs.get("stash_type", 1) == 11 else np.float32
    axes = tuple(range(axis, x.ndim))
    xs = x.astype(stash, copy=False)
    mean = xs.mean(axis=axes, keepdims=True)
    d = xs - mean
    inv = 1 / np.sqrt(np.mean(d * d, axis=axes, keepdims=True) + stash(eps))
    y = (d * inv).astype(x.dtype, copy=False) * scale
    if bias is not None:
        y += bias
    return [y, mean.astype(stash, copy=False), inv.astype(stash, copy=False)]


# -- group, RMS, Lp and mean-variance normalisation -------------------------------------------------
def _stash(attrs) -> type:
    return np.float64 if attrs.get("stash_type", 1) == 11 else np.float32


def _group_norm_normalise(imp, n) -> None:
    """Opset 18 scales and shifts per group (``num_groups`` values); opset 21 per channel:
    repeat each group's value over its channels (folded when constant)."""
    x, scale, bias = n.inputs[0], n.inputs[1], n.inputs[2]
    channels, groups = x.shape[1], int(n.attrs["num_groups"])
    if imp.opset < 21 and scale.shape == (groups,) and groups != channels:
        per = channels // groups
        for i, v in ((1, scale), (2, bias)):
            col = imp.const(np.array([groups, 1], np.int64), f"{n.name}_group_col")
            (g,) = imp.emit("Reshape", [v, col], {}, [None], f"{n.name}_in{i}_col")
            wide = imp.const(np.array([groups, per], np.int64), f"{n.name}_group_wide")
            (e,) = imp.emit("Expand", [g, wide], {}, [None], f"{n.name}_in{i}_wide")
            flat = imp.const(np.array([channels], np.int64), f"{n.name}_channels")
            (n.inputs[i],) = imp.emit("Reshape", [e, flat], {}, [None], f"{n.name}_in{i}_channels")
    imp.emit(n.op, n.inputs, n.attrs, n.outputs, n.name)


def _group_norm_infer(attrs, ins, consts):
    x, dt = ins[0]
    groups = int(attrs["num_groups"])
    if len(x) < 2 or groups < 1 or x[1] % groups:
        raise ValueError(f"channels of {list(x)} not divisible into {groups} groups")
    for t in ins[1:3]:
        if t is not None and tuple(t[0]) != (x[1],):
            raise ValueError(f"scale and bias must have one value per channel ({x[1]}), got {list(t[0])}")
    return [(x, dt)]


def _group_norm_split(attrs, ins, outs, consts):
    """Batch only (groups reduce over channels and space)."""
    x = ins[0][0]
    if x[0] < 2:
        return [], False
    return [SplitAxis("batch", x[0], ((0, 1), None, None), (0, 1))], False


@op("GroupNormalization", **_norm(6, _group_norm_split, Quant(COMPUTE), normalise=_group_norm_normalise,
                                   infer=_group_norm_infer))
def group_normalization(attrs, inputs):
    """Normalise each group of ``num_groups`` consecutive channels over its channels and
    spatial positions (statistics in float32, or float64 for ``stash_type`` 11), then scale
    and shift per channel (opset 21). O(elements)."""
    x, scale, bias = inputs
    groups = int(attrs["num_groups"])
    eps = attrs.get("epsilon", 1e-5)
    stash = _stash(attrs)
    g = x.reshape(x.shape[0], groups, -1).astype(stash, copy=False)
    d = g - g.mean(axis=-1, keepdims=True)
    inv = 1 / np.sqrt(np.mean(d * d, axis=-1, keepdims=True) + stash(eps))
    y = (d * inv).astype(x.dtype, copy=False).reshape(x.shape)
    cs = _channel_shape(x)
    return [(y * scale.reshape(cs) + bias.reshape(cs)).astype(x.dtype, copy=False)]


def _rms_infer(attrs, ins, consts):
    x, dt = ins[0]
    axis = int(attrs.get("axis", -1))
    axis = axis + len(x) if axis < 0 else axis
    if not 0 <= axis < len(x):
        raise ValueError(f"axis {attrs.get('axis')} out of range for rank {len(x)}")
    out = tuple(np.broadcast_shapes(tuple(x), tuple(ins[1][0])))
    stat = tuple(x[:axis]) + (1,) * (len(x) - axis)
    return [(out, ins[1][1]), (stat, np.dtype(_stash(attrs)))]


def _rms(attrs, inputs) -> tuple[np.ndarray, np.ndarray]:
    x, scale = inputs[0], inputs[1]
    axis = int(attrs.get("axis", -1))
    axis = axis + x.ndim if axis < 0 else axis
    stash = _stash(attrs)
    xs = x.astype(stash, copy=False)
    inv = 1 / np.sqrt(np.mean(xs * xs, axis=tuple(range(axis, x.ndim)), keepdims=True) + stash(attrs.get("epsilon", 1e-5)))
    y = (xs * inv).astype(x.dtype, copy=False) * scale
    return y.astype(scale.dtype, copy=False), inv


@op("RMSNormalization", **_norm(6, split_any(_layer_norm_reduced, whole=(1,)), Quant(COMPUTE), infer=_rms_infer))
def rms_normalization(attrs, inputs):
    """``x / sqrt(mean(x^2 over axes [axis, rank)) + epsilon) * scale`` (opset 23),
    statistics in the stash type. O(elements)."""
    return [_rms(attrs, inputs)[0]]


@op("SimplifiedLayerNormalization", **_norm(6, split_any(_layer_norm_reduced, whole=(1,)), Quant(COMPUTE),
                                             infer=_rms_infer))
def simplified_layer_normalization(attrs, inputs):
    """ONNX Runtime's RMS normalisation (in the default domain, as its transformer
    optimiser writes it): RMSNormalization plus the inverse RMS as output 1."""
    y, inv = _rms(attrs, inputs)
    return [y, inv]


def _lp_norm_reduced(attrs, rank):
    return {int(attrs.get("axis", -1)) % rank}


@op("LpNormalization", **_norm(3, split_any(_lp_norm_reduced), Quant(FLOAT)))
def lp_normalization(attrs, inputs):
    """``x / ||x||_p`` along ``axis`` (default -1) for p 1 or 2 (default 2); a zero norm
    gives 0. O(elements)."""
    x = inputs[0]
    axis = int(attrs.get("axis", -1))
    p = int(attrs.get("p", 2))
    if p not in (1, 2):
        raise UnsupportedOpError(f"LpNormalization: p must be 1 or 2, got {p}")
    norm = np.sum(np.abs(x), axis=axis, keepdims=True) if p == 1 else np.sqrt(np.sum(x * x, axis=axis, keepdims=True))
    with np.errstate(invalid="ignore", divide="ignore"):
        return [np.where(norm == 0, x.dtype.type(0), x / norm).astype(x.dtype, copy=False)]


def _mvn_axes(attrs, rank: int) -> tuple[int, ...]:
    return tuple(sorted(int(a) % rank for a in attrs.get("axes", [0, 2, 3])))


@op("MeanVarianceNormalization", **_norm(5, split_any(lambda attrs, rank: set(_mvn_axes(attrs, rank))), Quant(FLOAT)))
def mean_variance_normalization(attrs, inputs):
    """``(x - mean) / (std + 1e-9)`` over ``axes`` (default [0, 2, 3]), as ONNX's function
    body, with the variance taken as the mean squared deviation. O(elements)."""
    x = inputs[0]
    axes = _mvn_axes(attrs, x.ndim)
    d = x - x.mean(axis=axes, keepdims=True, dtype=x.dtype)
    std = np.sqrt(np.mean(d * d, axis=axes, keepdims=True, dtype=x.dtype))
    return [d / (std + x.dtype.type(1e-9))]
