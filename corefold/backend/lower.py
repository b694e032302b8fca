"""``lower(graph, target) -> Executable``: a graph onto the core mesh, step by step.

1. **Tile** (:mod:`.tile`): a private copy, integer patterns fused for QDQ models, every
   operator cut until it fits a core (the split pass, M3 §7). O(V * pieces).
2. **Place** (:mod:`.lgraph`, :mod:`.place`): data movement becomes pieces, the rest are
   tasks; tasks go to groups by list scheduling under SRAM, direction and NoC-buffer
   constraints, and groups onto cores with the M4 placement kernels.
   O(V * (k + deg^2)) + the M4 kernels.
3. **Order** (:mod:`.order`): each core's tasks in the order the M3 search finds for the
   core's units; one global order consistent with every core's order gives the positions.
   The list-scheduling orders' executable is emitted (steps 4-5) and timed first; its
   simulated task ends are the search's release times for data from other cores. Where
   the searched orders differ, their executable is emitted too and the whole chip's timed
   simulation keeps the faster (:func:`_lower_once`).
4. **Plan SRAM** (:mod:`.plan`): events and buffers per core; liveness, spills, offsets.
5. **Route, emit, pack** (:mod:`.emit`): XY routes, instructions with dependences,
   weights. Then the instruction memory and NoC buffers are checked.

With the order search on, the first tiling and clustering are tried against others
(:mod:`.trials`: clusterings, knobs, tilings, placement seeds), each through steps 2-5 and a
timed run, the faster list executable kept before the search.

:func:`fits` runs steps 1 and 2 (without the mesh placement) and estimates the
instruction memory, for serial partitioning (M1) to test many candidates quickly.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import replace
from functools import partial
from typing import Callable

from corefold.backend.assemble import arrival_times, assemble_into, run_latency
from corefold.backend.executable import Executable
from corefold.backend.lgraph import LoweredGraph, build

# the settings and presets are imported from here too (corefold.backend, the CLI, M1)
from corefold.backend.lower_settings import DEFAULT, FAST, PRESETS, SEARCH, STRONG, LowerSettings  # noqa: F401
from corefold.backend.pack import pack
from corefold.backend.place import Clustering, cluster, copies_choose_engine
from corefold.backend.tile import tile
from corefold.backend.trials import (
    EMITTED,
    clustering_knob,
    grid,
    other_tilings,
    placement_seeds,
    reclustered,
    repeats,
    shares,
    try_clusterings,
)
from corefold.errors import CompileError, format_bytes
from corefold.ir import Graph
from corefold.resources import fewer_collections
from corefold.settings import SettingsError
from corefold.target import Target


def _prepare(graph: Graph, target: Target, settings: LowerSettings = DEFAULT) -> tuple[LoweredGraph, Clustering]:
    if target.kind != "npu":
        raise CompileError("core count", f"target '{target.name}'", 1, 0,
                           f"a '{target.kind}' target has no cores corefold lowers onto")
    used = {id(v): v.nbytes for n in graph.nodes for v in n.inputs if v is not None and v.is_constant}
    total = sum(used.values())
    cores = len(target.usable_cores)
    if total > 0.9 * target.sram_bytes * cores:  # before any tiling: fits() stays fast
        raise CompileError("core count", f"target '{target.name}'", int(-(-total // int(0.9 * target.sram_bytes))),
                           cores, f"{format_bytes(total)} of resident weights")
    # NOTE: if the weights do not fit beside the pieces, smaller pieces leave them room
    error = None
    threshold = target.core_memory_threshold
    while threshold >= target.sram_bytes // 8:
        try:
            lg = build(tile(graph, target, threshold, settings.pieces_per_core, settings.min_rows[0],
                            settings.bands[0], settings.input_pieces[0],
                            settings.pack_slices if settings.pack_cores else 0, settings.floor_pieces,
                            settings.heavy_channels[0]), target)
            _check_weights(lg, target)
            packed = None
            if settings.pack_cores:
                packed = pack(lg, target, settings.pack_apart)
                if packed is None:
                    raise CompileError("core count", f"target '{target.name}'", len(target.usable_cores) + 1,
                                       len(target.usable_cores), "the tasks packed by SRAM alone")
            return lg, cluster(lg, target, settings.acyclic, settings.spread[0], settings.headroom[0],
                               settings.insertion[0], settings.vector_copies[0], settings.reserve_pieces[0], packed)
        except _NoRetry as exc:
            # NOTE: smaller pieces copy more weights; the first attempt's failure is the cause
            raise error or CompileError(exc.resource, exc.where, exc.need, exc.limit, exc.detail) from None
        except CompileError as exc:
            if exc.resource not in ("SRAM", "core count", "NoC buffers"):
                raise  # NOTE: NoC buffers too: smaller pieces may share the cores a reader hears
            error = error or exc
        threshold //= 2
    raise error


def _check_weights(lg: LoweredGraph, target: Target) -> None:
    """Resident weights need at least their bytes of SRAM over all usable cores.

    Raises:
        CompileError: core count, when they exceed 90% of all cores' SRAM (the rest is the
            least the activations need).
    """
    total = sum(p.nbytes for p in lg.phys if p.kind == "const")
    cores = len(target.usable_cores)
    need = int(-(-total // int(0.9 * target.sram_bytes)))
    if need > cores:
        raise _NoRetry("core count", f"target '{target.name}'", need, cores,
                       f"{format_bytes(total)} of resident weights")


class _NoRetry(CompileError):
    """A CompileError smaller operator pieces cannot cure."""


@fewer_collections()
def lower(graph: Graph, target: Target, settings: LowerSettings = DEFAULT, *,
          progress: Callable[[str], None] | None = None) -> Executable:
    """Lower ``graph`` (static shapes) onto ``target``; the graph is not modified.
    ``progress`` is told of each step as it starts, in a few words ("tile and cluster",
    "trial: spread 4 headroom 0.5", "order search", ...); ``corefold lower`` shows them.

    Pieces cut for parallelism replicate weights and add buffers, so when a lowering with
    ``settings.pieces_per_core`` runs out of a resource, it is tried again with half of
    them, a quarter, then none (only what does not fit a core is cut), halving
    ``settings.floor_pieces`` with them; the error is the last attempt's. (Straight from 8
    to 2 pieces per core, the int8 EfficientNet-B0, whose 8 overflow one core's instruction
    memory, ran 635 us instead of 439 at 4.) When every
    try runs out of SRAM or cores, the tasks are packed onto cores by SRAM alone and tried
    again (``pack_cores``, :func:`~corefold.backend.pack.pack`); if that fails too, the
    unpacked tries' error is raised. Tile and cluster with nothing cut for parallelism run first: when they fail
    (SRAM, core count), so does every try, and that error is raised at once.

    Raises:
        CompileError: a resource of the target runs out (SRAM, instruction memory, NoC
            buffers, core count), naming where, the amount needed and the limit.
        UnsupportedOpError: an operator has no kernel or a value no static shape.
    """
    if not settings.headroom or not all(h >= 0 for h in settings.headroom):
        raise SettingsError(f"headroom: one value or more, each >= 0, got {list(settings.headroom)}")
    if not settings.spread or not all(s > 0 for s in settings.spread):
        raise SettingsError(f"spread: one value or more, each > 0, got {list(settings.spread)}")
    if not settings.min_rows or not all(isinstance(m, int) and m >= 1 for m in settings.min_rows):
        raise SettingsError(f"min_rows: one whole number or more, each >= 1, got {list(settings.min_rows)}")
    if not settings.insertion:
        raise SettingsError("insertion: one value or more (False, True), got none")
    if not settings.vector_copies:
        raise SettingsError("vector_copies: one value or more (True, False), got none")
    if not settings.reserve_pieces:
        raise SettingsError("reserve_pieces: one value or more (False, True), got none")
    if not settings.bands:
        raise SettingsError("bands: one value or more (False, True), got none")
    if not settings.heavy_channels:
        raise SettingsError("heavy_channels: one value or more (False, True), got none")
    if not settings.input_pieces or not all(isinstance(n, int) and n >= 0 for n in settings.input_pieces):
        raise SettingsError(f"input_pieces: one whole number or more, each >= 0, got {list(settings.input_pieces)}")
    if not all(isinstance(x, int) and x >= 0 for x in settings.trial_seeds):
        raise SettingsError(f"trial_seeds: whole numbers >= 0, got {list(settings.trial_seeds)}")
    if settings.workers < 0:
        raise SettingsError(f"workers: >= 0, got {settings.workers}")
    if settings.trial_budget < 0:
        raise SettingsError(f"trial_budget: >= 0, got {settings.trial_budget}")
    if settings.pack_apart < 0 or settings.pack_slices < 0:
        raise SettingsError(f"pack_apart, pack_slices: >= 0, got {settings.pack_apart}, {settings.pack_slices}")
    if settings.floor_pieces < 1:
        raise SettingsError(f"floor_pieces: >= 1, got {settings.floor_pieces}")
    if not all(p >= 0 for p in settings.trial_pieces):
        raise SettingsError(f"trial_pieces: each value >= 0, got {list(settings.trial_pieces)}")
    say = progress or _silent
    if settings.tune_pieces or settings.tune_efforts:
        return _checked(_tuned(graph, target, settings, say), target)
    if settings.pieces_per_core > 0:
        # what every try ends with: when tile and cluster fail with only what does not fit a
        # core cut, the cut tries (replicated weights, halos, more buffers) fail too, so a
        # subgraph M1 must split fails after one tile-and-cluster, not three
        say("check that it fits")
        try:
            _prepare(graph, target, replace(settings, pieces_per_core=0.0))
        except CompileError as exc:
            return _packed(graph, target, settings, exc, say)
    p = settings.pieces_per_core
    tries = [p, p / 2, p / 4, 0.0] if p > 0 else [0.0]
    for i, pieces in enumerate(tries):
        try:
            fewer = {} if i == 0 else {"trial_pieces": ()}  # more pieces ran out of a resource already
            if i:
                say(f"again with {pieces:g} pieces per core")
            return _checked(_lower_once(graph, target, replace(settings, pieces_per_core=pieces if pieces >= 1
                                                               else 0.0, floor_pieces=max(1, settings.floor_pieces >> i),
                                                               **fewer), say), target)
        except CompileError as exc:
            if i == len(tries) - 1:
                return _packed(graph, target, settings, exc, say)
    raise AssertionError("unreachable")  # pragma: no cover


def _packed(graph: Graph, target: Target, settings: LowerSettings, error: CompileError,
            say: Callable[[str], None]) -> Executable:
    """:func:`lower`'s last try when every other ran out of SRAM or cores: the tasks packed
    onto cores by SRAM (``pack_cores``), with a quarter of the pieces per core first, then
    half, all, none (a packed core holds a convolution's bands beside its weights, and with
    more pieces more of their buffers at once: the float ResNet-18's SRAM plans ran out at 8
    and 4, after 12 s of trials), each with ``settings.pack_apart`` and then, if that does not
    lower, with 0; raises ``error`` (the unpacked tries' own) when this fails
    too, or when ``error`` is another resource's or the settings pack already.

    Raises:
        CompileError: ``error``.
    """
    if settings.pack_cores or error.resource not in ("SRAM", "core count"):
        raise error
    p = settings.pieces_per_core
    for pieces in [p / 4, p / 2, p, 0.0] if p > 0 else [0.0]:
        for apart in dict.fromkeys([settings.pack_apart, 0]):
            say(f"again with the tasks packed onto cores by SRAM, {pieces:g} pieces per core"
                + (f", each operator on {apart} cores apart" if apart else ""))
            try:
                return _checked(_lower_once(graph, target, replace(settings, pack_cores=True, pack_apart=apart,
                                                                   trial_pieces=(),
                                                                   pieces_per_core=pieces if pieces >= 1 else 0.0),
                                            say), target)
            except CompileError:
                continue
    raise error


def _silent(step: str) -> None:
    pass


#: Environment variable: when set (to anything but "" or "0"), every lowering is verified by
#: :func:`~corefold.backend.check.check_executable` before it is returned (the test suite
#: sets it, conftest.py): a broken rule is then an ExecutableError, a corefold bug, where it
#: arises instead of a wrong number somewhere downstream.
CHECK_ENV = "COREFOLD_CHECK_EXECUTABLES"


def _checked(exe: Executable, target: Target) -> Executable:
    if os.environ.get(CHECK_ENV, "") not in ("", "0"):
        from corefold.backend.check import check_executable

        check_executable(exe, target)
    return exe


def _tuned(graph: Graph, target: Target, settings: LowerSettings, say: Callable[[str], None]) -> Executable:
    """:func:`lower` with each pair of ``settings.tune_pieces`` x ``settings.tune_efforts``,
    each ``min_rows`` and each clustering (every ``spread`` with every ``headroom``) without
    the order search, timed on the whole chip; the fastest is lowered again with the search.
    A clustering that would repeat one already made for the pair and tiling is not tried
    (:func:`repeats`). O(pairs x min_rows x spreads x headrooms) lowerings. Deterministic: the timed
    simulation is."""
    from corefold.sim.timed import time_executable

    untuned = replace(settings, tune_pieces=(), tune_efforts=())
    pairs = [(p, e) for p in settings.tune_pieces or (settings.pieces_per_core,)
             for e in settings.tune_efforts or (settings.placement_effort,)]
    tried = []
    for pieces, effort in dict.fromkeys(pairs):
        if not (pieces >= 0 and effort >= 1):
            raise SettingsError(f"tune_pieces / tune_efforts: pieces_per_core {pieces} must be >= 0 and "
                                f"placement_effort {effort} >= 1")
        for rows in settings.min_rows:
            made: list[tuple[float, float, float, bool]] = []
            for spread, headroom in grid(settings):
                if repeats(spread, headroom, made):
                    continue
                trial = replace(untuned, pieces_per_core=pieces, placement_effort=effort, order_budget_seconds=0.0,
                                spread=(spread,), headroom=(headroom,), min_rows=(rows,))
                entry = {"pieces_per_core": pieces, "placement_effort": effort, "min_rows": rows, "spread": spread,
                         "headroom": headroom}
                say(f"tune: {pieces:g} pieces per core, effort {effort}, min_rows {rows}, spread {spread:g} "
                    f"headroom {headroom:g}")
                try:
                    exe = lower(graph, target, trial)
                except CompileError as exc:
                    tried.append({**entry, "error": str(exc)})
                    continue
                room = exe.meta["clustering_headroom"]  # None: no group holds weights
                made.append((spread, headroom, math.inf if room is None else room,
                             exe.meta["clustering_spread_limited"]))
                tried.append({**entry, "latency_s": run_latency(time_executable(exe, target))})
    timed = [t for t in tried if "latency_s" in t]
    if not timed:  # every pair fails: the settings' own error
        return lower(graph, target, untuned, progress=say)
    best = min(timed, key=lambda t: t["latency_s"])
    say("the fastest pair with the order search")
    # NOTE: its pieces were tuned: no trial of other counts
    exe = lower(graph, target, replace(untuned, pieces_per_core=best["pieces_per_core"],
                                       placement_effort=best["placement_effort"], spread=(best["spread"],),
                                       headroom=(best["headroom"],), min_rows=(best["min_rows"],),
                                       trial_pieces=()), progress=say)
    tuned_s = run_latency(time_executable(exe, target))
    # NOTE: the pairs are timed without the trials an untuned lowering runs (int8 SqueezeNet,
    # stop 43: 35.5 us untuned, 37.8 tuned): the faster of the two is kept
    say("the settings untuned, with the order search")
    try:
        plain = lower(graph, target, untuned, progress=say)
        plain_s: float | str = run_latency(time_executable(plain, target))
    except CompileError as exc:
        plain, plain_s = None, str(exc)
    if plain is not None and plain_s < tuned_s:
        exe = plain
    exe.meta["tuning"] = tried
    exe.meta["tuning_final"] = {"tuned_s": tuned_s, "untuned_s": plain_s, "kept": "untuned" if exe is plain else "tuned"}
    return exe


def _lower_once(graph: Graph, target: Target, settings: LowerSettings, say: Callable[[str], None]) -> Executable:
    from corefold.backend.order import order_tasks

    times: dict[str, float] = {EMITTED: 0}
    say(f"tile and cluster ({settings.pieces_per_core:g} pieces per core)")
    t0 = time.perf_counter()
    lg, cl = _prepare(graph, target, settings)
    times["tile_place"] = time.perf_counter() - t0
    timed = settings.order_budget_seconds > 0
    trials_on = timed and len(lg.tasks) <= settings.trial_tasks
    # NOTE: not within trials_on: a tiling or a clustering moves a big graph more than the
    # seeds and sharing do (trial_knobs_tasks)
    knobs_on = timed and len(lg.tasks) <= settings.trial_knobs_tasks
    # every lowering emits the list-scheduling orders (step 4-5) first; with the search,
    # their timed run tells the search when each remote input really arrives
    # every trial's result by its tiling and clustering: one clustered as an earlier one is not run again
    seen: dict = {}
    (spread, headroom), trial, tried = try_clusterings(lg, cl, target, settings, timed, knobs_on, times, say, seen)
    # NOTE: with the fastest pair only: every pair with both would double the trials
    insertion, trial, insertion_tried = clustering_knob(
        settings.insertion if knobs_on else settings.insertion[:1], trial,
        lambda value: reclustered(lg, target, settings.acyclic, spread, headroom, value, settings.vector_copies[0],
                                  settings.reserve_pieces[0]),
        target, settings, times, timed, lambda value: f"trial: clustering with insertion {'on' if value else 'off'}", say,
        seen)
    vector, trial, vector_tried = clustering_knob(
        settings.vector_copies if knobs_on and copies_choose_engine(lg, target) else settings.vector_copies[:1], trial,
        lambda value: reclustered(lg, target, settings.acyclic, spread, headroom, insertion, value,
                                  settings.reserve_pieces[0]),
        target, settings, times, timed,
        lambda value: f"trial: local copies on {'the engine that moves them fastest' if value else 'the DMA engine'}",
        say, seen)
    # the tilings below cluster with both choices
    settings = replace(settings, insertion=(insertion,), vector_copies=(vector,))
    lg, trial, min_rows, pieces, rows_tried, chosen, knobs_tried = other_tilings(
        partial(_prepare, graph, target), target, settings, lg, trial, spread, headroom, knobs_on, times, say, seen)
    # NOTE: after the tilings: the cores it keeps fresh pay off with the bands (int8 Inception
    # v1: 133.8 -> 97.9 us with both, 136.4 -> 139.7 with the first tiling). Within
    # trial_tasks: the int8 ResNet-50 on npu-array (1633 tasks) ran both in 239.8 us, for 2 s
    tiled = lg
    reserve, trial, reserve_tried = clustering_knob(
        settings.reserve_pieces if trials_on else settings.reserve_pieces[:1], trial,
        lambda value: reclustered(tiled, target, settings.acyclic, spread, headroom, insertion, vector, value),
        target, settings, times, timed,
        lambda value: f"trial: fresh cores kept for the weights {'per piece' if value else 'per weight'}", say, seen)
    seed, trial, seeds_tried = placement_seeds(lg, trial, target, settings, trials_on, timed, times, say)
    cl, core_of, base, order_report = trial.cl, trial.core_of, trial.base, trial.report
    built, errors, arrival = trial.built, trial.errors, trial.arrival
    t = time.perf_counter()
    shared = False
    shared_tried = trials_on and bool(lg.tasks) and shares(lg, core_of, base, target)  # no tasks: constants only
    if shared_tried:
        say("trial: pieces computed in place")
        # NOTE: a piece computed in place of an assembly others read too (a band and its halo)
        # saves a copy and a buffer, or costs SRAM (Planner.homes): the timed run decides (float
        # EfficientNet-B0 505.8 -> 443.6 us; float Inception v1 542.4 -> 590.1 keeps the strict rule)
        alt: tuple[dict, dict, dict] = ({}, {}, {})
        times[EMITTED] += assemble_into(*alt, "list", lg, cl, core_of, base, target, settings, timed=True, shared=True)
        if "list" in alt[0] and ("list" not in built or alt[0]["list"][0] < built["list"][0]):
            built, errors, shared = alt[0], alt[1], True
            arrival = arrival_times(lg, cl, *alt[2]["list"])
    position = base
    if settings.order_budget_seconds > 0:
        say(f"order search ({settings.order_budget_seconds:g} s budget)")
        position, order_report = order_tasks(lg, cl, core_of, target, settings.order_budget_seconds, arrival)
    times["order"] = times.get("order", 0.0) + time.perf_counter() - t
    t = time.perf_counter()
    if position != base:
        # NOTE: the M3 search orders each core alone; the data other cores send it gets
        # release times (the arrivals above), but the search still cannot see how its order
        # moves other cores' work. The whole chip's timed simulation decides; an order whose
        # executable does not fit the cores is dropped (the lowering fails only when both do).
        say("emit and time the searched orders")
        times[EMITTED] += assemble_into(built, errors, {}, "search", lg, cl, core_of, position, target, settings,
                                        timed=True, shared=shared)
    if timed:
        names = {"search": "searched", "list": "list"}
        order_report.update({f"{names[k]}_latency_s": v[0] for k, v in built.items()})
        order_report.update({f"{names[k]}_error": str(e) for k, e in errors.items()})
    if not built:
        raise errors["list"]
    kept = min(built, key=lambda k: (built[k][0], k != "search"))  # a tie keeps the search's
    if position != base:
        order_report["kept"] = kept
    order_report["shared_in_place"], order_report["shared_tried"] = shared, shared_tried
    order_report["spread"], order_report["headroom"] = spread, headroom
    order_report["insertion"] = insertion
    order_report["vector_copies"] = vector
    if vector_tried:
        order_report["vector_copies_tried"] = vector_tried  # [vector_copies, list latency or error]
    if insertion_tried:
        order_report["insertion_tried"] = insertion_tried  # [insertion, list latency or error]
    order_report["reserve_pieces"] = reserve
    order_report["packed"] = settings.pack_cores
    if reserve_tried:
        order_report["reserve_pieces_tried"] = reserve_tried  # [reserve_pieces, list latency or error]
    order_report["min_rows"], order_report["pieces_per_core"] = min_rows, pieces
    order_report["seed"] = seed
    if seeds_tried:
        order_report["seeds_tried"] = seeds_tried  # [seed, list latency or error]
    if len(rows_tried) > 1:
        order_report["tilings_tried"] = rows_tried  # [min_rows, pieces_per_core, list latency or error]
    order_report.update(chosen)  # bands, input_pieces
    order_report.update({f"{k}_tried": v for k, v in knobs_tried.items()})  # [value, list latency or error]
    if len(tried) > 1:
        order_report["clusterings_tried"] = sorted(tried, key=lambda shv: shv[:2])  # [spread, headroom, list latency or error]
    exe = built[kept][1]
    times["plan_emit"] = time.perf_counter() - t
    exe.meta.update({
        "graph": graph.name, "tasks": len(lg.tasks), "cores_used": len(exe.programs),
        "spills": sum(1 for r in exe.regions if r.kind == "spill"),
        "estimated_makespan_s": cl.makespan, "clustering_headroom": cl.headroom if math.isfinite(cl.headroom) else None,
        "clustering_spread_limited": cl.spread_limited, "order": order_report,
        "lower_seconds": {k: round(v, 4) for k, v in times.items() if k != EMITTED},
        "emitted_instructions": times[EMITTED],
    })
    return exe


@fewer_collections()
def fits(graph: Graph, target: Target, settings: LowerSettings = DEFAULT) -> CompileError | None:
    """Whether ``graph`` can be lowered onto ``target``, without lowering it: None if it
    fits, else the :class:`CompileError` that :func:`lower` would raise.

    Runs tile and cluster (which decide SRAM, NoC buffers and core count) and estimates
    each core's instruction memory from its tasks and transfers. It skips the mesh
    placement, the order search and the SRAM plan, whose spills may still, rarely, make
    :func:`lower` fail where this passes; and it answers for list scheduling alone, where
    :func:`lower` falls back to packing the tasks by SRAM (``pack_cores``), which may
    fit what this refuses (M1 then splits such a subgraph). O(V * (k + deg^2)).
    """
    from corefold.backend.cfx import estimate_program_bytes

    try:  # what lower() falls back to: only what does not fit a core is cut
        lg, cl = _prepare(graph, target, replace(settings, pieces_per_core=0.0))
    except CompileError as exc:
        return exc
    counts = estimate_program_bytes(lg, cl)
    for g, size in counts.items():
        if size > target.instruction_bytes:
            return CompileError("instruction memory", f"core group {g}", size, target.instruction_bytes,
                                "estimated before placement")
    return None
