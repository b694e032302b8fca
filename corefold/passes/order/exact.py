"""Exact reference for one segment: the simulator's model as a CP-SAT program (OR-Tools).

For segment ``S`` (m operators) issued from a simulator state (units' busy-until times,
residency, ready times and the pending store left by the segments before), the model
chooses an issue order and reproduces simulator.py's semantics for it exactly:

* **Order**: ``pos(o)`` a permutation of ``0..m-1``; ``before(a, b) <=> pos(a) < pos(b)``,
  fixed for ancestor pairs.
* **Residency** (a function of the order only): output ``v`` of ``q`` is resident iff
  ``L_q + b(v) <= B``, with ``L_q`` the bytes of resident values made before ``q`` with
  a consumer not issued before ``q`` (plus ``q``'s earlier resident outputs and the
  state's resident values); encoded with literals ``live(w, q) = res(w) and before(p(w), q)
  and not all-consumers-before(w, q)`` and a reified linear constraint each way.
* **Tasks**: per operator a compute interval on its unit kind, an optional load (present
  iff it loads weights or a spilled input; its size adds ``t(v)`` per spilled input) and
  an optional store (graph outputs plus spilled outputs), with the release times of the
  simulator: load after the stores of its spilled inputs, compute after its load, its
  resident inputs and control predecessors, store after its compute.
* **In-order units**: a unit kind with ``n`` units starts an operator at the ``n``-th
  largest of (the units' initial busy-until times, ends of the kind's operators issued
  before it): the multiset of busy-until times after greedy earliest-free assignment is
  exactly the ``n`` largest of that history. Encoded as: at most ``n - 1`` of those ends
  may exceed the start (literals ``z``); for ``n = 1`` every earlier end precedes it.
  DMA tasks follow the simulator's queue order, keyed per issue position ``k`` as
  ``4k`` (store of the previous operator when ``o`` reads one of its spilled outputs),
  ``4k + 1`` (load), ``4k + 2`` (that store otherwise), ``4k + 3`` (a DMA-kind compute).
  Redundant no-overlap / cumulative constraints help propagation.

With every time floored to an integer multiple of ``time_unit``, the model's optimum is at
most the true optimum (the floors only relax), and for a fixed order its value is the
simulated makespan less at most ``time_unit`` per task (exactness is tested against the
simulator on random orders). :func:`solve_segment` returns CP-SAT's order, its makespan
re-simulated exactly, and CP-SAT's proven lower bound.

Size: O(m^2) literals and constraints (order, liveness, DMA pairs), O(m^2 n) for a kind
with ``n > 1`` units. Needs ``ortools`` (the ``bench`` extra).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from corefold.passes.order.simulator import (
    DMA,
    ScheduleProblem,
    copy_state,
    run_order,
    run_recorded,
)


@dataclass(frozen=True)
class ExactResult:
    """CP-SAT's answer for one segment.

    ``status`` is ``optimal``, ``feasible`` or ``unknown``; ``order`` the best order found
    (node indices; the hint when nothing better was found); ``makespan`` its simulated
    makespan so far from the segment's state; ``lower_bound`` CP-SAT's proven bound on
    every order's makespan so far (seconds); ``seconds`` the solver's wall time.
    """

    status: str
    order: np.ndarray
    makespan: float
    lower_bound: float
    seconds: float


def _floor(x: float, unit: float) -> int:
    return int(np.floor(x / unit + 1e-9)) if x > 0 else 0


class _SegmentModel:
    """Builds the CP-SAT model of one segment (see the module docstring)."""

    def __init__(self, problem: ScheduleProblem, members: np.ndarray, state: tuple, time_unit: float,
                 horizon: float):
        from ortools.sat.python import cp_model

        self.cp = cp_model
        self.m = cp_model.CpModel()
        self.problem = problem
        self.members = np.asarray(members, np.int64)
        self.state = state
        self.unit = time_unit
        self.H = _floor(horizon, time_unit) + len(members) + 2
        (self.kind, self.duration, self.external_load, self.output_store, self.in_ptr, self.in_val,
         self.out_ptr, self.out_val, self.ctrl_ptr, self.ctrl_src, self.vbytes, self.vload, self.vuses,
         self.vis_out, self.kind_first, self.kind_count, budget, release) = problem.arrays
        if np.any(release > 0):
            raise ValueError("the exact reference models no release times")
        self.B = int(budget[0])
        self.local = {int(o): k for k, o in enumerate(self.members)}
        self._order()
        self._residency()
        self._tasks()
        self._units()
        self._dma_queue()
        self._objective()

    # -- helpers ---------------------------------------------------------------------------
    def t(self, seconds: float) -> int:
        return _floor(seconds, self.unit)

    def inputs(self, o: int) -> list[int]:
        return [int(v) for v in self.in_val[self.in_ptr[o]:self.in_ptr[o + 1]]]

    def outputs(self, o: int) -> list[int]:
        return [int(v) for v in self.out_val[self.out_ptr[o]:self.out_ptr[o + 1]]]

    def producer_in_segment(self, v: int) -> int | None:
        return self.producer.get(v)

    def before(self, a: int, b: int):
        """Literal (or bool) ``pos(a) < pos(b)`` for members a != b."""
        if self.reach[self.local[a], self.local[b]]:
            return True
        if self.reach[self.local[b], self.local[a]]:
            return False
        key = (a, b) if a < b else (b, a)
        lit = self.pair.get(key)
        if lit is None:
            lit = self.m.NewBoolVar(f"before_{key[0]}_{key[1]}")
            self.m.Add(self.pos[key[0]] < self.pos[key[1]]).OnlyEnforceIf(lit)
            self.m.Add(self.pos[key[0]] > self.pos[key[1]]).OnlyEnforceIf(lit.Not())
            self.pair[key] = lit
        return lit if key == (a, b) else lit.Not()

    def lit_and(self, parts: list, name: str):
        """A literal equal to the conjunction of ``parts`` (literals or Python bools)."""
        if any(p is False for p in parts):
            return False
        parts = [p for p in parts if p is not True]
        if not parts:
            return True
        if len(parts) == 1:
            return parts[0]
        lit = self.m.NewBoolVar(name)
        for p in parts:
            self.m.AddImplication(lit, p)
        self.m.AddBoolOr([p.Not() for p in parts] + [lit])
        return lit

    def lit_or(self, parts: list, name: str):
        if any(p is True for p in parts):
            return True
        parts = [p for p in parts if p is not False]
        if not parts:
            return False
        if len(parts) == 1:
            return parts[0]
        lit = self.m.NewBoolVar(name)
        for p in parts:
            self.m.AddImplication(p, lit)
        self.m.AddBoolOr(parts + [lit.Not()])
        return lit

    def enforce(self, constraint, lits: list) -> None:
        """Add ``constraint`` under the conjunction of ``lits`` (skipped if one is False)."""
        if any(x is False for x in lits):
            return
        lits = [x for x in lits if x is not True]
        ct = self.m.Add(constraint)
        if lits:
            ct.OnlyEnforceIf(lits)

    @staticmethod
    def neg(lit):
        return (not lit) if isinstance(lit, bool) else lit.Not()

    # -- order -----------------------------------------------------------------------------
    def _order(self) -> None:
        m = len(self.members)
        P = self.problem
        self.pos = {int(o): self.m.NewIntVar(0, m - 1, f"pos_{o}") for o in self.members}
        self.m.AddAllDifferent(list(self.pos.values()))
        reach = np.eye(m, dtype=np.bool_)  # reach[a, b]: a is b or an ancestor of b (in the segment)
        for k, o in enumerate(self.members):
            for p in P.pred_idx[P.pred_ptr[o]:P.pred_ptr[o + 1]]:
                if int(p) in self.local:
                    reach[:, k] |= reach[:, self.local[int(p)]]
        self.reach = reach
        for o in self.members:
            for p in P.pred_idx[P.pred_ptr[o]:P.pred_ptr[o + 1]]:
                if int(p) in self.local:
                    self.m.Add(self.pos[int(p)] < self.pos[int(o)])
        self.pair: dict = {}
        self.firsts: dict = {}
        self.producer = {v: int(o) for o in self.members for v in self.outputs(int(o))}

    def first(self, o: int):
        lit = self.firsts.get(o)
        if lit is None:
            lit = self.m.NewBoolVar(f"first_{o}")
            self.m.Add(self.pos[o] == 0).OnlyEnforceIf(lit)
            self.m.Add(self.pos[o] != 0).OnlyEnforceIf(lit.Not())
            self.firsts[o] = lit
        return lit

    def next_of(self, q: int, c: int):
        lit = self.m.NewBoolVar(f"next_{q}_{c}")
        self.m.Add(self.pos[c] == self.pos[q] + 1).OnlyEnforceIf(lit)
        self.m.Add(self.pos[c] != self.pos[q] + 1).OnlyEnforceIf(lit.Not())
        return lit

    # -- residency -------------------------------------------------------------------------
    def _residency(self) -> None:
        free, ready, resident, remaining, end, scal = self.state
        self.res: dict[int, object] = {}  # consumed segment value -> literal (True: resident)
        consumers: dict[int, list[int]] = {}
        for o in self.members:
            for v in self.inputs(int(o)):
                consumers.setdefault(v, []).append(int(o))
        self.consumers = consumers
        for o in self.members:
            for v in self.outputs(int(o)):
                if self.vuses[v] > 0:
                    self.res[v] = self.m.NewBoolVar(f"res_{v}")
        # the state's resident live values: freed once all their consumers here are issued
        permanent = float(scal[0])
        freeable = []
        for v in np.flatnonzero((resident == 1) & (remaining > 0)):
            here = consumers.get(int(v), [])
            if here and remaining[v] == len(here):
                freeable.append(int(v))
                permanent -= float(self.vbytes[v])
        permanent = int(round(permanent))
        for o in self.members:
            o = int(o)
            outs = [v for v in self.outputs(o) if v in self.res]
            if not outs:
                continue
            terms = []
            for w in freeable:
                gone = self.lit_and([self.before(c, o) if c != o else False for c in consumers[w]], f"gone_{w}_{o}")
                if gone is not True:
                    terms.append((int(self.vbytes[w]), self.neg(gone)))
            for w, rw in self.res.items():
                p = self.producer[w]
                if p == o:
                    continue
                made = self.before(p, o)
                if made is False:
                    continue
                outside = self.vuses[w] > len(consumers.get(w, []))
                gone = False if outside else self.lit_and(
                    [self.before(c, o) if c != o else False for c in consumers.get(w, [])], f"gone_{w}_{o}")
                if gone is True:
                    continue
                live = self.lit_and([rw, made, self.neg(gone)], f"live_{w}_{o}")
                if live is not False:
                    terms.append((int(self.vbytes[w]), live))
            for k, v in enumerate(outs):
                expr = permanent + sum(b * (lit if not isinstance(lit, bool) else int(lit)) for b, lit in terms)
                expr = expr + sum(int(self.vbytes[u]) * self.res[u] for u in outs[:k])
                size = int(self.vbytes[v])
                self.m.Add(expr + size <= self.B).OnlyEnforceIf(self.res[v])
                self.m.Add(expr + size >= self.B + 1).OnlyEnforceIf(self.res[v].Not())

    def spilled(self, v: int):
        """Literal/bool: value ``v`` (an input of a member) is in DRAM when read."""
        if v in self.res:
            return self.res[v].Not()
        return bool(self.state[2][v] == 2)

    # -- tasks -----------------------------------------------------------------------------
    def _interval(self, name: str, size, present):
        s = self.m.NewIntVar(0, self.H, f"{name}_s")
        e = self.m.NewIntVar(0, self.H, f"{name}_e")
        if isinstance(size, int):
            sz = size
        else:
            sz = self.m.NewIntVar(0, self.H, f"{name}_d")
            self.m.Add(sz == size)
        if present is True:
            iv = self.m.NewIntervalVar(s, sz, e, name)
        else:
            iv = self.m.NewOptionalIntervalVar(s, sz, e, present, name)
        return s, e, iv

    def _tasks(self) -> None:
        free, ready, resident, remaining, end, scal = self.state
        self.C, self.L, self.S = {}, {}, {}
        pending_op = int(scal[4])
        self.prev_store = None
        if pending_op >= 0:
            s, e, iv = self._interval("prevstore", self.t(scal[2]), True)
            self.m.Add(s >= self.t(scal[3]))
            self.prev_store = (s, e, iv, True)
        for o in self.members:
            o = int(o)
            self.C[o] = self._interval(f"c{o}", self.t(self.duration[o]), True) + (True,)
            # load: weights and graph inputs, plus every spilled input
            const = self.t(self.external_load[o])
            var = []
            present_parts = [bool(self.external_load[o] > 0)]
            for v in self.inputs(o):
                sp = self.spilled(v)
                if sp is True:
                    const += self.t(self.vload[v])
                    present_parts.append(True)
                elif sp is not False:
                    var.append((self.t(self.vload[v]), sp))
                    present_parts.append(sp)
            present = self.lit_or(present_parts, f"load_{o}")
            if present is not False:
                size = const + sum(d * lit for d, lit in var) if var else const
                self.L[o] = self._interval(f"l{o}", size, present) + (present,)
            # store: graph outputs, plus every spilled output that is not one
            const = self.t(self.output_store[o])
            var = []
            present_parts = [bool(self.output_store[o] > 0)]
            for v in self.outputs(o):
                if v in self.res:
                    present_parts.append(self.res[v].Not())
                    if not self.vis_out[v]:
                        var.append((self.t(self.vload[v]), self.res[v].Not()))
            present = self.lit_or(present_parts, f"store_{o}")
            if present is not False:
                size = const + sum(d * lit for d, lit in var) if var else const
                self.S[o] = self._interval(f"s{o}", size, present) + (present,)
        # releases
        for o in self.members:
            o = int(o)
            cs, ce = self.C[o][0], self.C[o][1]
            if o in self.L:
                ls, le, _, lp = self.L[o]
                self.enforce(cs >= le, [lp])
            if o in self.S:
                ss, _, _, sp = self.S[o]
                self.enforce(ss >= ce, [sp])
            for v in self.inputs(o):
                q = self.producer.get(v)
                if q is not None:
                    self.m.Add(cs >= self.C[q][1])
                    if o in self.L and q in self.S:
                        self.enforce(self.L[o][0] >= self.S[q][1], [self.res[v].Not()])
                elif resident[v] == 1:
                    self.m.Add(cs >= self.t(ready[v]))
                elif resident[v] == 2:
                    if ready[v] >= 0:
                        self.m.Add(self.L[o][0] >= self.t(ready[v]))
                    else:  # waits for the previous segment's pending store
                        self.m.Add(self.L[o][0] >= self.prev_store[1])
            for p in self.ctrl_src[self.ctrl_ptr[o]:self.ctrl_ptr[o + 1]]:
                p = int(p)
                self.m.Add(cs >= (self.C[p][1] if p in self.local else self.t(end[p])))

    # -- in-order units --------------------------------------------------------------------
    def _in_order(self, tasks: list, order, initial: list[int], n: int, name: str) -> None:
        """Tasks (start, end, interval, presence) of one unit kind issued in ``order(a, b)``
        order, on ``n`` units initially busy until ``initial``."""
        for k, (s, _e, _iv, p) in enumerate(tasks):
            for j, f in enumerate(initial):
                if f <= 0:
                    continue
                if n == 1:
                    self.enforce(s >= f, [p])
                else:
                    z = self.m.NewBoolVar(f"z0_{name}_{k}_{j}")
                    self.enforce(s >= f, [p, z.Not()])
                    self.zs.setdefault((name, k), []).append(z)
            for k2, (_s2, e2, _iv2, p2) in enumerate(tasks):
                if k2 == k:
                    continue
                earlier = order(k2, k)
                if earlier is False:
                    continue
                if n == 1:
                    self.enforce(s >= e2, [p, p2, earlier])
                else:
                    z = self.m.NewBoolVar(f"z_{name}_{k2}_{k}")
                    if earlier is not True:
                        self.m.AddImplication(z, earlier)
                    self.enforce(s >= e2, [p, p2, earlier, z.Not()])
                    self.zs.setdefault((name, k), []).append(z)
            if n > 1 and (name, k) in self.zs:
                self.m.Add(sum(self.zs[(name, k)]) <= n - 1)
        ivs = [iv for _, _, iv, _ in tasks]
        if n == 1:
            self.m.AddNoOverlap(ivs)
        busy = [self.m.NewFixedSizeIntervalVar(0, f, f"busy_{name}_{j}") for j, f in enumerate(initial) if f > 0]
        self.m.AddCumulative(ivs + busy, [1] * (len(ivs) + len(busy)), n)

    def _units(self) -> None:
        free = self.state[0]
        self.zs: dict = {}
        for u in range(len(self.kind_count)):
            if u == DMA:
                continue
            ops = [int(o) for o in self.members if self.kind[o] == u]
            if not ops:
                continue
            first = int(self.kind_first[u])
            initial = [self.t(free[first + j]) for j in range(int(self.kind_count[u]))]
            self._in_order([self.C[o] for o in ops], lambda a, b, ops=ops: self.before(ops[a], ops[b]),
                           initial, int(self.kind_count[u]), f"k{u}")

    def _dma_queue(self) -> None:
        free, ready, resident, remaining, end, scal = self.state
        members = [int(o) for o in self.members]
        # f(q): q's store goes before the next operator's load (that operator reads its spill)
        flush_early = {}
        for q in members:
            if q not in self.S:
                continue
            parts = []
            for c in sorted({c for v in self.outputs(q) for c in self.consumers.get(v, [])}):
                shared = [v for v in self.outputs(q) if v in self.inputs(c) and v in self.res]
                sp = self.lit_or([self.res[v].Not() for v in shared], f"sp_{q}_{c}")
                if sp is False:
                    continue
                parts.append(self.lit_and([self.next_of(q, c), sp], f"g_{q}_{c}"))
            flush_early[q] = self.lit_or(parts, f"f_{q}")
        prev_early = False
        if self.prev_store is not None:
            op = int(scal[4])
            readers = [c for c in members if any(resident[v] == 2 and ready[v] < 0 and v in self.outputs(op)
                                                 for v in self.inputs(c))]
            prev_early = self.lit_or([self.first(c) for c in readers], "f_prev")
        tasks = []  # (start, end, interval, presence, kind, op)
        if self.prev_store is not None:
            tasks.append(self.prev_store + ("P", -1))
        for o in members:
            if o in self.L:
                tasks.append(self.L[o] + ("L", o))
            if self.kind[o] == DMA:
                tasks.append(self.C[o] + ("C", o))
            if o in self.S:
                tasks.append(self.S[o] + ("S", o))

        def key(kind, o):  # the DMA queue position as a linear expression
            if kind == "P":
                return 2 - 2 * self._as_int(prev_early)
            if kind == "L":
                return 4 * self.pos[o] + 1
            if kind == "C":
                return 4 * self.pos[o] + 3
            return 4 * self.pos[o] + 6 - 2 * self._as_int(flush_early.get(o, False))

        memo: dict = {}

        def order(a, b):
            if (a, b) not in memo:
                memo[(a, b)] = queue_order(a, b)
            return memo[(a, b)]

        def queue_order(a, b):
            ka, oa = tasks[a][4], tasks[a][5]
            kb, ob = tasks[b][4], tasks[b][5]
            if ka == "P":
                return self.lit_or([self.neg(self.first(ob)), prev_early], f"pl_{ob}") if kb == "L" else True
            if kb == "P":
                return self.neg(order(b, a))
            if oa == ob:
                rank = {"L": 0, "C": 1, "S": 2}
                return rank[ka] < rank[kb]
            if ka == "S" and kb == "L" or ka == "L" and kb == "S":
                if (b, a) in memo:
                    return self.neg(memo[(b, a)])
                lit = self.m.NewBoolVar(f"dq_{a}_{b}")
                self.m.Add(key(ka, oa) + 1 <= key(kb, ob)).OnlyEnforceIf(lit)
                self.m.Add(key(kb, ob) + 1 <= key(ka, oa)).OnlyEnforceIf(lit.Not())
                return lit
            return self.before(oa, ob)

        first = int(self.kind_first[DMA])
        initial = [self.t(free[first + j]) for j in range(int(self.kind_count[DMA]))]
        self._in_order([t[:4] for t in tasks], order, initial, int(self.kind_count[DMA]), "dma")
        self.dma_tasks = tasks

    def _as_int(self, lit):
        return int(lit) if isinstance(lit, bool) else lit

    def _objective(self) -> None:
        scal = self.state[5]
        self.makespan = self.m.NewIntVar(self.t(scal[1]), self.H, "makespan")
        ends = [self.C[o] for o in self.C] + [self.L[o] for o in self.L] + [self.S[o] for o in self.S]
        if self.prev_store is not None:
            ends.append(self.prev_store)
        for _s, e, _iv, p in ends:
            self.enforce(self.makespan >= e, [p])
        self.m.Minimize(self.makespan)

    def hint(self, order: np.ndarray) -> None:
        """Hint ``order``'s whole schedule: positions, residency and task starts."""
        order = np.asarray(order, np.int64)
        for k, o in enumerate(order):
            self.m.AddHint(self.pos[int(o)], k)
        state = copy_state(self.state)
        rec = np.zeros((len(order), 9))
        run_recorded(self.problem.arrays, state, order, rec)
        for v, lit in self.res.items():
            self.m.AddHint(lit, bool(state[2][v] == 1))
        for k, o in enumerate(order):
            o = int(o)
            self.m.AddHint(self.C[o][0], self.t(rec[k, 1]))
            if o in self.L and rec[k, 3] >= 0:
                self.m.AddHint(self.L[o][0], self.t(rec[k, 4]))
            if o in self.S and rec[k, 6] >= 0:
                self.m.AddHint(self.S[o][0], self.t(rec[k, 7]))

    def fix_order(self, order: np.ndarray) -> None:
        for k, o in enumerate(order):
            self.m.Add(self.pos[int(o)] == k)


