"""The recurrent layers RNN, GRU and LSTM (ONNX opsets 7-22; ``layout`` from opset 14).

Shapes (``layout`` 0; layout 1 swaps the sequence and batch axes of X, Y and the states):
X ``(T, B, I)``; W ``(D, G*H, I)``; R ``(D, G*H, H)``; B ``(D, 2*G*H)`` (input then recurrence
biases); sequence_lens ``(B)``; initial_h (and LSTM's initial_c) ``(D, B, H)``; LSTM's
peepholes P ``(D, 3*H)``; outputs Y ``(T, D, B, H)``, Y_h (and Y_c) ``(D, B, H)``. D is 2 for
``direction`` bidirectional, else 1; G is 1 (RNN), 3 (GRU: z, r, h) or 4 (LSTM: i, o, f, c).

Per step, as the ONNX spec writes it (f, g, h are ``activations``, per direction):
RNN ``H = f(X W^T + H R^T + Wb + Rb)``; GRU ``z = f(..), r = f(..)``, ``h~ = g(X Wh^T +
(r * H) Rh^T + Rbh + Wbh)`` or, with ``linear_before_reset``, ``g(X Wh^T + r * (H Rh^T +
Rbh) + Wbh)``, ``H = (1 - z) * h~ + z * H``; LSTM ``i = f(.. + Pi * C)``, ``f = f(.. + Pf * C)``
(``input_forget``: ``f = 1 - i``), ``c = g(..)``, ``C = f * C + i * c``, ``o = f(.. + Po * C)``,
``H = o * h(C)``. ``clip`` bounds every gate's pre-activation. With ``sequence_lens``, a
batch entry's steps past its length leave its state unchanged and write zeros to Y; the
reverse direction runs each entry backwards from its own last step.

The input products of all steps are one matrix product; the recurrence is a loop over the
T steps, each one ``(B, H) x (H, G*H)`` product: O(T * B * D * G * H * (I + H)).
"""

from __future__ import annotations

import numpy as np
import scipy.special

from corefold.errors import UnsupportedOpError
from corefold.ops.facets import matrix
from corefold.ops.registry import op
from corefold.ops.schema import FLOAT, Quant, SplitAxis

#: activation name -> (function of (x, alpha, beta), default alpha, default beta); alpha and
#: beta are None for functions that take none (they consume no activation_alpha/beta value)
_ACTIVATIONS = {
    "sigmoid": (lambda x, a, b: scipy.special.expit(x), None, None),
    "tanh": (lambda x, a, b: np.tanh(x), None, None),
    "relu": (lambda x, a, b: np.maximum(x, x.dtype.type(0)), None, None),
    "affine": (lambda x, a, b: x * x.dtype.type(a) + x.dtype.type(b), 1.0, 0.0),
    "leakyrelu": (lambda x, a, b: np.where(x >= 0, x, x * x.dtype.type(a)), 0.01, None),
    "thresholdedrelu": (lambda x, a, b: np.where(x > x.dtype.type(a), x, x.dtype.type(0)), 1.0, None),
    "scaledtanh": (lambda x, a, b: x.dtype.type(a) * np.tanh(x * x.dtype.type(b)), 1.0, 1.0),
    "hardsigmoid": (lambda x, a, b: np.clip(x * x.dtype.type(a) + x.dtype.type(b), 0, 1).astype(x.dtype), 0.2, 0.5),
    "elu": (lambda x, a, b: np.where(x >= 0, x, x.dtype.type(a) * np.expm1(x)), 1.0, None),
    "softsign": (lambda x, a, b: x / (x.dtype.type(1) + np.abs(x)), None, None),
    "softplus": (lambda x, a, b: np.logaddexp(x.dtype.type(0), x), None, None),
}

#: (gates, activations per direction, default activations)
_KINDS = {"RNN": (1, 1, ["Tanh"]), "GRU": (3, 2, ["Sigmoid", "Tanh"]), "LSTM": (4, 3, ["Sigmoid", "Tanh", "Tanh"])}


def _direction(attrs) -> str:
    d = attrs.get("direction", "forward")
    d = d.decode() if isinstance(d, bytes) else str(d)
    if d not in ("forward", "reverse", "bidirectional"):
        raise ValueError(f"unknown direction {d!r}")
    return d


