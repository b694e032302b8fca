"""ONNX -> corefold IR: read, bind shapes, normalise to opset 21, infer shapes, fold.

Nodes are processed once, in file order (ONNX requires topological order). For each node
the operator table's normaliser (``corefold.ops``, facet ``normalise``) emits one or more
opset-21 nodes through :meth:`Importer.emit`, which either folds the node (every input
constant, or a Shape node: run the table's kernel, O(kernel)) or adds it with the shapes
the table infers. Whole import: O(nodes + constant bytes folded).
"""

from __future__ import annotations

import json
import os
from collections import ChainMap
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import onnx
from onnx import ModelProto

from corefold import ops
from corefold.errors import CorefoldError, DataError, ModelError, ShapeError, UnsupportedOpError
from corefold.frontend.onnx.protos import all_nodes, attribute_value, numpy_dtype, tensor_to_numpy
from corefold.frontend.onnx.schemas import check_input_types, since
from corefold.ir import Graph, Node, Value
from corefold.ops import fill, is_fill

#: Opset versions of the default domain corefold reads.
MIN_OPSET, MAX_OPSET = 6, 28
#: At most this many nodes are imported from subgraphs (unrolled loops, inlined branches).
MAX_INLINED_NODES = 200_000

def load_model(path: str | os.PathLike, shapes: dict[str, Sequence[int]] | None = None,
               values: dict[str, np.ndarray] | None = None) -> Graph:
    """Read an ONNX file and import it (see :func:`from_onnx`).

    Raises:
        ModelError: the file is missing, empty, truncated or not an ONNX model.
        UnsupportedOpError, ShapeError: as :func:`from_onnx`.
    """
    p = Path(path)
    if not p.is_file():
        raise ModelError(f"'{p}': no such model file")
    if p.stat().st_size == 0:
        raise ModelError(f"'{p}': the file is empty, not an ONNX model")
    try:
        model = onnx.load(str(p))
    except Exception as exc:  # noqa: BLE001 - protobuf raises various errors on junk
        raise ModelError(f"'{p}': not a readable ONNX model ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else 'parse error'})") from None
    try:
        return from_onnx(model, shapes, source=str(p), values=values)
    except CorefoldError as exc:
        if str(p) in str(exc):
            raise
        raise type(exc)(f"'{p}': {exc}") from None


def from_onnx(model: ModelProto, shapes: dict[str, Sequence[int]] | None = None,
              source: str = "<model>", values: dict[str, np.ndarray] | None = None) -> Graph:
    """Import an ONNX model as an IR graph with static shapes, in opset-21 form.

    Args:
        model: the model proto.
        shapes: input name -> shape binding dynamic dimensions (or overriding the shape).
        source: how to name the model in error messages (the file name).
        values: input name -> array binding a graph input to a constant, folded at import
            (a compiler specialises on axes, starts, shapes, ``k`` or indices given as
            inputs this way). The array's dtype must be the input's element type and its
            shape must fit the input's static dimensions.

    Raises:
        ModelError: the model is malformed (no graph, undefined values, bad opset).
        UnsupportedOpError: a node uses an operator or domain corefold does not handle.
        ShapeError: an input dimension is unbound, a binding names no input or contradicts
            a static dimension, or a value's shape cannot be determined.
        DataError: a bound value's dtype or shape does not fit its input.
    """
    return Importer(model, shapes or {}, source, values or {}).run()


