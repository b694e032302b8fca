"""Memory simulators: device bytes in use per compute step, and over simulated time.

**Step model** (what the planner guarantees; :func:`step_profile`). Every device storage
(:mod:`corefold.passes.memory.program`) is live on a closed range of compute steps
``[a, b]``:

* ``a`` is its producer's step; for a ``SwapIn`` output, the step ``q`` of the SwapIn's
  latest compute predecessor (its trigger; over data and control edges, through copy
  nodes), or ``q + 1`` when every SwapOut that step ``q + 1`` waits for is also a
  predecessor of the SwapIn: the copy may start as soon as step ``q`` ends, but then only
  once those SwapOuts have freed their tensors, so it never coexists with them in the gap
  before step ``q + 1`` (0 if it has no compute predecessor);
* ``b`` is its last compute use's step; a read by a ``SwapOut`` lasts until the step
  before the first compute node that must wait for that SwapOut (its first compute
  successor, through copy nodes; the last step if none); a graph output lives to the end.

``M(i) = resident + sum of the bytes of the storages with a <= i <= b``. This bounds the
memory in use at every instant of any execution that honours the graph's data and
control edges with in-order streams, whatever the durations: during step ``i`` nothing
outside that set has been allocated or can still be held (:func:`timed_profile` is one
such execution, and the property tests check ``timed <= step``).

**Timed model** (:func:`timed_profile`): with start and end times from
:func:`corefold.passes.memory.timesim.simulate`, a storage is allocated when its producer
starts and freed when its last reader ends (graph outputs and resident storages never).
Both are O(V + E + S log S) for S storages.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from corefold.passes.memory.program import COMPUTE, D2H, Program, Storage


@dataclass
class StepProfile:
    """Device memory per compute step.

    Attributes:
        memory: bytes in use at each step (resident bytes included), int64.
        resident: bytes of graph inputs and constants.
        intervals: device storage -> (a, b), its live steps (non-resident storages only).
    """

    memory: np.ndarray
    resident: int
    intervals: dict[Storage, tuple[int, int]]

    @property
    def peak(self) -> int:
        return int(self.memory.max()) if self.memory.size else self.resident

    @property
    def peak_step(self) -> int:
        return int(np.argmax(self.memory)) if self.memory.size else 0


def copy_windows(program: Program) -> tuple[dict, dict]:
    """For each copy node: the latest compute step it must wait for (``-1``: none), and
    the first compute step that must wait for it (``num_steps``: none). O(V + E)."""
    n = program.num_steps
    after: dict = {}
    for node in program.order:
        if program.stream[node] == COMPUTE:
            continue
        est = -1
        for p in node.predecessors():
            est = max(est, program.step[p] if program.stream[p] == COMPUTE else after.get(p, -1))
        after[node] = est
    before: dict = {}
    for node in reversed(program.order):
        if program.stream[node] == COMPUTE:
            continue
        lst = n
        for s in node.successors():
            lst = min(lst, program.step[s] if program.stream[s] == COMPUTE else before.get(s, n))
        before[node] = lst
    return after, before


def step_intervals(program: Program) -> dict[Storage, tuple[int, int]]:
    """Live step range ``[a, b]`` of every non-resident device storage (see the module doc)."""
    n = program.num_steps
    after, before = copy_windows(program)
    waited: dict[int, set] = {}  # step -> the SwapOuts it is the first compute node to wait for
    for node, lst in before.items():
        if program.stream[node] == D2H:
            waited.setdefault(lst, set()).add(node)
    out: dict[Storage, tuple[int, int]] = {}
    for s in program.storages.values():
        if s.resident or s.host:
            continue
        prod = s.root.producer
        if program.stream[prod] == COMPUTE:
            a = program.step[prod]
        else:
            q = after[prod]
            a = q + 1 if q >= 0 and waited.get(q + 1, set()) <= set(prod.predecessors()) else max(q, 0)
        b = a
        for node, _, _ in s.uses():
            if program.stream[node] == COMPUTE:
                b = max(b, program.step[node])
            else:
                b = max(b, before[node] - 1)
        if s.output:
            b = n - 1
        out[s] = (a, max(a, min(b, n - 1)))
    return out


def step_profile(program: Program) -> StepProfile:
    """Bytes in use at every compute step under the step model. O(V + E + S)."""
    n = program.num_steps
    resident = program.resident_bytes()
    intervals = step_intervals(program)
    diff = np.zeros(n + 1, dtype=np.int64)
    for s, (a, b) in intervals.items():
        diff[a] += s.nbytes
        diff[b + 1] -= s.nbytes
    memory = np.cumsum(diff[:n]) + resident
    return StepProfile(memory, resident, intervals)


def floor_bytes(program: Program) -> tuple[int, int]:
    """A lower bound on the peak of any plan that keeps inputs, weights and graph outputs
    on the device: resident bytes plus, at the step that needs most, the storages the
    step reads and writes and the graph outputs already produced. Returns (bytes, step).
    O(V + E)."""
    resident = program.resident_bytes()
    best, best_step = 0, 0
    outputs_done = 0  # bytes of graph-output storages produced at earlier steps
    done: set[int] = set()
    for i, node in enumerate(program.compute):
        touched: dict[int, int] = {}
        for v in list(node.inputs) + list(node.outputs):
            if v is None:
                continue
            s = program.storage_of[id(v)]
            if not s.resident and not s.host:
                touched[id(s)] = s.nbytes
        need = sum(touched.values()) + outputs_done - sum(b for k, b in touched.items() if k in done)
        if need > best:
            best, best_step = need, i
        for v in node.outputs:
            s = program.storage_of[id(v)]
            if s.output and not s.resident and id(s) not in done:
                done.add(id(s))
                outputs_done += s.nbytes
    return resident + best, best_step


@dataclass
class TimedProfile:
    """Device memory over simulated time.

    Attributes:
        times: event times (seconds), ascending.
        memory: bytes in use just after each event (resident bytes included).
        lifetimes: device storage -> (alloc time, free time), non-resident ones.
    """

    times: np.ndarray
    memory: np.ndarray
    lifetimes: dict[Storage, tuple[float, float]]
    resident: int

    @property
    def peak(self) -> int:
        return int(self.memory.max()) if self.memory.size else self.resident


def timed_profile(program: Program, start: dict, end: dict) -> TimedProfile:
    """Memory over time for node start and end times (a schedule of ``program``).

    At equal times, events are taken in issue order, and a node's allocations before its
    frees. O(V + E + S log S).
    """
    seq = {node: i for i, node in enumerate(program.order)}
    makespan = max(end.values(), default=0.0)
    events: list[tuple[float, int, int, int]] = []
    lifetimes: dict[Storage, tuple[float, float]] = {}
    for s in program.storages.values():
        if s.resident or s.host:
            continue
        prod = s.root.producer
        t0 = start[prod]
        last = (end[prod], seq[prod])
        for node, _, _ in s.uses():
            last = max(last, (end[node], seq[node]))
        if s.output:
            last = (makespan, len(seq))
        events.append((t0, seq[prod], 0, s.nbytes))
        events.append((last[0], last[1], 1, -s.nbytes))
        lifetimes[s] = (t0, last[0])
    events.sort()
    resident = program.resident_bytes()
    times = np.array([e[0] for e in events], dtype=np.float64)
    memory = np.cumsum(np.array([e[3] for e in events], dtype=np.int64)) + resident
    return TimedProfile(times, memory, lifetimes, resident)
