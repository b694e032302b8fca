"""Mixed precision: raise the widths of the most sensitive tensors until an output SQNR.

The quantized model is *simulated* in float (:func:`simulate`: every planned tensor is
replaced by ``dequantize(quantize(x))`` as it is produced), which equals the QDQ model's
arithmetic without building it. Output SQNR over a set of batches:

    SQNR = 10 log10( sum y_float^2 / sum (y_quant - y_float)^2 )   (all outputs pooled)

Sensitivity of a unit (one tied activation group, or one weight) = the SQNR with only that
unit quantized; the worst (lowest) units are raised to the next width (4 -> 8 -> 16) one by
one, re-measuring the whole model after each, until the target is met or nothing is left.
Cost: (units + raises) simulations of the measurement batches.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from corefold.executor import Interpreter
from corefold.ir import Graph
from corefold.passes.quantize.params import SUPPORTED_BITS, QuantParams
from corefold.passes.quantize.select import param_inputs

_CONST_CACHE: dict[tuple, np.ndarray] = {}


def _fake_constant(name: str, p: QuantParams, const: np.ndarray) -> np.ndarray:
    key = (name, id(const), p.mode, p.bits, np.asarray(p.k).tobytes(), id(p.integers))
    hit = _CONST_CACHE.get(key)
    if hit is None:
        if len(_CONST_CACHE) > 4096:
            _CONST_CACHE.clear()
        if p.bits == 32:
            s = np.asarray(1.0 / p.k)
            s = s.reshape([-1] + [1] * (const.ndim - 1)) if s.ndim else s
            hit = (np.clip(np.rint(const / s), -(2**31), 2**31 - 1) * s).astype(const.dtype)
        else:
            hit = p.dequantize(p.weight_integers(const))
        _CONST_CACHE[key] = hit
    return hit


class FakeQuantRunner(Interpreter):
    """The one interpreter, replacing every planned value by ``dequantize(quantize(x))``
    as it is produced (inputs, constants and node outputs). ``plan`` may change between
    runs; the graph's order and liveness are computed once.

    A node's parameter inputs (shapes, scales, indices: :func:`select.param_inputs`) read
    the float value even when the value is planned for another reader, as in the QDQ model
    (:mod:`qdq` quantizes a value only on the edges into its quantized readers)."""

    def __init__(self, graph: Graph, plan: dict[str, QuantParams] | None = None):
        super().__init__(graph)
        self.plan = plan or {}
        #: node -> its parameter input positions; the values read there
        self.param_slots = {n: ps for n in self.order if (ps := param_inputs(n))}
        self.param_values = {n.inputs[i] for n, ps in self.param_slots.items() for i in ps
                             if i < len(n.inputs) and n.inputs[i] is not None}
        self.floats: dict = {}

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.floats = {}
        try:
            return super().run(feeds)
        finally:
            self.floats = {}

    def on_value(self, value, array: np.ndarray) -> np.ndarray:
        p = self.plan.get(value.name)
        if p is None:
            return array
        if value in self.param_values:
            self.floats[value] = array
        return _fake_constant(value.name, p, array) if value.is_constant else p.fake_quantize(array)

    def fetch_args(self, node) -> list[np.ndarray | None]:
        args = super().fetch_args(node)
        for i in self.param_slots.get(node, ()):
            if i < len(args) and node.inputs[i] in self.floats:
                args[i] = self.floats[node.inputs[i]]
        return args


_RUNNERS: dict[int, tuple[Graph, FakeQuantRunner]] = {}


def simulate(graph: Graph, plan: dict[str, QuantParams], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The graph outputs with every tensor of ``plan`` fake-quantized where it is produced.

    Quantized constants are cached across calls (keyed by the constant and its parameters),
    and so is the runner of the last graphs seen (keyed by identity and node count).
    """
    key = id(graph)
    hit = _RUNNERS.get(key)
    if hit is None or hit[0] is not graph or len(hit[1].order) != len(graph):
        if len(_RUNNERS) > 8:
            _RUNNERS.clear()
        hit = (graph, FakeQuantRunner(graph))
        _RUNNERS[key] = hit
    runner = hit[1]
    runner.plan = plan
    out = runner.run(feeds)
    return [out[v.name] for v in graph.outputs]


