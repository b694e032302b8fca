"""Settings of the order search (SPEC M3 §4): one frozen dataclass and its presets.

The presets follow :mod:`corefold.settings`: ``fast``, ``default`` and ``strong`` trade
search effort for quality; ``seed`` is the seed text's literal method [002 §76, §79-80]:
enumerate every topological order of a segment when there are at most
``exhaustive_limit``, otherwise simulate ``samples`` randomly drawn orders, and keep the
fastest; no list schedules, no dynamic program, no local search.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal

from corefold.settings import SettingsError, preset


@dataclass(frozen=True)
class OrderSettings:
    """Knobs of the order search; ``--set NAME=VALUE`` reaches every one.

    Attributes:
        budget_seconds: budget of the whole search, converted into a fixed number of
            simulated operator issues (``budget_seconds * steps_per_second``) so the
            result does not depend on the machine's speed or load (enumeration of small
            segments and the baselines always run, even past the budget).
        steps_per_second: simulated operator issues per second assumed for that
            conversion (measured on one x86 core; bench/order.py prints the real time).
        exhaustive_limit: enumerate (and simulate) every topological order of a segment
            that has at most this many; 0 never enumerates.
        key_nodes_per_segment: consecutive key-node segments joined into one segment.
        samples: sampled orders per segment that is not enumerated.
        sampling: how those samples are drawn: ``priority``, list schedules on the
            critical-path priority perturbed log-normally by ``spread``; ``random``, each
            step issues a ready operator chosen uniformly at random (the seed's random
            selection; not uniform over orders).
        spread: log-normal spread of the ``priority`` samples' priorities.
        beam_width: partial orders kept per layer by the dynamic program over sets of
            finished operators (segments of at most 63 operators; 0 turns it off).
        local_search: improve each non-enumerated segment, then the whole order, by random
            insertion moves that keep every edge, with the budget left after sampling.
        carry: share of a segment's local-search moves that are carry moves (a node
            moved with the ancestors or descendants it would pass; list_schedule.py's
            ``carry_move``) instead of plain insertions; the whole-order polish uses
            insertions only.
        round_iters: local-search tries per round of a segment's iterated local search;
            each later round restarts from the best order after ``kicks`` random carry
            moves (0 turns the restarts off: one local search).
        kicks: random carry moves applied to the best order at each restart.
        baselines: also try per segment the file order and the critical-path and greedy
            list schedules, and return the best whole-graph baseline (file order,
            ready-first, critical path, greedy) when it beats the search, so the result
            is never worse than any of them.
        bound_nodes: branch-and-bound nodes per key-node window spent on the lower bound
            reported beside the result (bound.py's window term; 0 leaves it out). It
            changes the bound, never the order.
        target_makespan: stop rule [002 §76]: seconds of simulated makespan; the search
            stops as soon as a complete order reaches it (checked after the baselines,
            after each segment, whose prefix is completed by a critical-path list
            schedule of the rest, and after each local-search move). None searches on.
    """

    budget_seconds: float = 5.0
    steps_per_second: float = 2e6
    exhaustive_limit: int = 2000
    key_nodes_per_segment: int = 1
    samples: int = 64
    sampling: Literal["priority", "random"] = "priority"
    spread: float = 0.5
    beam_width: int = 64
    local_search: bool = True
    carry: float = 0.5
    round_iters: int = 1000
    kicks: int = 8
    baselines: bool = True
    bound_nodes: int = 20_000
    target_makespan: float | None = None

    #: Field values that differ from the defaults, per preset (see corefold.settings).
    PRESETS: ClassVar[dict[str, dict]] = {
        "fast": {"budget_seconds": 1.0, "exhaustive_limit": 200, "samples": 16, "beam_width": 16,
                 "bound_nodes": 2000},
        "strong": {"budget_seconds": 30.0, "exhaustive_limit": 20000, "samples": 256, "beam_width": 256,
                   "bound_nodes": 500_000},
        # SPEC M3 §4 as the seed says it: enumerate, else sample at random; keep the fastest
        "seed": {"samples": 256, "sampling": "random", "beam_width": 0, "local_search": False,
                 "baselines": False},
    }

    def checked(self) -> "OrderSettings":
        """Return self after validation.

        Raises:
            SettingsError: a count or time out of range, naming the field.
        """
        def need(ok: bool, name: str, what: str) -> None:
            if not ok:
                raise SettingsError(f"order setting {name} must be {what}, got {getattr(self, name)!r}")

        need(self.budget_seconds >= 0 and math.isfinite(self.budget_seconds), "budget_seconds", ">= 0")
        need(self.steps_per_second > 0, "steps_per_second", "> 0")
        need(self.exhaustive_limit >= 0, "exhaustive_limit", ">= 0")
        need(self.key_nodes_per_segment >= 1, "key_nodes_per_segment", ">= 1")
        need(self.samples >= 0, "samples", ">= 0")
        need(self.sampling in ("priority", "random"), "sampling", "'priority' or 'random'")
        need(self.spread >= 0, "spread", ">= 0")
        need(self.beam_width >= 0, "beam_width", ">= 0")
        need(0.0 <= self.carry <= 1.0, "carry", "in [0, 1]")
        need(self.round_iters >= 0, "round_iters", ">= 0")
        need(self.kicks >= 0, "kicks", ">= 0")
        need(self.bound_nodes >= 0, "bound_nodes", ">= 0")
        need(self.target_makespan is None or self.target_makespan >= 0, "target_makespan", "None or >= 0 seconds")
        return self


FAST = preset(OrderSettings, "fast")
DEFAULT = preset(OrderSettings, "default")
STRONG = preset(OrderSettings, "strong")
SEED = preset(OrderSettings, "seed")
