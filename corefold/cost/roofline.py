"""Roofline operator times on a GPU-like target (``kind = "gpu"``, SPEC M2's device).

For an operator ``o`` with ``F(o)`` floating point operations and ``B(o)`` bytes touched
(inputs, weights and outputs) on a device with peak rate ``P`` and memory bandwidth ``W``::

    time(o) = launch + max(F(o) / P(o), B(o) / W)
    P(o)    = tensor_flops  if o is matrix work on 16-bit or 8-bit inputs
              fp32_flops    otherwise (fp32 matrix work, element-wise work)

so matrix operators are compute-bound and element-wise ones bandwidth-bound, as on a
real GPU. Shape-only operators (Reshape, Flatten, ...; aten views) are free: no kernel.
Swap nodes (``corefold.memory`` SwapOut/SwapIn) take ``launch + bytes / host_link``
(:meth:`~corefold.target.model.Device.host_transfer_seconds`) on the host link, not the
compute stream. FLOPs come from :func:`corefold.cost.model.op_cost`'s formulas, and from
:mod:`corefold.cost.aten` for aten-domain operators. O(1) per node.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from corefold import ops
from corefold.cost.aten import aten_flops
from corefold.ir import Node
from corefold.ir.domains import ATEN_DOMAIN, MEMORY_DOMAIN
from corefold.target import Target

#: Element types whose matrix work runs on tensor cores.
TENSOR_CORE_DTYPES = frozenset({"float16", "bfloat16", "int8", "uint8", "float8_e4m3fn", "float8_e5m2"})

#: Memory-domain operators that move data over the host link.
HOST_COPY_OPS = frozenset({"SwapOut", "SwapIn"})


def is_view(node: Node) -> bool:
    """Whether ``node`` only reinterprets its first input's storage (no kernel, no memory)."""
    return bool(node.meta.get("view"))


def is_free(node: Node) -> bool:
    """Whether the operator table books ``node`` as shape-only (cost unit "free")."""
    entry = ops.lookup(node.op_type, node.domain)
    return entry is not None and entry.cost is not ops.NONE and entry.cost.unit == "free"


def roofline(base, node: Node, target: Target):
    """``base`` (an :class:`~corefold.cost.model.OpCost` from the generic formulas) with
    its FLOPs and time set by the roofline of ``target.device``."""
    dev = target.device
    if node.domain == MEMORY_DOMAIN and node.op_type in HOST_COPY_OPS:
        nbytes = sum(v.nbytes for v in node.inputs if v is not None)
        return replace(base, flops=0, unit="dma", work=float(nbytes),
                       compute_seconds=dev.host_transfer_seconds(nbytes))
    if is_view(node) or is_free(node):
        return replace(base, compute_seconds=0.0)
    flops = base.flops
    matrix = base.unit == "matrix"
    if node.domain == ATEN_DOMAIN:
        flops, matrix = aten_flops(node)
    peak = dev.fp32_flops
    if matrix:
        dtypes = {np.dtype(v.dtype).name for v in node.inputs if v is not None}
        if dtypes and dtypes <= TENSOR_CORE_DTYPES:
            peak = dev.tensor_flops
    seconds = dev.launch_seconds + max(flops / peak, base.total_bytes / dev.memory_bytes_per_s)
    return replace(base, flops=int(flops), unit="matrix" if matrix else base.unit, compute_seconds=seconds)
