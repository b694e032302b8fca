"""Run a graph on the reference kernels: the float executor and seeded random inputs."""

from __future__ import annotations

from typing import Iterable

import numpy as np

from corefold.errors import DataError
from corefold.executor.interpreter import Interpreter, check_feeds
from corefold.ir import Graph

__all__ = ["run", "random_inputs", "check_feeds"]


def run(graph: Graph, feeds: dict[str, np.ndarray], outputs: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """Execute ``graph`` on ``feeds`` (keyed by input name) and return the outputs by name.

    ``outputs`` may name any values (default: the graph outputs). Intermediates are freed
    after their last use. O(V + E) kernel calls.

    Raises:
        DataError: a feed is missing, unknown, or of the wrong shape or dtype.
        UnsupportedOpError: a node has no kernel.
    """
    return Interpreter(graph, outputs).run(feeds)


def random_inputs(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded random inputs for every graph input: standard normal floats, small integers."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for v in graph.inputs:
        if not v.has_static_shape:
            raise DataError(f"input '{v.name}' has unbound dimensions {list(v.shape or [])}; bind them with --shape")
        if np.issubdtype(v.dtype, np.floating):
            feeds[v.name] = rng.standard_normal(v.shape).astype(v.dtype)
        elif v.dtype == np.bool_:
            feeds[v.name] = rng.integers(0, 2, v.shape).astype(np.bool_)
        else:
            feeds[v.name] = rng.integers(0, 10, v.shape).astype(v.dtype)
    return feeds
