"""Run a graph on the reference kernels."""

from __future__ import annotations

from typing import Iterable

import numpy as np

from corefold.errors import DataError, UnsupportedOpError
from corefold.executor.registry import kernel_key, load_all
from corefold.ir import Graph


def run(graph: Graph, feeds: dict[str, np.ndarray], outputs: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """Execute ``graph`` on ``feeds`` (keyed by input name) and return the outputs by name.

    ``outputs`` may name any values (default: the graph outputs). Intermediates are freed
    after their last use, so peak memory is the live set, not the sum of all tensors.
    O(V + E) kernel calls.

    Raises:
        DataError: a feed is missing, unknown, or of the wrong shape or dtype.
        UnsupportedOpError: a node has no kernel.
    """
    kernels = load_all()
    want = list(outputs) if outputs is not None else [v.name for v in graph.outputs]
    env: dict[str, np.ndarray] = {}
    check_feeds(graph, feeds)
    for v in graph.inputs:
        env[v.name] = np.asarray(feeds[v.name])
    for v in graph.constants.values():
        env[v.name] = v.const
    order = graph.topological_order()
    remaining: dict[str, int] = {}
    for n in order:
        for v in n.inputs:
            if v is not None:
                remaining[v.name] = remaining.get(v.name, 0) + 1
    keep = set(want)
    for n in order:
        fn = kernels.get(kernel_key(n.op_type, n.domain))
        if fn is None:
            raise UnsupportedOpError(f"node '{n.name}': no kernel for operator {n.domain + '::' if n.domain else ''}{n.op_type}")
        args = [env[v.name] if v is not None else None for v in n.inputs]
        results = fn(n.attrs, args)
        if len(results) < len(n.outputs):
            raise RuntimeError(f"kernel {n.op_type} returned {len(results)} outputs, node '{n.name}' has {len(n.outputs)}")
        for v, r in zip(n.outputs, results[: len(n.outputs)], strict=True):
            env[v.name] = r
        for v in n.inputs:
            if v is not None:
                remaining[v.name] -= 1
                if remaining[v.name] == 0 and v.name not in keep and v.const is None:
                    env.pop(v.name, None)
    missing = [w for w in want if w not in env]
    if missing:
        raise DataError(f"no such value(s) to return: {', '.join(missing)}")
    return {w: env[w] for w in want}


def check_feeds(graph: Graph, feeds: dict[str, np.ndarray]) -> None:
    """Check feeds against the graph's inputs.

    Raises:
        DataError: a feed is unknown, or an input is missing or of the wrong shape or dtype.
    """
    known = {v.name for v in graph.inputs}
    for name in feeds:
        if name not in known:
            raise DataError(f"input '{name}' is not an input of the model (inputs: {', '.join(sorted(known))})")
    for v in graph.inputs:
        if v.name not in feeds:
            raise DataError(f"missing input '{v.name}'")
        x = np.asarray(feeds[v.name])
        if v.shape is not None and tuple(x.shape) != tuple(v.shape):
            raise DataError(f"input '{v.name}' has shape {list(x.shape)}, the model expects {list(v.shape)}")
        if x.dtype != v.dtype:
            raise DataError(f"input '{v.name}' has dtype {x.dtype}, the model expects {v.dtype}")


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
