"""Partitioning phases in data-flow order: ``coarsen`` -> ``initial`` (recursive bisection;
``multiconstraint`` rebalances when two capacities bind) -> ``refine`` (moves, swaps,
repair) -> ``exchange`` (ejections) -> ``anneal`` (single vertices, small graphs)."""
