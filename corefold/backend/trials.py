"""The trials of a lowering (:func:`~corefold.backend.lower.lower`): alternatives to its
first tiling and clustering, each placed on the mesh, ordered, emitted and timed, the
faster list executable kept.

No rule told beforehand which clustering pair (``spread``, ``headroom``), knob (insertion,
the vector copies, bands, the finer input cut, heavy weights on channels), tiling
(``min_rows``, pieces per core) or placement seed a model's executable runs fastest with,
so the chip's timed simulation decides, one trial at a time, each with what was kept
before it:

1. the clustering pairs (:func:`try_clusterings`, a pair that would repeat a clustering
   skipped, :func:`repeats`);
2. the clustering knobs (:func:`clustering_knob`);
3. the further tilings, then the tiling knobs on the kept tiling (:func:`other_tilings`);
4. the placement seeds (:func:`placement_seeds`).

A trial whose tiling and clustering one before it had (:func:`trial_key`) is not run again:
its result is the earlier one's, and a tie keeps the first, so it is never kept.

Each trial costs steps 2-5 and a timed run (:func:`run_trial`: about 0.1 ms an emitted
instruction), so ``LowerSettings.trial_tasks``, ``trial_knobs_tasks``,
``trial_pieces_tasks`` and ``trial_budget`` (instructions emitted, :data:`EMITTED`) bound
them. O(trials x (V * (k + deg^2) + instructions log instructions)).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Callable

import numpy as np

from corefold.backend.assemble import arrival_times, assemble_into
from corefold.backend.forks import Forks
from corefold.backend.lgraph import LoweredGraph
from corefold.backend.lower_settings import LowerSettings
from corefold.backend.mesh import place_on_mesh
from corefold.backend.place import Clustering, cluster
from corefold.errors import CompileError
from corefold.target import Target

#: ``times`` key of the instructions emitted so far (not a time: ``LowerSettings.trial_budget``)
EMITTED = "emitted_instructions"
#: Executables emitted after the seeds' trials: the sharing trial and the searched orders.
FOLLOWING = 2


def grid(settings: LowerSettings) -> list[tuple[float, float]]:
    """The clusterings ``(spread, headroom)`` the settings list, the first pair first."""
    return [(s, h) for s in settings.spread for h in settings.headroom]


def repeats(spread: float, headroom: float, made: list[tuple[float, float, float, bool]]) -> bool:
    """Whether ``cluster(spread=spread, headroom=headroom)`` would repeat a clustering of
    ``made``, each ``(spread, headroom, its Clustering.headroom, its spread_limited)``:
    one made at a headroom ``h <= headroom`` up to its spare (no group crowded in between),
    and at the same spread or a smaller one that never held a fresh group back. Both rules
    are exact (:class:`~corefold.backend.place.Clustering`). O(len(made))."""
    return any((headroom == h or h <= headroom <= room) and (spread == s or (s <= spread and not limited))
               for s, h, room, limited in made)


@dataclass
class Trial:
    """One clustering's mesh placement, list orders and list executable
    (:func:`~corefold.backend.assemble.assemble_into`), with each task's end in its timed
    run (``arrival``, :func:`~corefold.backend.assemble.arrival_times`; None untimed) and the
    instructions it emitted (``emitted``, 0 when the emit failed)."""

    cl: Clustering
    core_of: list
    base: list[int]
    report: dict
    built: dict = field(default_factory=dict)
    errors: dict = field(default_factory=dict)
    arrival: np.ndarray | None = None
    emitted: int = 0

    @property
    def latency(self) -> float:
        return self.built["list"][0] if "list" in self.built else math.inf

    @property
    def result(self) -> float | str:
        """What a report lists for it: the list executable's latency, or its error."""
        return float(self.latency) if self.built else str(self.errors["list"])


def reclustered(lg: LoweredGraph, *args) -> tuple[LoweredGraph, Clustering]:
    """``lg`` and its :func:`~corefold.backend.place.cluster` with ``args``."""
    return lg, cluster(lg, *args)


