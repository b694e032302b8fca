"""Control flow: If, Loop and Scan, inlined or unrolled at import.

corefold's IR is static: no node has a subgraph. A control-flow node whose decisions are
constants once the model's inputs are bound (``--value``) is replaced at import by the
nodes it would run:

* **If**: the condition is a constant, and the taken branch is imported in place; when it
  depends on data and both branches give the same shapes and types (PyTorch exports
  ``y = verifier(x) if p >= 0.5 else p`` so), both branches are imported and each output
  is ``Where(cond, then, else)`` (if-conversion: both run, the condition selects);
* **Loop**: the trip count and/or the condition are constants, each iteration's condition
  folds to a constant, and the body is imported once per iteration (loop-carried values
  flow from one copy to the next; scan outputs are stacked with Unsqueeze and Concat);
* **Scan**: the sequence length is a static dimension, so the body is imported once per
  step on Gather slices of the scan inputs (opset 8's batched form once per batch row).

A decision that depends on data is refused with the node and the value named. Each
normaliser costs O(iterations x body nodes); the importer caps the total number of inlined
nodes. The entries never reach the IR, so their other facets are ``NONE``.
"""

from __future__ import annotations

import numpy as np

from corefold.errors import UnsupportedOpError
from corefold.ops.registry import define
from corefold.ops.schema import NONE, OpDef

#: Loops without a constant trip count stop when their condition folds to false; this many
#: iterations at most.
MAX_ITERATIONS = 100_000


def _scalar(handle, what: str, node: str, op: str):
    """The constant value of a scalar input, or a refusal naming it."""
    if handle.const is None:
        raise UnsupportedOpError(f"node '{node}' ({op}): {what} '{handle.name}' depends on data (it is not a "
                                 "constant at import; bind the model input it comes from with --value)")
    return np.asarray(handle.const).reshape(-1)[0]


def _stack(imp, values, axis: int, name: str):
    """``values`` (same shape) stacked along a new ``axis``."""
    rank = len(values[0].shape) + 1
    axis = axis + rank if axis < 0 else axis
    axes = imp.const(np.array([axis], np.int64), f"{name}_axes")
    parts = [imp.emit("Unsqueeze", [v, axes], {}, [None], f"{name}_unsqueeze{i}")[0] for i, v in enumerate(values)]
    if len(parts) == 1:
        return parts[0]
    return imp.emit("Concat", parts, {"axis": axis}, [None], f"{name}_concat")[0]


def _if_normalise(imp, n) -> None:
    """Import the branch a constant condition takes, or both branches selected by ``Where``
    when the condition depends on data (:func:`_if_convert`)."""
    if n.inputs[0].const is None:
        _if_convert(imp, n)
        return
    cond = bool(_scalar(n.inputs[0], "the condition", n.name, "If"))
    branch = n.attrs["then_branch"] if cond else n.attrs["else_branch"]
    outs = imp.inline(branch, [], f"{n.name}_{'then' if cond else 'else'}")
    _check_outputs(n, outs)
    for oname, v in zip(n.outputs, outs, strict=False):
        if oname:
            imp.alias(oname, v)


def _check_outputs(n, outs) -> None:
    if len(outs) < len([o for o in n.outputs if o is not None]):
        raise UnsupportedOpError(f"node '{n.name}' (If): the branch gives {len(outs)} outputs, the node has "
                                 f"{len(n.outputs)}")


