"""Selection, scans and type operators: TopK, CumSum, CumProd, Trilu, EyeLike, Size,
CastLike and BitCast.

TopK is one stable argsort along its axis, O(elements * log(axis length)) (ties keep the
lower index first, as ONNX requires); CumSum and CumProd one NumPy scan, O(elements); Trilu,
EyeLike and Size O(output). CastLike becomes a Cast at import (its output type is the second
input's), BitCast a NumPy view (O(1)).
"""

from __future__ import annotations

import numpy as np

from corefold.ops import registry
from corefold.ops.defs.elemtypes import attr_dtype
from corefold.ops.defs.shape import attr_to_input
from corefold.ops.facets import (
    DMA,
    FREE,
    first_input_range,
    norm_axis,
    split_any,
    vector,
    vector_in,
)
from corefold.ops.registry import op
from corefold.ops.schema import AS_IS, COMPUTE, FLOAT, MOVEMENT, NONE, Interval, Quant


def _scalar_int(a, what: str) -> int:
    a = np.asarray(a)
    if a.size != 1:
        raise ValueError(f"{what} must hold one value, got shape {list(a.shape)}")
    return int(a.reshape(-1)[0])


# -- TopK ------------------------------------------------------------------------------------------
def _topk_normalise(imp, n) -> None:
    """Opset 1: ``k`` is an attribute; it becomes input 1 (a 1-D int64 constant)."""
    if "k" in n.attrs:
        n.attrs["k"] = [n.attrs["k"]]
        attr_to_input(imp, n, "k", 1, "int64")
    imp.emit(n.op, n.inputs, n.attrs, n.outputs, n.name)


def _topk_infer(attrs, ins, consts):
    shape, dt = ins[0]
    if consts[1] is None:
        raise ValueError("K is not a constant at import")
    axis = norm_axis(int(attrs.get("axis", -1)), len(shape))
    k = _scalar_int(consts[1], "K")
    if not 0 <= k <= shape[axis]:
        raise ValueError(f"K={k} is outside [0, {shape[axis]}]")
    out = tuple(shape[:axis]) + (k,) + tuple(shape[axis + 1:])
    return [(out, dt), (out, np.dtype("int64"))]


_SELECTED = Quant(MOVEMENT, first_input_range, integer="layout")


@op("TopK", normalise=_topk_normalise, infer=_topk_infer, cost=vector_in(8),
    split=split_any(lambda attrs, rank: {int(attrs.get("axis", -1)) % rank}, whole=(1,)),
    quant=_SELECTED, param_inputs=(1,))
def topk(attrs, inputs):
    """The ``K`` largest (``largest=1``) or smallest values along ``axis`` and their
    indices, sorted (``sorted`` is honoured by always sorting, which ONNX allows); equal
    values keep the lower index first. NaN counts as larger than every number."""
    x, k = inputs[0], _scalar_int(inputs[1], "K")
    axis = norm_axis(int(attrs.get("axis", -1)), x.ndim)
    n = x.shape[axis]
    if not 0 <= k <= n:
        raise ValueError(f"TopK: K={k} is outside [0, {n}]")
    if attrs.get("largest", 1):
        # stable ascending sort of the reversed axis, read backwards: descending values,
        # ties in increasing original index
        order = np.argsort(np.flip(x, axis), axis=axis, kind="stable")
        idx = (n - 1) - np.flip(order, axis)
    else:
        idx = np.argsort(x, axis=axis, kind="stable")
    idx = np.take(idx, np.arange(k), axis=axis)
    return [np.take_along_axis(x, idx, axis=axis), idx.astype(np.int64)]


# -- scans -----------------------------------------------------------------------------------------
def _scan_axis(attrs, rank):
    return set(range(rank))  # the axis is an input; never cut any (it may be any of them)


def _scan(ufunc, identity: int, x: np.ndarray, axis_in, attrs) -> np.ndarray:
    axis = norm_axis(_scalar_int(axis_in, "axis"), x.ndim)
    reverse, exclusive = attrs.get("reverse", 0), attrs.get("exclusive", 0)
    y = np.flip(x, axis) if reverse else x
    y = ufunc.accumulate(y, axis=axis, dtype=x.dtype)
    if exclusive:
        pad = [(0, 0)] * x.ndim
        pad[axis] = (1, 0)
        y = np.pad(np.take(y, np.arange(x.shape[axis] - 1), axis=axis), pad, constant_values=identity)
    return np.ascontiguousarray(np.flip(y, axis)) if reverse else y


@op("CumSum", normalise=AS_IS, infer=lambda attrs, ins, consts: [ins[0]], cost=vector(1),
    split=split_any(_scan_axis, whole=(1,)), quant=Quant(COMPUTE), param_inputs=(1,))
def cumsum(attrs, inputs):
    """Running sum along the ``axis`` input (``exclusive``: shifted by one, starting at 0;
    ``reverse``: from the end), in the input's dtype."""
    return [_scan(np.add, 0, inputs[0], inputs[1], attrs)]