def clustering_knob(values: tuple, trial: Trial, make: Callable[[object], tuple[LoweredGraph, Clustering]],
                    target: Target, settings: LowerSettings, times: dict, timed: bool,
                    label: Callable[[object], str], say: Callable[[str], None],
                    seen: dict | None = None) -> tuple[object, Trial, list]:
    """``(value kept, its trial, [[value, list latency or error], ...])`` of a clustering knob
    (``insertion``, ``vector_copies``): ``trial``, clustered with ``values[0]``, against the
    clustering ``make(value)`` of each further value; the faster list executable is kept (the
    first on a tie). A clustering ``seen`` holds (:func:`alternatives`) is not run again. No
    further value: ``(values[0], trial, [])``. O(values) clusterings and trials."""
    kept, first, tried = values[0], trial.result, []
    for value in values[1:]:
        say(label(value))
        result, _, other = alternative(partial(make, value), target, settings, times, timed, seen=seen)
        tried.append([value, result])
        if other is not None and other.latency < trial.latency:
            trial, kept = other, value
    return kept, trial, [[values[0], first], *tried] if tried else []


def tiling_key(lg: LoweredGraph) -> tuple:
    """What tells two tilings apart: each task's name (its operator and its rows, channels
    or part) and duration, and the physical tensors' count. Two lowered graphs with one
    key, clustered with the same settings, give the same trial. O(tasks)."""
    return tuple((x.name, x.seconds) for x in lg.tasks) + (len(lg.phys),)


def trial_key(lg: LoweredGraph, cl: Clustering) -> tuple:
    """What tells two trials of one lowering apart (its seed aside): the tiling
    (:func:`tiling_key`) and the clustering, every task's group, estimated start and end,
    the group count, the bytes between groups (in the order they were counted) and where
    local copies go. The mesh placement, the list orders and the executable follow from
    these alone, so two trials with one key give the same result: two clustering settings
    often cluster alike (the int8 SqueezeNet's spreads 2.5 and 4, the int8 EfficientNet-B0
    with and without ``reserve_pieces``), as two tilings may tile alike. O(tasks + group
    pairs)."""
    return (tiling_key(lg), cl.group.tobytes(), cl.start.tobytes(), cl.end.tobytes(), cl.groups,
            tuple(cl.traffic.items()), cl.vector_copies)


def alternative(make: Callable[[], tuple[LoweredGraph, Clustering]], target: Target, settings: LowerSettings,
                times: dict, timed: bool = True, same_as: LoweredGraph | None = None, seen: dict | None = None):
    """``(result, lowered graph, trial)`` of one alternative tiling or clustering: ``make``
    (timed as ``tile_place``), then :func:`run_trial`. ``result`` is the trial's
    :attr:`Trial.result`, or the CompileError's text when ``make`` fails (no graph, no
    trial); ``(None, None, None)`` when its tasks are those of ``same_as`` (nothing to try).
    ``seen`` maps :func:`trial_key` to ``(result, instructions emitted)`` of each trial of
    the lowering: a tiling and clustering tried already is not run again (``(its result,
    None, None)``: it lost then, or it is the kept one; either way it is not kept again,
    since a tie keeps the first) and a new one is added."""
    with Forks(1) as here:
        return alternatives([(None, make)], target, settings, times, here, timed, same_as, seen)[0]