def _if_convert(imp, n) -> None:
    """If-conversion of an If whose condition depends on data: import both branches and
    select each output with ``Where(cond, then_out, else_out)``. The IR stays static, so
    both branches must give the same static shape and dtype for every output; otherwise
    the node is refused naming the output. Both branches run, so a branch that only
    errors on the inputs it is not taken for (an out-of-range index) errors here too.
    O(nodes of both branches).

    Raises:
        UnsupportedOpError: an output's shape or dtype differs between the branches.
    """
    cond = n.inputs[0]
    if int(np.prod(cond.shape)) != 1:
        raise UnsupportedOpError(f"node '{n.name}' (If): the condition '{cond.name}' has shape "
                                 f"{list(cond.shape)}, not one element")
    then_outs = imp.inline(n.attrs["then_branch"], [], f"{n.name}_then")
    else_outs = imp.inline(n.attrs["else_branch"], [], f"{n.name}_else")
    _check_outputs(n, then_outs)
    _check_outputs(n, else_outs)
    if cond.shape != ():
        cond = imp.emit("Reshape", [cond, imp.const(np.zeros(0, np.int64), f"{n.name}_scalar")], {}, [None],
                        f"{n.name}_cond")[0]
    for k, (oname, t, e) in enumerate(zip(n.outputs, then_outs, else_outs, strict=False)):
        if not oname:
            continue
        if t.shape != e.shape or t.dtype != e.dtype:
            raise UnsupportedOpError(
                f"node '{n.name}' (If): the condition '{n.inputs[0].name}' depends on data and output '{oname}' "
                f"is {t.dtype}{list(t.shape)} in the then branch but {e.dtype}{list(e.shape)} in the else "
                "branch (bind the model input the condition comes from with --value)")
        imp.emit("Where", [cond, t, e], {}, [oname], f"{n.name}_select{k}")


def _loop_normalise(imp, n) -> None:
    """Unroll: inputs ``(M, cond, v_initial...)``, body ``(i, cond, v...) -> (cond, v...,
    scan outputs...)``; outputs ``(v_final..., scan outputs stacked on axis 0...)``."""
    trip = n.input(0)
    cond_in = n.input(1)
    carried = list(n.inputs[2:])
    body = n.attrs["body"]
    trips = int(_scalar(trip, "the trip count", n.name, "Loop")) if trip is not None else None
    cond = bool(_scalar(cond_in, "the condition", n.name, "Loop")) if cond_in is not None else None
    if trips is None and cond is None:
        raise UnsupportedOpError(f"node '{n.name}' (Loop): no trip count and no condition (an endless loop)")
    n_carried = len(carried)
    n_scan = len(body.output) - 1 - n_carried
    scans: list[list] = [[] for _ in range(n_scan)]
    i = 0
    while (trips is None or i < trips) and (cond is None or cond):
        if i >= MAX_ITERATIONS:
            raise UnsupportedOpError(f"node '{n.name}' (Loop): more than {MAX_ITERATIONS} iterations to unroll")
        it = imp.const(np.array(i, np.int64), f"{n.name}_i{i}")
        c = imp.const(np.array(True if cond is None else cond), f"{n.name}_cond{i}")
        outs = imp.inline(body, [it, c] + carried, f"{n.name}_iter{i}")
        carried = outs[1:1 + n_carried]
        for k, v in enumerate(outs[1 + n_carried:]):
            scans[k].append(v)
        if cond is not None:
            cond = bool(_scalar(outs[0], f"the condition after iteration {i}", n.name, "Loop"))
        i += 1
    for oname, v in zip(n.outputs[:n_carried], carried, strict=False):
        if oname:
            imp.alias(oname, v)
    for k, oname in enumerate(n.outputs[n_carried:]):
        if not oname:
            continue
        if not scans[k]:
            raise UnsupportedOpError(f"node '{n.name}' (Loop): runs no iteration, so the shape of its scan output "
                                     f"'{oname}' is unknown")
        imp.alias(oname, _stack(imp, scans[k], 0, f"{n.name}_scan{k}"))