def _activations(op_type: str, attrs, dirs: int) -> list[list]:
    """Per direction, the activation callables with their alpha and beta bound."""
    _, per_dir, default = _KINDS[op_type]
    names = [n.decode() if isinstance(n, bytes) else str(n) for n in attrs.get("activations", [])] or default * dirs
    if len(names) != per_dir * dirs:
        raise ValueError(f"{len(names)} activations given, {per_dir * dirs} needed")
    alphas, betas = list(attrs.get("activation_alpha", [])), list(attrs.get("activation_beta", []))
    out = []
    for name in names:
        key = name.lower()
        if key not in _ACTIVATIONS:
            raise UnsupportedOpError(f"{op_type}: activation {name!r} is not supported")
        fn, a, b = _ACTIVATIONS[key]
        if a is not None and alphas:
            a = alphas.pop(0)
        if b is not None and betas:
            b = betas.pop(0)
        out.append(lambda x, fn=fn, a=a, b=b: fn(x, a, b))
    return [out[i * per_dir:(i + 1) * per_dir] for i in range(dirs)]


# -- facets ------------------------------------------------------------------------------------------
def _recurrent_normalise(imp, n) -> None:
    """Opset 1's ``output_sequence`` (Y is listed or not) goes."""
    n.attrs.pop("output_sequence", None)
    imp.emit(n.op, n.inputs, n.attrs, n.outputs, n.name)


def _infer(op_type: str):
    def infer(attrs, ins, consts):
        (x, dt), (w, _), (r, _) = ins[0], ins[1], ins[2]
        gates = _KINDS[op_type][0]
        layout = int(attrs.get("layout", 0))
        t, b = (x[1], x[0]) if layout else (x[0], x[1])
        d = 2 if _direction(attrs) == "bidirectional" else 1
        h = int(attrs.get("hidden_size", r[-1]))
        if len(x) != 3 or tuple(w) != (d, gates * h, x[2]) or tuple(r) != (d, gates * h, h):
            raise ValueError(f"X {list(x)}, W {list(w)} and R {list(r)} do not fit {op_type} with hidden_size {h} "
                             f"and {d} direction(s)")
        y = (b, t, d, h) if layout else (t, d, b, h)
        state = (b, d, h) if layout else (d, b, h)
        return [(y, dt), (state, dt), (state, dt)][:3 if op_type == "LSTM" else 2]
    return infer


def _macs(op_type: str):
    def macs(attrs, ins, outs):
        x, r = ins[0][0], ins[2][0]
        d, gh, h = r
        steps = x[0] * x[1]  # T * B in either layout
        return steps * d * gh * (x[2] + h)
    return macs


def _split(attrs, ins, outs, consts):
    """The batch (SPEC M3 §7: batch first): X, sequence_lens and the initial states are cut
    on it, the weights read whole. With layout 0, Y's batch axis (2) differs from the
    states' (1), so only a node whose one output is Y can be split."""
    layout = int(attrs.get("layout", 0))
    x = ins[0][0]
    b = x[0] if layout else x[1]
    if b < 2:
        return [], True
    if layout:
        out_axis = 0
    elif len(outs) == 1:
        out_axis = 2
    else:
        return [], True
    state = (0, 1) if layout else (1, 1)
    cut = []
    for i, t in enumerate(ins):
        if t is None:
            cut.append(None)
        elif i == 0:
            cut.append((0, 1) if layout else (1, 1))
        elif i == 4:
            cut.append((0, 1))
        elif i in (5, 6):
            cut.append(state)
        else:
            cut.append(None)
    return [SplitAxis("batch", b, tuple(cut), (out_axis, 1))], True


def _facets(op_type: str) -> dict:
    return dict(normalise=_recurrent_normalise, infer=_infer(op_type), cost=matrix(_macs(op_type)), split=_split,
                quant=Quant(FLOAT), param_inputs=(4,))


# -- the recurrence ------------------------------------------------------------------------------------
def _arg(inputs, i):
    return inputs[i] if len(inputs) > i and inputs[i] is not None else None


