"""What corefold knows about one operator: the facets of an :class:`OpDef`.

Every facet takes plain data (attributes, input shapes and dtypes, constant values), never
IR nodes, so that ``corefold.ir`` may read this table without an import cycle:

* ``normalise(imp, node)``: rewrite an ONNX node of any supported opset into the
  opset-21-form node(s) the rest of corefold reads, through the importer's
  :class:`Emitter` (``AS_IS`` for operators whose newest form reads older models unchanged);
* ``infer(attrs, ins, consts) -> [(shape, dtype), ...]``: static output shapes and dtypes;
* ``kernel(attrs, inputs) -> [array, ...]``: the NumPy reference semantics;
* ``cost``: the unit kind that runs it and its work in that unit's measure (:class:`Cost`);
* ``split(attrs, ins, outs, consts) -> (axes, by_preference)``: the dimensions it may be
  cut along into same-type pieces (SPEC M3 §7);
* ``quant``: how M5 quantizes around it (:class:`Quant`): compute, data movement or left in
  float; its range rule; its integer kernel kind; its weight and bias inputs;
* ``param_inputs``: inputs that carry shapes, indices, axes or other parameters rather than
  data (Reshape's shape, Gather's indices, Resize's scales, Clip's bounds, TopK's k):
  never quantized, and not data in range rules.

A facet that does not apply is the explicit :data:`NONE`; a facet left out is
:data:`MISSING`, which a test forbids. ``ins`` is a list of ``(shape, dtype)`` (``None``
for a missing optional input); ``consts`` the inputs' constant values (``None`` where not
constant).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Protocol, Sequence

import numpy as np

Shape = tuple[int, ...]
TypeIn = "tuple[Shape, np.dtype] | None"
Ins = Sequence[Any]  # Sequence[tuple[Shape, np.dtype] | None]
Consts = Sequence["np.ndarray | None"]
Kernel = Callable[[dict[str, Any], list["np.ndarray | None"]], list[np.ndarray]]
ShapeFn = Callable[[dict[str, Any], Ins, Consts], list[tuple[Shape, np.dtype]]]


class _Marker:
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name

    def __bool__(self) -> bool:
        return False


#: A facet that explicitly does not apply (no split rule, not quantizable, ...).
NONE = _Marker("NONE")
#: A facet nobody filled in; ``ops_test.py`` fails on it.
MISSING = _Marker("MISSING")
#: The normaliser of an operator whose opset-21 form reads every older opset unchanged.
AS_IS = _Marker("AS_IS")


# -- import-time normalisation --------------------------------------------------------------------
class Handle(Protocol):
    """What a normaliser may read of an input: an IR value, seen only through these."""

    name: str
    shape: tuple
    dtype: np.dtype
    const: np.ndarray | None

    @property
    def is_constant(self) -> bool: ...


class Emitter(Protocol):
    """The importer as a normaliser sees it."""

    opset: int

    def emit(self, op: str, inputs: Sequence[Handle | None], attrs: dict[str, Any],
             outputs: Sequence[str | None], name: str) -> list[Handle]: ...

    def const(self, data: Any, base: str) -> Handle: ...

    def bind_const(self, onnx_name: str, data: np.ndarray) -> Handle: ...

    def is_used(self, onnx_name: str) -> bool: ...

    def alias(self, onnx_name: str, value: Handle) -> None: ...

    def inline(self, body: Any, inputs: Sequence[Handle | None], name: str) -> list[Handle]:
        """Import subgraph ``body`` (an ONNX GraphProto, opaque here) in place with its inputs
        bound to ``inputs``; returns its outputs (If branches, Loop and Scan bodies)."""
        ...


@dataclass
class OnnxNode:
    """An ONNX node being imported: input handles, ONNX output names, Python attributes."""

    op: str
    name: str
    inputs: list[Any]
    outputs: list[str | None]
    attrs: dict[str, Any]

    def input(self, i: int) -> Any:
        return self.inputs[i] if i < len(self.inputs) else None


Normaliser = Callable[[Emitter, OnnxNode], None]


# -- cost --------------------------------------------------------------------------------------------
#: unit kinds; "free" ops only reinterpret a shape and cost nothing
UNITS = ("matrix", "vector", "dma", "free")


@dataclass(frozen=True)
class Cost:
    """Which unit kind runs an operator and how much work it is there.

    ``work(attrs, ins, outs)`` is in the unit's own measure: MACs for ``matrix``, element
    operations for ``vector``, bytes for ``dma``; ``None`` means the default for the unit
    (``vector``: one operation per output element; ``dma``: the output bytes; ``free``: 0).
    ``macs`` is the same as ``work`` for matrix operators and 0 otherwise.
    """

    unit: str
    work: Callable[[dict[str, Any], Ins, Ins], float] | None = None

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise ValueError(f"unknown unit kind {self.unit!r}")


# -- split -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SplitAxis:
    """One way to cut an operator into same-type pieces.

    The axis counts ``extent`` *units*; a piece covering units ``[s, e)`` reads
    ``[s * scale, e * scale)`` on input ``i``'s axis ``inputs[i] = (axis, scale)`` (``None``:
    the whole input) and writes the same range of its output axis (``output``). With
    ``reduce`` every piece writes a full-size partial output and the pieces are added.
    ``scales_group``: grouped conv, the piece's ``group`` attribute is its unit count.
    """

    name: str
    extent: int
    inputs: tuple[tuple[int, int] | None, ...]
    output: tuple[int, int] | None
    reduce: bool = False
    scales_group: bool = False


SplitFn = Callable[[dict[str, Any], Ins, Ins, Consts], "tuple[list[SplitAxis], bool]"]


# -- quantization ------------------------------------------------------------------------------------
class Interval(NamedTuple):
    """A value range; either bound may be unknown (``None``)."""

    lo: float | None
    hi: float | None

    @property
    def non_negative(self) -> bool:
        return self.lo is not None and self.lo >= 0


UNKNOWN = Interval(None, None)
NON_NEGATIVE = Interval(0.0, None)

#: range rule: (attrs, input intervals, consts) -> output interval (output 0)
RangeFn = Callable[[dict[str, Any], Sequence[Interval], Consts], Interval]

#: quantization roles
COMPUTE, MOVEMENT, FLOAT = "compute", "movement", "float"
#: integer kernel kinds (corefold/passes/quantize/integer.py implements them)
INTEGER_KINDS = ("linear", "add", "mul", "average", "layout", "sum")


@dataclass(frozen=True)
class Quant:
    """How M5 treats an operator.

    Attributes:
        role: ``compute`` (its float data inputs and outputs are quantized), ``movement``
            (its output rearranges or selects values of input 0, so it shares that scale),
            or ``float`` (left in float).
        range: the output interval from the inputs' (SPEC M5 §1), or ``None``: unknown.
        integer: the integer kernel kind (``linear``: conv/matmul accumulation, ``add``,
            ``mul``, ``average``: pooled sums, ``layout``: the op on the integers, ``sum``:
            integers summed exactly when every input has the same scale), or
            ``None``: runs in float between its DequantizeLinear and QuantizeLinear.
        weights: weight input index -> per-channel axis function ``(attrs, shape) -> axis``.
        bias: the bias input index (int32 at the product of the scales), or ``None``.
        fuses_activation: a following ReLU / Clip(min >= 0) is fused into it, so its
            output takes the activation's (non-negative) range (SPEC M5 §1).
        ties_inputs: its output and every float input share one scale (Concat).
    """

    role: str
    range: RangeFn | None = None
    integer: str | None = None
    weights: dict[int, Callable[[dict[str, Any], Shape], int]] = field(default_factory=dict)
    bias: int | None = None
    fuses_activation: bool = False
    ties_inputs: bool = False

    def __post_init__(self) -> None:
        if self.role not in (COMPUTE, MOVEMENT, FLOAT):
            raise ValueError(f"unknown quantization role {self.role!r}")
        if self.integer is not None and self.integer not in INTEGER_KINDS:
            raise ValueError(f"unknown integer kernel kind {self.integer!r}")


# -- the entry ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class OpDef:
    """Everything corefold knows about one operator (see the module docstring).

    ``refuse`` names why corefold cannot represent the operator statically (its output
    shape depends on data, it is random, it works on sequences, ...); importing it then
    fails with that reason. ``foldable`` False keeps the importer from evaluating the node
    even when every input is constant (QuantizeLinear/DequantizeLinear pairs on weights are
    how a quantized model says its weights are integers).
    """

    op_type: str
    domain: str = ""
    normalise: Any = MISSING
    infer: Any = MISSING
    kernel: Any = MISSING
    cost: Any = MISSING
    split: Any = MISSING
    quant: Any = MISSING
    param_inputs: Any = MISSING
    foldable: bool = True
    refuse: str | None = None
    #: the kernel with float32 accumulated in float64 and rounded once, for an operator whose
    #: float32 result depends on how BLAS blocks the work (it picks blockings per shape and
    #: CPU, so a product cut into pieces need not equal the whole); None where it does not
    wide_kernel: Any = None

    FACETS = ("normalise", "infer", "kernel", "cost", "split", "quant", "param_inputs")

    @property
    def key(self) -> tuple[str, str]:
        return (self.domain, self.op_type)

    @property
    def blocking_free_kernel(self) -> Kernel:
        """The kernel whose result does not depend on how the work is cut: ``wide_kernel``
        where the operator has one, else ``kernel``. The chip simulator and the integer
        runner run it, so that a quantized model's float products round the same whole
        (the reference) as in pieces (the chip)."""
        return self.wide_kernel if self.wide_kernel is not None else self.kernel

    def missing_facets(self) -> list[str]:
        return [f for f in self.FACETS if getattr(self, f) is MISSING]
