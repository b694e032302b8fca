"""Partitioning phases in data-flow order: ``coarsen`` -> one bisection (``initial``:
greedy growing; ``balance`` and ``multiconstraint``: sides back within their capacities;
``fm``: Fiduccia-Mattheyses; ``multilevel``: the three on one part of the graph, sharing
``bisection`` and ``heap``) -> ``recursive`` (recursive bisection along the target region,
on threads) -> ``refine`` (moves, swaps, repair) -> ``exchange`` (ejections) -> ``anneal``
(single vertices, small graphs)."""