def solve_segment(problem: ScheduleProblem, members: np.ndarray, state: tuple, *, hint: np.ndarray | None = None,
                  time_limit: float = 60.0, workers: int = 2, time_unit: float = 1e-12, seed: int = 0,
                  fixed_order: np.ndarray | None = None) -> ExactResult:
    """Minimise the makespan so far of issuing ``members`` from ``state`` (left untouched).

    ``hint`` (an order of ``members``) seeds CP-SAT and sets the horizon; ``fixed_order``
    pins the order (tests compare the model with the simulator this way).

    Raises:
        ImportError: OR-Tools is not installed (``pip install 'corefold[bench]'``).
    """
    from ortools.sat.python import cp_model

    members = np.asarray(members, np.int64)
    if hint is None:
        hint = members if fixed_order is None else np.asarray(fixed_order, np.int64)
    hint_state = copy_state(state)
    hint_ms = float(run_order(problem.arrays, hint_state, np.asarray(hint, np.int64)))
    if len(members) == 0:
        return ExactResult("optimal", members, hint_ms, hint_ms, 0.0)
    model = _SegmentModel(problem, members, state, time_unit, hint_ms)
    model.hint(hint)
    if fixed_order is not None:
        model.fix_order(fixed_order)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit
    solver.parameters.num_workers = workers
    solver.parameters.random_seed = seed
    t0 = time.perf_counter()
    status = solver.Solve(model.m)
    seconds = time.perf_counter() - t0
    name = {cp_model.OPTIMAL: "optimal", cp_model.FEASIBLE: "feasible"}.get(status, "unknown")
    if name == "unknown":
        return ExactResult(name, np.asarray(hint, np.int64), hint_ms, float(solver.BestObjectiveBound()) * time_unit,
                           seconds)
    pos = {o: solver.Value(v) for o, v in model.pos.items()}
    order = np.array(sorted(pos, key=pos.get), np.int64)
    sim_state = copy_state(state)
    ms = float(run_order(problem.arrays, sim_state, order))
    if ms > hint_ms:  # the floors let a worse order tie; keep the better one
        order, ms = np.asarray(hint, np.int64), hint_ms
    bound = float(solver.BestObjectiveBound()) * time_unit
    return ExactResult(name, order, ms, bound, seconds)
