"""Chrome trace-event JSON of a simulated run (opens in Perfetto UI and chrome://tracing).

The file is the JSON object form ``{"traceEvents": [...], "displayTimeUnit": "ns"}`` of the
trace-event format, restricted to the subset that ``trace_schema.json`` (beside this file)
describes:

* ``"M"`` metadata: ``process_name`` / ``thread_name`` and their ``*_sort_index``: one
  process per core (``core (x,y)``), one for the NoC, one for DRAM, one for the host link;
  one thread (track) per resource server: ``matrix``, ``vector 0``, ``vector 1``, ``dma``
  for a core, ``(x,y) E`` for the east link leaving core (x, y), ``channel 0`` for DRAM;
* ``"X"`` complete events: one per stage the engine served, ``ts`` and ``dur`` in
  microseconds, ``name`` the task's name, ``cat`` its category, ``args`` its arguments;
* ``"C"`` counters: per core, the SRAM bytes in use over time (a step function).

O(S log S) for S stages (the events are sorted by time within each track).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

import numpy as np

from corefold.io import atomic_output
from corefold.sim.engine import Engine, Timeline

#: Seconds to the trace's microseconds.
_US = 1e6


def trace_events(engine: Engine, timeline: Timeline,
                 counters: Iterable[tuple[str, str, np.ndarray, np.ndarray]] = ()) -> dict:
    """The trace as a JSON-ready dict.

    Args:
        engine: the engine that ran (its resources name the tracks, its tasks the events).
        timeline: what :meth:`Engine.run` returned.
        counters: ``(process, name, times_s, values)`` step functions, e.g. a core's SRAM
            bytes in use; ``process`` is a resource's process name (a new one is made if
            no resource has it).

    Returns:
        ``{"traceEvents": [...], "displayTimeUnit": "ns"}``.
    """
    pids: dict[str, int] = {}
    tids: dict[tuple[int, int], int] = {}
    threads_of: dict[str, int] = {}
    events: list[dict] = []
    for r, res in enumerate(engine.resources):
        if res.process not in pids:
            pids[res.process] = len(pids) + 1
            threads_of[res.process] = 0
        pid = pids[res.process]
        for k in range(res.servers):
            threads_of[res.process] += 1
            tid = threads_of[res.process]
            tids[(r, k)] = tid
            name = res.thread if res.servers == 1 else f"{res.thread} {k}"
            events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}})
            events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
                           "args": {"sort_index": tid}})
    counters = list(counters)
    for process, _name, _t, _v in counters:
        if process not in pids:
            pids[process] = len(pids) + 1
    for process, pid in pids.items():
        events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": process}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0,
                       "args": {"sort_index": pid}})
    order = np.lexsort((timeline.stage_start, timeline.stage_server, timeline.stage_resource))
    starts = timeline.stage_start * _US
    durs = (timeline.stage_end - timeline.stage_start) * _US
    tasks = engine.tasks
    for i in order.tolist():
        r = int(timeline.stage_resource[i])
        task = tasks[int(timeline.stage_task[i])]
        ev = {"name": task.name or "task", "cat": task.category or "task", "ph": "X",
              "ts": float(starts[i]), "dur": float(durs[i]),
              "pid": pids[engine.resources[r].process], "tid": tids[(r, int(timeline.stage_server[i]))]}
        if task.args:
            ev["args"] = task.args
        events.append(ev)
    for process, name, times, values in counters:
        pid = pids[process]
        for t, v in zip(np.asarray(times, np.float64).tolist(), np.asarray(values).tolist(), strict=True):
            events.append({"name": name, "ph": "C", "ts": t * _US, "pid": pid, "tid": 0, "args": {"bytes": v}})
    return {"traceEvents": events, "displayTimeUnit": "ns"}


def write_trace(path: str | Path, engine: Engine, timeline: Timeline,
                counters: Iterable[tuple[str, str, np.ndarray, np.ndarray]] = ()) -> None:
    """Write :func:`trace_events` to ``path`` atomically.

    Raises:
        OutputPathError: the folder is missing or ``path`` is a folder.
    """
    doc = trace_events(engine, timeline, counters)
    with atomic_output(path, suffix=".json") as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f, separators=(",", ":"))


def schema() -> dict:
    """The JSON schema of the trace subset this module writes (``trace_schema.json``)."""
    return json.loads((Path(__file__).parent / "trace_schema.json").read_text(encoding="utf-8"))