def _run(op_type: str, attrs, inputs) -> list[np.ndarray]:
    x, w, r = inputs[0], inputs[1], inputs[2]
    gates = _KINDS[op_type][0]
    layout = int(attrs.get("layout", 0))
    dt = x.dtype
    if layout:
        x = np.swapaxes(x, 0, 1)
    steps, batch, _ = x.shape
    dirs, gh, hidden = r.shape
    direction = _direction(attrs)
    if dirs != (2 if direction == "bidirectional" else 1) or gh != gates * hidden:
        raise ValueError(f"{op_type}: W/R shapes {list(w.shape)}/{list(r.shape)} do not fit direction {direction}")
    bias = _arg(inputs, 3)
    lens = _arg(inputs, 4)
    lens = np.full(batch, steps, np.int64) if lens is None else np.asarray(lens).astype(np.int64).reshape(-1)
    if lens.shape != (batch,) or lens.min(initial=0) < 0 or lens.max(initial=0) > steps:
        raise ValueError(f"{op_type}: sequence_lens {lens.tolist()} do not fit {steps} steps of {batch} entries")
    h0, c0, peep = _arg(inputs, 5), _arg(inputs, 6), _arg(inputs, 7)
    if layout:
        h0 = None if h0 is None else np.swapaxes(h0, 0, 1)
        c0 = None if c0 is None else np.swapaxes(c0, 0, 1)
    acts = _activations(op_type, attrs, dirs)
    clip = attrs.get("clip")
    clip = None if clip is None else dt.type(clip)
    ys, hs, cs = [], [], []
    for d in range(dirs):
        backward = direction == "reverse" or d == 1
        wb = np.zeros(gh, dt) if bias is None else bias[d, :gh]
        rb = np.zeros(gh, dt) if bias is None else bias[d, gh:]
        # every step's input product at once: (T, B, G*H)
        xw = np.matmul(x.reshape(steps * batch, -1), w[d].T).reshape(steps, batch, gh)
        h = np.zeros((batch, hidden), dt) if h0 is None else np.array(h0[d], dt)
        c = np.zeros((batch, hidden), dt) if c0 is None else np.array(c0[d], dt)
        y = np.zeros((steps, batch, hidden), dt)
        order = range(steps - 1, -1, -1) if backward else range(steps)
        p = None if peep is None else peep[d].reshape(3, hidden)
        for t in order:
            valid = (t < lens)[:, None]
            if op_type == "GRU":
                new = _gru_step(h, xw[t], r[d], wb, rb, hidden, acts[d], clip, attrs)
            elif op_type == "LSTM":
                new, c_new = _lstm_step(h, c, xw[t], r[d], wb + rb, hidden, acts[d], clip, p, attrs)
                c = np.where(valid, c_new, c)
            else:
                new = acts[d][0](_clipped(xw[t] + np.matmul(h, r[d].T) + wb + rb, clip))
            h = np.where(valid, new, h).astype(dt, copy=False)
            y[t] = np.where(valid, h, dt.type(0))
        ys.append(y)
        hs.append(h)
        cs.append(c)
    y = np.stack(ys, axis=1)  # (T, D, B, H)
    yh, yc = np.stack(hs), np.stack(cs)  # (D, B, H)
    if layout:
        y, yh, yc = np.transpose(y, (2, 0, 1, 3)), np.swapaxes(yh, 0, 1), np.swapaxes(yc, 0, 1)
    return [np.ascontiguousarray(y), np.ascontiguousarray(yh), np.ascontiguousarray(yc)]


def _clipped(a: np.ndarray, clip) -> np.ndarray:
    return a if clip is None else np.clip(a, -clip, clip)


def _gru_step(h, xw, r, wb, rb, hidden, acts, clip, attrs):
    f, g = acts
    rz, rr, rh = r[:hidden], r[hidden:2 * hidden], r[2 * hidden:]
    zx, rx, hx = xw[:, :hidden], xw[:, hidden:2 * hidden], xw[:, 2 * hidden:]
    z = f(_clipped(zx + np.matmul(h, rz.T) + wb[:hidden] + rb[:hidden], clip))
    rg = f(_clipped(rx + np.matmul(h, rr.T) + wb[hidden:2 * hidden] + rb[hidden:2 * hidden], clip))
    if attrs.get("linear_before_reset", 0):
        pre = hx + rg * (np.matmul(h, rh.T) + rb[2 * hidden:]) + wb[2 * hidden:]
    else:
        pre = hx + np.matmul(rg * h, rh.T) + rb[2 * hidden:] + wb[2 * hidden:]
    cand = g(_clipped(pre, clip))
    return (1 - z) * cand + z * h


def _lstm_step(h, c, xw, r, b, hidden, acts, clip, p, attrs):
    f, g, hh = acts
    pre = xw + np.matmul(h, r.T) + b
    pi, po, pf = (None, None, None) if p is None else (p[0], p[1], p[2])
    gi, go, gf, gc = (pre[:, k * hidden:(k + 1) * hidden] for k in range(4))
    i = f(_clipped(gi if pi is None else gi + pi * c, clip))
    if attrs.get("input_forget", 0):
        fg = 1 - i
    else:
        fg = f(_clipped(gf if pf is None else gf + pf * c, clip))
    cand = g(_clipped(gc, clip))
    c_new = fg * c + i * cand
    o = f(_clipped(go if po is None else go + po * c_new, clip))
    return o * hh(c_new), c_new


@op("RNN", **_facets("RNN"))
def rnn(attrs, inputs):
    """See the module docstring."""
    return _run("RNN", attrs, inputs)[:2]


@op("GRU", **_facets("GRU"))
def gru(attrs, inputs):
    """See the module docstring."""
    return _run("GRU", attrs, inputs)[:2]


@op("LSTM", **_facets("LSTM"))
def lstm(attrs, inputs):
    """See the module docstring."""
    return _run("LSTM", attrs, inputs)
