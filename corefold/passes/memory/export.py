"""The transformed graph in a form ONNX Runtime runs: memory nodes as standard operators.

ONNX has no host memory and no control edges, so for ``OUT.onnx``:

* ``SwapOut`` and ``SwapIn`` become ``Identity`` (one per tensor): the values are
  unchanged, and the nodes stay visible, named as in the text form;
* ``Compress`` and ``Decompress`` become the same arithmetic in standard operators, so ONNX
  Runtime computes bit-identical compressed values: fp16 and bf16 as ``Cast`` pairs; fp8 as
  ``scale = Max(ReduceMax(Abs(x)) / 448, FLT_MIN)``, ``Cast(x / scale)`` to float8e4m3fn
  (saturating) and ``Cast(q) * scale``; int8 as ``Clip(Round(x / scale), -127, 127)`` cast
  to int8, with scale over 127;
* the control edges are kept in the node order: the nodes are written in the stable
  topological order over data and control edges, which is a valid ONNX order.

O(V + E).
"""

from __future__ import annotations

import numpy as np

from corefold.ir import Graph, Node, Value
from corefold.ir.domains import MEMORY_DOMAIN
from corefold.ops.defs.memory import FLT_MIN, compress_format


def to_standard_ops(graph: Graph) -> Graph:
    """Rewrite ``graph``'s memory nodes in place as standard ONNX operators (see the module
    doc), keeping the node order. Returns ``graph``."""
    order = graph.topological_order()
    new_order: list[Node] = []
    consts: dict[str, Value] = {}

    def const(name: str, value, dtype: str) -> Value:
        if name not in consts:
            consts[name] = graph.add_constant(name, np.array(value, dtype=dtype))
        return consts[name]

    def add(op: str, inputs: list, like: Value, attrs: dict | None, name: str, dtype=None, shape=None) -> Value:
        node = graph.make_node(op, inputs, attrs, name=name)
        out = node.outputs[0]
        out.shape = like.shape if shape is None else shape
        out.dtype = like.dtype if dtype is None else np.dtype(dtype)
        new_order.append(node)
        return out

    f32 = "float32"
    for node in order:
        if node.domain != MEMORY_DOMAIN:
            new_order.append(node)
            continue
        ins, outs, base = list(node.inputs), list(node.outputs), node.name
        if node.op_type in ("SwapOut", "SwapIn"):
            new = [add("Identity", [x], y, None, base) for x, y in zip(ins, outs, strict=True)]
        elif node.op_type == "Compress":
            fmt = compress_format(node.attrs["format"])
            x = ins[0]
            if not fmt.scale_max:
                new = [add("Cast", [x], outs[0], {"to": fmt.dtype.name}, base)]
            else:
                amax = add("ReduceMax", [add("Abs", [x], x, None, f"{base}_abs")], outs[1], {"keepdims": 0},
                           f"{base}_amax")
                ratio = add("Div", [amax, const(f"memory_{fmt.name}_max", fmt.scale_max, f32)], outs[1], None,
                            f"{base}_ratio")
                scale = add("Max", [ratio, const("memory_flt_min", FLT_MIN, f32)], outs[1], None, f"{base}_scale")
                y = add("Div", [x, scale], x, None, f"{base}_div")
                if fmt.name == "int8":
                    y = add("Clip", [add("Round", [y], x, None, f"{base}_round"), const("memory_int8_lo", -127.0, f32),
                                     const("memory_int8_hi", 127.0, f32)], x, None, f"{base}_clip")
                new = [add("Cast", [y], outs[0], {"to": fmt.dtype.name}, base), scale]
        elif node.op_type == "Decompress":
            fmt = compress_format(node.attrs["format"])
            to = node.attrs.get("to", f32)
            if not fmt.scale_max:
                new = [add("Cast", [ins[0]], outs[0], {"to": to}, base)]
            else:
                wide = add("Cast", [ins[0]], outs[0], {"to": f32}, f"{base}_cast", dtype=f32)
                new = [add("Mul", [wide, ins[1]], outs[0], None, base)]
        else:
            raise ValueError(f"node '{base}': unknown {MEMORY_DOMAIN} operator {node.op_type}")
        for old, value in zip(outs, new, strict=True):
            graph.replace_all_uses(old, value)
        graph.remove_node(node)
    graph.reorder(new_order)
    return graph