def _scan_steps(imp, n, states, scan_ins, axes_in, dirs_in, axes_out, dirs_out, body, name):
    """One (unbatched) Scan: returns the final states and the stacked scan outputs."""
    lengths = {v.shape[a + len(v.shape) if a < 0 else a] for v, a in zip(scan_ins, axes_in, strict=True)}
    if len(lengths) != 1:
        raise UnsupportedOpError(f"node '{n.name}' (Scan): scan inputs of different lengths {sorted(lengths)}")
    steps = lengths.pop()
    n_out = len(body.output) - len(states)
    collected: list[list] = [[] for _ in range(n_out)]
    for t in range(steps):
        slices = []
        for j, (v, a) in enumerate(zip(scan_ins, axes_in, strict=True)):
            idx = imp.const(np.array(steps - 1 - t if dirs_in[j] else t, np.int64), f"{name}_t{t}_{j}")
            slices.append(imp.emit("Gather", [v, idx], {"axis": a}, [None], f"{name}_slice{t}_{j}")[0])
        outs = imp.inline(body, list(states) + slices, f"{name}_step{t}")
        states = outs[:len(states)]
        for k, v in enumerate(outs[len(states):]):
            collected[k].append(v)
    stacked = []
    for k, vals in enumerate(collected):
        if not vals:
            raise UnsupportedOpError(f"node '{n.name}' (Scan): scans a sequence of length 0, so the shape of its "
                                     f"scan output {k} is unknown")
        if dirs_out[k]:
            vals = vals[::-1]
        stacked.append(_stack(imp, vals, axes_out[k], f"{name}_out{k}"))
    return states, stacked


def _scan_normalise(imp, n) -> None:
    """Unroll over the static sequence length (opset 9+: ``num_scan_inputs``, axes and
    directions per input and output; opset 8: a leading batch axis and ``sequence_lens``)."""
    body = n.attrs["body"]
    m = int(n.attrs["num_scan_inputs"])
    if imp.opset < 9:
        seq_lens, ins = n.input(0), n.inputs[1:]
    else:
        seq_lens, ins = None, n.inputs
    n_state = len(ins) - m
    states, scan_ins = list(ins[:n_state]), list(ins[n_state:])
    n_out = len(body.output) - n_state
    dirs_in = list(n.attrs.get("scan_input_directions", n.attrs.get("directions", [0] * m)))
    axes_in = list(n.attrs.get("scan_input_axes", [0] * m))
    dirs_out = list(n.attrs.get("scan_output_directions", [0] * n_out))
    axes_out = list(n.attrs.get("scan_output_axes", [0] * n_out))
    if imp.opset >= 9:
        finals, stacked = _scan_steps(imp, n, states, scan_ins, axes_in, dirs_in, axes_out, dirs_out, body, n.name)
    else:
        batch = scan_ins[0].shape[0]
        steps = scan_ins[0].shape[1]
        if seq_lens is not None:
            lens = seq_lens.const
            if lens is None:
                raise UnsupportedOpError(f"node '{n.name}' (Scan): sequence_lens '{seq_lens.name}' depends on data")
            if np.any(np.asarray(lens) != steps):
                raise UnsupportedOpError(f"node '{n.name}' (Scan): sequence_lens shorter than the sequence are "
                                         "not supported")
        per_batch_states, per_batch_outs = [], []
        for b in range(batch):
            idx = imp.const(np.array(b, np.int64), f"{n.name}_b{b}")
            row = [imp.emit("Gather", [v, idx], {"axis": 0}, [None], f"{n.name}_row{b}_{j}")[0]
                   for j, v in enumerate(states + scan_ins)]
            f, s = _scan_steps(imp, n, row[:n_state], row[n_state:], [0] * m, dirs_in, [0] * n_out,
                               [0] * n_out, body, f"{n.name}_b{b}")
            per_batch_states.append(f)
            per_batch_outs.append(s)
        finals = [_stack(imp, [f[k] for f in per_batch_states], 0, f"{n.name}_state{k}") for k in range(n_state)]
        stacked = [_stack(imp, [s[k] for s in per_batch_outs], 0, f"{n.name}_scan{k}") for k in range(n_out)]
    for oname, v in zip(n.outputs, finals + stacked, strict=False):
        if oname:
            imp.alias(oname, v)


def _control(op_type: str, normalise, params) -> None:
    define(OpDef(op_type, normalise=normalise, infer=NONE, kernel=NONE, cost=NONE, split=NONE, quant=NONE,
                 param_inputs=params))


# the condition and the trip count decide what is imported: they are parameters
_control("If", _if_normalise, (0,))
_control("Loop", _loop_normalise, (0, 1))
_control("Scan", _scan_normalise, NONE)