def alternatives(makes: list[tuple[str | None, Callable[[], tuple[LoweredGraph, Clustering]]]], target: Target,
                 settings: LowerSettings, times: dict, forks: Forks, timed: bool = True,
                 same_as: LoweredGraph | None = None, seen: dict | None = None, beat: float = math.inf,
                 say: Callable[[str], None] | None = None) -> list[tuple]:
    """:func:`alternative` of each ``(label, make)`` in order, as one after the other would
    give them (``say(label)`` before each ``make``): each tiles and clusters here, its trial
    goes to ``forks``; with ``seen``, a tiling and clustering seen before or earlier in
    ``makes`` is not run again (its result, and its instructions charged again). A trial no faster than ``beat``
    comes back without its executable (:func:`trial_job`). O(makes) tilings and trials."""
    runs: list[tuple] = []
    batch: set = set()  # this call's trials
    for label, make in makes:
        if say is not None and label is not None:
            say(label)
        t = time.perf_counter()
        try:
            lg, cl = make()
        except CompileError as exc:
            runs.append(("failed", str(exc)))
            continue
        finally:
            times["tile_place"] += time.perf_counter() - t
        if same_as is not None and [x.name for x in lg.tasks] == [x.name for x in same_as.tasks]:
            runs.append(("same",))
            continue
        key = trial_key(lg, cl) if seen is not None else None
        if seen is not None and (key in seen or key in batch):
            runs.append(("seen", key))
            continue
        batch.add(key)
        runs.append(("run", key, lg, forks.submit(partial(trial_job, lg, cl, target, settings, timed, beat))))
    out = []
    for run in runs:
        if run[0] == "run":
            trial = merged(run[3](), times)
            if seen is not None:
                seen[run[1]] = (trial.result, trial.emitted)
            out.append((trial.result, run[2], trial))
        elif run[0] == "failed":
            out.append((run[1], None, None))
        elif run[0] == "same":
            out.append((None, None, None))
        else:
            result, emitted = seen[run[1]]
            # NOTE: charged as if emitted again, so that trial_budget admits the same trials after it
            times[EMITTED] = times.get(EMITTED, 0) + emitted
            out.append((result, None, None))
    return out


def run_trial(lg: LoweredGraph, cl: Clustering, target: Target, settings: LowerSettings, timed: bool,
              times: dict) -> Trial:
    """Steps 3 to 5 of ``cl`` with the list-scheduling orders: place on the mesh, order,
    emit, and time the executable when ``timed``."""
    from corefold.backend.order import order_tasks

    t = time.perf_counter()
    cores = place_on_mesh(cl, target, settings.seed, settings.placement_effort)
    core_of = [cores[g] for g in cl.group]
    times["mesh"] = times.get("mesh", 0.0) + time.perf_counter() - t
    t = time.perf_counter()
    base, report = order_tasks(lg, cl, core_of, target, 0.0)
    trial = Trial(cl, core_of, base, report)
    runs: dict = {}
    trial.emitted = assemble_into(trial.built, trial.errors, runs, "list", lg, cl, core_of, base, target,
                                  settings, timed=timed)
    times[EMITTED] = times.get(EMITTED, 0) + trial.emitted
    if "list" in runs:
        trial.arrival = arrival_times(lg, cl, *runs["list"])
    times["order"] = times.get("order", 0.0) + time.perf_counter() - t
    return trial


def trial_job(lg: LoweredGraph, cl: Clustering, target: Target, settings: LowerSettings,
              timed: bool, beat: float = math.inf) -> tuple[Trial, dict]:
    """:func:`run_trial` with times of its own: ``(trial, times)``, for a forked process. A
    trial that does not run faster than ``beat`` (the kept trial's latency: it cannot be
    kept) comes back without its executable and arrival times, which are then never used
    and would only be pickled back."""
    own: dict = {}
    trial = run_trial(lg, cl, target, settings, timed, own)
    if trial.latency >= beat and "list" in trial.built:
        trial.built = {"list": (trial.built["list"][0], None)}
        trial.arrival = None
    return trial, own


def merged(job: tuple[Trial, dict], times: dict) -> Trial:
    """The trial of a :func:`trial_job`, its times added to ``times``."""
    trial, own = job
    for key, value in own.items():
        times[key] = times.get(key, 0) + value
    return trial


