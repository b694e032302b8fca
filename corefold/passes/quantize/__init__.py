"""Range-aware post-training quantization (SPEC M5, seed 004).

Stages, in the order data passes through them:

* ``ranges``    -- intervals known from the operators alone (ReLU -> [0, ?], ...);
* ``calibrate`` -- streaming min/max and |x| histograms over the calibration data;
* ``params``    -- the seed's rules: unsigned iff min >= 0 else symmetric, k = qmax / m;
* ``qdq``       -- which tensors, tied groups (concat), QDQ insertion, JSON report;
* ``mixed``     -- sensitivity-ordered bit raising to a target output SQNR;
* ``integer``   -- integer execution of the QDQ graph (int32 accumulation, requantization).

:func:`quantize_graph` runs them in that order.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from corefold.ir import Graph
from corefold.passes.quantize.calibrate import (
    CALIBRATION_METHODS,
    CalibrationSet,
    collect_statistics,
    load_calibration,
)
from corefold.passes.quantize.params import QuantizeError, QuantParams, check_bits
from corefold.passes.quantize.qdq import (
    PlanSettings,
    Selection,
    insert_qdq,
    make_plan,
    plan_to_json,
    select_tensors,
)
from corefold.passes.quantize.ranges import static_ranges


@dataclass(frozen=True)
class QuantizeSettings:
    """Every knob of :func:`quantize_graph`.

    ``weight_bits`` None means ``bits``. ``unsigned_rule`` False is the symmetric-only
    ablation. ``engine`` runs calibration on corefold's executor or on ONNX Runtime.
    ``max_batches`` bounds the calibration batches; ``mixed_batches`` the batches the
    mixed-precision search measures on. ``quantize_outputs`` False leaves the graph outputs
    float (the last ops' accumulators dequantized instead of rounded to n bits).
    ``weight_rounding`` is ``gptq`` (error-compensating, ``rounding.py``) or ``nearest``.
    """

    bits: int = 8
    weight_bits: int | None = None
    per_channel: bool = True
    calibration: str = "mse"
    percentile: float = 99.99
    unsigned_rule: bool = True
    target_sqnr_db: float | None = None
    engine: str = "corefold"
    max_batches: int | None = None
    mixed_batches: int = 4
    quantize_outputs: bool = True
    weight_rounding: str = "gptq"

    def checked(self) -> "QuantizeSettings":
        """Return self after validation.

        Raises:
            QuantizeError: bits out of range or an unknown calibration method / engine.
        """
        check_bits(self.bits, "--bits")
        if self.weight_bits is not None:
            check_bits(self.weight_bits, "--weight-bits")
        if self.calibration not in CALIBRATION_METHODS:
            raise QuantizeError(f"calibration method '{self.calibration}' is unknown "
                                f"(choose from {', '.join(CALIBRATION_METHODS)})")
        if self.engine not in ("corefold", "onnxruntime"):
            raise QuantizeError(f"calibration engine '{self.engine}' is unknown (corefold or onnxruntime)")
        if self.weight_rounding not in ("gptq", "nearest"):
            raise QuantizeError(f"weight rounding '{self.weight_rounding}' is unknown (gptq or nearest)")
        if not 0 < self.percentile <= 100:
            raise QuantizeError(f"percentile {self.percentile} is not in (0, 100]")
        return self


#: named presets: fast = minmax on at most 32 batches, default = MSE clipping, per-channel,
#: strong = default plus 16-bit raising down to 40 dB output SQNR
PRESETS = {
    "fast": QuantizeSettings(calibration="minmax", max_batches=32),
    "default": QuantizeSettings(),
    "strong": QuantizeSettings(target_sqnr_db=40.0),
}


@dataclass
class QuantizeResult:
    graph: Graph
    plan: dict[str, QuantParams]
    selection: Selection
    mixed: dict | None = None
    report: dict = field(default_factory=dict)


def quantize_graph(graph: Graph, data: CalibrationSet, settings: QuantizeSettings = PRESETS["default"],
                   progress: bool = True) -> QuantizeResult:
    """Quantize ``graph`` in place into QDQ form, calibrated on ``data``.

    Raises:
        QuantizeError: bad settings, or nothing in the graph to quantize.
        DataError: calibration data that does not fit the model.
    """
    settings = settings.checked()
    sel = select_tensors(graph, settings.per_channel, settings.quantize_outputs)
    static = static_ranges(graph)
    hessians = None
    if settings.weight_rounding == "gptq":
        from corefold.passes.quantize.rounding import HessianSet

        hessians = HessianSet(graph, sel.weights)
    stats = collect_statistics(graph, data, sel.activations, engine=settings.engine,
                               limit=settings.max_batches, progress=progress, observer=hessians)
    consts = {w: graph.value(w).const for w in sel.weights} if hessians is not None else {}
    rounded: dict[tuple[str, int], object] = {}
    plan_settings = PlanSettings(bits=settings.bits, weight_bits=settings.weight_bits or settings.bits,
                                 per_channel=settings.per_channel, calibration=settings.calibration,
                                 percentile=settings.percentile, unsigned_rule=settings.unsigned_rule)

    def plan_for(bits: dict[str, int]) -> dict[str, QuantParams]:
        plan = make_plan(graph, sel, stats, static, plan_settings, bits)
        if hessians is not None:
            from corefold.passes.quantize.rounding import gptq_round

            todo = {w: plan[w] for w in hessians.nodes if w in plan and (w, plan[w].bits) not in rounded}
            for w, q in gptq_round(hessians, consts, todo).items():
                rounded[(w, plan[w].bits)] = q
            for w in todo:
                rounded.setdefault((w, plan[w].bits), None)
            for w in hessians.nodes:
                if w in plan and rounded.get((w, plan[w].bits)) is not None:
                    plan[w] = replace(plan[w], integers=rounded[(w, plan[w].bits)])
        return plan

    bits: dict[str, int] = {}
    mixed = None
    if settings.target_sqnr_db is not None:
        from corefold.passes.quantize.mixed import raise_bits

        units = {rep: members for rep, members in sel.members().items()}
        units.update({w: [w] for w in sel.weights})
        batches = list(data.batches(settings.mixed_batches))
        bits, rep = raise_bits(graph, units, plan_for, batches, settings.target_sqnr_db, progress=progress)
        mixed = rep.to_json()
    plan = plan_for(bits)
    report = plan_to_json(plan, sel)
    report["settings"] = {k: v for k, v in settings.__dict__.items()}
    if mixed is not None:
        report["mixed_precision"] = mixed
    insert_qdq(graph, plan)
    return QuantizeResult(graph, plan, sel, mixed, report)


__all__ = ["QuantizeSettings", "PRESETS", "QuantizeResult", "quantize_graph", "load_calibration",
           "QuantizeError", "replace"]
