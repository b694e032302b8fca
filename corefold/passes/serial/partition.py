"""Serial subgraph partitioning driven by the compiler (SPEC M1, seed 000).

1. **Cut** at every target node (:func:`~corefold.passes.serial.cuts.target_cuts`), as the
   seed does before compiling anything [000 §52].
2. **Compile** every piece (independently, in parallel where the service allows).
3. **Split on failure**, recursively [000 §60-66]: a piece that does not compile is cut in
   two and both halves are compiled, until every piece compiles. The cut is chosen, in
   this order, among the piece's target-node cuts, then among its cuts that only one value
   crosses, then among all its cuts; within a rule, the cut that best balances the
   resource that ran out (weight and activation bytes for SRAM and NoC buffers, work for
   the core count, node count for instruction memory), ties broken by fewer crossing
   bytes. A single operator that cannot compile ends with the compiler's error, naming it.
4. **Fuse** the compiled chain with one of the strategies of
   :mod:`~corefold.passes.serial.fusion`, and measure the optimal reference beside it.

The ``optimal`` strategy (the default) skips steps 1-3 when a fast feasibility check is
given: its greedy cover over every position of the order, each step confirmed by a
compile, is the fewest executables whatever the split chain (:func:`optimal_directly`).

Cost: O(V + E) for the cuts and attributes; each split examines O(piece length) cuts;
compile calls dominate and are counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np

from corefold.errors import CompileError, CorefoldError
from corefold.ir import Graph, Node
from corefold.passes.serial.balance import Balance, balance_cuts
from corefold.passes.serial.chain import Attributes, Piece, extract
from corefold.passes.serial.compilers import CompileService
from corefold.passes.serial.cuts import Crossing, clean_ends, constant_nodes, crossing, target_cuts
from corefold.passes.serial.fusion import (
    STRATEGIES,
    GroupLimits,
    alone,
    compiled_cover,
    fuse,
    minimum_chain,
    minimum_cover,
)
from corefold.pipeline import Equivalence, PassResult


class SerialError(CorefoldError):
    """Serial partitioning cannot proceed (no compiler, a bad strategy)."""


@dataclass(frozen=True)
class SerialSettings:
    """Knobs of serial partitioning.

    Attributes:
        fusion: the fusion strategy: ``a`` (attribute groups), ``b`` (pairs), ``c``
            (forward greedy), ``d`` (bidirectional), ``optimal`` (the minimum number of
            executables) or ``none``. The default is ``optimal``: with the fast check now
            agreeing with the backend (no range it admitted failed to compile on
            bench/compile.py's models), it compiles each executable about once and skips
            the split phase, so it is both the fewest executables and the fewest compiles
            (ResNet-50 on npu-2x2: 67 executables in 67 compiles and 355 s, against
            ``d``'s 95 in 478 compiles and 617 s; docs/compile.md). ``d`` (the seed's)
            stays available.
        fusion_rounds: how many times the strategy is applied (0: until a round fuses
            nothing; the seed applies it once).
        split_rules: the cut rules tried in order when a piece fails: ``target`` (the
            seed's target nodes), ``single`` (cuts only one value crosses), ``balanced``
            (any cut).
        cut_at_targets: cut at every target node before compiling (the seed's first step).
        reference: also compute the minimum number of executables (the optimal reference,
            with the fast feasibility check).
        group_max_macs, group_max_weight_bytes, group_max_nodes: strategy a's maxima for a
            group's summed MACs, weight bytes and nodes (0: no bound).
        group_min_macs, group_min_weight_bytes, group_min_nodes: strategy a's minima.
        balance_trials: with ``optimal`` and a latency callable (``corefold compile`` on
            its own backend), the positions each cut of the cover may try, within the
            ranges that fit, to lower the chain's simulated latency at the same count
            (:mod:`~corefold.passes.serial.balance`); 0 keeps the greedy's cuts, each
            range as long as it compiles.
        workers: compile processes (1: in this process; 0: one per CPU).
        ray: ``""`` (none), ``"auto"`` or a Ray cluster address to compile on.
    """

    fusion: str = "optimal"
    fusion_rounds: int = 0
    split_rules: tuple[str, ...] = ("target", "single", "balanced")
    cut_at_targets: bool = True
    reference: bool = True
    group_max_macs: float = 0.0
    group_max_weight_bytes: float = 0.0
    group_max_nodes: float = 0.0
    group_min_macs: float = 0.0
    group_min_weight_bytes: float = 0.0
    group_min_nodes: float = 0.0
    balance_trials: int = 6
    workers: int = 1
    ray: str = ""

    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {
        "fast": {"fusion": "c", "reference": False},
        "strong": {"workers": 0},
        # the seed: one pass of bidirectional fusion, split at target nodes then anywhere
        "seed": {"fusion": "d", "fusion_rounds": 1, "split_rules": ("target", "balanced")},
    }

    def checked(self) -> "SerialSettings":
        if self.fusion not in STRATEGIES:
            raise SerialError(f"fusion strategy '{self.fusion}' is unknown (choose from {', '.join(STRATEGIES)})")
        bad = [r for r in self.split_rules if r not in ("target", "single", "balanced")]
        if bad:
            raise SerialError(f"split rule '{bad[0]}' is unknown (target, single, balanced)")
        if self.balance_trials < 0:
            raise SerialError(f"balance_trials must be >= 0, got {self.balance_trials}")
        return self

    def limits(self) -> GroupLimits:
        return GroupLimits(self.group_min_macs, self.group_max_macs or None, self.group_min_weight_bytes,
                           self.group_max_weight_bytes or None, self.group_min_nodes, self.group_max_nodes or None)


@dataclass
class SerialResult:
    """What serial partitioning chose.

    Attributes:
        order: the topological order the pieces are ranges of.
        pieces: the executables' ranges, in run order.
        outcomes: the compile outcome (executable) of each piece.
        compile_calls, fits_calls: full compiles and fast feasibility checks made.
        split_pieces: the chain after splitting on failure (before fusion).
        minimum_executables: the optimal reference's count, cutting at any position of
            the order (None when not computed).
        chain_minimum_executables: the fewest executables any fusion of ``split_pieces``
            can reach (the DP over the split chain's cut points; None when not computed).
            Between the two lies what fusion cannot recover because the split phase cut
            elsewhere.
        crossing_bytes: bytes stored to DRAM between consecutive executables.
        balance: what moving the cover's cuts did (:class:`~corefold.passes.serial.balance.Balance`),
            None when it did not run.
    """

    order: list[Node]
    pieces: list[Piece]
    outcomes: list[Any]
    compile_calls: int
    fits_calls: int
    split_pieces: list[Piece]
    minimum_executables: int | None
    crossing_bytes: list[int] = field(default_factory=list)
    strategy: str = "d"
    chain_minimum_executables: int | None = None
    balance: Balance | None = None

    def subgraphs(self, graph: Graph) -> list[Graph]:
        return [extract(graph, self.order, p, name=f"{graph.name}_part{i}") for i, p in enumerate(self.pieces)]

    def ends_inside_patterns(self) -> list[int]:
        """The executables (indices) whose range ends between an integer pattern's operator
        and its QuantizeLinear (:func:`~corefold.passes.serial.cuts.inside_patterns`): no
        clean end fitted there, so that operator runs in float, not in integers. O(V + E)."""
        from corefold.passes.serial.cuts import inside_patterns

        if not self.order:
            return []
        inside = inside_patterns(self.order)
        return [i for i, p in enumerate(self.pieces) if p.end < len(self.order) and inside[p.end]]

    def report(self) -> dict[str, Any]:
        return {"fusion": self.strategy, "executables": len(self.pieces), "compile_calls": self.compile_calls,
                "ends_inside_integer_patterns": self.ends_inside_patterns(),
                "fits_calls": self.fits_calls, "minimum_executables": self.minimum_executables,
                "chain_minimum_executables": self.chain_minimum_executables,
                "pieces_after_split": len(self.split_pieces),
                "ranges": [[p.start, p.end] for p in self.pieces], "crossing_bytes": self.crossing_bytes,
                "balance": self.balance.to_json() if self.balance is not None else None}


_BALANCE = {"SRAM": "weights", "NoC buffers": "weights", "instruction memory": "nodes", "core count": "work"}


def _choose_cut(piece: Piece, error: CompileError, rules: tuple[str, ...], cuts: set[int], cross: Crossing,
                attrs: Attributes, clean: set[int] | None = None) -> int | None:
    """The cut inside ``piece`` by the first rule that offers one (module docstring), among
    the ``clean`` positions (:func:`~corefold.passes.serial.cuts.clean_ends`) when any lies
    inside."""
    inner = [k for k in range(piece.start + 1, piece.end) if clean is None or k in clean]
    if not inner:
        inner = list(range(piece.start + 1, piece.end))
    measure = getattr(attrs, _BALANCE.get(error.resource, "work"))
    if not np.any(measure[piece.start + 1:piece.end + 1] - measure[piece.start:piece.end]):
        measure = attrs.nodes
    for rule in rules:
        if rule == "target":
            candidates = [k for k in inner if k in cuts]
        elif rule == "single":
            candidates = [k for k in inner if cross.count[k] <= 1]
        else:
            candidates = list(inner)
        if candidates:
            def score(k: int) -> tuple[float, int]:
                left = measure[k] - measure[piece.start]
                right = measure[piece.end] - measure[k]
                return (max(left, right), int(cross.bytes[k]))

            return min(candidates, key=score)
    return None


def split_until_compiled(pieces: list[Piece], svc: CompileService, settings: SerialSettings, cuts: set[int],
                         cross: Crossing, attrs: Attributes, clean: set[int] | None = None) -> list[Piece]:
    """Compile every piece; split failing ones (recursively) until all compile.

    Raises:
        CompileError: a single operator does not compile (naming it).
    """
    chain = list(pieces)
    while True:
        outcomes = svc.compile_many(chain)
        failed = [(i, o) for i, o in enumerate(outcomes) if not o.ok]
        if not failed:
            return chain
        replace: dict[int, list[Piece]] = {}
        for i, out in failed:
            piece = out.piece
            k = (_choose_cut(piece, out.error, settings.split_rules, cuts, cross, attrs, clean) if len(piece) > 1
                 else None)
            if k is None:
                raise alone(svc, piece.start, out.error) from None
            replace[i] = [Piece(piece.start, k), Piece(k, piece.end)]
        chain = [q for i, p in enumerate(chain) for q in replace.get(i, [p])]


@dataclass
class Prepared:
    """The split phase's result, shared by every fusion strategy."""

    graph: Graph
    order: list[Node]
    cross: Crossing
    attrs: Attributes
    chain: list[Piece]
    split_calls: int
    cache: dict


def prepare(graph: Graph, compile_fn, settings: SerialSettings, svc_factory) -> Prepared:
    """Cut at the target nodes, compile, split failures until every piece compiles."""
    order = graph.topological_order()
    svc = svc_factory(order, {})
    try:
        cross = crossing(graph, order)
        attrs = Attributes.of(order)
        cuts = set(target_cuts(graph, order))
        n = len(order)
        bounds = [0] + (sorted(cuts) if settings.cut_at_targets else []) + [n]
        initial = [Piece(a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]
        chain = split_until_compiled(initial, svc, settings, cuts, cross, attrs, set(clean_ends(order)))
    finally:
        svc.close()
    return Prepared(graph, order, cross, attrs, chain, svc.calls, dict(svc.cache))


def fuse_prepared(prep: Prepared, settings: SerialSettings, svc_factory, strategy: str | None = None,
                  reference: bool | None = None) -> SerialResult:
    """Fuse the split chain with ``strategy`` (default the settings'), on a service that
    starts from the split phase's compiles: its calls are the split's plus its own."""
    strategy = strategy or settings.fusion
    svc = svc_factory(prep.order, dict(prep.cache))
    try:
        fused = fuse(strategy, prep.chain, svc, prep.attrs, settings.limits(), settings.fusion_rounds)
        outcomes = svc.compile_many(fused)
        calls = prep.split_calls + svc.calls
        minimum = chain_minimum = None
        if settings.reference if reference is None else reference:
            minimum = len(minimum_cover(0, len(prep.order), svc.fits, clean_ends(prep.order)))
            chain_minimum = len(minimum_chain(prep.chain, svc)) if prep.chain else 0
    finally:
        svc.close()
    return SerialResult(prep.order, fused, [o.executable for o in outcomes], calls, svc.fits_calls, prep.chain,
                        minimum, [int(prep.cross.bytes[p.end]) for p in fused[:-1]], strategy, chain_minimum)


def _factory(graph: Graph, compile_fn, fits_fn, settings: SerialSettings, memo=None, progress=None):
    def make(order, cache):
        return CompileService(graph, order, compile_fn, fits_fn, workers=settings.workers, ray=settings.ray or None,
                              cache=cache, memo=memo, progress=progress)
    return make


def serial_partition(graph: Graph, compile_fn, settings: SerialSettings | None = None, *,
                     fits_fn=None, memo: dict | None = None, progress=None, latency_fn=None) -> SerialResult:
    """Partition ``graph`` into a chain of subgraphs that each compile with ``compile_fn``,
    cut along the graph's stable topological order.

    Args:
        compile_fn: ``compile(subgraph) -> executable``, raising CompileError when the
            subgraph does not fit.
        fits_fn: optional fast feasibility check ``fits(subgraph) -> None | CompileError``
            for the optimal reference.
        memo: outcomes shared with other runs on the same graph (work saved, calls still
            counted; see ``compilers``).
        progress: a ``tqdm``-like object told of every compile call.
        latency_fn: optional ``latency(executable) -> seconds`` (the timed simulation):
            with it, ``optimal`` moves its cuts to lower the chain's latency
            (``settings.balance_trials``).

    Raises:
        CompileError: an operator that alone cannot compile.
        SerialError: bad settings or no compiler.

    The graph's file order is changed first (:func:`constants_beside_readers`), not its
    nodes or outputs.
    """
    settings = (settings or SerialSettings()).checked()
    if compile_fn is None:
        raise SerialError("serial partitioning needs a compiler (CompileContext.compile)")
    if len(graph) == 0:
        return SerialResult([], [], [], 0, 0, [], 0)
    constants_beside_readers(graph)
    make = _factory(graph, compile_fn, fits_fn, settings, memo, progress)
    if settings.fusion == "optimal" and fits_fn is not None:
        return optimal_directly(graph, settings, make, latency_fn)
    return fuse_prepared(prepare(graph, compile_fn, settings, make), settings, make)


def constants_beside_readers(graph: Graph) -> int:
    """Put every node computed from constants alone (a weight's DequantizeLinear, a
    Reshape or Transpose of a weight, and nodes computed from those) just before the first
    node that reads it, in the file order, and so in the stable topological order the
    chain is cut along; return how many nodes moved. A quantizer writes a model's weight
    DequantizeLinear nodes first: in order, they made a subgraph of their own, whose
    outputs, the float weights, went through DRAM to every later executable (the int8
    light SqueezeNet on ``npu-2x2``: its second executable held 18 weight
    DequantizeLinear nodes and nothing else; the backend folds each into the operator
    that reads it when they share a subgraph). Unread ones (graph outputs) go last.
    O((V + E) log V)."""
    order = graph.topological_order()
    constant = constant_nodes(order)
    if not constant:
        return 0
    placed: set[Node] = set()
    out: list[Node] = []

    def place(n: Node) -> None:
        stack = [(n, False)]
        while stack:
            m, ready = stack.pop()
            if m in placed:
                continue
            if ready:
                placed.add(m)
                out.append(m)
                continue
            stack.append((m, True))
            before = [v.producer for v in m.inputs if v is not None and v.producer in constant]
            before += [p for p in m.control_preds if p in constant]
            stack.extend((p, False) for p in reversed(before) if p not in placed)

    for n in order:
        if n not in constant:
            place(n)
    for n in order:
        place(n)
    moved = sum(a is not b for a, b in zip(order, out, strict=True))
    if moved:
        graph.reorder(out)
    return moved


def optimal_directly(graph: Graph, settings: SerialSettings, make, latency_fn=None) -> SerialResult:
    """The optimal strategy without the split phase: its cover ranges over every position of
    the order, whatever the split chain is, so the split phase's compiles would be spent
    for nothing. The greedy cover with every step confirmed by a compile
    (:func:`~corefold.passes.serial.fusion.compiled_cover`), its cuts then moved to lower
    the chain's latency when ``latency_fn`` is given (:func:`~corefold.passes.serial.balance.balance_cuts`);
    the reference is the same greedy on the fast check, on the same caches. There is no
    split chain: ``split_pieces`` is the cover itself. O(k log(n / k)) fast checks and
    about k compiles for k executables of n operators, plus the balancing's
    O(k * balance_trials) compiles and timed runs."""
    order = graph.topological_order()
    svc = make(order, {})
    balance = None
    try:
        cross = crossing(graph, order)
        ends = clean_ends(order)
        pieces = compiled_cover(0, len(order), svc, ends)
        if latency_fn is not None and settings.balance_trials > 0 and len(pieces) > 1:
            pieces, balance = balance_cuts(pieces, svc, latency_fn, ends, settings.balance_trials)
        outcomes = svc.compile_many(pieces)
        minimum = len(minimum_cover(0, len(order), svc.fits, ends)) if settings.reference else None
    finally:
        svc.close()
    return SerialResult(order, pieces, [o.executable for o in outcomes], svc.calls, svc.fits_calls, list(pieces),
                        minimum, [int(cross.bytes[p.end]) for p in pieces[:-1]], "optimal", None, balance)


def compare_strategies(graph: Graph, compile_fn, settings: SerialSettings | None = None, *, fits_fn=None,
                       strategies: tuple[str, ...] = ("a", "b", "c", "d", "optimal"), memo: dict | None = None,
                       progress=None, latency_fn=None) -> dict[str, SerialResult]:
    """Every strategy on the same split chain, each counting its own compile calls (the
    split phase's included); the reference is computed once, with the first. ``optimal``
    with a fast check runs as it does alone, without the split phase (its calls are its
    cover's; its cuts balanced with ``latency_fn``)."""
    settings = (settings or SerialSettings()).checked()
    make = _factory(graph, compile_fn, fits_fn, settings, memo, progress)
    prep = prepare(graph, compile_fn, settings, make)
    out = {}
    for i, s in enumerate(strategies):
        if s == "optimal" and fits_fn is not None:  # as `--fusion optimal` runs: no split phase
            out[s] = optimal_directly(graph, replace(settings, reference=(i == 0) and settings.reference), make,
                                      latency_fn)
            continue
        out[s] = fuse_prepared(prep, settings, make, strategy=s, reference=(i == 0) and settings.reference)
    minimum = out[strategies[0]].minimum_executables
    chain_minimum = out[strategies[0]].chain_minimum_executables
    for r in out.values():
        r.minimum_executables = minimum
        r.chain_minimum_executables = chain_minimum
    return out


class SerialPass:
    """M1 under the pass contract: reaches a compiler only through ``ctx.compile``; marks
    every node with ``meta["subgraph"]`` and leaves the :class:`SerialResult` in
    ``ctx.data["serial"]``."""

    name = "serial"
    settings_class = SerialSettings
    equivalence = Equivalence("exact")

    def run(self, graph: Graph, ctx) -> PassResult:
        settings = ctx.settings_for(self)
        res = serial_partition(graph, ctx.compile, settings, fits_fn=ctx.data.get("fits"),
                               memo=ctx.data.get("compile_memo"), progress=ctx.data.get("compile_progress"),
                               latency_fn=ctx.data.get("latency"))
        for i, p in enumerate(res.pieces):
            for node in res.order[p.start:p.end]:
                node.meta["subgraph"] = i
        ctx.data["serial"] = res
        return PassResult(graph, len(res.pieces) > 1, res.report())
