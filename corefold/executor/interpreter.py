"""The one interpreter: runs a graph node by node on the operator table's kernels.

Every run of a graph in corefold goes through :class:`Interpreter`: the float executor
(:func:`corefold.executor.run`), calibration (observing values as they are produced),
mixed-precision simulation (fake-quantizing values as they are produced) and the integer
runner (computing some nodes on integers). They differ only in two hooks, as torch.fx's
Interpreter subclasses do:

* :meth:`Interpreter.on_value` sees (and may replace) every value when it comes into
  being: graph inputs, constants and node outputs;
* :meth:`Interpreter.run_node` computes one node (default: its kernel), and
  :meth:`Interpreter.skips` says which nodes not to run at all (their outputs must then
  never be read).

Intermediates are freed after their last reader (:mod:`corefold.ir.liveness`), so peak
memory is the live set. Kernels are resolved once per interpreter, so an operator the
table lacks fails before any work. O(V + E) plus the kernels.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from corefold import ops
from corefold.errors import DataError, UnsupportedOpError
from corefold.ir import Graph, Node, Value
from corefold.ir.liveness import liveness


class Interpreter:
    """Runs ``graph``; ``outputs`` names the values to return (default: graph outputs).

    A subclass that sets ``blocking_free`` runs each operator's
    :attr:`~corefold.ops.OpDef.blocking_free_kernel` (float32 products accumulated in
    float64): the integer runner does, to round a quantized model's float products as the
    chip simulator does.

    Raises:
        UnsupportedOpError: a node's operator has no kernel in the table.
        DataError: a requested output names no value.
    """

    blocking_free = False

    def __init__(self, graph: Graph, outputs: Iterable[str] | None = None):
        self.graph = graph
        by_name = {v.name: v for v in graph.values()} if outputs is not None else {}
        if outputs is None:
            self.wanted: list[Value] = list(graph.outputs)
        else:
            names = list(outputs)
            missing = [n for n in names if n not in by_name]
            if missing:
                raise DataError(f"no such value(s) to return: {', '.join(missing)}")
            self.wanted = [by_name[n] for n in names]
        self._keep = set(self.wanted)
        #: the live values of the current run (value -> array)
        self.env: dict[Value, np.ndarray] = {}
        self.order = graph.topological_order()
        self.live = liveness(graph, self.order, keep=self.wanted)
        self.kernels: list[Any] = []
        for n in self.order:
            entry = ops.get(n.op_type, n.domain, where=f"node '{n.name}'")
            if not callable(entry.kernel):
                raise UnsupportedOpError(f"node '{n.name}': operator {n.op_type} has no kernel")
            self.kernels.append(entry.blocking_free_kernel if self.blocking_free else entry.kernel)

    # -- hooks ---------------------------------------------------------------------------------
    def on_value(self, value: Value, array: np.ndarray) -> np.ndarray:
        """Called for every value as it comes into being; returns what the graph reads."""
        return array

    def skips(self, index: int, node: Node) -> bool:
        """Whether not to run ``node`` at all."""
        return False

    def run_node(self, index: int, node: Node) -> list[np.ndarray]:
        """Compute ``node`` (``order[index]``); the default runs its kernel on
        :meth:`fetch_args`."""
        return self.kernels[index](node.attrs, self.fetch_args(node))

    def fetch_args(self, node: Node) -> list[np.ndarray | None]:
        """The arrays of ``node``'s inputs (``None`` for missing optional inputs)."""
        env = self.env
        return [env[v] if v is not None else None for v in node.inputs]

    # -- the loop ------------------------------------------------------------------------------
    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The wanted values by name.

        Raises:
            DataError: a feed is missing, unknown, or of the wrong shape or dtype.
        """
        check_feeds(self.graph, feeds)
        env: dict[Value, np.ndarray] = {}
        self.env = env
        for v in self.graph.inputs:
            env[v] = self.on_value(v, np.asarray(feeds[v.name]))
        for v in self.graph.constants.values():
            if v.uses() or v in self.wanted:
                env[v] = self.on_value(v, v.const)
        for i, n in enumerate(self.order):
            if not self.skips(i, n):
                results = self.run_node(i, n)
                if len(results) < len(n.outputs):
                    raise UnsupportedOpError(f"node '{n.name}' ({n.op_type}): the kernel gives {len(results)} "
                                             f"outputs, the node has {len(n.outputs)}")
                for v, r in zip(n.outputs, results, strict=False):
                    env[v] = self.on_value(v, r)
            for v in self.live.frees[i]:
                if v not in self._keep:
                    env.pop(v, None)
        self.env = {}
        return {v.name: env[v] for v in self.wanted}


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
