"""Compiling candidate subgraphs: cached, counted, and in parallel.

Serial partitioning reaches a compiler only through a callable
``compile(subgraph) -> executable`` that raises :class:`~corefold.errors.CompileError`
when the subgraph does not fit (``CompileContext.compile``; ``backend.lower`` by default,
or a wrapper around a user's toolchain). :class:`CompileService` asks it about ranges of
one topological order, remembers every answer (a range is compiled at most once), counts
the calls, and runs independent candidates at the same time: in this process, on a local
process pool (the graph is sent to each worker once), or on a Ray cluster. Results do not
depend on where they ran.

An optional ``fits(subgraph) -> None | CompileError`` (``backend.fits``: a feasibility
check without full lowering) answers the optimal reference's many questions cheaply; its
calls are counted apart.

A *memo* shared between services (``compile_model`` shares one between the chosen
strategy and the strategy table) hands back an outcome computed by another service: the
call is still counted (each service reports what it alone would have cost), only the
work is saved. A *progress* object (``tqdm``-like: ``update(n)``) is told of every call.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from corefold.errors import CompileError
from corefold.ir import Graph, Node
from corefold.passes.serial.chain import Piece, extract


@dataclass
class Outcome:
    """What compiling one range gave: the executable, or the error that refused it, and
    the executable's simulated latency once someone measured it (M1's balancing; kept here
    so that services sharing a memo measure it once)."""

    piece: Piece
    executable: Any = None
    error: CompileError | None = None
    seconds: float = 0.0
    latency_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


# -- worker side (process pool) -----------------------------------------------------------------
_WORKER: dict[str, Any] = {}


def _worker_init(graph: Graph, compile_fn: Callable) -> None:
    _WORKER["graph"] = graph
    _WORKER["order"] = graph.topological_order()
    _WORKER["compile"] = compile_fn


def _compile_range(graph: Graph, order: list[Node], compile_fn: Callable, piece: Piece) -> Outcome:
    t0 = time.perf_counter()
    sub = extract(graph, order, piece)
    try:
        exe = compile_fn(sub)
    except CompileError as exc:
        return Outcome(piece, None, exc, time.perf_counter() - t0)
    return Outcome(piece, exe, None, time.perf_counter() - t0)


def _worker_compile(piece: Piece) -> Outcome:
    return _compile_range(_WORKER["graph"], _WORKER["order"], _WORKER["compile"], piece)


def _ray_compile(graph: Graph, compile_fn: Callable, piece: Piece) -> Outcome:
    # the order is the graph's own stable topological order (the service requires it), so
    # a worker recomputes it rather than receiving node objects
    return _compile_range(graph, graph.topological_order(), compile_fn, piece)


@dataclass
class CompileService:
    """Cached, counted, possibly parallel compiles of ranges of ``order``, which must be
    ``graph.topological_order()`` (workers recompute it from the graph).

    Attributes:
        workers: 1 compiles in this process; N > 1 on a pool of N processes; 0 one per CPU.
        ray: ``None``, ``"auto"`` or a Ray cluster address: compile there instead.
        calls: full compiles made (cache misses).
        fits_calls: feasibility checks made.
    """

    graph: Graph
    order: list[Node]
    compile_fn: Callable[[Graph], Any]
    fits_fn: Callable[[Graph], CompileError | None] | None = None
    workers: int = 1
    ray: str | None = None
    calls: int = 0
    fits_calls: int = 0
    seconds: float = 0.0
    cache: dict[Piece, Outcome] = field(default_factory=dict)
    memo: dict[Piece, Outcome] | None = None
    progress: Any = None
    fits_cache: dict[Piece, CompileError | None] = field(default_factory=dict)
    _pool: Any = None
    _ray_refs: Any = None

    def compile(self, piece: Piece) -> Outcome:
        return self.compile_many([piece])[0]

    def compile_many(self, pieces: Sequence[Piece]) -> list[Outcome]:
        """Compile every piece not compiled yet (at once, where workers allow)."""
        todo = [p for p in dict.fromkeys(pieces) if p not in self.cache]
        if todo:
            t0 = time.perf_counter()
            memo = self.memo if self.memo is not None else {}
            fresh = [p for p in todo if p not in memo]
            for out in self._run(fresh) if fresh else []:
                memo[out.piece] = out
            for p in todo:
                self.cache[p] = memo[p]
            self.calls += len(todo)
            self.seconds += time.perf_counter() - t0
            if self.progress is not None:
                self.progress.update(len(todo))
        return [self.cache[p] for p in pieces]

    def fits(self, piece: Piece) -> bool:
        """Whether ``piece`` fits: the cached full compile if there is one, else the fast
        check (or a full compile when no fast check was given)."""
        if piece in self.cache:
            return self.cache[piece].ok
        if self.fits_fn is None:
            return self.compile(piece).ok
        if piece not in self.fits_cache:
            self.fits_calls += 1
            self.fits_cache[piece] = self.fits_fn(extract(self.graph, self.order, piece))
        return self.fits_cache[piece] is None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    # -- execution ---------------------------------------------------------------------------
    def _run(self, todo: list[Piece]) -> list[Outcome]:
        if self.ray is not None:
            return self._run_ray(todo)
        workers = self.workers or len(os.sched_getaffinity(0))
        if workers <= 1 or len(todo) == 1:
            return [_compile_range(self.graph, self.order, self.compile_fn, p) for p in todo]
        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=workers, initializer=_worker_init,
                                             initargs=(self.graph, self.compile_fn))
        return list(self._pool.map(_worker_compile, todo))

    def _run_ray(self, todo: list[Piece]) -> list[Outcome]:
        try:
            import ray
        except ImportError:
            raise CompileError("Ray", "this machine", 1, 0, "--ray needs the 'ray' extra: pip install "
                               "'corefold[ray]'") from None
        if self._ray_refs is None:
            if not ray.is_initialized():
                ray.init(address=None if self.ray == "auto" else self.ray, ignore_reinit_error=True,
                         include_dashboard=False, log_to_driver=False)
            remote = ray.remote(_ray_compile)
            self._ray_refs = (ray, remote, ray.put(self.graph), ray.put(self.compile_fn))
        ray_mod, remote, g, fn = self._ray_refs
        return ray_mod.get([remote.remote(g, fn, p) for p in todo])
