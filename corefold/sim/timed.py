"""The timed run of an executable: every instruction a task of the timing engine.

Phases, one engine run (:mod:`corefold.sim.engine`, resources :mod:`corefold.sim.machine`):

1. *load*: every resident weight buffer comes from the host: host link, then the XY route
   from the host's router to its core (no DMA engine); ``load_s`` is when the last one
   arrived;
2. the graph inputs whose ``location`` is ``"host"`` are written into their DRAM regions:
   host link, route from the host router to the channel's router, the channel;
3. *run*: the programs, from the moment 1 and 2 are done (``run_start``) until every
   instruction completed (``run_end``): ``latency_s = run_end - run_start``;
4. the ``"host"`` outputs are read back: channel, route to the host router, host link.

The executable's rules (``corefold.backend.executable``) become dependencies: an
instruction waits for its ``deps``, for the previous instruction of its engine (each engine
runs one instruction at a time, in program order), a :class:`Send` also for its
:class:`Recv`'s posting (rendezvous), a Recv's completion for the Send, a Wait for its
Signal. A Recv is two tasks: *posted* (its deps done) and *done* (the data arrived). The
stages of each instruction:

=============  ==============================================================
Compute        its engine for ``work / (throughput x clock)``; a fused
               activation's ``activation_work`` at the vector unit's rate: on
               a matrix op a second stage, vector engine ``i mod count``,
               streamed (cut-through) behind matrix engine ``i`` (one stage
               per vector engine it is dealt over, each with its share, when
               it outlasts the work: ``compute_stages``); on a vector op the
               same engine, after the work
DmaLoad        DRAM channel -> each hop of ``route`` -> the DMA engine
DmaStore       the DMA engine -> each hop -> DRAM channel
DmaCopy        the DMA engine -> source DRAM channel -> each hop -> destination channel
Copy           its engine (a DMA engine, or a vector engine at its elements per cycle)
Send           each hop of ``route`` (bytes at the link's rate, hop latency)
Signal         each hop with no payload (latencies only)
Recv, Wait     none (they complete when what they wait for arrived)
=============  ==============================================================

A DMA transfer on an interleaved region (:attr:`DramRegion.interleave` above 1) is one
such chain per channel, each with that channel's share of the bytes on the XY route
between the channel's router and the other end, and a stageless task that completes with
the last share (its start is reported as the first share's).

Tasks are added to the engine in a topological order of these dependencies (Kahn), which
exists because the programs cannot deadlock (the backend's ordering argument); a cycle is
an :class:`~corefold.errors.InternalError`. O(N + D) to build for N instructions and D
dependencies, plus the engine's O((N + S) log(N + S)) for S stages.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain

import numpy as np
from numba import njit

from corefold.backend.executable import (
    INSTRUCTION_TYPES,
    Compute,
    Copy,
    DmaCopy,
    DmaLoad,
    DmaStore,
    Executable,
    Recv,
    Send,
    Signal,
    View,
    Wait,
    compute_stages,
    instruction_kind,
    split_bytes,
    xy_route,
)
from corefold.errors import InternalError
from corefold.resources import fewer_collections
from corefold.sim.engine import Engine, Stage, Timeline
from corefold.sim.machine import Machine
from corefold.target import Target


class ProgramError(InternalError):
    """The executable breaks its own rules (an unmatched tag, a dependency cycle, a bad engine)."""


@dataclass
class TimedRun:
    """What the timed run computed.

    Attributes:
        engine, machine, timeline: the engine, its resources and what it computed.
        task: per core index and instruction, the task whose finish is the instruction's
            completion (``task[c][j]``).
        posted: per core index, instruction -> the task of a Recv's posting.
        load_end: when the last weight arrived (``load_s``).
        run_start, run_end: the run's bounds (``latency_s = run_end - run_start``).
        transfers: ``(bytes, route, what)`` of every NoC transfer of the run (what is
            ``"send"``, ``"load"``, ``"store"`` or ``"dram copy"``).
        dram_bytes, host_bytes: bytes through DRAM channels during the run, and over the
            host link for inputs and outputs.
    """

    engine: Engine
    machine: Machine
    timeline: Timeline
    task: list[list[int]]
    posted: list[dict[int, int]]
    load_end: float
    run_start: float
    run_end: float
    transfers: list[tuple[int, tuple, str]]
    dram_bytes: int
    host_bytes: int

    def start(self, c: int, j: int) -> float:
        """When instruction ``j`` of core ``c`` started (a Recv: when it was posted)."""
        if j in self.posted[c]:
            return float(self.timeline.finish[self.posted[c][j]])
        return float(self.timeline.start[self.task[c][j]])

    def finish(self, c: int, j: int) -> float:
        """When instruction ``j`` of core ``c`` completed."""
        return float(self.timeline.finish[self.task[c][j]])


def view_bytes(exe: Executable, view: View, dram: bool) -> int:
    """Bytes a transfer of ``view`` moves: its elements times its buffer's item size."""
    dtype = exe.regions[view.ref].dtype if dram else exe.buffers[view.ref].dtype
    size = _ITEMSIZE.get(dtype)
    if size is None:
        size = _ITEMSIZE[dtype] = np.dtype(dtype).itemsize
    return view.elements * size


