"""An event-driven timing engine: tasks with dependencies on FIFO resources, cut-through stages.

Model. A *resource* is ``k`` identical servers (the matrix units of one core, one direction
of one NoC link, one DRAM channel, the host link), each busy over disjoint intervals. A
*task* is a chain of *stages* ``(r_j, d_j, l_j)``: stage ``j`` holds one server of resource
``r_j`` for at least ``d_j`` seconds; its head reaches stage ``j + 1`` ``l_j`` seconds after
it started, and its tail ``l_j`` seconds after it ended. A compute is one stage; a NoC
transfer of ``b`` bytes over links ``r_1 .. r_h`` of ``B`` bytes/s and hop latency ``L`` is
``h`` stages ``(r_i, b / B, L)``. This is *virtual cut-through*: the message streams through
the routers, every link of the route is held for its own transmission time (contention per
hop), and a head that finds its next link busy waits in the router while the links behind
it are released. NOTE: a wormhole router with FIFOs smaller than the message would keep
those upstream links too, so chains of blocking (head-of-line blocking spreading back along
a route) are underestimated; in exchange every hop is one event.
Without contention a transfer takes ``h L + b / B``; two transfers that share a link are
serialised on it, and only on it.

Each request is served first come, first served (ties: the order the requests were
made, so a run is deterministic)::

    arrive_0      = max(end of every dependency, issue of the previous task of its queue)
    start_j       = max(arrive_j, earliest free server of r_j)
    end_j         = max(start_j + d_j, end_{j-1} + l_{j-1})     (the tail cannot overtake)
    arrive_{j+1}  = start_j + l_j
    finish        = end_last + l_last;  the server chosen is busy until end_j, or until
                                        start_j + d_j on a shared resource

A *shared* resource (the machine's links, DRAM channels, host link and DMA engines)
carries packets of several streams interleaved: a stream fed slower than the resource
(a DRAM channel's 6.4 GB/s into a 32 GB/s link) uses only its share of the bandwidth and
leaves the rest to others. So a stage reserves its server for its own transmission time
``d_j`` alone, while its tail still cannot overtake the stage before it. Held for the
whole stream instead, four channel shares of one striped load converging on one link
went through it one after another: 1.35 us for a load that streams in 0.84. Busy time on
a shared server is thus the bytes it carried over its rate, and two streams that meet on
it are serialised by their transmission times, as a fluid model would share it.

A *queue* (optional per task) issues its tasks in the order they were added: a task asks
for its first stage only after the previous task of its queue was granted its first stage
(in-order issue, as a core's instruction stream; several servers may still run in
parallel). A task without stages finishes as soon as it may start (a barrier or a sync).
Dependencies must be earlier tasks and a queue follows the order tasks are added, so no
task graph built through this API can deadlock; :meth:`Engine.run` still checks it.

Complexity: O((T + S) log(T + S) + S k) for T tasks, S stages in total and at most ``k``
servers per resource: every stage is one event on a binary heap, every dependency edge is
visited once.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Any, NamedTuple, Sequence

import numpy as np
from numba import njit

from corefold.errors import InternalError


class DeadlockError(InternalError):
    """Tasks that can never start: a dependency cycle, or a queue order against a dependency."""


class Stage(NamedTuple):
    """One server of ``resource`` held for at least ``duration`` seconds (a named tuple:
    cheap to make by the hundred thousand).

    Attributes:
        resource: index returned by :meth:`Engine.resource`.
        duration: seconds of service (``bytes / rate`` for a link, a unit's compute time).
        latency: seconds from this stage's start (end) until the next stage's head (tail)
            arrives, e.g. a NoC hop's latency; after the last stage, until the task is done.
    """

    resource: int
    duration: float
    latency: float = 0.0


@dataclass
class Resource:
    """``servers`` identical servers; ``process`` and ``thread`` name its trace track;
    ``shared``: a stage reserves a server for its own duration only (module docstring)."""

    name: str
    servers: int
    process: str
    thread: str
    kind: str
    shared: bool = False


@dataclass
class Timeline:
    """What :meth:`Engine.run` computed.

    Attributes:
        start: per task, when its first stage started (or when it could start, stageless).
        finish: per task, when it was done.
        stage_task, stage_resource, stage_server, stage_start, stage_end: one entry per
            stage served, in the order they were granted; on a shared resource the end
            is that of its reservation, ``start + duration`` (the tail may pass later).
        makespan: the latest finish (0 without tasks).
    """

    start: np.ndarray
    finish: np.ndarray
    stage_task: np.ndarray
    stage_resource: np.ndarray
    stage_server: np.ndarray
    stage_start: np.ndarray
    stage_end: np.ndarray
    makespan: float

    def busy_seconds(self, num_resources: int) -> np.ndarray:
        """Per resource, the summed busy time of all its servers."""
        return np.bincount(self.stage_resource, weights=self.stage_end - self.stage_start,
                           minlength=num_resources)


class _Task:
    """One task as an object, for the trace and the critical path (:attr:`Engine.tasks`)."""

    __slots__ = ("stages", "queue", "name", "category", "args", "succs")

    def __init__(self, stages: tuple[Stage, ...], queue: int, name: str, category: str,
                 args: dict[str, Any] | None, succs: list[int]):
        self.stages = stages
        self.queue = queue
        self.name = name
        self.category = category
        self.args = args
        self.succs = succs


class Engine:
    """Build resources, queues and tasks, then :meth:`run` them once."""

    def __init__(self) -> None:
        self.resources: list[Resource] = []
        # the tasks flat (one entry per task in the first lists), for the compiled run:
        # names, categories, args, queue (-1: none), count of stages and of dependencies;
        # each stage's resource, duration and latency; each dependency edge (earlier, later)
        self._names: list[str] = []
        self._categories: list[str] = []
        self._args: list[dict[str, Any] | None] = []
        self._queue_of: list[int] = []
        self._nstages: list[int] = []
        self._pending: list[int] = []
        self._res: list[int] = []
        self._dur: list[float] = []
        self._lat: list[float] = []
        self._edge_from: list[int] = []
        self._edge_to: list[int] = []
        self._queues: list[list[int]] = []
        self._views: list[_Task] = []

    @property
    def num_tasks(self) -> int:
        """Tasks added so far. O(1)."""
        return len(self._nstages)

    @property
    def tasks(self) -> list[_Task]:
        """Every task as an object: its stages, queue, name, category, args and successors
        (in the order they were added). Built when first asked for after a :meth:`task`:
        the run itself needs none of them. O(T + S + E)."""
        n = len(self._nstages)
        if len(self._views) != n:
            succs: list[list[int]] = [[] for _ in range(n)]
            for a, b in zip(self._edge_from, self._edge_to, strict=True):
                succs[a].append(b)
            first = 0
            views = []
            for t in range(n):
                last = first + self._nstages[t]
                stages = tuple(map(Stage, self._res[first:last], self._dur[first:last], self._lat[first:last]))
                views.append(_Task(stages, self._queue_of[t], self._names[t], self._categories[t], self._args[t],
                                   succs[t]))
                first = last
            self._views = views
        return self._views

    def resource(self, name: str, servers: int = 1, *, process: str = "", thread: str = "",
                 kind: str = "", shared: bool = False) -> int:
        """Add a resource of ``servers`` identical servers and return its index; a
        ``shared`` one is reserved for a stage's duration only (module docstring).

        Raises:
            ValueError: ``servers`` is below 1.
        """
        if servers < 1:
            raise ValueError(f"resource '{name}': {servers} servers")
        self.resources.append(Resource(name, servers, process or name, thread or name, kind, shared))
        return len(self.resources) - 1

    def queue(self) -> int:
        """A new in-order issue queue (module docstring); returns its index."""
        self._queues.append([])
        return len(self._queues) - 1

    def task(self, stages: Sequence[Stage], deps: Sequence[int] = (), *, queue: int | None = None,
             name: str = "", category: str = "", args: dict[str, Any] | None = None) -> int:
        """Add a task that starts after every task in ``deps`` finished; returns its index.

        Raises:
            ValueError: a dependency is not an earlier task, a stage names no resource, or
                a duration or latency is negative or not finite.
        """
        index = len(self._nstages)
        unique = set(deps)
        if unique and (min(unique) < 0 or max(unique) >= index):
            bad = next(d for d in unique if not 0 <= d < index)
            raise ValueError(f"task '{name}': dependency {bad} is not an earlier task")
        if stages:
            res, dur, lat = zip(*stages, strict=True)
            # (a NaN or an infinity makes the sum fail ``< inf``; a negative, the minimum)
            if (min(res) < 0 or max(res) >= len(self.resources) or not sum(dur) + sum(lat) < math.inf
                    or min(dur) < 0 or min(lat) < 0):
                self._check(stages, name)  # (finite ones whose sum overflows pass)
            self._res.extend(res)
            self._dur.extend(dur)
            self._lat.extend(lat)
        if unique:
            self._edge_from.extend(unique)
            self._edge_to.extend([index] * len(unique))
        self._pending.append(len(unique))
        self._nstages.append(len(stages))
        self._names.append(name)
        self._categories.append(category)
        self._args.append(args)
        if queue is None:
            self._queue_of.append(-1)
        else:
            self._queue_of.append(queue)
            self._queues[queue].append(index)
        return index

    def _check(self, stages: Sequence[Stage], name: str) -> None:
        """Raise the ValueError for the first bad stage of ``stages``, if any. O(stages)."""
        for r, d, lat in stages:
            if not 0 <= r < len(self.resources):
                raise ValueError(f"task '{name}': no resource {r}")
            if not (0 <= d < math.inf and 0 <= lat < math.inf):
                raise ValueError(f"task '{name}': stage on '{self.resources[r].name}' has duration {d} and "
                                 f"latency {lat}")

    def run(self) -> Timeline:
        """Simulate every task once (module docstring), the event loop compiled by numba
        (:func:`_run_tasks` on the tasks laid out flat; ``engine_test.py`` checks it against
        the same rules in plain Python, to the bit). O((T + S) log(T + S) + S k).

        Raises:
            DeadlockError: some tasks never became ready (names the first of them).
        """
        n = len(self._nstages)
        stage_first = np.zeros(n + 1, np.int64)
        np.cumsum(np.asarray(self._nstages, np.int64), out=stage_first[1:])
        # each task's successors in the order they were added (tasks add in index order,
        # so a stable sort of the edges by their first task keeps it): the heap's ties
        edge_from = np.asarray(self._edge_from, np.int64)
        by_from = np.argsort(edge_from, kind="stable")
        succ = np.asarray(self._edge_to, np.int64)[by_from]
        succ_first = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(edge_from, minlength=n), out=succ_first[1:])
        queue_first = np.zeros(len(self._queues) + 1, np.int64)
        np.cumsum(np.asarray([len(q) for q in self._queues], np.int64), out=queue_first[1:])
        queued = np.asarray([t for q in self._queues for t in q], np.int64)
        server_first = np.zeros(len(self.resources) + 1, np.int64)
        np.cumsum(np.asarray([r.servers for r in self.resources], np.int64), out=server_first[1:])
        start, finish, rec, rec_start, rec_end, done, pending = _run_tasks(
            stage_first, np.asarray(self._res, np.int64), np.asarray(self._dur, np.float64),
            np.asarray(self._lat, np.float64), succ_first, succ, np.asarray(self._pending, np.int64),
            np.asarray(self._queue_of, np.int64), queue_first, queued, server_first,
            np.asarray([r.shared for r in self.resources], np.bool_))
        if done != n:
            stuck = next(i for i in range(n) if np.isnan(finish[i]))
            why = (f"waits for {pending[stuck]} unfinished dependencies" if pending[stuck]
                   else "waits behind an earlier task of its queue")
            raise DeadlockError(f"engine: {n - done} of {n} tasks never ran; the first, "
                                f"'{self._names[stuck] or stuck}', {why}")
        return Timeline(start=start, finish=finish, stage_task=rec[0], stage_resource=rec[1], stage_server=rec[2],
                        stage_start=rec_start, stage_end=rec_end, makespan=float(finish.max()) if n else 0.0)


@njit(cache=True, nogil=True)
def _run_tasks(stage_first, res, dur, lat, succ_first, succ, pending0, queue_of, queue_first, queued,
               server_first, shared):
    """:meth:`Engine.run` on flat arrays (CSR: task ``t``'s stages are
    ``stage_first[t]:stage_first[t + 1]``, its successors ``succ[succ_first[t]:...]``, queue
    ``q``'s tasks ``queued[queue_first[q]:...]``, resource ``r``'s servers
    ``server_first[r]:...``). Returns ``(start, finish, (stage task, resource, server),
    stage start, stage end, tasks done, pending)``, the stages in the order they were
    granted. A heap of ``(time, sequence, task, stage, tail)``: the sequence breaks ties in
    the order requests were made. O((T + S) log(T + S) + S k)."""
    n = len(stage_first) - 1
    pending = pending0.copy()
    ready = np.zeros(n)
    start = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    free = np.zeros(server_first[-1])
    nq = len(queue_first) - 1
    head = np.zeros(nq, np.int64)
    issued = np.zeros(nq)
    total = len(res)
    rec = np.empty((3, total), np.int64)
    rec_start = np.empty(total)
    rec_end = np.empty(total)
    served = 0
    heap = [(0.0, 0, 0, 0, 0.0)]
    heap.pop()
    seq = 0
    for t in range(n):
        q = queue_of[t]
        if pending[t] == 0 and (q < 0 or queued[queue_first[q] + head[q]] == t):
            heap.append((0.0, seq, t, 0, 0.0))
            seq += 1
    heapq.heapify(heap)
    done = 0
    while len(heap) > 0:
        now, _, t, j, tail = heapq.heappop(heap)
        first = stage_first[t]
        count = stage_first[t + 1] - first
        ended = -1.0
        if j < count:
            r = res[first + j]
            d = dur[first + j]
            lt = lat[first + j]
            lo = server_first[r]
            k = lo
            for i in range(lo + 1, server_first[r + 1]):  # the first server that frees first
                if free[i] < free[k]:
                    k = i
            s = now if free[k] <= now else free[k]
            e = s + d
            if shared[r]:
                free[k] = e  # reserved for its own transmission only
                rec_end[served] = e
            if j > 0 and tail > e:
                e = tail
            if not shared[r]:
                free[k] = e
                rec_end[served] = e
            rec[0, served] = t
            rec[1, served] = r
            rec[2, served] = k - lo
            rec_start[served] = s
            served += 1
            began = s
            if j + 1 < count:
                heapq.heappush(heap, (s + lt, seq, t, j + 1, e + lt))
                seq += 1
            else:
                ended = e + lt
        else:  # no stages: a barrier
            began = now
            ended = now
        if j == 0:
            start[t] = began
            q = queue_of[t]
            if q >= 0:
                head[q] += 1
                issued[q] = began
                if head[q] < queue_first[q + 1] - queue_first[q]:
                    nxt = queued[queue_first[q] + head[q]]
                    if pending[nxt] == 0:
                        heapq.heappush(heap, (max(ready[nxt], began), seq, nxt, 0, 0.0))
                        seq += 1
        if ended < 0.0:
            continue
        finish[t] = ended
        done += 1
        for i in range(succ_first[t], succ_first[t + 1]):
            u = succ[i]
            if ended > ready[u]:
                ready[u] = ended
            pending[u] -= 1
            q = queue_of[u]
            if pending[u] == 0 and (q < 0 or queued[queue_first[q] + head[q]] == u):
                at = ready[u] if q < 0 else max(ready[u], issued[q])
                heapq.heappush(heap, (at, seq, u, 0, 0.0))
                seq += 1
    return start, finish, rec[:, :served], rec_start[:served], rec_end[:served], done, pending
