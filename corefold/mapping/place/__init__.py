"""Placement phases in data-flow order: ``initial`` (region bisection) -> ``force`` (swaps)."""