def try_clusterings(lg: LoweredGraph, cl: Clustering, target: Target, settings: LowerSettings, timed: bool,
                    trials_on: bool, times: dict, say: Callable[[str], None], seen: dict | None = None):
    """``((spread, headroom), trial, [[spread, headroom, list latency or error], ...])``:
    the first clustering ``cl``'s trial, or that of another ``spread`` and ``headroom`` pair
    whose list executable the timed simulation runs faster (the first on a tie). A pair
    whose clustering would repeat one made before is skipped (:func:`repeats`); one that
    clusters as an earlier pair did is not run (:func:`trial_key`: it cannot be kept) but
    listed with that pair's result, its instructions charged again. Each trial run goes
    into ``seen`` (:func:`alternatives`). O(pairs) clusterings and trials."""
    pairs = [(settings.spread[0], settings.headroom[0])]
    made = [(*pairs[0], cl.headroom, cl.spread_limited)]
    tried: list[list] = []
    keys = [trial_key(lg, cl)]
    same: dict[int, int] = {}  # pair -> the earlier pair it clusters as
    # NOTE: no rule told beforehand which clustering the SRAM plan suits (headroom 0.5:
    # float EfficientNet-B0 443.6 -> 331.3 us, int8 ResNet-18 184.6 -> 158.5, float
    # Inception v1 542.4 -> 768.1; spread 4 rather than 2.5: int8 EfficientNet-B0
    # 154.2 -> 146.7, int8 ResNet-18 144.9 -> 153.6), so the timed simulation decides
    with Forks(settings.workers) as forks:  # each trial runs while the next pair is clustered
        say(f"trial: spread {pairs[0][0]:g} headroom {pairs[0][1]:g}" if timed else "place, order and emit")
        pending = [forks.submit(partial(trial_job, lg, cl, target, settings, timed))]
        for spread, headroom in grid(settings)[1:] if trials_on else ():
            if repeats(spread, headroom, made):
                continue  # that clustering again
            say(f"cluster: spread {spread:g} headroom {headroom:g}")
            t = time.perf_counter()
            try:
                other = cluster(lg, target, settings.acyclic, spread, headroom, settings.insertion[0],
                                settings.vector_copies[0], settings.reserve_pieces[0])
            except CompileError as exc:
                tried.append([spread, headroom, str(exc)])
                continue
            finally:
                times["tile_place"] += time.perf_counter() - t
            made.append((spread, headroom, other.headroom, other.spread_limited))
            key = trial_key(lg, other)
            if key in keys:
                same[len(pairs)] = keys.index(key)
                pairs.append((spread, headroom))
                keys.append(key)
                pending.append(None)
                continue
            pairs.append((spread, headroom))
            keys.append(key)
            say(f"trial: spread {spread:g} headroom {headroom:g}")
            pending.append(forks.submit(partial(trial_job, lg, other, target, settings, timed)))
        trials: list[Trial] = []
        for i, result in enumerate(pending):
            if result is None:  # as the earlier pair, charged as if emitted again
                trials.append(trials[same[i]])
                times[EMITTED] = times.get(EMITTED, 0) + trials[-1].emitted
            else:
                trials.append(merged(result(), times))
    if seen is not None:
        seen.update((key, (tr.result, tr.emitted)) for key, tr in zip(keys, trials, strict=True))
    tried += [[*sh, tr.result] for sh, tr in zip(pairs, trials, strict=True)]
    best = min(range(len(trials)), key=lambda i: trials[i].latency)  # the first on a tie
    return pairs[best], trials[best], tried


