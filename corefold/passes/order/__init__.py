"""Execution-order search on key-node segments (SPEC M3 §1-6).

``key_nodes`` finds the convergence points and segments, ``simulator`` simulates an issue
order on a core's concurrent units, ``bound`` bounds any order's makespan from below,
``candidates`` and ``list_schedule`` build orders, ``search`` combines them into the
:func:`order_graph` entry point and the :class:`OrderPass` pipeline pass, configured by
:class:`OrderSettings` (``settings``); ``exact`` is the CP-SAT reference (OR-Tools).
"""

from corefold.passes.order.bound import LowerBound, lower_bound
from corefold.passes.order.candidates import baseline_orders
from corefold.passes.order.key_nodes import key_nodes, segments
from corefold.passes.order.search import OrderPass, OrderResult, order_graph, search_order
from corefold.passes.order.settings import DEFAULT, FAST, SEED, STRONG, OrderSettings
from corefold.passes.order.simulator import (
    Schedule,
    ScheduleProblem,
    build_problem,
    schedule,
    simulate,
)

__all__ = ["key_nodes", "segments", "build_problem", "schedule", "simulate", "Schedule", "ScheduleProblem",
           "lower_bound", "LowerBound", "order_graph", "search_order", "OrderPass", "OrderResult", "OrderSettings",
           "baseline_orders", "FAST", "DEFAULT", "STRONG", "SEED"]
