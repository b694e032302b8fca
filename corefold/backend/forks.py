"""Independent jobs of one lowering on forked processes (``LowerSettings.workers``).

A lowering's trials (:mod:`.trials`) are independent once their tiling and clustering are
made: each places, orders, emits and times an executable, deterministically. :class:`Forks`
runs such jobs in forked children, at most ``workers - 1`` at once; the calling process is
the last worker and runs a job itself when no child is free. A child inherits the job's
data by ``fork`` (nothing is pickled on the way in) and pickles its result to a file the
caller reads back. Results are the same as in one process, so the caller replays its
choices in the jobs' order and keeps what the serial loop would keep.

Where ``fork`` is missing (Windows) or ``workers`` is 1, every job runs in the caller.
"""

from __future__ import annotations

import os
import pickle
import sys
import tempfile
import traceback
from collections.abc import Callable
from typing import Any

from corefold.errors import InternalError


def worker_count(workers: int) -> int:
    """``workers`` (0: one per CPU this process may run on), 1 where ``fork`` is missing."""
    if not hasattr(os, "fork"):
        return 1
    if workers:
        return workers
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class Forks:
    """Jobs on at most ``workers`` processes, the caller being one of them. Use as a
    context manager: leaving it waits for every child and removes their files.

    :meth:`submit` queues a job and returns a function that gives its value (or raises its
    exception). The job before it then starts: in a child when fewer than ``workers - 1``
    children run, else in the caller at once. Asking for any result first runs the queued
    job in the caller. So the caller goes on with its own work (the next tiling) while a
    child runs a trial, and the last job, or a lone one, never leaves the caller (nothing to
    pickle). O(workers) per job besides the job and pickling a child's value."""

    def __init__(self, workers: int):
        self.workers = worker_count(workers)
        self._queued: tuple[int, Callable[[], Any]] | None = None
        self._values: dict[int, Callable[[], Any]] = {}  # job -> its value's getter, when run here
        self._children: dict[int, tuple[int, str]] = {}  # job -> (pid, result file)
        self._ended: dict[int, int] = {}  # pid -> wait status of a child that has ended
        self._jobs = 0

    def __enter__(self) -> Forks:
        return self

    def __exit__(self, *exc) -> None:
        for pid, path in self._children.values():
            self._wait(pid)
            _remove(path)
        self._children.clear()

    def submit(self, job: Callable[[], Any]) -> Callable[[], Any]:
        self._start_queued()
        index = self._jobs
        self._jobs += 1
        self._queued = (index, job)
        return lambda: self._result(index)

    def _start_queued(self, here: bool = False) -> None:
        if self._queued is None:
            return
        index, job = self._queued
        self._queued = None
        path = None
        if not here and self._busy() < self.workers - 1:
            try:
                fd, path = tempfile.mkstemp(prefix="corefold-trial-", suffix=".pickle")
                os.close(fd)
            except OSError:  # no room for a result file: this process runs it
                path = None
        if path is None:
            self._values[index] = _run_here(job)
            return
        for stream in (sys.stdout, sys.stderr):  # else the child flushes the caller's buffered text again
            stream.flush()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            _child(job, path)
        self._children[index] = (pid, path)

    def _busy(self) -> int:
        """Children still running (an ended one is noted without waiting)."""
        busy = 0
        for pid, _ in self._children.values():
            if pid not in self._ended:
                got, status = os.waitpid(pid, os.WNOHANG)
                if got == pid:
                    self._ended[pid] = status
                    continue
                busy += 1
        return busy

    def _wait(self, pid: int) -> int:
        if pid not in self._ended:
            self._ended[pid] = os.waitpid(pid, 0)[1]
        return self._ended.pop(pid)

    def _result(self, index: int) -> Any:
        self._start_queued(here=True)
        if index in self._values:
            return self._values.pop(index)()
        pid, path = self._children.pop(index)
        status = self._wait(pid)
        try:
            with open(path, "rb") as f:
                data = f.read()
        finally:
            _remove(path)
        if not data:
            raise InternalError(f"a lowering trial's process ended without a result (wait status {status}): "
                                "a corefold bug, or the process was killed")
        kind, value = pickle.loads(data)
        if kind == "value":
            return value
        if kind == "raise":
            raise value
        raise InternalError(f"a lowering trial failed in its process:\n{value}")


def _run_here(job: Callable[[], Any]) -> Callable[[], Any]:
    """``job``'s value, or its exception raised when asked (where the serial loop meets it)."""
    try:
        value = job()
    except Exception as exc:  # noqa: BLE001 - re-raised at the result
        error = exc
        return lambda: _raise(error)
    return lambda: value


def _raise(error: Exception) -> Any:
    raise error


def _child(job: Callable[[], Any], path: str) -> None:
    """Run ``job``, pickle ``("value", v)``, ``("raise", exception)`` or ``("bug", traceback
    text)`` to ``path``, and leave the process without running the caller's exit handlers."""
    code = 0
    try:
        try:
            payload = pickle.dumps(("value", job()), protocol=pickle.HIGHEST_PROTOCOL)
        except BaseException as exc:  # noqa: BLE001 - the caller re-raises it
            try:
                payload = pickle.dumps(("raise", exc), protocol=pickle.HIGHEST_PROTOCOL)
            except Exception:  # noqa: BLE001 - an exception that does not pickle: its text
                payload = pickle.dumps(("bug", traceback.format_exc()))
        with open(path, "wb") as f:
            f.write(payload)
    except BaseException:  # noqa: BLE001 - nothing may escape a forked child
        code = 1
    finally:
        os._exit(code)


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
