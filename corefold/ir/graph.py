"""The graph: nodes in file order, inputs, outputs, constants and control edges."""

from __future__ import annotations

import heapq
import itertools
from typing import Any, Iterable, Sequence

import numpy as np

from corefold.ir.nodes import Node
from corefold.ir.values import Value


class Graph:
    """A dataflow graph.

    Nodes keep their insertion ("file") order; :meth:`topological_order` is the stable
    topological sort of that order over data and control edges. Value and node names are
    unique within a graph; :meth:`fresh_name` hands out new ones.
    """

    def __init__(self, name: str = "main"):
        self.name = name
        self.inputs: list[Value] = []
        self.outputs: list[Value] = []
        self.constants: dict[str, Value] = {}
        self.opset: int = 21
        self.metadata: dict[str, str] = {}
        self._nodes: dict[Node, None] = {}
        self._names: set[str] = set()
        self._counter = 0
        #: what passes derive from this graph and keep for their next call on it (the split
        #: pass's constant slices, for one), by the pass's key: it lives and dies with the
        #: graph, and neither a pickled nor a cloned graph carries it
        self.caches: dict[str, Any] = {}

    # -- construction -------------------------------------------------------------------
    def fresh_name(self, base: str) -> str:
        """A name not yet used by any value or node of this graph, starting with ``base``."""
        if base and base not in self._names:
            self._names.add(base)
            return base
        while True:
            self._counter += 1
            name = f"{base or 'v'}_{self._counter}"
            if name not in self._names:
                self._names.add(name)
                return name

    def _claim(self, name: str) -> None:
        if name in self._names:
            raise ValueError(f"name '{name}' is already used in graph '{self.name}'")
        self._names.add(name)

    def add_input(self, name: str, shape: tuple | None, dtype: str | np.dtype = "float32") -> Value:
        self._claim(name)
        v = Value(name, shape, dtype)
        self.inputs.append(v)
        return v

    def add_constant(self, name: str, data: np.ndarray) -> Value:
        name = self.fresh_name(name)
        v = Value(name, const=np.asarray(data))
        self.constants[name] = v
        return v

    def add_node(self, node: Node) -> Node:
        """Append a node built outside the graph; its name and output names are claimed."""
        if node.graph is not None:
            raise ValueError(f"node '{node.name}' already belongs to a graph")
        node.name = self.fresh_name(node.name or node.op_type.lower())
        for v in node.outputs:
            self._claim(v.name)
        node.graph = self
        self._nodes[node] = None
        return node

    def make_node(self, op_type: str, inputs: Sequence[Value | None], attrs: dict[str, Any] | None = None,
                  *, num_outputs: int = 1, name: str = "", output_names: Sequence[str] | None = None,
                  domain: str = "") -> Node:
        """Create, append and return a node with fresh output values (shapes unset)."""
        base = name or op_type.lower()
        names = list(output_names) if output_names else [f"{base}_out{i}" if num_outputs > 1 else f"{base}_out"
                                                          for i in range(num_outputs)]
        outs = []
        for n in names:
            outs.append(Value(self.fresh_name(n)))
            self._names.discard(outs[-1].name)  # add_node claims it
        return self.add_node(Node(op_type, inputs, outs, attrs, name=name or op_type.lower(), domain=domain))

    def remove_node(self, node: Node) -> None:
        """Remove a node whose outputs are unused and not graph outputs.

        Raises:
            ValueError: an output still has uses or is a graph output.
        """
        outs = set(self.outputs)
        for v in node.outputs:
            if v._uses:
                raise ValueError(f"cannot remove '{node.name}': output '{v.name}' is used by "
                                 f"{[u.node.name for u in v.uses()]}")
            if v in outs:
                raise ValueError(f"cannot remove '{node.name}': output '{v.name}' is a graph output")
        node.detach_inputs()
        for p in list(node.control_preds):
            self.remove_control_edge(p, node)
        for s in list(node.control_succs):
            self.remove_control_edge(node, s)
        del self._nodes[node]
        node.graph = None
        for v in node.outputs:
            v._producer = None
            self._names.discard(v.name)
        self._names.discard(node.name)

    def add_control_edge(self, src: Node, dst: Node) -> None:
        """``dst`` may start only after ``src`` has finished (no data flows)."""
        if src is dst:
            raise ValueError(f"control edge from '{src.name}' to itself")
        dst.control_preds[src] = None
        src.control_succs[dst] = None

    def remove_control_edge(self, src: Node, dst: Node) -> None:
        del dst.control_preds[src]
        del src.control_succs[dst]

    def replace_all_uses(self, old: Value, new: Value) -> None:
        """Every use of ``old`` (and graph outputs naming it) reads ``new`` instead."""
        for u in old.uses():
            u.node.replace_input(u.index, new)
        self.outputs = [new if v is old else v for v in self.outputs]

    def rename_value(self, value: Value, name: str) -> None:
        """Call ``value`` (a node output or graph input of this graph) ``name``, a name no
        value or node of this graph uses (a rewrite that replaces the nodes making a graph
        output keeps the output's name so).

        Raises:
            ValueError: ``name`` is taken, or ``value`` is a constant (constants are keyed by
                name).
        """
        if name == value.name:
            return
        if value.is_constant:
            raise ValueError(f"cannot rename constant '{value.name}'")
        self._claim(name)
        self._names.discard(value.name)
        value.name = name

    def has_name(self, name: str) -> bool:
        """Whether a value or node of this graph is called ``name``."""
        return name in self._names

    def remove_constant(self, name: str) -> None:
        """Remove an unused constant.

        Raises:
            ValueError: it still has uses or is a graph output.
        """
        v = self.constants[name]
        if v._uses or v in self.outputs:
            raise ValueError(f"cannot remove constant '{name}': it is still used")
        del self.constants[name]
        self._names.discard(name)

    def remove_unused_constants(self) -> int:
        dead = [k for k, v in self.constants.items() if not v._uses and v not in self.outputs]
        for k in dead:
            del self.constants[k]
            self._names.discard(k)
        return len(dead)

    # -- queries ------------------------------------------------------------------------
    @property
    def nodes(self) -> list[Node]:
        """Nodes in file (insertion) order."""
        return list(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)

    def newest(self, k: int) -> list[Node]:
        """The last ``k`` nodes added, in insertion order. O(k)."""
        return list(itertools.islice(reversed(self._nodes), k))[::-1] if k > 0 else []

    def __contains__(self, node: object) -> bool:
        return node in self._nodes

    def values(self) -> Iterable[Value]:
        """Inputs, constants, then node outputs in file order."""
        yield from self.inputs
        yield from self.constants.values()
        for n in self._nodes:
            yield from n.outputs

    def value(self, name: str) -> Value:
        for v in self.values():
            if v.name == name:
                return v
        raise KeyError(name)

    def node(self, name: str) -> Node:
        for n in self._nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def reorder(self, order: Sequence[Node]) -> None:
        """Set the file order to ``order`` (a permutation of the nodes)."""
        if len(order) != len(self._nodes) or set(order) != set(self._nodes):
            raise ValueError("reorder needs a permutation of the graph's nodes")
        self._nodes = dict.fromkeys(order)

    def topological_order(self) -> list[Node]:
        """The stable topological order over data and control edges.

        Among ready nodes, the one earliest in file order goes first, so a graph already in
        topological order comes back unchanged. O((V + E) log V).

        Raises:
            ValueError: the graph has a cycle (naming a node on it).
        """
        position = {n: i for i, n in enumerate(self._nodes)}
        indeg = {n: 0 for n in self._nodes}
        succs: dict[Node, list[Node]] = {}
        for n in self._nodes:
            ss = [s for s in n.successors() if s in position]
            succs[n] = ss
            for s in ss:
                indeg[s] += 1
        heap = [position[n] for n, d in indeg.items() if d == 0]
        heapq.heapify(heap)
        nodes = list(self._nodes)
        order: list[Node] = []
        while heap:
            n = nodes[heapq.heappop(heap)]
            order.append(n)
            for s in succs[n]:
                indeg[s] -= 1
                if indeg[s] == 0:
                    heapq.heappush(heap, position[s])
        if len(order) != len(nodes):
            stuck = next(n for n, d in indeg.items() if d > 0)
            raise ValueError(f"graph '{self.name}' has a cycle through node '{stuck.name}'")
        return order

    def sort(self) -> None:
        """Put the file order into stable topological order."""
        self.reorder(self.topological_order())

    def __str__(self) -> str:
        from corefold.ir.text import to_text

        return to_text(self, max_const_elements=16)

    # -- pickling (graphs travel to worker processes) -----------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        """A flat description (names instead of object links), so pickling a graph of any
        size needs no deep recursion. O(V + E) plus the constants' bytes."""
        nodes = []
        for n in self._nodes:
            nodes.append((n.op_type, n.domain, n.name, n.attrs, n.meta,
                          [None if v is None else v.name for v in n.inputs],
                          [(v.name, v.shape, v.dtype) for v in n.outputs],
                          [p.name for p in n.control_preds]))
        return {"name": self.name, "opset": self.opset, "metadata": self.metadata, "counter": self._counter,
                "inputs": [(v.name, v.shape, v.dtype) for v in self.inputs],
                "constants": [(k, _pack_const(v.const)) for k, v in self.constants.items()],
                "nodes": nodes, "outputs": [v.name for v in self.outputs]}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["name"])
        self.opset = state["opset"]
        self.metadata = dict(state["metadata"])
        values: dict[str, Value] = {}
        for name, shape, dtype in state["inputs"]:
            values[name] = self.add_input(name, shape, dtype)
        for name, data in state["constants"]:
            v = Value(name, const=_unpack_const(data))
            self._claim(name)
            self.constants[name] = v
            values[name] = v
        by_name: dict[str, Node] = {}
        made = []
        for *_, outs, _preds in state["nodes"]:  # every output first: file order may read ahead
            out_values = [Value(o, shape, dtype) for o, shape, dtype in outs]
            values.update((v.name, v) for v in out_values)
            made.append(out_values)
        for (op, domain, name, attrs, meta, ins, _outs, _preds), out_values in zip(state["nodes"], made, strict=True):
            node = Node(op, [None if i is None else values[i] for i in ins], out_values, attrs, name=name,
                        domain=domain)
            node.meta = dict(meta)
            self._claim(name)
            for v in out_values:
                self._claim(v.name)
            node.graph = self
            self._nodes[node] = None
            by_name[name] = node
        for _op, _domain, name, _attrs, _meta, _ins, _outs, preds in state["nodes"]:
            for p in preds:
                self.add_control_edge(by_name[p], by_name[name])
        self.outputs = [values[o] for o in state["outputs"]]
        self._counter = state["counter"]



def _pack_const(a: np.ndarray):
    """A constant for pickling: a stride-0 fill stays one value and a shape."""
    if a.size > 1 and all(st == 0 for st in a.strides):
        return ("fill", a.reshape(-1)[:1].copy(), a.shape)
    return a


def _unpack_const(c) -> np.ndarray:
    if isinstance(c, tuple) and len(c) == 3 and c[0] == "fill":
        return np.broadcast_to(c[1].reshape(()), c[2])
    return c
