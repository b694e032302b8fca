"""``corefold compile``: ONNX in, a simulated build out, as one pipeline of named passes.

    import -> fold (BatchNormalization into convolutions; a float model) or quantize (with
    calibration data; it folds first) -> split -> serial (M1: compile, split on
    failure, fuse; every compile is ``backend.lower``: tile, place, order, plan SRAM,
    route, emit) -> link -> simulate -> build/

*Link* decides where every tensor between two executables lives: a value an earlier
executable writes and a later one reads stays in DRAM; the model's inputs come from the
host and its outputs go back to it (SPEC M1 §8: "its outputs go to external DRAM or the
host"). :func:`compile_model` returns a :class:`Build`; :mod:`corefold.build_folder`
writes it as the build folder (``.cfx`` files, ONNX, manifest, report) and reads it back.
Cost: the compile calls (counted in the manifest) plus one simulation of the chain.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from corefold.errors import CompileError, CorefoldError
from corefold.ir import Graph
from corefold.passes.fold import FoldPass
from corefold.passes.serial import SerialResult, SerialSettings, compare_strategies
from corefold.passes.serial.partition import SerialPass
from corefold.pipeline import CompileContext, Equivalence, PassResult, Pipeline
from corefold.resources import fewer_collections
from corefold.target import Target


@dataclass(frozen=True)
class CompileSettings:
    """Knobs of ``corefold compile`` beyond each pass's own settings.

    Attributes:
        strategies_table: compile with every fusion strategy too, for the report's table
            (each strategy's executables, compile calls, DRAM and host bytes, latency).
        simulate: simulate the chain on seeded random inputs for the report.
        seed: seed of those inputs.
        polish: M1 compiles its candidates with the list-scheduling order on each core
            (``backend.lower.SEARCH``: whether a subgraph fits hardly depends on it, the
            latency does, by about 3%), then lowers the executables it keeps again with
            the M3 order search (``polish_seconds`` each), keeping the one that simulates
            faster. On ResNet-18 that search was 4/5 of the compile time when every
            candidate paid it. False keeps the candidates' executables. Ignored with a
            user's compiler.
        polish_seconds: the M3 order-search budget of each kept executable's lowering
            (``backend.lower``'s own default is 1 s for one executable; a chain has many).
            On ResNet-18, 0.25 s keeps 80% of the 1 s latency gain at half the time.
    """

    strategies_table: bool = True
    simulate: bool = True
    seed: int = 0
    polish: bool = True
    polish_seconds: float = 0.25

    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {"fast": {"strategies_table": False, "polish": False}}


def split_threshold(graph: Graph, target: Target) -> int:
    """Bytes one operator may touch before the split pass cuts it ahead of M1.

    A float model: one core's budget (``core_memory_threshold``). The backend would cut the
    operator the same way, and the pieces give M1 cut positions inside it (the multi-exit
    CNN on ``npu-2x2``: 2 executables; split to the chip's budget, 3).

    A QDQ model: what every usable core holds together. The backend fuses a QDQ model's
    ``DequantizeLinear -> op -> QuantizeLinear`` patterns into integer operators before it
    tiles them, and a graph-level split to one core's budget cut those patterns apart, so
    every piece ran in float: the int8 light SqueezeNet on 64 cores of 128 KiB took 7
    executables of float convolutions where it fits in one, all 86 convolutions in integers
    (simulated 223 us against 1227 us for stop 35's 11 executables)."""
    from corefold.backend.qdq import is_quantized

    if is_quantized(graph):
        # the split pass counts a pattern's float tensors (4 bytes an element), the backend
        # tiles the fused operator on its integers (int8 ResNet-18's 3 x 3 convolutions of 512
        # channels, 2.3 MiB, read 9.0 MiB of float weights: cut from their QuantizeLinear)
        ints = [q.outputs[0].dtype for q in graph.nodes if q.op_type == "QuantizeLinear"]
        widen = max(1, 4 // max((np.dtype(d).itemsize for d in ints), default=1))
        return int(target.core_memory_threshold) * max(1, len(target.usable_cores)) * widen
    return int(target.core_memory_threshold)


def lower_for(target: Target, settings=None):
    """``backend.lower`` bound to ``target`` and ``settings`` (default ``backend.lower.SEARCH``,
    the list-scheduling order on each core): M1's compile callable (picklable)."""
    from corefold.backend.lower import SEARCH, lower

    return functools.partial(lower, target=target, settings=settings or SEARCH)


def polish(executables: list[Any], subgraphs: list[Graph], target: Target,
           budget_seconds: float = 0.25, progress=None, latency=None, workers: int = 1) -> tuple[list[Any], int]:
    """Lower each kept subgraph again with the M3 order search on every core.

    An order changes the buffers' lifetimes, so a subgraph that compiled with the
    list-scheduling order may not with the searched one: it keeps its candidate
    executable. The search ranks orders by the cost model, not by the simulator, and the
    two disagree where spills dominate (onnx's light DenseNet-121 on ``npu``: its first
    executable 4780 us searched against 4262 us listed); given ``latency`` (an executable's
    simulated seconds) the searched executable replaces the candidate only when it runs
    faster. With ``latency``, a candidate cut for parallelism is also lowered with no
    parallel pieces (searched too) and that one kept when it runs faster still: the most
    pieces that compile is not always the fastest (the DenseNet's second executable, 1743.5
    us with 2 pieces per core, 1260.9 us with none: the replicated weights leave its cores
    little SRAM). Returns the executables and how many were replaced; ``progress``
    (``tqdm``-like: ``update(n)``) is told of each subgraph done.

    ``workers`` (with ``latency``): 1 lowers in this process; N > 1 on a pool of N
    processes, 0 one per CPU, each subgraph's lowerings in one worker and timed there by
    the simulator (:func:`latency_for`), the candidates here by ``latency``; the result is
    the same (lowering and timing are deterministic). O(executables) lowerings, two each
    with ``latency`` and a timed run of each lowering.
    """
    from corefold.backend.lower import LowerSettings

    settings = LowerSettings(order_budget_seconds=budget_seconds, trial_seeds=())  # seed 0, as docs/compile.md measured
    tries = [settings]
    if latency is not None:
        tries.append(dataclasses.replace(settings, pieces_per_core=0.0, trial_pieces=()))
    jobs = [(sub, tuple(tries if _has_pieces(exe) else tries[:1])) for exe, sub in zip(executables, subgraphs,
                                                                                           strict=True)]
    n = workers or len(os.sched_getaffinity(0))
    if latency is None or n <= 1 or len(jobs) <= 1:
        found = (_fastest_lowering(sub, target, ts, latency) for sub, ts in jobs)
        return _keep_faster(executables, found, latency, progress)  # lazily: one lowering at a time
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=min(n, len(jobs))) as pool:
        timed = latency_for(target)
        futures = [pool.submit(_fastest_lowering, sub, target, ts, timed) for sub, ts in jobs]
        return _keep_faster(executables, (f.result() for f in futures), latency, progress)


def _has_pieces(exe) -> bool:
    return exe.meta.get("order", {}).get("pieces_per_core", 0) > 0


def _fastest_lowering(sub: Graph, target: Target, tries, latency=None) -> tuple[Any, float | None]:
    """The fastest of ``sub``'s lowerings under ``tries`` that compile, by ``latency``
    (without it: the first that compiles, untimed), with its seconds; (None, None) if
    none compiles. O(len(tries)) lowerings and timed runs."""
    from corefold.backend.lower import lower

    best, best_s = None, None
    for lowering in tries:
        try:
            other = lower(sub, target, lowering)
        except CompileError:
            continue
        if latency is None:
            return other, None
        seconds = latency(other)
        if best is None or seconds < best_s:
            best, best_s = other, seconds
    return best, best_s


def _keep_faster(executables, found, latency, progress) -> tuple[list[Any], int]:
    """Each candidate, or its polished lowering where that compiled and (given
    ``latency``) runs faster. O(executables) timed runs of candidates not timed before."""
    out, replaced = [], 0
    for exe, (other, seconds) in zip(executables, found, strict=True):
        best = exe
        if other is not None and (latency is None or seconds < latency(exe)):
            best = other
        replaced += best is not exe
        out.append(best)
        if progress is not None:
            progress.update(1)
    return out, replaced


def latency_for(target: Target):
    """The simulated latency of an executable on ``target`` (the timed run, seconds): what
    M1 balances its cuts by (:mod:`corefold.passes.serial.balance`)."""
    return functools.partial(_latency, target=target)


def _latency(executable, target: Target) -> float:
    from corefold.sim.timed import time_executable

    run = time_executable(executable, target)
    return float(run.run_end - run.run_start)


def _measured(memo: dict, latency):
    """``latency``, but an executable M1 already timed (its balancing caches the latency on
    the compile outcome, in ``memo``) is not simulated again. O(1) per known executable."""
    known = {id(o.executable): o.latency_s for o in memo.values() if o.ok and o.latency_s is not None}

    def measured(executable) -> float:
        seconds = known.get(id(executable))
        return latency(executable) if seconds is None else seconds

    return measured


def fits_for(target: Target):
    """``backend.fits`` bound to ``target`` and M1's candidate settings (``backend.lower.SEARCH``)."""
    from corefold.backend.lower import SEARCH, fits

    return functools.partial(fits, target=target, settings=SEARCH)


class _QuantizeStep:
    """Quantization inside the compile pipeline (the quantizer's own pass when present)."""

    name = "quantize"
    equivalence = Equivalence("sqnr", min_sqnr_db=0.0)

    def __init__(self, data, settings):
        from corefold.passes.quantize import QuantizeSettings

        self.data = data
        self.settings = settings
        self.settings_class = QuantizeSettings

    def run(self, graph: Graph, ctx: CompileContext) -> PassResult:
        from corefold.passes.quantize import quantize_graph

        res = quantize_graph(graph, self.data, self.settings, progress=ctx.progress)
        ctx.data["quantize"] = res.report
        return PassResult(graph, True, {"tensors": len(res.plan)})


@dataclass
class Build:
    """A compiled model: the chain's executables and subgraphs, how M1 found them, the
    per-strategy table, the simulated run and the manifest."""

    graph: Graph
    target: Target
    serial: SerialResult
    executables: list[Any]
    subgraphs: list[Graph]
    table: dict[str, SerialResult] = field(default_factory=dict)
    simulation: Any = None
    latency_by_strategy: dict[str, float] = field(default_factory=dict)
    quantize_report: dict | None = None
    polished: int = 0


def link(executables: list[Any], graph: Graph) -> list[Any]:
    """Set where each executable's inputs and outputs live: DRAM between executables,
    the host at the model's boundary. O(total I/O)."""
    model_inputs = {v.name for v in graph.inputs}
    model_outputs = {v.name for v in graph.outputs}
    later_reads: list[set[str]] = []
    seen: set[str] = set()
    for exe in reversed(executables):
        later_reads.append(set(seen))
        seen |= {io.name for io in exe.inputs}
    later_reads.reverse()
    linked = []
    for exe, later in zip(executables, later_reads, strict=True):
        ins = [dataclasses.replace(io, location="host" if io.name in model_inputs else "dram") for io in exe.inputs]
        outs = [dataclasses.replace(io, location="host" if io.name in model_outputs and io.name not in later
                                    else "dram") for io in exe.outputs]
        linked.append(dataclasses.replace(exe, inputs=ins, outputs=outs))
    return linked


@fewer_collections()
def compile_model(graph: Graph, target: Target, *, serial: SerialSettings | None = None,
                  settings: CompileSettings | None = None, calib=None, quantize=None, compiler=None,
                  progress: bool = False, debug: bool = False) -> Build:
    """Run the whole pipeline on ``graph`` (changed in place: quantized, split, ordered).

    Args:
        calib: a :class:`~corefold.passes.quantize.CalibrationSet` to quantize with (None:
            stay float).
        quantize: the quantizer's settings.
        compiler: the compile callable (default ``backend.lower`` for ``target``); a
            ``toolchain.CommandCompiler`` for a user's compiler.

    Raises:
        CompileError: an operator that cannot compile alone.
        CorefoldError: bad input anywhere.
    """
    serial = (serial or SerialSettings()).checked()
    settings = settings or CompileSettings()
    own_backend = compiler is None
    ctx = CompileContext(target=target, settings={"serial": serial}, seed=settings.seed, debug=debug,
                         progress=progress, compile=compiler or lower_for(target))
    if own_backend:
        ctx.data["fits"] = fits_for(target)
        ctx.data["latency"] = latency_for(target)
    memo: dict = {}  # outcomes shared by the chosen strategy and the strategy table
    ctx.data["compile_memo"] = memo
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(desc="compile calls", unit=" call", leave=False)
        ctx.data["compile_progress"] = bar
    try:
        return _compile(graph, target, ctx, serial, settings, calib, quantize, own_backend, memo, bar)
    finally:
        if bar is not None:
            bar.close()


def _split_for_m1():
    """The split pass at :func:`split_threshold` of the graph it gets (quantized or not),
    unless the context already sets its settings."""
    from corefold.passes.split import SplitPass, SplitSettings

    class SplitForM1(SplitPass):
        def run(self, graph: Graph, ctx: CompileContext) -> PassResult:
            if ctx.settings.get(self.name) is None:
                ctx.settings[self.name] = SplitSettings(threshold=split_threshold(graph, ctx.target))
            return super().run(graph, ctx)

    return SplitForM1()


def _partition(graph: Graph, target: Target, ctx: CompileContext, memo: dict) -> Graph:
    """Split and partition (M1) ``graph`` in place; return the graph partitioned.

    A QDQ model split only to the chip's budget (:func:`split_threshold`) can hold an
    operator that compiles neither fused nor in float (until stop 37, when the backend cut
    integer reductions only in float, the int8 ResNet-18 on cores of 128 KiB: a 3 x 3
    convolution of 64 -> 128 channels alone needed 320 KiB). M1 then ends in a compile
    error naming it; the model is then split and partitioned again from a copy taken
    before, to one core's budget, as a float model is (its pieces run in float).
    O(one more split and partition on failure)."""
    from corefold.backend.tile import copy_graph
    from corefold.passes.split import SplitPass, SplitSettings

    core = int(target.core_memory_threshold)
    fallback = (copy_graph(graph) if ctx.settings.get(SplitPass.name) is None and split_threshold(graph, target) > core
                else None)
    try:
        Pipeline([_split_for_m1(), SerialPass()]).run(graph, ctx)
        return graph
    except CompileError:
        if fallback is None:
            raise
    memo.clear()  # outcomes of the other graph's ranges
    ctx.settings[SplitPass.name] = SplitSettings(threshold=core)
    Pipeline([SplitPass(), SerialPass()]).run(fallback, ctx)
    return fallback


def _compile(graph, target, ctx, serial, settings, calib, quantize, own_backend, memo, bar) -> Build:
    if calib is not None:
        Pipeline([_QuantizeStep(calib, quantize)]).run(graph, ctx)  # (folds first: QuantizeSettings.fold)
    elif not any(n.op_type == "QuantizeLinear" for n in graph.nodes):
        # (a QDQ model stays as it was quantized, as the tile step leaves it: folded, its float
        # values between a DequantizeLinear and a QuantizeLinear would round otherwise)
        Pipeline([FoldPass()]).run(graph, ctx)
    graph = _partition(graph, target, ctx, memo)
    res: SerialResult = ctx.data["serial"]
    executables = list(res.outcomes)
    subgraphs = res.subgraphs(graph)
    build = Build(graph, target, res, executables, subgraphs, quantize_report=ctx.data.get("quantize"))
    if own_backend:
        if settings.polish:
            from tqdm import tqdm

            # with progress bars on, one for the polish, whose lowerings take longest
            with tqdm(total=len(executables), desc="polish", unit=" executable", leave=False,
                      disable=bar is None) as shown:
                executables, build.polished = polish(executables, subgraphs, target, settings.polish_seconds,
                                                     shown, latency=_measured(memo, ctx.data["latency"]),
                                                     workers=1 if serial.ray else serial.workers)
        build.executables = link(executables, graph)
    if settings.strategies_table:
        build.table = compare_strategies(graph, ctx.compile, serial, fits_fn=ctx.data.get("fits"), memo=memo,
                                         progress=bar, latency_fn=ctx.data.get("latency"))
    if settings.simulate and own_backend:
        from corefold.executor import random_inputs
        from corefold.sim import simulate_chain

        feeds = random_inputs(graph, seed=settings.seed)
        build.simulation = simulate_chain(build.executables, feeds, target)
        # the strategy table compares candidates' executables (list-scheduling orders), the
        # chosen strategy's among them, so its rows stay comparable with each other
        for name, r in build.table.items():
            if r.outcomes:
                sim = simulate_chain(link(list(r.outcomes), graph), feeds, target)
                build.latency_by_strategy[name] = sim.report.latency_s
        build.latency_by_strategy.setdefault(res.strategy, build.simulation.report.latency_s)
    return build


__all__ = ["CompileSettings", "Build", "compile_model", "link", "CorefoldError"]
