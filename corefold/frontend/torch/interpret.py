"""Run an imported graph with PyTorch's own aten operators.

Each node calls the aten overload it was imported from (``meta["aten"]``) with its
recorded arguments (``meta["args"]``, ``meta["kwargs"]``; ``{"t": k}`` is input ``k``);
``corefold.memory`` nodes copy (SwapOut, SwapIn) or compress and decompress with the same
arithmetic as :mod:`corefold.ops.defs.memory`. This checks a transformed graph
against the original with torch itself: the values must be identical for swaps. O(V + E)
aten calls.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from corefold.errors import UnsupportedOpError
from corefold.ir import Graph, Node
from corefold.ir.domains import MEMORY_DOMAIN

_FLT_MIN = float(np.finfo(np.float32).tiny)


def _decode(x: Any, ins: list) -> Any:
    if isinstance(x, dict):
        if "t" in x:
            return ins[x["t"]]
        for key in ("dtype", "layout", "memory_format"):
            if key in x:
                return getattr(torch, x[key])
        if "device" in x:
            return torch.device(x["device"])
        return {k: _decode(v, ins) for k, v in x.items()}
    if isinstance(x, list):
        return [_decode(i, ins) for i in x]
    return x


def _aten(name: str):
    parts = name.split(".")
    if len(parts) != 3 or parts[0] != "aten":
        raise UnsupportedOpError(f"cannot run {name!r}: not an aten overload")
    return getattr(getattr(torch.ops.aten, parts[1]), parts[2])


def _memory(node: Node, ins: list) -> list:
    op, fmt = node.op_type, node.attrs.get("format")
    if op in ("SwapOut", "SwapIn"):
        return [x.clone() for x in ins]
    x = ins[0]
    if op == "Compress":
        if fmt in ("fp16", "bf16"):
            return [x.to(torch.float16 if fmt == "fp16" else torch.bfloat16)]
        top = 448.0 if fmt == "fp8" else 127.0
        scale = torch.clamp_min(x.abs().max() / torch.tensor(top, dtype=torch.float32), _FLT_MIN)
        y = x / scale
        q = torch.round(y).clamp(-127, 127).to(torch.int8) if fmt == "int8" \
            else y.clamp(-top, top).to(torch.float8_e4m3fn)
        return [q, scale]
    if op == "Decompress":
        y = x.to(torch.float32)
        return [y * ins[1] if len(ins) > 1 else y]
    raise UnsupportedOpError(f"node '{node.name}': unknown {MEMORY_DOMAIN} operator {op}")


def run_torch(graph: Graph, feeds: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Outputs of ``graph`` for ``feeds`` (graph input name -> tensor), by output name.

    Raises:
        UnsupportedOpError: a node without a recorded aten overload.
    """
    env: dict[int, torch.Tensor] = {}
    for v in graph.inputs:
        env[id(v)] = feeds[v.name]
    for v in graph.constants.values():
        env[id(v)] = torch.from_numpy(np.array(v.const))
    for node in graph.topological_order():
        ins = [env[id(v)] if v is not None else None for v in node.inputs]
        if node.domain == MEMORY_DOMAIN:
            outs = _memory(node, ins)
        else:
            if "aten" not in node.meta:
                raise UnsupportedOpError(f"node '{node.name}' ({node.op_type}) has no aten overload to run")
            kwargs = {k: _decode(v, ins) for k, v in node.meta.get("kwargs", {}).items()}
            res = _aten(node.meta["aten"])(*_decode(node.meta["args"], ins), **kwargs)
            picks = node.meta.get("outputs")
            outs = [res[i] for i in picks] if picks is not None else [res]
        for v, t in zip(node.outputs, outs, strict=True):
            env[id(v)] = t
    return {v.name: env[id(v)] for v in graph.outputs}