class Importer:
    """One import. Normalisers call :meth:`emit`, :meth:`const` and :meth:`value`."""

    def __init__(self, model: ModelProto, shapes: dict[str, Sequence[int]], source: str,
                 values: dict[str, np.ndarray] | None = None):
        self.model, self.bindings, self.source = model, dict(shapes), source
        self.values = dict(values or {})
        self.graph = Graph(model.graph.name or "main")
        #: ONNX name -> IR value in the current scope (a ChainMap over the outer scopes
        #: while a subgraph is being inlined)
        self.env: dict[str, Value] | ChainMap[str, Value] = {}
        self.depth = 0  # subgraph nesting depth of the nodes being imported
        self.inlined_nodes = 0  # nodes imported from subgraphs so far (unrolling budget)
        self.reserved: set[str] = set()
        self.used_names: set[str] = set()  # ONNX values read by some node or a graph output
        self.output_names = {o.name for o in model.graph.output}
        self.opset = self._default_opset()

    # -- helpers for normalisers --------------------------------------------------------
    def new_name(self, base: str) -> str:
        """A name used by no IR value or node and by no ONNX value of the model."""
        name, i = base, 0
        while name in self.reserved or self.graph.has_name(name):
            i += 1
            name = f"{base}_{i}"
        self.reserved.add(name)
        return name

    def const(self, data: Any, base: str) -> Value:
        """A new constant holding ``data``."""
        return self.graph.add_constant(self.new_name(base), np.asarray(data))

    def bind_const(self, onnx_name: str, data: np.ndarray) -> Value:
        """Bind an ONNX value name to a new constant."""
        v = self.graph.add_constant(self._value_name(onnx_name), data)
        self.env[onnx_name] = v
        return v

    def alias(self, onnx_name: str, value: Value) -> None:
        """Bind an ONNX value name to an existing value (an inlined subgraph's result). A
        graph output of the model keeps its name through an Identity node."""
        if self.depth == 0 and onnx_name in self.output_names and value.name != onnx_name:
            self.emit("Identity", [value], {}, [onnx_name], f"{onnx_name}_identity")
        else:
            self.env[onnx_name] = value

    def inline(self, body: onnx.GraphProto, inputs: Sequence[Value | None], name: str) -> list[Value]:
        """Import subgraph ``body`` in place: its formal inputs bound to ``inputs``, its
        nodes normalised into the main graph (they may read every value of the enclosing
        scopes), and its outputs returned. Used by If (the taken branch), Loop and Scan
        (once per iteration). O(nodes of the body).

        Raises:
            ModelError: the body is malformed, or unrolling would exceed
                :data:`MAX_INLINED_NODES` nodes.
        """
        if len(inputs) != len(body.input):
            raise ModelError(f"node '{name}': the subgraph takes {len(body.input)} inputs, {len(inputs)} given")
        self.inlined_nodes += len(body.node)
        if self.inlined_nodes > MAX_INLINED_NODES:
            raise UnsupportedOpError(f"node '{name}': unrolling its subgraphs would import more than "
                                     f"{MAX_INLINED_NODES} nodes")
        outer = self.env
        scope: ChainMap[str, Value] = ChainMap({}, outer) if isinstance(outer, dict) else outer.new_child()
        self.env = scope
        self.depth += 1
        try:
            for t in body.initializer:
                scope[t.name] = self.graph.add_constant(
                    self.new_name(t.name), _compact(tensor_to_numpy(t, f"initializer '{t.name}' of node '{name}'")))
            for vi, v in zip(body.input, inputs, strict=True):
                if v is None:
                    raise ModelError(f"node '{name}': subgraph input '{vi.name}' has no value")
                scope[vi.name] = v
            for index, n in enumerate(body.node):
                self._import_node(n, f"{name}/{n.name or n.op_type.lower() + '_' + str(index)}")
            return [self.value(o.name, name) for o in body.output]
        finally:
            self.env = outer
            self.depth -= 1

    def is_used(self, onnx_name: str) -> bool:
        return bool(onnx_name) and onnx_name in self.used_names

    def emit(self, op: str, inputs: Sequence[Value | None], attrs: dict[str, Any],
             outputs: Sequence[str | None], name: str) -> list[Value]:
        """Add an opset-21 node (or fold it into constants) and bind its outputs.

        ``outputs`` are ONNX names to bind (``None``: a fresh internal value). Returns the
        output values.
        """
        inputs = list(inputs)
        while inputs and inputs[-1] is None:
            inputs.pop()
        entry = ops.get(op, where=f"node '{name}'")
        foldable = callable(entry.kernel) and entry.foldable and (
            op == "Shape" and inputs[0].has_static_shape
            or all(v is None or v.is_constant for v in inputs))
        if foldable:
            args = [None if v is None else (v.const if v.is_constant else fill(np.zeros((), v.dtype), v.shape))
                    for v in inputs]
            try:
                results = entry.kernel(attrs, args)
            except Exception as exc:  # noqa: BLE001 - a kernel refusing bad constants
                raise ModelError(f"node '{name}' ({op}): cannot evaluate on its constant inputs: {exc}") from None
            out = []
            for oname, r in zip(outputs, results, strict=False):
                r = _compact(np.asarray(r))
                base = oname if oname else f"{name}_out"
                v = self.graph.add_constant(self.new_name(base) if not oname else self._value_name(oname), r)
                if oname:
                    self.env[oname] = v
                out.append(v)
            return out
        types = self.infer(op, attrs, inputs, name, [o or f"{name}_out{i}" for i, o in enumerate(outputs)])
        vals = []
        for i, oname in enumerate(outputs):
            shape, dtype = types[i]
            vname = self._value_name(oname) if oname else self.new_name(f"{name}_out{i}")
            v = Value(vname, tuple(int(d) for d in shape), dtype)
            vals.append(v)
        node = Node(op, inputs, vals, attrs, name=self._node_name(name, op))
        self.graph.add_node(node)
        for oname, v in zip(outputs, vals, strict=False):
            if oname:
                self.env[oname] = v
        return vals

    def infer(self, op: str, attrs: dict[str, Any], inputs: Sequence[Value | None], name: str,
              out_names: Sequence[str]) -> list[tuple[tuple[int, ...], np.dtype]]:
        """Output shapes and dtypes of an opset-21 node, from the operator table.

        Raises:
            ShapeError: naming the node, when an input that decides the shape is not
                constant or the shapes do not fit the operator.
        """
        what = f"'{out_names[0]}'" + (f" (and {len(out_names) - 1} more)" if len(out_names) > 1 else "")
        what += f", output of node '{name}' ({op})"
        ins = [None if v is None else (v.shape, v.dtype) for v in inputs]
        consts = [None if v is None else v.const for v in inputs]
        types = ops.infer_types(ops.get(op, where=f"node '{name}'"), attrs, ins, consts, what, [None if v is None else v.name for v in inputs])
        if len(types) < len(out_names):
            raise ShapeError(f"node '{name}' ({op}) has {len(out_names)} outputs, the operator gives {len(types)}")
        return types

    def value(self, onnx_name: str, node_name: str) -> Value | None:
        """The IR value bound to an ONNX input name ('' is a missing optional input)."""
        if not onnx_name:
            return None
        if onnx_name not in self.env:
            raise ModelError(f"{self.source}: node '{node_name}' reads '{onnx_name}', which is defined "
                             "by no earlier node, initializer or graph input")
        return self.env[onnx_name]

    # -- the import ---------------------------------------------------------------------
    def run(self) -> Graph:
        g, model = self.graph, self.model
        graph = model.graph
        if not graph.output:
            raise ModelError(f"{self.source}: the model's graph has no outputs (not an ONNX model?)")
        for vi in list(graph.input) + list(graph.output) + list(graph.value_info):
            self.reserved.add(vi.name)
        for t in graph.initializer:
            self.reserved.add(t.name)
        for n in graph.node:
            self.reserved.update(o for o in n.output if o)
        self.used_names = _names_read(graph)

        if graph.sparse_initializer:
            raise UnsupportedOpError(f"{self.source}: sparse initializers are not supported")
        g.metadata = {p.key: p.value for p in model.metadata_props}
        g.opset = 21
        base_dir = str(Path(self.source).parent) if self.source != "<model>" else None
        self._bind_values()
        for t in graph.initializer:
            if t.name in self.env:  # an initializer listed as an input, overridden by a bound value
                continue
            data = _compact(tensor_to_numpy(t, f"initializer '{t.name}'", base_dir))
            self.env[t.name] = g.add_constant(self._claim_onnx(t.name), data)
        self._bind_inputs()
        for index, n in enumerate(graph.node):
            self._import_node(n, n.name or f"{n.op_type.lower()}_{index}")
        for o in graph.output:
            if o.name not in self.env:
                raise ModelError(f"{self.source}: graph output '{o.name}' is produced by no node")
            g.outputs.append(self.env[o.name])
        g.remove_unused_constants()
        return g

    def _import_node(self, n: onnx.NodeProto, name: str) -> None:
        """Normalise one ONNX node into the graph (or fold it), binding its outputs."""
        g = self.graph
        if n.domain not in ("", "ai.onnx"):
            raise UnsupportedOpError(f"node '{name}': operator {n.domain}::{n.op_type} (domain "
                                     f"'{n.domain}') is not supported")
        entry = ops.get(n.op_type, where=f"node '{name}'")
        ins = [self.value(i, name) for i in n.input]
        # what corefold cannot represent is said first, whatever the inputs' types
        if entry.refuse and not (callable(entry.kernel) and all(v is None or v.is_constant for v in ins)):
            raise UnsupportedOpError(f"node '{name}': operator {n.op_type} is not supported: {entry.refuse}")
        check_input_types(n.op_type, self.opset, [None if v is None else (v.name, v.dtype) for v in ins], name)
        attrs = {a.name: attribute_value(n.op_type, a, f"node '{name}' ({n.op_type})") for a in n.attribute}
        outs = list(n.output)
        while outs and not outs[-1]:
            outs.pop()
        node = ops.OnnxNode(n.op_type, name, ins, [o or None for o in outs], attrs)
        before = len(g)
        try:
            if entry.normalise is ops.AS_IS or entry.normalise is ops.NONE:  # NONE: refused unless folded
                self.emit(node.op, node.inputs, node.attrs, node.outputs, node.name)
            else:
                entry.normalise(self, node)
        except (KeyError, IndexError, ValueError, TypeError, AttributeError) as exc:
            # a malformed node (missing attribute or input) in a file that parsed
            raise ModelError(f"node '{name}' ({n.op_type}) is malformed: {type(exc).__name__}: {exc}") from None
        meta = {p.key[len("corefold."):]: p.value for p in getattr(n, "metadata_props", [])
                if p.key.startswith("corefold.")}
        if meta:
            for added in g.nodes[before:]:
                added.meta.update({k: json.loads(v) for k, v in meta.items()})

    def _default_opset(self) -> int:
        """The model's opset of the default domain, as the opset whose semantics apply.

        A model of opset 1 to 5 is read as opset 6 when none of its operators changed
        between its opset and 6 (``onnx.defs`` knows each operator's versions).

        Raises:
            ModelError: the opset is outside 6 to 28 (and not readable as 6).
        """
        versions = {o.domain: o.version for o in self.model.opset_import}
        if "" not in versions and "ai.onnx" not in versions:
            if any(n.domain in ("", "ai.onnx") for n in self.model.graph.node):
                raise ModelError(f"{self.source}: no opset import for the default ONNX domain (not an ONNX model?)")
            return MAX_OPSET  # no default-domain node: the other domains' nodes are refused by name
        v = int(versions.get("", versions.get("ai.onnx")))
        if 1 <= v < MIN_OPSET:
            changed = sorted({n.op_type for n in all_nodes(self.model.graph) if n.domain in ("", "ai.onnx")
                              and since(n.op_type, v) != since(n.op_type, MIN_OPSET)})
            if not changed:
                return MIN_OPSET
            raise ModelError(f"{self.source}: ONNX opset {v} is not supported (corefold reads opsets {MIN_OPSET} to "
                             f"{MAX_OPSET}; {', '.join(changed)} changed since opset {v})")
        if not MIN_OPSET <= v <= MAX_OPSET:
            raise ModelError(f"{self.source}: ONNX opset {v} is not supported (corefold reads opsets "
                             f"{MIN_OPSET} to {MAX_OPSET})")
        return v

    def _bind_values(self) -> None:
        """Bind the inputs the caller gave values for to constants (before initializers: a
        value overrides an initializer's default)."""
        graph = self.model.graph
        declared = {vi.name for vi in graph.input}
        for key in self.values:
            if key in self.bindings:
                raise ShapeError(f"--shape {key} and --value {key}: bind input '{key}' either to a shape or to a value")
            if key not in declared:
                init = {t.name for t in graph.initializer}
                names = [vi.name for vi in graph.input if vi.name not in init]
                raise ShapeError(f"--value {key}=...: the model has no input '{key}' "
                                 f"(inputs: {', '.join(names) or 'none'})")
        for vi in graph.input:
            if vi.name in self.values:
                self._bind_value(vi)

    def _bind_inputs(self) -> None:
        graph = self.model.graph
        real = [vi for vi in graph.input if vi.name not in self.env]
        names = [vi.name for vi in real]
        for key in self.bindings:
            if key not in names:
                raise ShapeError(f"--shape {key}=...: the model has no input '{key}' "
                                 f"(inputs: {', '.join(names) or 'none'})")
        for vi in real:
            dtype, dims = self._input_type(vi)
            bound = self.bindings.get(vi.name)
            if bound is not None:
                bound = tuple(int(b) for b in bound)
                if dims is not None and len(bound) != len(dims):
                    raise ShapeError(f"--shape {vi.name}: {len(bound)} dimensions given, the input has rank {len(dims)}")
                for i, (d, b) in enumerate(zip(dims or [], bound, strict=False)):
                    if isinstance(d, int) and d != b:
                        raise ShapeError(f"--shape {vi.name}: dimension {i} is fixed at {d} in the model, "
                                         f"cannot bind it to {b}")
                shape = bound
            else:
                if dims is None:
                    raise ShapeError(f"graph input '{vi.name}' has an unknown rank; bind its shape with "
                                     f"--shape {vi.name}=D0,D1,...")
                for i, d in enumerate(dims):
                    if not isinstance(d, int):
                        label = f"'{d}'" if d else "unnamed"
                        raise ShapeError(f"graph input '{vi.name}' dimension {i} ({label}) is dynamic; bind it with "
                                         f"--shape {vi.name}=" + ",".join(str(x) if isinstance(x, int) else (x or "?") for x in dims))
                shape = tuple(int(d) for d in dims)
            v = self.graph.add_input(self._claim_onnx(vi.name), shape, dtype)
            self.env[vi.name] = v

    def _input_type(self, vi: onnx.ValueInfoProto) -> tuple[np.dtype, list[int | str | None] | None]:
        """An input's dtype and declared dimensions (an int when static; a name or None when
        dynamic, as is ``dim_value <= 0``, which ONNX Runtime reads as dynamic too); None: rank unknown.

        Raises:
            UnsupportedOpError: the input is not a tensor, or of an unsupported type.
        """
        if not vi.type.HasField("tensor_type"):
            kind = vi.type.WhichOneof("value") or "unknown"
            raise UnsupportedOpError(f"graph input '{vi.name}' is not a tensor (it is a {kind.replace('_type', '')}); "
                                     "corefold handles tensors only")
        tt = vi.type.tensor_type
        dtype = numpy_dtype(tt.elem_type, f"graph input '{vi.name}'")
        if not tt.HasField("shape"):
            return dtype, None
        dims: list[int | str | None] = []
        for d in tt.shape.dim:
            if d.HasField("dim_value") and d.dim_value > 0:
                dims.append(int(d.dim_value))
            else:
                dims.append(d.dim_param or None)
        return dtype, dims

    def _bind_value(self, vi: onnx.ValueInfoProto) -> None:
        """Bind graph input ``vi`` to the constant the caller gave for it.

        Raises:
            DataError: the array's dtype is not the input's, or its shape contradicts a
                static dimension or the rank.
        """
        data = np.asarray(self.values[vi.name])
        dtype, dims = self._input_type(vi)
        if data.dtype != dtype:
            raise DataError(f"--value {vi.name}: the array has dtype {data.dtype}, the input is {dtype}")
        if dims is not None:
            if len(dims) != data.ndim:
                raise DataError(f"--value {vi.name}: the array has rank {data.ndim}, the input has rank {len(dims)}")
            for i, (d, n) in enumerate(zip(dims, data.shape, strict=True)):
                if isinstance(d, int) and d != n:
                    raise DataError(f"--value {vi.name}: dimension {i} is fixed at {d} in the model, the array has {n}")
        self.env[vi.name] = self.graph.add_constant(self._claim_onnx(vi.name), _compact(data))

    def _value_name(self, onnx_name: str) -> str:
        """The IR name of a value an ONNX node defines: its ONNX name in the main graph, a
        fresh one inside inlined subgraphs (a loop body defines its names once per iteration)."""
        return self._claim_onnx(onnx_name) if self.depth == 0 else self.new_name(onnx_name)

    def _claim_onnx(self, name: str) -> str:
        if self.graph.has_name(name):
            raise ModelError(f"{self.source}: value '{name}' is defined twice")
        return name

    def _node_name(self, base: str, op: str) -> str:
        return self.new_name(base or op.lower())


def _names_read(graph: onnx.GraphProto) -> set[str]:
    """Every value name a node of ``graph`` or of its subgraphs reads, and every output of
    them. O(nodes)."""
    names: set[str] = {o.name for o in graph.output}
    for n in graph.node:
        names.update(i for i in n.input if i)
        for a in n.attribute:
            for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                names |= _names_read(sub)
    return names


def _compact(a: np.ndarray) -> np.ndarray:
    """A constant whose elements are all equal, as a stride-0 fill (O(size) check)."""
    if a.size > 1 and not is_fill(a) and a.dtype != object:
        first = a.reshape(-1)[0]
        if bool(np.all(a == first)):
            return fill(first, a.shape)
    return a