def other_tilings(prepare: Callable[[LowerSettings], tuple[LoweredGraph, Clustering]], target: Target,
                  settings: LowerSettings, lg: LoweredGraph, trial: Trial,
                  spread: float, headroom: float, trials_on: bool, times: dict, say: Callable[[str], None],
                  seen: dict | None = None):
    """``(lowered graph, its trial, min_rows, pieces_per_core, [[min_rows, pieces_per_core,
    list latency or error], ...], {knob: value}, {knob: [[value, list latency or error],
    ...]})``: the first tiling's, or that of a further ``settings.min_rows`` value, then of a
    further ``settings.trial_pieces`` value (with the ``min_rows`` kept), then of a further
    ``settings.bands`` value, then ``settings.input_pieces``, then ``settings.heavy_channels``
    (each with what was kept before it; a value that tiles as the kept tiling is skipped),
    whose list executable (clustered with ``spread`` and ``headroom``) the timed simulation
    runs faster. ``prepare(settings)`` tiles and clusters the graph with those settings; a
    tiling and clustering ``seen`` holds (:func:`alternatives`; the first tiling's is added)
    is not run again. O(values) tilings and trials."""
    kept, pieces = settings.min_rows[0], settings.pieces_per_core
    tried: list[list] = [[kept, pieces, trial.result]]
    # NOTE: two values may tile alike (16 and 20 pieces per core on the int8 ResNet-18: 1035
    # tasks either way)
    seen = {} if seen is None else seen
    seen[trial_key(lg, trial.cl)] = (trial.result, trial.emitted)
    # NOTE: decided on the first tiling (pieces_fit_budget counts the min_rows trials ahead)
    pieces_on = trials_on and (len(lg.tasks) <= settings.trial_pieces_tasks or pieces_fit_budget(trial, settings, times))
    def tiling(m: int, p: float) -> tuple[str, Callable[[], tuple[LoweredGraph, Clustering]]]:
        return (f"trial: tiling with min_rows {m}, {p:g} pieces per core",
                partial(prepare, replace(settings, min_rows=(m,), pieces_per_core=p, spread=(spread,),
                                         headroom=(headroom,))))

    with Forks(settings.workers) as forks:  # a trial runs while the next value tiles
        rows = [m for m in settings.min_rows[1:]] if trials_on else []
        for m, (result, other_lg, other) in zip(rows, alternatives(
                [tiling(m, pieces) for m in rows], target, settings, times, forks, seen=seen, beat=trial.latency,
                say=say), strict=True):
            tried.append([m, pieces, result])
            if other is not None and other.latency < trial.latency:
                lg, trial, kept = other_lg, other, m
        # the pieces' trials follow the min_rows kept
        more = [p for p in settings.trial_pieces if p != pieces] if pieces_on else []
        for p, (result, other_lg, other) in zip(more, alternatives(
                [tiling(kept, p) for p in more], target, settings, times, forks, seen=seen, beat=trial.latency,
                say=say), strict=True):
            tried.append([kept, p, result])
            if other is not None and other.latency < trial.latency:
                lg, trial, pieces = other_lg, other, p
    chosen = {"bands": settings.bands[0], "input_pieces": settings.input_pieces[0],
              "heavy_channels": settings.heavy_channels[0]}
    knobs_tried: dict[str, list[list]] = {}
    for knob in chosen if trials_on and pieces > 0 and len(lg.tasks) <= settings.trial_knobs_tasks else ():
        here = [[chosen[knob], trial.result]]
        if knob == "heavy_channels" and crowds_out_seeds(trial, settings, times):
            continue
        for value in getattr(settings, knob)[1:]:
            say(f"trial: tiling with {knob} {('on' if value else 'off') if isinstance(value, bool) else value}")
            tiling = replace(settings, min_rows=(kept,), pieces_per_core=pieces, spread=(spread,), headroom=(headroom,),
                             **{k: (value if k == knob else v,) for k, v in chosen.items()})
            result, other_lg, other = alternative(partial(prepare, tiling), target, settings, times,
                                                   same_as=lg, seen=seen)
            if result is None:
                continue  # the same tiling (the knob found nothing to cut otherwise)
            here.append([value, result])
            if other is not None and other.latency < trial.latency:
                lg, trial, chosen[knob] = other_lg, other, value
        if len(here) > 1:
            knobs_tried[knob] = here
    return lg, trial, kept, pieces, tried, chosen, knobs_tried


