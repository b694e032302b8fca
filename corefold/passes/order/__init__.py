"""Execution-order search on key-node segments (SPEC M3 §1-6).

``key_nodes`` finds the convergence points and segments, ``simulator`` simulates an issue
order on a core's concurrent units, ``bound`` bounds any order's makespan from below,
``list_schedule`` builds orders, ``search`` combines them into the :func:`order_graph` pass.
"""

from corefold.passes.order.bound import LowerBound, lower_bound
from corefold.passes.order.key_nodes import key_nodes, segments
from corefold.passes.order.search import (
                                          DEFAULT,
                                          FAST,
                                          PRESETS,
                                          STRONG,
                                          OrderResult,
                                          OrderSettings,
                                          baseline_orders,
                                          order_graph,
)
from corefold.passes.order.simulator import (
                                          Schedule,
                                          ScheduleProblem,
                                          build_problem,
                                          schedule,
                                          simulate,
)

__all__ = ["key_nodes", "segments", "build_problem", "schedule", "simulate", "Schedule", "ScheduleProblem",
           "lower_bound", "LowerBound", "order_graph", "OrderResult", "OrderSettings", "baseline_orders",
           "FAST", "DEFAULT", "STRONG", "PRESETS"]
