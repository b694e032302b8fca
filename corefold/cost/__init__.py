"""The cost model: what each operator costs on a target (SPEC M3 §5).

``op_cost(node, target)`` gives an operator's work (MACs, FLOPs), the bytes it reads and
writes, the unit kind that runs it and its time on one unit of that kind;
``graph_cost(graph, target)`` sums them. Used by ``corefold inspect``, the order search
(M3), timing slack (M2) and the compile feasibility checks (M1).
"""

from corefold.cost.model import GraphCost, OpCost, graph_cost, op_cost, transfer_seconds

__all__ = ["OpCost", "GraphCost", "graph_cost", "op_cost", "transfer_seconds"]
