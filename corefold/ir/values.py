"""Values: the tensors flowing between nodes (SPEC M2 §1's hyperedges).

A value has at most one producer (a node output); a value without a producer is a graph
input or a constant. Its uses are an ordered set of ``(node, input index)`` pairs; only
:class:`~corefold.ir.nodes.Node` methods change them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from corefold.ir.nodes import Node


class Usage(NamedTuple):
    """One use of a value: input ``index`` of ``node``."""

    node: "Node"
    index: int


class Value:
    """A tensor: name, static shape, dtype, producer, uses and (for constants) data.

    ``shape`` is a tuple of ints once shapes are known (``None`` before); a dynamic
    dimension the user has not bound is a string (the ONNX ``dim_param``).
    """

    __slots__ = ("name", "shape", "dtype", "const", "_producer", "_output_index", "_uses")

    def __init__(self, name: str, shape: tuple | None = None, dtype: np.dtype | str = "float32",
                 const: np.ndarray | None = None):
        self.name = name
        self.dtype = np.dtype(dtype)
        self.const = None
        self.shape = tuple(shape) if shape is not None else None
        self._producer: Node | None = None
        self._output_index: int | None = None
        self._uses: dict[Usage, None] = {}
        if const is not None:
            self.set_const(const)

    def set_const(self, data: np.ndarray) -> None:
        """Make this value a constant holding ``data`` (its shape and dtype follow the data)."""
        data = np.asarray(data)
        self.const = data
        self.shape = tuple(int(d) for d in data.shape)
        self.dtype = data.dtype

    @property
    def producer(self) -> "Node | None":
        return self._producer

    @property
    def output_index(self) -> int | None:
        return self._output_index

    @property
    def is_constant(self) -> bool:
        return self.const is not None

    def uses(self) -> tuple[Usage, ...]:
        """A snapshot of this value's uses, in the order they were made."""
        return tuple(self._uses)

    def consumers(self) -> list["Node"]:
        """Distinct nodes reading this value, in use order."""
        return list(dict.fromkeys(u.node for u in self._uses))

    @property
    def has_static_shape(self) -> bool:
        return self.shape is not None and all(isinstance(d, int) for d in self.shape)

    @property
    def size(self) -> int:
        """Number of elements. Raises ValueError if the shape is not static. O(rank), in
        plain Python: the backend asks millions of times per compile, and ``np.prod`` of a
        short tuple costs ten times this loop."""
        shape = self.shape
        if shape is not None:
            n = 1
            for d in shape:
                if not isinstance(d, int):
                    break
                n *= d
            else:
                return n
        raise ValueError(f"value '{self.name}' has no static shape: {self.shape}")

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __repr__(self) -> str:
        return f"Value({self.name!r}, {self.dtype.name}{list(self.shape) if self.shape is not None else '[?]'})"