def sqnr_db(reference: list[np.ndarray], test: list[np.ndarray]) -> float:
    """Output SQNR in dB over all outputs pooled (inf when identical)."""
    sig = sum(float(np.sum(np.asarray(r, np.float64) ** 2)) for r in reference)
    noise = sum(float(np.sum((np.asarray(t, np.float64) - np.asarray(r, np.float64)) ** 2))
                for r, t in zip(reference, test, strict=False))
    if noise == 0:
        return float("inf")
    return 10.0 * np.log10(max(sig, 1e-300) / noise)


@dataclass
class MixedReport:
    """What mixed precision did: SQNR before/after, each raise and its size cost."""

    target_db: float
    start_db: float
    final_db: float
    raises: list[dict] = field(default_factory=list)
    weight_bytes_added: int = 0
    activation_bytes_added: int = 0
    reached: bool = False

    def to_json(self) -> dict:
        return {"target_sqnr_db": self.target_db, "start_sqnr_db": self.start_db, "final_sqnr_db": self.final_db,
                "reached": self.reached, "raises": self.raises,
                "weight_bytes_added": self.weight_bytes_added, "activation_bytes_added": self.activation_bytes_added}


def raise_bits(graph: Graph, units: dict[str, list[str]], make_plan, batches: list[dict[str, np.ndarray]],
               target_db: float, start_bits: dict[str, int] | None = None,
               progress: bool = True) -> tuple[dict[str, int], MixedReport]:
    """Greedy sensitivity-ordered width raising (module docstring).

    Args:
        units: unit name -> tensor names raised together.
        make_plan: ``bits_override -> plan`` (closes over the statistics and settings).
        batches: the measurement feeds.
        target_db: the requested output SQNR.

    Returns:
        The per-tensor width overrides and the report.
    """
    from tqdm import tqdm

    reference = [simulate(graph, {}, f) for f in batches]

    def measure(plan: dict[str, QuantParams]) -> float:
        return sqnr_db([y for ys in reference for y in ys],
                       [y for f in batches for y in simulate(graph, plan, f)])

    bits = dict(start_bits or {})
    plan = make_plan(bits)
    current = measure(plan)
    report = MixedReport(target_db, current, current)
    if current >= target_db:
        report.reached = True
        return bits, report
    by_name = {v.name: v for v in graph.values()}
    sensitivity = {}
    for unit, members in tqdm(units.items(), desc="sensitivity", disable=not progress, leave=False):
        sub = {t: plan[t] for t in members if t in plan}
        sensitivity[unit] = measure(sub) if sub else float("inf")
    for unit in sorted(units, key=lambda u: sensitivity[u]):
        members = [t for t in units[unit] if t in plan]
        if not members:
            continue
        now = max(plan[t].bits for t in members)
        wider = [b for b in SUPPORTED_BITS if b > now]
        if not wider:
            continue
        for t in members:
            bits[t] = wider[0]
        plan = make_plan(bits)
        current = measure(plan)
        added = sum(by_name[t].size * (wider[0] - now) // 8 for t in members)
        is_weight = all(by_name[t].const is not None for t in members)
        if is_weight:
            report.weight_bytes_added += added
        else:
            report.activation_bytes_added += added
        report.raises.append({"unit": unit, "tensors": members, "from_bits": now, "to_bits": wider[0],
                              "sensitivity_db": sensitivity[unit], "sqnr_after_db": current,
                              "bytes_added": added, "kind": "weight" if is_weight else "activation"})
        if current >= target_db:
            report.reached = True
            break
    report.final_db = current
    return bits, report
