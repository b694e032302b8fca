"""The quantize pass: the stages of M5 in the order data passes through them, each once.

``corefold quantize MODEL --calib DATA`` (and ``corefold compile``) run :class:`QuantizePass`
under :class:`corefold.pipeline.Pipeline`, which calls :func:`quantize_graph`:

0. ``fold``      -- (``fold``) each BatchNormalization and per-channel affine node after a
   float convolution is folded into it, each Sum of two inputs becomes an Add, and each
   normalisation left (no convolution before it) becomes a depthwise 1 x 1 convolution, a
   linear operator with an integer kernel (:mod:`corefold.passes.fold`);
1. ``select``    -- which tensors are quantized and which share one parameter set;
2. ``ranges``    -- intervals known from the operators alone (ReLU -> [0, ?], ...);
3. ``calibrate`` -- one stream over the calibration data: min/max, |x| histograms and, for
   GPTQ, the Hessians of the weights' inputs; a tensor taking +-inf (a mask) leaves the
   selection and stays float;
4. ``params``    -- the seed's rules: unsigned iff min >= 0 else symmetric, k = qmax / m
   (m clipped by the calibration method);
5. ``rounding``  -- the weights' integers (GPTQ or nearest);
6. ``mixed``     -- with a target SQNR, the widths of the most sensitive tensors are raised
   (asking stages 4-5 for the plan of each candidate assignment);
   ``outgrid`` -- the graph outputs' magnitudes, re-chosen where a candidate within 3% lowers
   the simulated output error on the calibration batches by at least 2%;
7. ``qdq``       -- QuantizeLinear/DequantizeLinear insertion and the JSON report.

``integer`` runs the resulting QDQ graph on integers; ``check`` runs it in ONNX Runtime.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import ClassVar

import numpy as np

from corefold.ir import Graph
from corefold.passes.fold import fold, normalisations_as_convs
from corefold.passes.quantize.calibrate import CalibrationSet, calibrate, gptq_weights
from corefold.passes.quantize.params import Planner, QuantizeError, QuantParams
from corefold.passes.quantize.qdq import insert_qdq, plan_to_json
from corefold.passes.quantize.ranges import static_ranges
from corefold.passes.quantize.rounding import round_weights
from corefold.passes.quantize.select import Selection, select_tensors
from corefold.passes.quantize.settings import QuantizeSettings
from corefold.pipeline import CompileContext, Equivalence, PassResult


@dataclass
class QuantizeResult:
    """The quantized graph (the input graph, changed in place), every tensor's parameters,
    the selection, the mixed-precision report (or None) and the JSON report."""

    graph: Graph
    plan: dict[str, QuantParams]
    selection: Selection
    mixed: dict | None = None
    report: dict = field(default_factory=dict)


def quantize_graph(graph: Graph, data: CalibrationSet, settings: QuantizeSettings | None = None,
                   progress: bool = True) -> QuantizeResult:
    """Quantize ``graph`` in place into QDQ form, calibrated on ``data`` (module docstring).

    Cost: one float run per calibration batch, plus GPTQ's O(M K^2) per weight, plus
    (with ``target_sqnr_db``) one simulated run per measurement batch and candidate.

    Raises:
        QuantizeError: bad settings, or nothing in the graph to quantize.
        DataError: calibration data that does not fit the model or is not finite, or a tensor
            taking NaN. A tensor the model itself fills with +-inf stays float.
    """
    settings = (settings or QuantizeSettings()).checked()
    folded = {"folded": 0, "sums_as_adds": 0, "normalisations_as_convs": 0}
    if settings.fold:
        folded = {**fold(graph), "normalisations_as_convs": normalisations_as_convs(graph)}
    sel = select_tensors(graph, settings.per_channel, settings.quantize_outputs, settings.fuse_activations)
    static = static_ranges(graph)
    batches = data.num_batches if settings.max_batches is None else min(settings.max_batches, data.num_batches)
    gptq = gptq_weights(graph, sel.weights, batches, rows_per_column=settings.gptq_rows_per_column) if settings.weight_rounding == "gptq" else {}
    stats = calibrate(graph, data, sel.activations, hessians=gptq, engine=settings.engine,
                      limit=settings.max_batches, progress=progress)
    if stats.batches == 0:
        raise QuantizeError(f"no calibration batch: the data holds {data.num_samples} samples, fewer than the "
                            f"model's batch")
    # a tensor the model fills with +-inf (a causal mask's Where(m, x, -inf), the scores it is
    # added to) has no scale: it stays float, as a constant holding infinity does (select)
    sel.keep_float({t for t, s in stats.tensors.items() if s.infinite},
                   "takes infinity on the calibration data (a mask): read float")
    # ... and a weight whose input takes infinity has no usable Hessian: nearest rounding
    gptq = {w: n for w, n in gptq.items() if w not in stats.hessians or np.isfinite(stats.hessians[w]).all()}
    planner = Planner(graph, sel, static, stats, settings)
    consts = {w: graph.value(w).const for w in gptq}
    rounded: dict = {}

    def plan_for(bits: dict[str, int]) -> dict[str, QuantParams]:
        return round_weights(planner.plan(bits), gptq, stats.hessians, consts, rounded)

    bits: dict[str, int] = {}
    mixed = None
    if settings.target_sqnr_db is not None:
        from corefold.passes.quantize.mixed import raise_bits

        units = dict(sel.members())
        units.update({w: [w] for w in sel.weights})
        batches = list(data.batches(settings.mixed_batches))
        bits, rep = raise_bits(graph, units, plan_for, batches, settings.target_sqnr_db, progress=progress)
        mixed = rep.to_json()
    plan = plan_for(bits)
    grids = {}
    if settings.output_grid and settings.calibration == "mse":
        from corefold.passes.quantize.outgrid import refine_output_grids

        # every calibration batch (as calibrate): fitted on a few, the grid followed those
        # (digits CNN, 4 of 64 images: 1.4 dB lower on held-out images than no refit)
        grids = refine_output_grids(graph, sel, plan, data.batches(settings.max_batches),
                                    float_outputs=stats.outputs or None)
        if grids and mixed is not None:  # the reported SQNR is the final plan's
            from corefold.passes.quantize.mixed import simulate, sqnr_db

            feeds = list(data.batches(settings.mixed_batches))
            mixed["final_sqnr_db"] = sqnr_db([y for f in feeds for y in simulate(graph, {}, f)],
                                             [y for f in feeds for y in simulate(graph, plan, f)])
    report = plan_to_json(plan, sel)
    report["settings"] = asdict(settings)
    report["calibration_batches"] = stats.batches
    report.update(folded)
    if mixed is not None:
        report["mixed_precision"] = mixed
    if grids:
        report["output_grids"] = grids
    insert_qdq(graph, plan)
    return QuantizeResult(graph, plan, sel, mixed, report)


class QuantizePass:
    """M5 as a pass (:mod:`corefold.pipeline`): reads its :class:`QuantizeSettings` and the
    calibration data ``ctx.data["calibration"]`` (a :class:`CalibrationSet`) from the context.

    The quantized graph's outputs stay within an SQNR of the float graph's
    (``equivalence``): 10 dB is a sanity bound that a lost output (0 dB) fails and every
    8-bit model of the bench passes on its own data by a wide margin.
    """

    name: ClassVar[str] = "quantize"
    settings_class: ClassVar[type] = QuantizeSettings
    equivalence: ClassVar[Equivalence] = Equivalence("sqnr", min_sqnr_db=10.0)

    def run(self, graph: Graph, ctx: CompileContext) -> PassResult:
        """Quantize ``graph`` in place.

        Raises:
            QuantizeError: no calibration data in the context, bad settings, or nothing to
                quantize.
            DataError: calibration data that does not fit the model.
        """
        data = ctx.data.get("calibration")
        if data is None:
            raise QuantizeError("the quantize pass needs calibration data (ctx.data['calibration'], --calib)")
        result = quantize_graph(graph, data, ctx.settings_for(self), progress=ctx.progress)
        ctx.data["quantize"] = result
        return PassResult(result.graph, True, result.report)