_ITEMSIZE: dict[str, int] = {}  # dtype name -> bytes per element (np.dtype is slow to ask)
_KIND = {cls: name for name, cls in INSTRUCTION_TYPES.items()}  # instruction class -> kind


#: What :func:`time_executable` can be told to count as free (``what_if``), to see how much
#: of a latency a resource sets with the same executable.
WHAT_IF = {
    "compute": "every Compute takes no time on its engines",
    "noc": "NoC links move bytes in no time (hop latencies stay)",
    "multicast": "a box sent from one core to several crosses each link once, as one multicast would "
                 "(the hops already crossed are skipped, their latency too)",
    "dram": "DRAM channels and DMA engines move bytes in no time",
}


@fewer_collections()
def time_executable(exe: Executable, target: Target, what_if: frozenset[str] = frozenset()) -> TimedRun:
    """Build and run the tasks of every phase (module docstring); ``what_if`` names parts
    of :data:`WHAT_IF` counted as free (a diagnostic: the latency the same executable
    would have without them).

    Raises:
        ValueError: ``what_if`` names something :data:`WHAT_IF` does not.
        ProgramError: an engine the core does not have, a Send, Recv, Signal or Wait
            without its partner, or a dependency cycle.
    """
    unknown = set(what_if) - set(WHAT_IF)
    if unknown:
        raise ValueError(f"what_if: {sorted(unknown)} not among {sorted(WHAT_IF)}")
    engine = Engine()
    m = Machine.build(target, engine, free_noc="noc" in what_if, free_dram="dram" in what_if)
    sent_on: set[tuple] = set()  # (core, box, hop) already carried, under what_if "multicast"

    # -- nodes and their dependencies ---------------------------------------------------------
    # node ids: (c, j) -> 2 * flat + 0 (completion), Recv posting -> 2 * flat + 1
    offsets = np.cumsum([0] + [len(p.instructions) for p in exe.programs]).tolist()
    total = offsets[-1]
    preds: list[list[int]] = [[] for _ in range(2 * total)]
    is_node = [False] * (2 * total)
    sends: dict[int, int] = {}
    recvs: dict[int, int] = {}
    signals: dict[int, int] = {}
    waits: dict[int, int] = {}
    engines_of: dict[tuple, set[str]] = {}
    for core, u in m.units:
        engines_of.setdefault(core, set()).add(u)
    for c, p in enumerate(exe.programs):
        last_on: dict[str, int] = {}
        base = offsets[c]
        engines = engines_of.get(p.core, set())
        for j, ins in enumerate(p.instructions):
            flat = base + j
            is_node[2 * flat] = True
            deps = ins.deps
            if deps and (min(deps) < 0 or max(deps) >= j):
                d = next(d for d in deps if not 0 <= d < j)
                raise ProgramError(f"core {p.core} instruction {j}: dependency {d} is not an earlier instruction")
            dep_nodes = [2 * (base + d) for d in deps]
            kind = type(ins)
            unit = getattr(ins, "unit", None)
            if unit is not None:
                if unit not in engines:
                    raise ProgramError(f"core {p.core} instruction {j}: no engine '{unit}' on this core")
                if kind is Copy and unit.rstrip("0123456789") not in ("dma", "vector"):
                    raise ProgramError(f"core {p.core} instruction {j}: a copy on engine '{unit}' (only a DMA or "
                                       "vector engine copies)")
                if unit in last_on:
                    dep_nodes.append(2 * last_on[unit])
                last_on[unit] = flat
            if kind is Recv:
                is_node[2 * flat + 1] = True
                preds[2 * flat + 1] = dep_nodes
                preds[2 * flat] = [2 * flat + 1]
                _unique(recvs, ins.tag, flat, "Recv")
            else:
                preds[2 * flat] = dep_nodes
                if kind is Send:
                    _unique(sends, ins.tag, flat, "Send")
                elif kind is Signal:
                    _unique(signals, ins.tag, flat, "Signal")
                elif kind is Wait:
                    _unique(waits, ins.tag, flat, "Wait")
    for a, b, what in ((sends, recvs, "Send"), (signals, waits, "Signal")):
        if set(a) != set(b):
            tag = min(set(a) ^ set(b))
            raise ProgramError(f"tag {tag}: a {what} without its partner")
    for tag, s in sends.items():
        r = recvs[tag]
        preds[2 * s].append(2 * r + 1)  # rendezvous: the Recv is posted
        preds[2 * r].append(2 * s)      # the Recv completes when the data arrived
    for tag, s in signals.items():
        preds[2 * waits[tag]].append(2 * s)

    # -- phases 1 and 2 ------------------------------------------------------------------------
    weight_tasks = []
    for b in exe.buffers:
        if b.kind == "weight":
            route = xy_route(target.host_router, b.core)
            weight_tasks.append(engine.task([m.host_stage(b.nbytes), *m.hops(route, b.nbytes)],
                                            name=f"load weight {b.name}", category="weight load",
                                            args={"bytes": b.nbytes, "core": f"{b.core}"}))
    loaded = engine.task([], deps=weight_tasks, name="weights loaded", category="phase")
    host_bytes = 0
    input_tasks = []
    channels = target.dram_channels
    for io in exe.inputs:
        if io.location == "host":
            reg = exe.regions[io.region]
            for c, b in reg.shares(reg.nbytes):
                route = xy_route(target.host_router, channels[c])
                input_tasks.append(engine.task([m.host_stage(b), *m.hops(route, b), m.channel_stage(c, b)],
                                               deps=[loaded], name=f"write input {io.name}", category="host",
                                               args={"bytes": b, "channel": c}))
            host_bytes += reg.nbytes
    run_start = engine.task([], deps=[loaded, *input_tasks], name="run start", category="phase")

    # -- phase 3: the programs, in a topological order ----------------------------------------
    order = _topological(preds, is_node)
    task_of = [-1] * (2 * total)
    transfers: list[tuple[int, tuple, str]] = []
    dram_bytes = 0
    joins: list[tuple[int, list[int]]] = []  # a striped transfer's task and its shares' tasks
    flat_core = np.repeat(np.arange(len(exe.programs)), np.diff(offsets)).tolist()
    for node in order:
        flat = node // 2
        c = flat_core[flat]
        j = flat - offsets[c]
        p = exe.programs[c]
        ins = p.instructions[j]
        deps = [task_of[q] for q in preds[node]] or [run_start]
        label = f"({p.core[0]},{p.core[1]})#{j}"
        if node % 2:  # a Recv's posting
            task_of[node] = engine.task([], deps=deps, name=f"post recv {ins.tag}", category="sync",
                                        args={"instruction": label})
            continue
        cls = type(ins)
        kind = _KIND.get(cls) or instruction_kind(ins)  # (which names what is not an instruction)
        stages: list[Stage] = []
        shares: list[tuple[list[Stage], tuple, str, int]] = []  # one transfer per channel share
        args: dict = {"instruction": label}
        if cls is Compute:
            op = exe.ops[ins.op]
            stages = []
            for engine_name, seconds in compute_stages(op, ins.unit, target):
                if (p.core, engine_name) not in m.units:
                    raise ProgramError(f"core {p.core} instruction {j}: no engine '{engine_name}' for its epilogue")
                stages.append(m.unit_stage(p.core, engine_name, 0.0 if "compute" in what_if else seconds))
            name, args["op_type"] = op.name, op.op_type
        elif cls is DmaLoad or cls is DmaStore:
            load = cls is DmaLoad
            region = exe.regions[ins.src.ref if load else ins.dst.ref]
            nbytes = view_bytes(exe, ins.src, dram=load)
            what = "load" if load else "store"
            for c, b in region.shares(nbytes):
                route = ins.route if region.interleave == 1 else (
                    xy_route(channels[c], p.core) if load else xy_route(p.core, channels[c]))
                dma = m.unit_stage(p.core, ins.unit, m.dma_seconds(b))
                chan, hops = m.channel_stage(c, b), m.hops(route, b)
                shares.append(([chan, *hops, dma] if load else [dma, *hops, chan], route, what, b))
            dram_bytes += nbytes
            name = f"{'load' if load else 'store'} {region.name}"
            args["bytes"] = nbytes
        elif cls is DmaCopy:
            src, dst = exe.regions[ins.src.ref], exe.regions[ins.dst.ref]
            nbytes = view_bytes(exe, ins.src, dram=True)
            n = max(src.interleave, dst.interleave)
            for k, b in enumerate(split_bytes(nbytes, n)):
                cs, cd = src.channel + k % src.interleave, dst.channel + k % dst.interleave
                route = ins.route if n == 1 else xy_route(channels[cs], channels[cd])
                shares.append(([m.unit_stage(p.core, ins.unit, m.dma_seconds(b)), m.channel_stage(cs, b),
                                *m.hops(route, b), m.channel_stage(cd, b)], route, "dram copy", b))
            dram_bytes += 2 * nbytes  # read from one region, written into the other
            name = f"copy {src.name} -> {dst.name}"
            args["bytes"] = nbytes
        elif cls is Copy:
            nbytes = view_bytes(exe, ins.src, dram=False)
            stages = [m.unit_stage(p.core, ins.unit, m.copy_seconds(ins.unit, nbytes, exe.buffers[ins.src.ref].dtype))]
            name = f"copy {exe.buffers[ins.src.ref].name}"
            args["bytes"] = nbytes
        elif cls is Send:
            nbytes = view_bytes(exe, ins.src, dram=False)
            stages = m.hops(ins.route, nbytes)
            if "multicast" in what_if:  # the hops this box already crossed are not taken again
                box = (p.core, ins.src.ref, ins.src.start, ins.src.extent)
                stages = [st for st, hop in zip(stages, ins.route, strict=True) if (box, hop) not in sent_on]
                sent_on.update((box, hop) for hop in ins.route)
            transfers.append((nbytes, ins.route, "send"))
            name = f"send {exe.buffers[ins.src.ref].name}"
            args.update(bytes=nbytes, to=f"{ins.dst_core}")
        elif cls is Signal:
            stages = m.hops(ins.route, 0)
            name = f"signal {ins.tag}"
        else:  # Recv completion, Wait
            name = f"{kind} {ins.tag}"
        if len(shares) == 1:
            stages, route, what, b = shares[0]
            transfers.append((b, route, what))
        elif shares:  # striped: one task per channel share, and the instruction ends with the last
            parts = []
            for k, (st, route, what, b) in enumerate(shares):
                transfers.append((b, route, what))
                parts.append(engine.task(st, deps=deps, name=f"{name} (share {k})", category=kind,
                                         args={**args, "bytes": b}))
            deps = parts
        task_of[node] = engine.task(stages, deps=deps, name=name, category=kind, args=args)
        if len(shares) > 1:
            joins.append((task_of[node], parts))
    run_end = engine.task([], deps=[task_of[n] for n in order if n % 2 == 0] or [run_start],
                          name="run end", category="phase")

    # -- phase 4 -------------------------------------------------------------------------------
    for io in exe.outputs:
        if io.location == "host":
            reg = exe.regions[io.region]
            for c, b in reg.shares(reg.nbytes):
                route = xy_route(channels[c], target.host_router)
                engine.task([m.channel_stage(c, b), *m.hops(route, b), m.host_stage(b)], deps=[run_end],
                            name=f"read output {io.name}", category="host", args={"bytes": b, "channel": c})
            host_bytes += reg.nbytes

    timeline = engine.run()
    for join, parts in joins:  # a striped transfer starts with its first share
        timeline.start[join] = min(timeline.start[t] for t in parts)
    task = [[task_of[2 * (offsets[c] + j)] for j in range(len(p.instructions))] for c, p in enumerate(exe.programs)]
    posted = [{j: task_of[2 * (offsets[c] + j) + 1] for j, ins in enumerate(p.instructions) if isinstance(ins, Recv)}
              for c, p in enumerate(exe.programs)]
    return TimedRun(engine, m, timeline, task, posted, float(timeline.finish[loaded]),
                    float(timeline.finish[run_start]), float(timeline.finish[run_end]),
                    transfers, dram_bytes, host_bytes)


