"""Nodes: one operator application, its inputs, outputs, attributes and control edges."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Sequence

from corefold.ir.values import Usage, Value

if TYPE_CHECKING:
    from corefold.ir.graph import Graph


class Node:
    """An operator applied to input values, producing output values.

    ``op_type`` and ``attrs`` follow ONNX (opset 21 semantics after import). A missing
    optional input is ``None``. ``control_preds`` are nodes that must finish before this one
    starts although no data flows (SPEC M2 §5); ``meta`` carries pass annotations such as
    ``core``, ``subgraph`` or ``unit`` and is printed by the text form.
    """

    def __init__(self, op_type: str, inputs: Sequence[Value | None], outputs: Sequence[Value],
                 attrs: dict[str, Any] | None = None, name: str = "", domain: str = ""):
        self.op_type = op_type
        self.domain = domain
        self.name = name
        self.attrs: dict[str, Any] = dict(attrs or {})
        self.meta: dict[str, Any] = {}
        self.graph: Graph | None = None
        self._inputs: list[Value | None] = []
        self._outputs: tuple[Value, ...] = ()
        self.control_preds: dict[Node, None] = {}
        self.control_succs: dict[Node, None] = {}
        for v in inputs:
            self._append_input(v)
        for i, v in enumerate(outputs):
            if v._producer is not None:
                raise ValueError(f"value '{v.name}' already has producer '{v._producer.name}'")
            if v.const is not None:
                raise ValueError(f"constant '{v.name}' cannot be a node output")
            v._producer, v._output_index = self, i
        self._outputs = tuple(outputs)

    def _append_input(self, v: Value | None) -> None:
        idx = len(self._inputs)
        self._inputs.append(v)
        if v is not None:
            v._uses[Usage(self, idx)] = None

    @property
    def inputs(self) -> tuple[Value | None, ...]:
        return tuple(self._inputs)

    @property
    def outputs(self) -> tuple[Value, ...]:
        return self._outputs

    def replace_input(self, index: int, value: Value | None) -> None:
        """Make input ``index`` read ``value`` instead, keeping uses consistent."""
        old = self._inputs[index]
        if old is not None:
            del old._uses[Usage(self, index)]
        self._inputs[index] = value
        if value is not None:
            value._uses[Usage(self, index)] = None

    def set_inputs(self, values: Iterable[Value | None]) -> None:
        """Replace the whole input list."""
        self.detach_inputs()
        for v in values:
            self._append_input(v)

    def detach_inputs(self) -> None:
        for i, v in enumerate(self._inputs):
            if v is not None:
                del v._uses[Usage(self, i)]
        self._inputs = []

    def predecessors(self) -> list["Node"]:
        """Producers of the inputs, then control predecessors, without repeats."""
        preds: dict[Node, None] = {}
        for v in self._inputs:
            if v is not None and v._producer is not None:
                preds[v._producer] = None
        preds.update(self.control_preds)
        return list(preds)

    def successors(self) -> list["Node"]:
        """Consumers of the outputs, then control successors, without repeats."""
        succs: dict[Node, None] = {}
        for v in self._outputs:
            for u in v._uses:
                succs[u.node] = None
        succs.update(self.control_succs)
        return list(succs)

    def __repr__(self) -> str:
        return f"Node({self.name!r}, {self.op_type})"
