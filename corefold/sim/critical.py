"""The critical path of a timed run: the chain of tasks that sets the latency, and what
it spends that time on.

Walking back from the instruction that completed last, each step goes to the dependency
that finished last (the one that held the task back), until the run's start. A step's
time splits into *service*, ``finish - max(start, ready)`` (its engines, links and DRAM
channels working for it), and *wait*, ``start - ready`` (a shared link or DRAM channel
busy with other transfers when it was ready; ``ready`` is when its last dependency
finished). Service and wait over the steps add up to the latency, so the split by
category (``compute``, ``send``, ``dma_load``, ...: :mod:`corefold.sim.timed`) says
where the latency goes, e.g. that an int8 SqueezeNet's 70.7 us are 23.6 us of input
loads, 32 us of compute and 8.5 us of sends.

``corefold sim`` prints the split, and its ``--report`` carries it as ``critical_path``.
O(T + E) for T tasks and E dependencies of the run.
"""

from __future__ import annotations

from dataclasses import dataclass

from corefold.sim.timed import TimedRun


@dataclass(frozen=True)
class PathStep:
    """One task on the critical path (seconds from the run's start; ``task``: its index
    in the run's engine, which :attr:`TimedRun.task` maps to instructions)."""

    category: str
    name: str
    start_s: float
    service_s: float
    wait_s: float
    task: int = -1


@dataclass(frozen=True)
class CriticalPath:
    """The steps in time order, and their time by category."""

    steps: tuple[PathStep, ...]

    def by_category(self) -> dict[str, tuple[float, float]]:
        """category -> (service, wait) seconds, the largest total first."""
        out: dict[str, list[float]] = {}
        for s in self.steps:
            acc = out.setdefault(s.category, [0.0, 0.0])
            acc[0] += s.service_s
            acc[1] += s.wait_s
        return {k: (v[0], v[1]) for k, v in sorted(out.items(), key=lambda kv: -(kv[1][0] + kv[1][1]))}

    def longest(self, n: int = 10) -> list[PathStep]:
        """The ``n`` steps of most service plus wait, longest first (ties in time order)."""
        ranked = sorted(range(len(self.steps)), key=lambda i: (-(self.steps[i].service_s + self.steps[i].wait_s), i))
        return [self.steps[i] for i in ranked[:n]]

    def to_json(self) -> dict:
        """``{"service_s": {category: s}, "wait_s": {category: s}, "steps": n,
        "longest": [{category, name, start_s, service_s, wait_s}, ...]}`` (ten longest)."""
        cats = self.by_category()
        return {"service_s": {k: v[0] for k, v in cats.items()}, "wait_s": {k: v[1] for k, v in cats.items()},
                "steps": len(self.steps),
                "longest": [{"category": s.category, "name": s.name, "start_s": s.start_s, "service_s": s.service_s,
                             "wait_s": s.wait_s} for s in self.longest()]}

    def summary(self, unit: float = 1e-6, suffix: str = "us") -> str:
        """One line: each category's service (and wait, when any), largest first;
        categories under 0.05 ``unit`` in all are left out."""
        parts = []
        for k, (service, wait) in self.by_category().items():
            if service + wait < 0.05 * unit:
                continue
            part = f"{k} {service / unit:.1f}"
            if wait >= 0.05 * unit:  # shown with one decimal
                part += f" (+{wait / unit:.1f} waiting)"
            parts.append(part)
        if not parts:
            return f"{len(self.steps)} steps, under 0.05 {suffix} each category"
        return f"{len(self.steps)} steps: " + ", ".join(parts) + f" {suffix}"


def critical_path(run: TimedRun) -> CriticalPath:
    """The critical path of ``run`` (module docstring). O(T + E)."""
    tasks = run.engine.tasks
    start, finish = run.timeline.start, run.timeline.finish
    preds: list[list[int]] = [[] for _ in tasks]
    for i, task in enumerate(tasks):
        for s in task.succs:
            preds[s].append(i)
    ends = [t for core in run.task for t in core]
    if not ends:
        return CriticalPath(())
    cur = max(ends, key=lambda t: (finish[t], -t))
    origin = run.run_start
    steps: list[PathStep] = []
    while True:
        before = [p for p in preds[cur] if finish[p] > origin]
        ready = max((finish[p] for p in before), default=origin)
        begin = max(float(start[cur]), ready)
        steps.append(PathStep(tasks[cur].category, tasks[cur].name, float(start[cur]) - origin,
                              float(finish[cur]) - begin, begin - ready, cur))
        if not before:
            break
        cur = max(before, key=lambda p: (finish[p], -p))
    steps.reverse()
    return CriticalPath(tuple(steps))
