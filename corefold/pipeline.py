"""The pass contract: ``Pass``, ``PassResult``, ``CompileContext`` and ``Pipeline``.

A pass is an object with a ``name``, a ``settings_class`` (a frozen dataclass with
presets, :mod:`corefold.settings`), an ``equivalence`` (how its output graph's outputs
relate to its input graph's: exact, close, or within an SQNR) and a method
``run(graph, ctx) -> PassResult(graph, modified, report)``. Passes take everything else
from the :class:`CompileContext`: the target, their settings, the seed, the report sink,
the progress switch and, for serial partitioning (M1), the compile callable.

:class:`Pipeline` runs passes in order and calls :func:`corefold.ir.verify` after each
(a broken invariant is an :class:`~corefold.errors.InternalError` naming the pass). With
``ctx.debug`` it also runs the reference executor on seeded inputs before the first pass
and after each pass that modified the graph, and compares the outputs with the input
model's under the loosest equivalence seen so far.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Protocol, Sequence

import numpy as np

from corefold.errors import InternalError
from corefold.ir import Graph, VerifyError, verify
from corefold.settings import preset


# -- equivalences ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Equivalence:
    """How a pass's outputs relate to its input's, checked on the same inputs.

    ``kind`` "exact": bit-identical; "close": ``|a - b| <= atol + rtol * scale`` with scale
    the reference output's largest magnitude (split reductions and fusions reassociate);
    "sqnr": output SQNR at least ``min_sqnr_db`` (quantization, compression).
    """

    kind: str = "exact"
    rtol: float = 0.0
    atol: float = 0.0
    min_sqnr_db: float = 0.0

    def looser(self, other: "Equivalence") -> "Equivalence":
        """The weaker of two equivalences (what holds after both passes ran)."""
        rank = {"exact": 0, "close": 1, "sqnr": 2}
        if rank[other.kind] > rank[self.kind]:
            a, b = other, self
        else:
            a, b = self, other
        if a.kind == "close" and b.kind == "close":
            return Equivalence("close", max(a.rtol, b.rtol), max(a.atol, b.atol))
        if a.kind == "sqnr" and b.kind == "sqnr":
            return Equivalence("sqnr", min_sqnr_db=min(a.min_sqnr_db, b.min_sqnr_db))
        return a

    def mismatch(self, want: np.ndarray, got: np.ndarray) -> str | None:
        """None when ``got`` is equivalent to ``want``, else what differs. NaN equals NaN."""
        if want.shape != got.shape:
            return f"shape {list(got.shape)} instead of {list(want.shape)}"
        if want.size == 0:
            return None
        if not np.issubdtype(want.dtype, np.floating):
            same = np.array_equal(want, got)
            return None if same or self.kind == "sqnr" else "integer values differ"
        w = want.astype(np.float64)
        g = got.astype(np.float64)
        if not np.array_equal(np.isnan(w), np.isnan(g)):
            return "NaN in different places"
        w, g = np.nan_to_num(w, nan=0.0), np.nan_to_num(g, nan=0.0)
        if self.kind == "exact":
            return None if np.array_equal(w, g) else f"max |difference| {np.max(np.abs(w - g)):.3g} (exact expected)"
        if self.kind == "close":
            scale = float(np.max(np.abs(w[np.isfinite(w)]))) if np.isfinite(w).any() else 0.0
            err = float(np.max(np.abs(w - g)))
            limit = self.atol + self.rtol * scale
            return None if err <= limit else f"max |difference| {err:.3g} > {limit:.3g}"
        noise = float(np.sum((w - g) ** 2))
        signal = float(np.sum(w**2))
        if noise == 0.0:
            return None
        sqnr = 10 * np.log10(signal / noise) if signal > 0 else -np.inf
        return None if sqnr >= self.min_sqnr_db else f"SQNR {sqnr:.1f} dB < {self.min_sqnr_db} dB"


EXACT = Equivalence("exact")


# -- the contract ------------------------------------------------------------------------------
@dataclass
class PassResult:
    """What a pass returns: the graph (usually the same object, changed in place), whether
    it changed, and a JSON-able report."""

    graph: Graph
    modified: bool
    report: dict[str, Any] = field(default_factory=dict)


class Pass(Protocol):
    """A graph-to-graph transformation. See the module docstring."""

    name: ClassVar[str]
    settings_class: ClassVar[type]
    equivalence: ClassVar[Equivalence]

    def run(self, graph: Graph, ctx: "CompileContext") -> PassResult: ...


@dataclass
class CompileContext:
    """What every pass may read: the target, per-pass settings, the seed, switches, the
    report sink and (for M1) the compiler.

    Attributes:
        target: the chip (:class:`corefold.target.Target`), or None for target-free passes.
        settings: pass name -> its settings instance; a pass without an entry uses its
            settings class's ``default`` preset.
        seed: the seed every random choice derives from.
        debug: run the executor after each pass and compare with the input model.
        progress: show progress bars.
        compile: ``compile(subgraph) -> Executable`` raising ``CompileError``; serial
            partitioning reaches a compiler only through this.
        reports: (pass name, report) in the order passes ran.
        data: named artefacts passes hand to later ones (calibration data, executables).
    """

    target: Any = None
    settings: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    debug: bool = False
    progress: bool = False
    compile: Callable[..., Any] | None = None
    reports: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    def settings_for(self, p: Pass) -> Any:
        """The settings of pass ``p``: the context's, else its class's default preset."""
        s = self.settings.get(p.name)
        return s if s is not None else preset(p.settings_class)

    def report(self, name: str, report: dict[str, Any]) -> None:
        self.reports.append((name, report))


@dataclass
class PipelineResult:
    """The final graph, and per pass: name, result and wall seconds."""

    graph: Graph
    steps: list[tuple[str, PassResult, float]]

    @property
    def modified(self) -> bool:
        return any(r.modified for _, r, _ in self.steps)


class Pipeline:
    """Passes run in order, with ``verify`` after each (and executor checks in debug)."""

    def __init__(self, passes: Sequence[Pass]):
        self.passes = list(passes)

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.passes]

    def run(self, graph: Graph, ctx: CompileContext | None = None) -> PipelineResult:
        """Run every pass on ``graph``.

        Raises:
            InternalError: a pass broke an IR invariant, or (debug) changed the outputs
                beyond its equivalence.
            CorefoldError: whatever a pass raises for bad input.
        """
        ctx = ctx or CompileContext()
        feeds = reference = None
        allowed = EXACT
        if ctx.debug:
            from corefold.executor import random_inputs, run

            feeds = random_inputs(graph, seed=ctx.seed)
            reference = list(run(graph, feeds).items())  # by position: a pass may rename an output
        steps = []
        for p in self.passes:
            t0 = time.perf_counter()
            result = p.run(graph, ctx)
            seconds = time.perf_counter() - t0
            graph = result.graph
            try:
                verify(graph)
            except VerifyError as exc:
                raise InternalError(f"pass '{p.name}' left a broken graph: {exc}") from exc
            ctx.report(p.name, result.report)
            steps.append((p.name, result, seconds))
            if ctx.debug and result.modified:
                from corefold.executor import run

                allowed = allowed.looser(p.equivalence)
                got = list(run(graph, feeds).values())
                if len(got) != len(reference):
                    raise InternalError(f"pass '{p.name}' changed the number of graph outputs "
                                        f"({len(reference)} -> {len(got)})")
                for (name, want), now in zip(reference, got, strict=True):
                    why = allowed.mismatch(np.asarray(want), np.asarray(now))
                    if why:
                        raise InternalError(f"pass '{p.name}' changed output '{name}': {why}")
        return PipelineResult(graph, steps)
