"""corefold IR -> ONNX: opset 21, or the lowest newer opset (up to 28) that accepts every
node written (bfloat16 activations need 22, float8 E8M0 and 2-bit integers 25, operators
born later such as Attention 23, Swish 24, BitCast 26 their own). Opsets 22 to 28 change
nothing of the opset-21 forms corefold writes: they add types, operators and attributes
whose defaults keep the old meaning. The IR version is the lowest that opset needs.

Nodes are written in the graph's file order (passes that reorder nodes rely on it);
control edges are dropped (ONNX has none); JSON-able ``node.meta`` entries become node
``metadata_props`` keyed ``corefold.<key>`` (the importer reads them back). Constants are
initializers, except fills (stride-0, one value) larger than :data:`FILL_LIMIT` elements,
which are written as ConstantOfShape nodes so the file stays small. O(nodes + constant bytes).
"""

from __future__ import annotations

import functools
import json
import os

import numpy as np
import onnx
from onnx import ModelProto, helper

from corefold.errors import ModelError
from corefold.frontend.onnx.protos import make_attribute, numpy_to_tensor, onnx_dtype
from corefold.frontend.onnx.schemas import accepts
from corefold.ir import Graph, Value
from corefold.ops import is_fill

#: the opset corefold writes unless a node needs a newer one, and the newest it may pick
OPSET, MAX_OPSET = 21, 28
#: Fills with more elements than this are exported as ConstantOfShape nodes.
FILL_LIMIT = 16


def to_onnx(graph: Graph) -> ModelProto:
    """The graph as an ONNX model that ``onnx.checker.check_model(full_check=True)`` accepts.

    Raises:
        ModelError: a value has a dtype ONNX cannot hold, or an attribute cannot be written.
    """
    taken = {v.name for v in graph.values()} | {n.name for n in graph.nodes}

    def fresh(base: str) -> str:
        name, i = base, 0
        while name in taken:
            i += 1
            name = f"{base}_{i}"
        taken.add(name)
        return name

    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    out_set = {id(v) for v in graph.outputs}
    renamed: dict[str, str] = {}  # constants that are graph outputs get an internal name
    for v in graph.constants.values():
        name = v.name
        if id(v) in out_set:
            name = renamed[v.name] = fresh(f"{v.name}_const")
        data = v.const
        if is_fill(data) and data.size > FILL_LIMIT:
            shape_name = fresh(f"{name}_shape")
            inits.append(numpy_to_tensor(np.array(data.shape, np.int64), shape_name))
            value = numpy_to_tensor(data.reshape(-1)[:1], "value")
            nodes.append(helper.make_node("ConstantOfShape", [shape_name], [name], name=fresh(f"{name}_fill"),
                                          value=value))
        else:
            inits.append(numpy_to_tensor(data, name))
    for n in graph.nodes:
        what = f"node '{n.name}' ({n.op_type})"
        ins = ["" if v is None else renamed.get(v.name, v.name) for v in n.inputs]
        proto = helper.make_node(n.op_type, ins, [v.name for v in n.outputs], name=n.name,
                                 domain=n.domain or None)
        proto.attribute.extend(make_attribute(n.op_type, k, val, what) for k, val in sorted(n.attrs.items())
                               if val is not None)
        for k, val in n.meta.items():
            try:
                text = json.dumps(val, sort_keys=True)
            except TypeError:
                continue
            proto.metadata_props.add(key=f"corefold.{k}", value=text)
        nodes.append(proto)
    outputs = []
    for v in graph.outputs:
        if v.name in renamed:
            nodes.append(helper.make_node("Identity", [renamed[v.name]], [v.name], name=fresh(f"{v.name}_identity")))
        outputs.append(_value_info(v))
    out_names = {v.name for v in graph.outputs}
    value_info = [_value_info(v) for n in graph.nodes for v in n.outputs if v.name not in out_names]
    g = helper.make_graph(nodes, graph.name, [_value_info(v) for v in graph.inputs], outputs,
                          initializer=inits, value_info=value_info)
    domains = {n.domain for n in graph.nodes if n.domain}
    opsets = [helper.make_opsetid("", export_opset(graph))] + [helper.make_opsetid(d, 1) for d in sorted(domains)]
    model = helper.make_model(g, opset_imports=opsets, producer_name="corefold",
                              ir_version=max(10, helper.find_min_ir_version_for(opsets[:1])))
    for k, val in graph.metadata.items():
        model.metadata_props.add(key=str(k), value=str(val))
    return model


def export_opset(graph: Graph) -> int:
    """The lowest opset from :data:`OPSET` to :data:`MAX_OPSET` whose definitions accept
    every default-domain node of ``graph`` (its input and output types and its attributes);
    :data:`OPSET` when none does (the checker then names the node). O(nodes)."""
    need = OPSET
    for n in graph.nodes:
        if n.domain:
            continue
        ins = tuple(None if v is None else (v.name, v.dtype) for v in n.inputs)
        outs = tuple((v.name, v.dtype) for v in n.outputs)
        attrs = tuple(sorted(k for k, val in n.attrs.items() if val is not None))
        need = max(need, _node_opset(n.op_type, tuple((t[1] if t else None) for t in ins),
                                     tuple(t[1] for t in outs), attrs))
    return need


@functools.lru_cache(maxsize=4096)
def _node_opset(op_type: str, ins: tuple, outs: tuple, attrs: tuple) -> int:
    named = lambda ts: [None if t is None else ("", t) for t in ts]  # noqa: E731
    for v in range(OPSET, MAX_OPSET + 1):
        if accepts(op_type, v, named(ins), named(outs), attrs):
            return v
    return OPSET


def save_model(graph: Graph, path: str | os.PathLike) -> None:
    """Export ``graph`` and write it to ``path`` atomically (temp file, then rename).

    Raises:
        ModelError: as :func:`to_onnx`, or the model exceeds protobuf's 2 GB limit.
        CorefoldError: the output directory does not exist.
    """
    from corefold.io import atomic_output

    model = to_onnx(graph)
    if model.ByteSize() >= 2**31:
        raise ModelError(f"'{path}': the exported model exceeds 2 GB, which a single ONNX file cannot hold")
    with atomic_output(path) as tmp:
        onnx.save(model, str(tmp))


def _value_info(v: Value) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(v.name, onnx_dtype(v.dtype, f"value '{v.name}'"), list(v.shape))