def _unique(table: dict[int, int], tag: int, flat: int, what: str) -> None:
    if tag in table:
        raise ProgramError(f"tag {tag}: two {what} instructions")
    table[tag] = flat


def _topological(preds: list[list[int]], is_node: list[bool]) -> list[int]:
    """Kahn's order of the nodes (first in, first out among the ready ones; a node's
    successors in the order of their index). O(N + D), the loop compiled (:func:`_kahn`).

    Raises:
        ProgramError: a cycle (names one node on it or behind it: ``2 * flat + posting``).
    """
    n = len(preds)
    lengths = np.fromiter(map(len, preds), np.int64, n)
    flat = np.fromiter(chain.from_iterable(preds), np.int64, int(lengths.sum()))
    node = np.fromiter(is_node, np.bool_, n)
    order, indeg = _kahn(lengths, flat, node)
    if len(order) != int(node.sum()):
        stuck = int(np.flatnonzero(node & (indeg > 0))[0])
        raise ProgramError(f"the programs deadlock: instruction {stuck // 2} (numbered over all cores in "
                           f"program order) waits in a dependency cycle")
    return order.tolist()


@njit(cache=True, nogil=True)
def _kahn(lengths, flat, node):  # pragma: no cover - compiled
    """:func:`_topological` on node ``v``'s predecessors ``flat[sum(lengths[:v]):...]``:
    ``(order, in-degrees left)``. O(N + D)."""
    n = len(lengths)
    ptr = np.zeros(n + 1, np.int64)
    ptr[1:] = np.cumsum(lengths)
    count = np.zeros(n, np.int64)
    for v in range(n):
        if node[v]:
            for e in range(ptr[v], ptr[v + 1]):
                count[flat[e]] += 1
    sptr = np.zeros(n + 1, np.int64)
    sptr[1:] = np.cumsum(count)
    fill = sptr[:n].copy()
    succ = np.empty(sptr[n], np.int64)
    indeg = np.zeros(n, np.int64)
    for v in range(n):
        if node[v]:
            for e in range(ptr[v], ptr[v + 1]):
                u = flat[e]
                succ[fill[u]] = v
                fill[u] += 1
            indeg[v] = ptr[v + 1] - ptr[v]
    queue = np.empty(n, np.int64)
    tail = 0
    for v in range(n):
        if node[v] and indeg[v] == 0:
            queue[tail] = v
            tail += 1
    head = 0
    while head < tail:
        u = queue[head]
        head += 1
        for e in range(sptr[u], sptr[u + 1]):
            v = succ[e]
            indeg[v] -= 1
            if indeg[v] == 0:
                queue[tail] = v
                tail += 1
    return queue[:tail], indeg
