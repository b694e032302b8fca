"""A PyTorch joint forward and backward fx graph (aten operators) into the IR.

Every ``call_function`` node becomes one IR node whose outputs take their shapes and
dtypes from the fake tensors (``meta["val"]``); ``getitem`` picks an output. Operators with
an ONNX counterpart become that ONNX operator (:data:`ONNX_FORMS`: Conv, MatMul, Gemm,
Relu, Add, Softmax, MaxPool, LayerNormalization, ...) so that the cost model's formulas
apply; the others stay in :data:`~corefold.ir.domains.ATEN_DOMAIN` under their aten name
(``convolution_backward``, ``native_batch_norm_backward``, ``native_dropout``, ...), costed
by :mod:`corefold.cost.aten`, with no kernel. Aten views (view, t, permute, expand, slice,
...) get ``meta["view"]``: they share their input's memory. Each node also keeps
``meta["aten"]`` (the overload) and ``meta["args"]`` (its arguments with ``{"t": k}`` for
IR input ``k``) so that :mod:`corefold.frontend.torch.interpret` can run the graph with
PyTorch, and ``meta["phase"]``: ``forward`` for the ancestors of the loss and of the buffer
updates, else ``backward``.

Placeholders become graph inputs named after the parameters, buffers and user inputs;
outputs are the loss, the mutated buffers and the gradients (``grad.<parameter>``). O(V + E).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from corefold.errors import UnsupportedOpError
from corefold.ir import Graph, Value
from corefold.ir.domains import ATEN_DOMAIN

#: aten operators whose outputs are views of their first input.
VIEW_ATEN = frozenset({
    "view", "_unsafe_view", "t", "permute", "transpose", "expand", "alias", "detach", "squeeze",
    "unsqueeze", "slice", "select", "as_strided", "unfold", "diagonal", "narrow", "view_as", "split",
    "split_with_sizes", "unbind", "chunk", "_reshape_alias", "lift_fresh",
})


def numpy_dtype(dtype) -> np.dtype:
    """The NumPy dtype of a torch dtype (bfloat16 and float8 via ml_dtypes).

    Raises:
        UnsupportedOpError: a dtype the IR cannot hold (complex, quantized...).
    """
    import ml_dtypes

    name = str(dtype).replace("torch.", "")
    special = {"bfloat16": ml_dtypes.bfloat16, "float8_e4m3fn": ml_dtypes.float8_e4m3fn, "bool": np.bool_}
    try:
        return np.dtype(special.get(name, name))
    except TypeError:
        raise UnsupportedOpError(f"torch dtype {name} has no IR counterpart") from None


def encode(x: Any, index_of) -> Any:
    """An fx argument as JSON: tensors ``{"t": k}``, dtypes, devices, layouts, formats tagged."""
    import torch

    if hasattr(x, "op") and hasattr(x, "meta"):  # an fx Node
        return {"t": index_of(x)}
    if isinstance(x, (list, tuple)):
        return [encode(i, index_of) for i in x]
    if isinstance(x, torch.dtype):
        return {"dtype": str(x).replace("torch.", "")}
    if isinstance(x, torch.device):
        return {"device": str(x)}
    if isinstance(x, torch.layout):
        return {"layout": str(x).replace("torch.", "")}
    if isinstance(x, torch.memory_format):
        return {"memory_format": str(x).replace("torch.", "")}
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    raise UnsupportedOpError(f"an argument of type {type(x).__name__} ({x!r}) cannot be recorded")


def _tensors(val) -> list[tuple[int | None, Any]]:
    """(tuple index or None, fake tensor) for each tensor a node produces."""
    import torch

    if isinstance(val, torch.Tensor):
        return [(None, val)]
    if isinstance(val, (list, tuple)):
        return [(i, v) for i, v in enumerate(val) if isinstance(v, torch.Tensor)]
    return []


class _Importer:
    def __init__(self, gm, names: dict[str, str], output_names: list[str]):
        self.gm = gm
        self.graph = Graph("torch_joint")
        self.names = names
        self.output_names = output_names
        self.values: dict[Any, Value] = {}              # fx node -> value (single tensor)
        self.multi: dict[Any, dict[int, Value]] = {}    # fx node -> tuple index -> value
        self.consts = 0
        self.out_name: dict[tuple, str] = {}  # (fx node, tuple index or None) -> output name

    def const(self, data: np.ndarray, name: str) -> Value:
        self.consts += 1
        return self.graph.add_constant(f"{name}_c{self.consts}", data)

    def value(self, x) -> Value:
        if x not in self.values:
            raise UnsupportedOpError(f"fx node '{x.name}' is used as a tensor but produced none")
        return self.values[x]

    def run(self) -> Graph:
        import operator

        fx_nodes = list(self.gm.graph.nodes)
        out_node = next(n for n in fx_nodes if n.op == "output")
        # the forward phase: what the loss and the buffer updates need (not the gradients)
        forward: set = set()
        for x, name in zip(out_node.args[0], self.output_names, strict=False):
            if x is not None and not name.startswith("grad."):
                forward |= _ancestors(x)
        for x, name in zip(out_node.args[0], self.output_names, strict=False):
            if x is None or x.op != "call_function":
                continue
            key = (x.args[0], x.args[1]) if x.target is operator.getitem else (x, None)
            self.out_name.setdefault(key, name)
        for n in fx_nodes:
            if n.op == "placeholder":
                val = n.meta["val"]
                self.values[n] = self.graph.add_input(self.names.get(n.name, n.name), tuple(val.shape),
                                                      numpy_dtype(val.dtype))
            elif n.op == "call_function":
                self.call(n, "forward" if n in forward else "backward")
            elif n.op == "get_attr":
                raise UnsupportedOpError(f"fx get_attr '{n.target}': a constant the trace did not lift")
        outs = []
        for x, name in zip(out_node.args[0], self.output_names, strict=False):
            if x is None:
                continue
            v = self.value(x)
            if v in outs or v.producer is None or v.name != name:
                ident = self.graph.make_node("Identity", [v], name=f"out_{name}", output_names=[name])
                ident.outputs[0].shape, ident.outputs[0].dtype = v.shape, v.dtype
                ident.meta.update({"view": True, "phase": "backward", "aten": "aten.alias.default",
                                   "args": [{"t": 0}]})
                v = ident.outputs[0]
            outs.append(v)
        self.graph.outputs = outs
        return self.graph

    def call(self, n, phase: str) -> None:
        import operator

        if n.target is operator.getitem:
            parent, index = n.args
            if parent in self.multi and index in self.multi[parent]:
                self.values[n] = self.multi[parent][index]
            return
        target = n.target
        packet = getattr(target, "_overloadpacket", None)
        if packet is None:
            raise UnsupportedOpError(f"fx node '{n.name}' calls {target}, not an aten operator")
        aten_name = packet.__name__
        produced = _tensors(n.meta.get("val"))
        if not produced:
            return  # no tensor result (asserts, profiler marks)
        form = ONNX_FORMS.get(aten_name)
        spec = form(self, n) if form is not None else None
        if spec is None:
            inputs = _tensor_args(n)
            spec = (aten_name, ATEN_DOMAIN, [self.value(x) for x in inputs], _aten_attrs(n), inputs)
        op_type, domain, ir_inputs, attrs, fx_inputs = spec
        names = [self.out_name.get((n, index)) or (f"{n.name}.out" if index is None else f"{n.name}.{index}")
                 for index, _ in produced]
        node = self.graph.make_node(op_type, ir_inputs, attrs, num_outputs=len(produced), name=n.name,
                                    output_names=names, domain=domain)
        outs = []
        for (index, fake), v in zip(produced, node.outputs, strict=True):
            v.shape, v.dtype = tuple(fake.shape), numpy_dtype(fake.dtype)
            outs.append((index, v))

        def index_of(x) -> int:
            return fx_inputs.index(x)

        node.meta.update({"aten": str(target), "args": encode(list(n.args), index_of), "phase": phase})
        if n.kwargs:
            node.meta["kwargs"] = {k: encode(v, index_of) for k, v in n.kwargs.items()}
        if len(outs) > 1 or outs[0][0] is not None:
            node.meta["outputs"] = [i for i, _ in outs]
        if aten_name in VIEW_ATEN:
            node.meta["view"] = True
        if len(outs) == 1 and outs[0][0] is None:
            self.values[n] = outs[0][1]
        else:
            self.multi[n] = dict(outs)


def _ancestors(root) -> set:
    seen, stack = set(), [root]
    while stack:
        x = stack.pop()
        if x in seen:
            continue
        seen.add(x)
        stack.extend(x.all_input_nodes)
    return seen


def _tensor_args(n) -> list:
    """The fx tensor arguments of ``n`` in argument order (lists flattened), without repeats."""
    out: list = []

    def walk(x):
        if hasattr(x, "op") and hasattr(x, "meta"):
            if x not in out:
                out.append(x)
        elif isinstance(x, (list, tuple)):
            for i in x:
                walk(i)
        elif isinstance(x, dict):
            for i in x.values():
                walk(i)

    walk(list(n.args))
    walk(dict(n.kwargs))
    return out


def _aten_attrs(n) -> dict:
    """Attributes the cost formulas of aten-domain operators read."""
    if n.target._overloadpacket.__name__ == "convolution_backward":
        return {"output_mask": [int(bool(b)) for b in n.args[-1]]}
    return {}


# -- ONNX forms ------------------------------------------------------------------------------
# A form returns (op_type, domain, IR inputs, attributes, the fx nodes of the IR inputs in
# the same order: meta["args"] refers to IR input k as {"t": k}).
def _plain(op: str, arity: int = 1, **fixed):
    def form(imp: _Importer, n):
        xs = list(n.args[:arity])
        if not all(hasattr(x, "meta") for x in xs) or n.kwargs:
            return None
        return op, "", [imp.value(x) for x in xs], dict(fixed), xs
    return form


def _binary(op: str):
    def form(imp: _Importer, n):
        if len(n.args) != 2 or n.kwargs.get("alpha", 1) != 1:
            return None
        a, b = n.args
        if not hasattr(a, "meta"):
            return None
        if hasattr(b, "meta"):
            return op, "", [imp.value(a), imp.value(b)], {}, [a, b]
        if isinstance(b, (int, float)) and not isinstance(b, bool):
            va = imp.value(a)
            return op, "", [va, imp.const(np.array(b, dtype=va.dtype), n.name)], {}, [a]
        return None
    return form


def _reshape(imp: _Importer, n):
    x, shape = n.args[0], n.args[1]
    return "Reshape", "", [imp.value(x), imp.const(np.array(list(shape), np.int64), n.name)], {}, [x]


def _conv(imp: _Importer, n):
    x, w, b, stride, padding, dilation, transposed, _, groups = n.args
    if transposed:
        return None
    k = list(imp.value(w).shape[2:])
    ins, fx = [imp.value(x), imp.value(w)], [x, w]
    if b is not None:
        ins.append(imp.value(b))
        fx.append(b)
    attrs = {"strides": list(stride), "pads": list(padding) * 2, "dilations": list(dilation),
             "group": int(groups), "kernel_shape": k}
    return "Conv", "", ins, attrs, fx


def _addmm(imp: _Importer, n):
    if n.kwargs:
        return None
    bias, a, b = n.args[:3]
    return "Gemm", "", [imp.value(a), imp.value(b), imp.value(bias)], {}, [a, b, bias]


def _softmax(op: str):
    def form(imp: _Importer, n):
        return op, "", [imp.value(n.args[0])], {"axis": int(n.args[1])}, [n.args[0]]
    return form


def _maxpool(imp: _Importer, n):
    x, k = n.args[0], list(n.args[1])
    stride = list(n.args[2]) if len(n.args) > 2 and n.args[2] else k
    pad = list(n.args[3]) if len(n.args) > 3 else [0] * len(k)
    dil = list(n.args[4]) if len(n.args) > 4 else [1] * len(k)
    ceil = int(bool(n.args[5])) if len(n.args) > 5 else 0
    return "MaxPool", "", [imp.value(x)], {"kernel_shape": k, "strides": stride, "pads": pad * 2,
                                           "dilations": dil, "ceil_mode": ceil}, [x]


def _reduce(op: str):
    def form(imp: _Importer, n):
        if n.kwargs or len(n.args) < 2 or n.args[1] is None:
            return None
        x = n.args[0]
        keep = int(bool(n.args[2])) if len(n.args) > 2 else 0
        axes = imp.const(np.array(list(n.args[1]), np.int64), n.name)
        return op, "", [imp.value(x), axes], {"keepdims": keep}, [x]
    return form


def _embedding(imp: _Importer, n):
    w, idx = n.args[0], n.args[1]
    return "Gather", "", [imp.value(w), imp.value(idx)], {}, [w, idx]


def _layer_norm(imp: _Importer, n):
    x, shape, w, b, eps = n.args
    if w is None or b is None:
        return None
    return "LayerNormalization", "", [imp.value(x), imp.value(w), imp.value(b)], \
        {"axis": -len(shape), "epsilon": float(eps)}, [x, w, b]


def _gelu(imp: _Importer, n):
    approx = n.kwargs.get("approximate", n.args[1] if len(n.args) > 1 else "none")
    return "Gelu", "", [imp.value(n.args[0])], {"approximate": approx}, [n.args[0]]


#: aten name -> converter to the ONNX form (None from a converter: keep the aten form).
ONNX_FORMS = {
    "convolution": _conv, "mm": _plain("MatMul", 2), "bmm": _plain("MatMul", 2), "addmm": _addmm,
    "relu": _plain("Relu"), "tanh": _plain("Tanh"), "sigmoid": _plain("Sigmoid"), "exp": _plain("Exp"),
    "neg": _plain("Neg"), "sqrt": _plain("Sqrt"), "gelu": _gelu,
    "add": _binary("Add"), "sub": _binary("Sub"), "mul": _binary("Mul"), "div": _binary("Div"),
    "_softmax": _softmax("Softmax"), "_log_softmax": _softmax("LogSoftmax"),
    "view": _reshape, "_unsafe_view": _reshape, "max_pool2d_with_indices": _maxpool,
    "mean": _reduce("ReduceMean"), "sum": _reduce("ReduceSum"), "embedding": _embedding,
    "native_layer_norm": _layer_norm,
}


def from_joint(gm, input_names: dict[str, str], output_names: list[str]) -> Graph:
    """The IR of an aot joint graph module ``gm``.

    Args:
        gm: an ``fx.GraphModule`` from ``aot_export_module(..., trace_joint=True)`` whose
            placeholders and nodes carry fake tensors in ``meta["val"]``.
        input_names: placeholder name -> graph input name.
        output_names: a name per output; gradients are named ``grad.*``.

    Raises:
        UnsupportedOpError: a node that is not an aten operator, or an argument or dtype
            the IR cannot record.
    """
    return _Importer(gm, input_names, output_names).run()
