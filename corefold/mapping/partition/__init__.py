"""Partitioning phases in data-flow order: ``coarsen`` -> ``initial`` -> ``refine``."""