@op("CumProd", normalise=AS_IS, infer=lambda attrs, ins, consts: [ins[0]], cost=vector(1),
    split=split_any(_scan_axis, whole=(1,)), quant=Quant(FLOAT), param_inputs=(1,))
def cumprod(attrs, inputs):
    """Running product along the ``axis`` input (opset 26; ``exclusive`` starts at 1)."""
    return [_scan(np.multiply, 1, inputs[0], inputs[1], attrs)]


# -- Trilu, EyeLike ----------------------------------------------------------------------------------
def _with_zero(attrs, rngs, consts) -> Interval:
    """Input 0's range widened to hold the zeros written in."""
    r = first_input_range(attrs, rngs, consts)
    lo = None if r.lo is None else min(r.lo, 0.0)
    hi = None if r.hi is None else max(r.hi, 0.0)
    return Interval(lo, hi)


def _matrix_batch_split(attrs, ins, outs, consts):
    """Any axis but the last two (the matrix)."""
    rule = split_any(lambda attrs, rank: {rank - 1, rank - 2}, whole=(1,))
    return rule(attrs, ins, outs, consts)


@op("Trilu", normalise=AS_IS, infer=lambda attrs, ins, consts: [ins[0]], cost=DMA, split=_matrix_batch_split,
    quant=Quant(MOVEMENT, _with_zero), param_inputs=(1,))
def trilu(attrs, inputs):
    """The upper (``upper=1``) or lower triangle of the last two axes from diagonal ``k``
    (input 1, default 0); the rest zero."""
    x = inputs[0]
    k = _scalar_int(inputs[1], "k") if len(inputs) > 1 and inputs[1] is not None else 0
    if x.ndim < 2:
        raise ValueError(f"Trilu needs rank >= 2, got {list(x.shape)}")
    rows, cols = x.shape[-2:]
    keep = np.arange(cols)[None, :] - np.arange(rows)[:, None]
    keep = keep >= k if attrs.get("upper", 1) else keep <= k
    return [np.where(keep, x, np.zeros((), x.dtype))]


def _eyelike_infer(attrs, ins, consts):
    shape, dt = ins[0]
    if len(shape) != 2:
        raise ValueError(f"EyeLike needs a 2-D input, got {list(shape)}")
    return [(shape, attr_dtype(attrs.get("dtype"), dt))]


@op("EyeLike", normalise=AS_IS, infer=_eyelike_infer, cost=DMA, split=NONE, quant=Quant(FLOAT), param_inputs=(0,))
def eye_like(attrs, inputs):
    """Ones on diagonal ``k`` of a matrix shaped as the input, in ``dtype`` (default the
    input's)."""
    x = inputs[0]
    dt = attr_dtype(attrs.get("dtype"), x.dtype)
    return [np.eye(x.shape[0], x.shape[1], int(attrs.get("k", 0)), dtype=np.float64).astype(dt)]


# -- type and size -----------------------------------------------------------------------------------
@op("Size", normalise=AS_IS, infer=lambda attrs, ins, consts: [((), np.dtype("int64"))], cost=FREE, split=NONE,
    quant=Quant(FLOAT), param_inputs=(0,))
def size(attrs, inputs):
    """The number of elements, an int64 scalar."""
    return [np.array(inputs[0].size, np.int64)]


def _cast_attrs(attrs, to: np.dtype) -> dict:
    out = {"to": to.name}
    for k in ("saturate", "round_mode"):
        if k in attrs:
            out[k] = attrs[k]
    return out


def _castlike_normalise(imp, n) -> None:
    """CastLike is a Cast to the second input's element type."""
    x, like = n.inputs[0], n.inputs[1]
    imp.emit("Cast", [x], _cast_attrs(n.attrs, np.dtype(like.dtype)), n.outputs, n.name)


@op("CastLike", normalise=_castlike_normalise, infer=lambda attrs, ins, consts: [(ins[0][0], ins[1][1])], cost=vector(1),
    split=split_any(whole=(1,)), quant=Quant(FLOAT), param_inputs=(1,))
def cast_like(attrs, inputs):
    """Cast input 0 to input 1's element type (the Cast kernel; the importer emits Cast)."""
    cast = registry.get("Cast").kernel
    return cast(_cast_attrs(attrs, inputs[1].dtype), [inputs[0]])


def _bitcast_infer(attrs, ins, consts):
    shape, dt = ins[0]
    to = attr_dtype(attrs.get("to"))
    if to.itemsize != dt.itemsize:
        raise ValueError(f"BitCast from {dt} to {to}: the bit widths differ")
    return [(shape, to)]


@op("BitCast", normalise=AS_IS, infer=_bitcast_infer, cost=FREE, split=split_any(), quant=Quant(FLOAT),
    param_inputs=())
def bit_cast(attrs, inputs):
    """The input's bits read as type ``to`` of the same width (opset 26): a NumPy view."""
    x = inputs[0]
    to = attr_dtype(attrs.get("to"))
    if to.itemsize != x.dtype.itemsize:
        raise ValueError(f"BitCast from {x.dtype} to {to}: the bit widths differ")
    return [x.view(to)]

