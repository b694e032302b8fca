"""Stage 6b: the graph outputs' grids, re-chosen where the calibration data shows it helps.

The MSE clipping of :mod:`params` picks a graph output's magnitude ``m`` from a histogram of
its float values. A graph output read by no node is the one tensor whose rounding error the
model's output error is directly: with every other tensor fake-quantized (:func:`simulate`),
its error for a magnitude ``m`` is exactly

    E(m) = sum_batches sum (fq_m(y_sim) - y_float)^2,

``y_sim`` the output of the simulated model before its own rounding and ``y_float`` the float
model's, both on the calibration batches. Where the output is peaked (logits ~ a Gemm bias),
where the grid falls decides the error, and the histogram cannot see that. Candidates are
``candidates`` magnitudes evenly spaced in ``m * [1 - window, 1 + window]``; the current
``m`` is the first, so a new one is kept only where it lowers ``E`` by at least
:data:`MIN_DROP` of it (deterministic; the mode, unsigned iff never negative else
symmetric, and the width stay). Cost: one float
and one simulated run per batch, plus ``candidates`` fake quantizations of the outputs.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable

import numpy as np

from corefold.ir import Graph
from corefold.passes.quantize.mixed import simulate
from corefold.passes.quantize.params import QuantParams
from corefold.passes.quantize.select import Selection

#: the least relative drop of the calibration error that moves a grid: the error is measured
#: on the few calibration batches the grid is fitted to, and smaller drops did not carry over
#: to held-out samples (zoo, 4 samples: EfficientNet-B0 1.3% in-sample, -0.03 dB held out;
#: ShuffleNetV2 2.7%, +0.11 dB; BERT 4.9%, DeepLabV3 4.0%)
MIN_DROP = 0.02


def output_groups(graph: Graph, sel: Selection, plan: dict[str, QuantParams]) -> dict[str, list[str]]:
    """The tied groups made only of graph outputs that no node reads, quantized per tensor."""
    outs = {v.name: v for v in graph.outputs}
    groups = {}
    for rep, members in sel.members().items():
        if all(t in outs and not outs[t].consumers() and t in plan and plan[t].axis is None
               and plan[t].bits < 32 for t in members):
            groups[rep] = members
    return groups


def magnitude(p: QuantParams) -> float:
    """The ``m`` of a per-tensor ``p`` (``k = qmax / m``)."""
    return float(p.qmax / float(np.asarray(p.k)))


def output_error(p: QuantParams, y_sim: list[np.ndarray], y_float: list[np.ndarray]) -> float:
    """``sum (fq(y_sim) - y_float)^2`` in float64 with ``p``'s rounding (module docstring)."""
    return float(sum(np.sum((p.fake_quantize(s).astype(np.float64) - f) ** 2) for s, f in zip(y_sim, y_float,
                                                                                             strict=True)))


def refine_output_grids(graph: Graph, sel: Selection, plan: dict[str, QuantParams],
                        batches: Iterable[dict[str, np.ndarray]], window: float = 0.03,
                        candidates: int = 121, min_drop: float = MIN_DROP,
                        float_outputs: list[list[np.ndarray]] | None = None) -> dict[str, dict]:
    """Re-choose the magnitude of each output group in ``plan`` (changed in place) where a
    candidate lowers the calibration error by at least the fraction ``min_drop`` (module
    docstring). ``float_outputs``: the float model's outputs on the same batches, when
    calibration kept them (else computed here). Returns, per changed group representative,
    the old and new ``m`` and the errors."""
    groups = output_groups(graph, sel, plan)
    if not groups:
        return {}
    names = {t for ms in groups.values() for t in ms}
    rest = {t: p for t, p in plan.items() if t not in names}
    idx = {v.name: i for i, v in enumerate(graph.outputs)}
    sims, refs = [], []
    for i, f in enumerate(batches):  # one pass over the batches; only the outputs are kept
        sims.append(simulate(graph, rest, f))
        refs.append(float_outputs[i] if float_outputs is not None and i < len(float_outputs)
                    else simulate(graph, {}, f))
    if not sims:
        return {}
    changed = {}
    for rep, members in groups.items():
        p0 = plan[members[0]]
        ys = [s[idx[t]] for s in sims for t in members]
        yf = [np.asarray(r[idx[t]], np.float64) for r in refs for t in members]
        m0 = magnitude(p0)
        ms = [m0] + [m for m in m0 * np.linspace(1.0 - window, 1.0 + window, candidates) if m > 0 and m != m0]
        errs = [output_error(replace(p0, k=np.asarray(p0.qmax / m)), ys, yf) for m in ms]
        best = int(np.argmin(errs))
        if best == 0 or not errs[best] < (1.0 - min_drop) * errs[0]:
            continue
        p = replace(p0, k=np.asarray(p0.qmax / ms[best]), source=p0.source + " + output grid")
        for t in members:
            plan[t] = p
        changed[rep] = {"from_m": m0, "to_m": float(ms[best]), "calib_error_before": errs[0],
                        "calib_error_after": errs[best]}
    return changed
