"""Where each operator's time goes in a timed run: ``corefold sim --profile ops.csv``.

Lowering cuts an operator into pieces (row bands ``<name>_rows<k>``, channel and other
parts ``<name>_part<k>``, nested in either order) and spreads them over cores, so an
executable's compute instructions carry piece names. :func:`operator_profile` groups a
timed run's compute instructions by the operator they were cut from (the name without
those suffixes: :func:`operator_name`) and gives, per operator,

* its type, how many pieces it ran as and on how many cores;
* when its first piece started and its last piece ended (``span`` between them);
* ``busy``: its pieces' engine time summed (what it would take on one engine; over
  ``cores`` it is the span a perfect spread over those cores would give);
* its longest piece (the least it can take, however the rest is spread);
* ``critical``: the time its pieces spend on the run's critical path
  (:mod:`corefold.sim.critical`: service and wait of each compute step). Over all
  operators it adds up to the path's ``compute`` category; sends, loads and stores on the
  path are the rest of the latency.

Names are those of the lowered graph: a quantized operator runs as ``<node>_int`` and the
(de)quantization the integer runner inserts as ``<value>_quantize`` /
``<value>_dequantize``; an operator the tile step rewrote shows as its parts (a mean
over row bands as ``<node>_sum`` and ``<node>_mean``); an operator whose own name ends in
``_rows<k>`` or ``_part<k>`` is grouped under the shorter name.

It found, for instance, that the int8 ResNet-18's 3x3 convolutions of ``layer3`` and
``layer4`` run as 25 to 30 pieces of about 4 us each, so each layer spans 5 to 7 us on
the 8x8 ``npu`` against the 1.8 us its 113 us of engine time would take over 64 cores
(docs/backend.md).

O(I + P) for I instructions and P critical-path steps.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from corefold.backend.executable import Compute, Executable
from corefold.backend.lgraph import operator_name
from corefold.sim.critical import CriticalPath, critical_path
from corefold.sim.timed import TimedRun

__all__ = ["COLUMNS", "OperatorTime", "operator_name", "operator_profile", "summary", "write_csv"]

#: The columns of :func:`write_csv` (times in microseconds, from the run's start).
COLUMNS = ("operator", "op_type", "pieces", "cores", "start_us", "end_us", "span_us", "busy_us", "longest_us",
           "critical_us")


@dataclass(frozen=True)
class OperatorTime:
    """One operator of a timed run (module docstring; seconds from the run's start)."""

    name: str
    op_type: str
    pieces: int
    cores: int
    start_s: float
    end_s: float
    busy_s: float
    longest_s: float
    critical_s: float

    @property
    def span_s(self) -> float:
        return self.end_s - self.start_s

    def row(self) -> dict:
        """The :data:`COLUMNS` of this operator, times in microseconds."""
        us = 1e6
        return {"operator": self.name, "op_type": self.op_type, "pieces": self.pieces, "cores": self.cores,
                "start_us": round(self.start_s * us, 4), "end_us": round(self.end_s * us, 4),
                "span_us": round(self.span_s * us, 4), "busy_us": round(self.busy_s * us, 4),
                "longest_us": round(self.longest_s * us, 4), "critical_us": round(float(self.critical_s) * us, 4)}


def operator_profile(exe: Executable, run: TimedRun, path: CriticalPath | None = None) -> list[OperatorTime]:
    """Every operator of ``exe`` that computes, in ``run`` (module docstring), the most
    time on the critical path first, then the most engine time, then the earliest.
    ``path`` defaults to ``run``'s own critical path. O(I + P)."""
    path = critical_path(run) if path is None else path
    on_path: dict[int, float] = {}
    for step in path.steps:
        if step.task >= 0:
            on_path[step.task] = on_path.get(step.task, 0.0) + float(step.service_s + step.wait_s)
    acc: dict[str, dict] = {}
    for c, program in enumerate(exe.programs):
        for j, ins in enumerate(program.instructions):
            if not isinstance(ins, Compute):
                continue
            op = exe.ops[ins.op]
            name = operator_name(op.name)
            start, finish = run.start(c, j) - run.run_start, run.finish(c, j) - run.run_start
            a = acc.setdefault(name, {"op_type": op.op_type, "pieces": 0, "cores": set(), "start": start,
                                      "end": finish, "busy": 0.0, "longest": 0.0, "critical": 0.0})
            a["pieces"] += 1
            a["cores"].add(program.core)
            a["start"], a["end"] = min(a["start"], start), max(a["end"], finish)
            a["busy"] += finish - start
            a["longest"] = max(a["longest"], finish - start)
            a["critical"] += on_path.get(run.task[c][j], 0.0)
    out = [OperatorTime(name, a["op_type"], a["pieces"], len(a["cores"]), a["start"], a["end"], a["busy"],
                        a["longest"], a["critical"]) for name, a in acc.items()]
    out.sort(key=lambda o: (-o.critical_s, -o.busy_s, o.start_s, o.name))
    return out


def write_csv(path: str | Path, rows: list[dict]) -> None:
    """``rows`` (:meth:`OperatorTime.row`, maybe with an ``executable`` column first) as CSV
    at ``path`` (the caller makes it atomic)."""
    fields = (("executable",) if rows and "executable" in rows[0] else ()) + COLUMNS
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)


def summary(profile: list[OperatorTime], n: int = 3) -> str:
    """One line: the ``n`` operators longest on the critical path, each with its time there,
    its type and its pieces over its cores; empty if none is on it."""
    top = [o for o in profile if o.critical_s > 0][:n]
    return ", ".join(f"{o.name} {o.critical_s * 1e6:.3g} us ({o.op_type}, {o.pieces} piece"
                     f"{'s' if o.pieces != 1 else ''} on {o.cores} core{'s' if o.cores != 1 else ''})" for o in top)