def crowds_out_seeds(trial: Trial, settings: LowerSettings, times: dict) -> bool:
    """Whether one more trial of about ``trial``'s instructions would leave room in
    ``settings.trial_budget`` for fewer placement seeds (:func:`placement_seeds`, after the
    ``reserve_pieces`` trials) than there is room for now: the ``heavy_channels`` knob is
    then not tried (on the torchvision MNASNet 1.0 in int8 its trial, kept off, took the
    room of a seed that ran 51.99 -> 50.96 us). O(1)."""
    seeds = len(dict.fromkeys(s for s in settings.trial_seeds if s != settings.seed))
    size = trial.emitted
    if not seeds or not size:
        return False
    ahead = times.get(EMITTED, 0) + (len(settings.reserve_pieces) - 1) * size

    def admitted(emitted: float) -> int:  # as placement_seeds admits them, each the kept size
        room = settings.trial_budget - emitted - (1 + FOLLOWING) * size
        return 0 if room < 0 else min(seeds, int(room // size) + 1)

    return admitted(ahead + size) < admitted(ahead)


def pieces_fit_budget(trial: Trial, settings: LowerSettings, times: dict) -> bool:
    """Whether ``settings.trial_pieces`` fit ``settings.trial_budget`` (a graph past
    ``trial_pieces_tasks``): emitted so far, the ``min_rows`` trials (the first tiling's
    executable each), 1.4 times it for each pieces trial and the four that may follow. O(1)."""
    size = trial.emitted
    need = size * (len(settings.min_rows) - 1) + 1.4 * size * (len(settings.trial_pieces) + 2 + FOLLOWING)
    return bool(size and settings.trial_pieces) and times.get(EMITTED, 0) + need <= settings.trial_budget


def placement_seeds(lg: LoweredGraph, trial: Trial, target: Target, settings: LowerSettings, trials_on: bool,
                    timed: bool, times: dict, say: Callable[[str], None]) -> tuple[int, Trial, list]:
    """``(seed kept, its trial, [[seed, list latency or error], ...])``: the kept clustering placed
    again with each of ``settings.trial_seeds`` while what was emitted, this seed and the two builds
    after it fit ``settings.trial_budget``; the faster kept (the first on a tie). O(seeds) trials."""
    seeds = list(dict.fromkeys(s for s in settings.trial_seeds if s != settings.seed))
    if not (trials_on and timed and seeds and "list" in trial.built):
        return settings.seed, trial, []
    kept, tried = settings.seed, [[settings.seed, trial.result]]
    with Forks(settings.workers) as forks:
        # NOTE: the seeds run at once while the budget would admit them if each emitted the
        # kept executable's instructions; the loop below then admits exactly those the one-by-one
        # loop would, and runs here any it admits that were not started
        results: dict[int, Callable[[], tuple[Trial, dict]]] = {}
        ahead = times[EMITTED]
        for seed in seeds if forks.workers > 1 else ():
            if ahead + (1 + FOLLOWING) * trial.emitted > settings.trial_budget:
                break
            ahead += trial.emitted
            say(f"trial: mesh placement with seed {seed}")
            results[seed] = forks.submit(partial(trial_job, lg, trial.cl, target, replace(settings, seed=seed), timed,
                                                 trial.latency))
        for seed in seeds:  # a seed emits about the kept executable's instructions, as do the FOLLOWING builds
            if times[EMITTED] + (1 + FOLLOWING) * trial.emitted > settings.trial_budget:
                break
            if seed not in results:
                say(f"trial: mesh placement with seed {seed}")
            other = merged(results[seed]() if seed in results else
                           trial_job(lg, trial.cl, target, replace(settings, seed=seed), timed), times)
            tried.append([seed, other.result])
            if other.latency < trial.latency:
                trial, kept = other, seed
    return kept, trial, tried if len(tried) > 1 else []


def shares(lg: LoweredGraph, core_of: list, position: list[int], target: Target) -> bool:
    """Whether sharing in place changes the plan of ``position``: some piece that other
    tasks read too would be computed in place (:meth:`~corefold.backend.plan.Planner.homes`,
    O(pieces)); else a shared build would only repeat the strict one."""
    from corefold.backend.plan import Planner

    probe = Planner(lg, core_of, position, core_of[0], target.core_memory_threshold, target.sram_bytes, True)
    probe.homes()
    return probe.shared_pieces > 0
