"""A readable text form of a graph that parses back (``parse(to_text(g))`` rebuilds ``g``).

Example::

    graph tiny opset 21
    input x: float32[1, 4]
    const w: float32[4, 2] = [0.5, -1.0, 0.25, 2.0, 1.0, 0.0, -0.5, 3.0]
    const b: float32[2] = fill(0.0)
    node mm = MatMul(x, w) -> (h: float32[1, 2])
    node add = Add(h, b) -> (y: float32[1, 2]) after(mm) meta {"core": [0, 1]}
    node relu = Relu(y) attrs {} -> (z: float32[1, 2])
    output z

Names made of letters, digits and ``_ . / -`` are written bare, any other as a JSON string.
``_`` stands for a missing optional input. Attributes and ``meta`` are JSON objects; a
tensor attribute is ``{"__tensor__": dtype, "shape": [...], "data": [...]}``. A constant
whose data is one value broadcast (stride 0) is written ``fill(v)``.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

from corefold.ir.graph import Graph
from corefold.ir.nodes import Node
from corefold.ir.values import Value

_BARE = re.compile(r"[A-Za-z0-9_.\-/]+")


class TextParseError(ValueError):
    """The text is not a valid graph; the message gives the line number."""


def _name(s: str) -> str:
    return s if _BARE.fullmatch(s) and s != "_" else json.dumps(s)


def _type(v: Value) -> str:
    shape = "?" if v.shape is None else ", ".join(str(d) for d in v.shape)
    return f"{v.dtype.name}[{shape}]"


def _jsonable(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return {"__tensor__": x.dtype.name, "shape": list(x.shape), "data": x.reshape(-1).tolist()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(i) for i in x]
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, bytes):
        return x.decode("utf-8", errors="replace")
    return x


def _from_json(x: Any) -> Any:
    if isinstance(x, dict):
        if "__tensor__" in x:
            return np.array(x["data"], dtype=x["__tensor__"]).reshape(x["shape"])
        return {k: _from_json(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_from_json(i) for i in x]
    return x


def _is_splat(a: np.ndarray) -> bool:
    return a.size > 1 and all(s == 0 for s in a.strides)


def to_text(graph: Graph, max_const_elements: int | None = None) -> str:
    """The text form. With ``max_const_elements``, bigger constants print as ``<N elements>``
    (readable, but no longer parseable). Nodes appear in file order."""
    lines = [f"graph {_name(graph.name)} opset {graph.opset}"]
    for v in graph.inputs:
        lines.append(f"input {_name(v.name)}: {_type(v)}")
    for v in graph.constants.values():
        data = v.const
        if _is_splat(data):
            body = f"fill({json.dumps(data.reshape(-1)[0].item())})"
        elif max_const_elements is not None and data.size > max_const_elements:
            body = f"<{data.size} elements>"
        else:
            body = json.dumps(data.reshape(-1).tolist() if data.dtype != np.bool_ else data.reshape(-1).astype(bool).tolist())
        lines.append(f"const {_name(v.name)}: {_type(v)} = {body}")
    for n in graph.nodes:
        op = f"{n.domain}::{n.op_type}" if n.domain else n.op_type
        ins = ", ".join("_" if v is None else _name(v.name) for v in n.inputs)
        s = f"node {_name(n.name)} = {op}({ins})"
        if n.attrs:
            s += f" attrs {json.dumps(_jsonable(n.attrs), sort_keys=True)}"
        s += " -> (" + ", ".join(f"{_name(v.name)}: {_type(v)}" for v in n.outputs) + ")"
        if n.control_preds:
            s += " after(" + ", ".join(_name(p.name) for p in n.control_preds) + ")"
        if n.meta:
            s += f" meta {json.dumps(_jsonable(n.meta), sort_keys=True)}"
        lines.append(s)
    for v in graph.outputs:
        lines.append(f"output {_name(v.name)}")
    return "\n".join(lines) + "\n"


class _Cursor:
    def __init__(self, text: str, lineno: int):
        self.s, self.i, self.lineno = text, 0, lineno

    def fail(self, msg: str) -> TextParseError:
        return TextParseError(f"line {self.lineno}: {msg} at column {self.i + 1}: {self.s!r}")

    def ws(self) -> None:
        while self.i < len(self.s) and self.s[self.i] == " ":
            self.i += 1

    def peek(self, lit: str) -> bool:
        self.ws()
        return self.s.startswith(lit, self.i)

    def expect(self, lit: str) -> None:
        if not self.peek(lit):
            raise self.fail(f"expected {lit!r}")
        self.i += len(lit)

    def name(self) -> str:
        self.ws()
        if self.i < len(self.s) and self.s[self.i] == '"':
            return self.json()
        m = _BARE.match(self.s, self.i)
        if not m:
            raise self.fail("expected a name")
        self.i = m.end()
        return m.group()

    def json(self) -> Any:
        self.ws()
        try:
            val, end = json.JSONDecoder().raw_decode(self.s, self.i)
        except json.JSONDecodeError as exc:
            raise self.fail(f"bad JSON ({exc.msg})") from None
        self.i = end
        return val

    def type(self) -> tuple[np.dtype, tuple | None]:
        self.ws()
        m = re.compile(r"([a-z0-9_]+)\[([^\]]*)\]").match(self.s, self.i)
        if not m:
            raise self.fail("expected a type like float32[1, 3]")
        self.i = m.end()
        try:
            dtype = np.dtype(m.group(1))
        except TypeError:
            raise self.fail(f"unknown dtype {m.group(1)!r}") from None
        body = m.group(2).strip()
        if body == "?":
            return dtype, None
        dims: list[int | str] = []
        for d in (p.strip() for p in body.split(",")) if body else []:
            dims.append(int(d) if re.fullmatch(r"-?\d+", d) else d)
        return dtype, tuple(dims)

    def end(self) -> bool:
        self.ws()
        return self.i >= len(self.s)


def parse(text: str) -> Graph:
    """Build a graph from its text form.

    Raises:
        TextParseError: a line is malformed or names an undefined value or node.
    """
    graph: Graph | None = None
    env: dict[str, Value] = {}
    by_name: dict[str, Node] = {}
    pending_after: list[tuple[Node, list[str], int]] = []
    pending_inputs: list[tuple[Node, list[str], int]] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        c = _Cursor(line, lineno)
        word = line.split(" ", 1)[0]
        c.i = len(word)
        if word == "graph":
            graph = Graph(c.name())
            if c.peek("opset"):
                c.expect("opset")
                graph.opset = int(c.json())
            continue
        if graph is None:
            raise c.fail("the text must start with 'graph NAME'")
        if word == "input":
            name = c.name()
            c.expect(":")
            dtype, shape = c.type()
            env[name] = graph.add_input(name, shape, dtype)
        elif word == "const":
            name = c.name()
            c.expect(":")
            dtype, shape = c.type()
            c.expect("=")
            if shape is None or not all(isinstance(d, int) for d in shape):
                raise c.fail("a constant needs a static shape")
            if c.peek("fill("):
                c.expect("fill(")
                fill = c.json()
                c.expect(")")
                data = np.broadcast_to(np.array(fill, dtype=dtype), shape)
            else:
                flat = c.json()
                if not isinstance(flat, list):
                    raise c.fail("constant data must be a flat JSON list or fill(v)")
                data = np.array(flat, dtype=dtype)
                if data.size != int(np.prod(shape, dtype=np.int64)):
                    raise c.fail(f"constant '{name}' has {data.size} values for shape {list(shape)}")
                data = data.reshape(shape)
            if name in env:
                raise c.fail(f"'{name}' is defined twice")
            v = Value(name, const=data)
            graph._claim(name)
            graph.constants[name] = v
            env[name] = v
        elif word == "node":
            nname = c.name()
            c.expect("=")
            c.ws()
            m = re.compile(r"(?:([A-Za-z0-9_.]+)::)?([A-Za-z0-9_]+)").match(c.s, c.i)
            if not m:
                raise c.fail("expected an operator type")
            c.i = m.end()
            domain, op = m.group(1) or "", m.group(2)
            c.expect("(")
            in_names: list[str] = []
            while not c.peek(")"):
                in_names.append(c.name())
                if not c.peek(")"):
                    c.expect(",")
            c.expect(")")
            attrs: dict[str, Any] = {}
            if c.peek("attrs"):
                c.expect("attrs")
                attrs = _from_json(c.json())
            c.expect("->")
            c.expect("(")
            outs: list[Value] = []
            while not c.peek(")"):
                oname = c.name()
                c.expect(":")
                dtype, shape = c.type()
                if oname in env:
                    raise c.fail(f"'{oname}' is defined twice")
                outs.append(Value(oname, shape, dtype))
                env[oname] = outs[-1]
                if not c.peek(")"):
                    c.expect(",")
            c.expect(")")
            node = Node(op, [], outs, attrs, name=nname, domain=domain)
            pending_inputs.append((node, in_names, lineno))
            if c.peek("after("):
                c.expect("after(")
                preds = []
                while not c.peek(")"):
                    preds.append(c.name())
                    if not c.peek(")"):
                        c.expect(",")
                c.expect(")")
                pending_after.append((node, preds, lineno))
            if c.peek("meta"):
                c.expect("meta")
                node.meta = _from_json(c.json())
            if nname in by_name:
                raise c.fail(f"node '{nname}' is defined twice")
            try:
                graph.add_node(node)
            except ValueError as exc:
                raise c.fail(str(exc)) from None
            if node.name != nname:
                raise c.fail(f"node name '{nname}' clashes with a value name")
            by_name[nname] = node
        elif word == "output":
            name = c.name()
            if name not in env:
                raise c.fail(f"output '{name}' is not defined")
            graph.outputs.append(env[name])
        else:
            raise c.fail(f"unknown line kind {word!r}")
        if not c.end():
            raise c.fail("unexpected text")
    if graph is None:
        raise TextParseError("empty text: expected 'graph NAME'")
    # inputs resolve after all lines are read: file order need not be topological
    for node, names, lineno in pending_inputs:
        ins: list[Value | None] = []
        for iname in names:
            if iname == "_":
                ins.append(None)
            elif iname not in env:
                raise TextParseError(f"line {lineno}: input '{iname}' of node '{node.name}' is defined nowhere")
            else:
                ins.append(env[iname])
        node.set_inputs(ins)
    for node, preds, lineno in pending_after:
        for p in preds:
            if p not in by_name:
                raise TextParseError(f"line {lineno}: after({p}) names no node")
            graph.add_control_edge(by_name[p], node)
    return graph
