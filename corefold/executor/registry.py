"""The kernel registry.

A kernel is ``fn(attrs, inputs) -> list[np.ndarray]``: ``attrs`` is the node's attribute
dict in ONNX opset-21 form (the importer normalises older opsets), ``inputs`` the input
arrays in order (``None`` for a missing optional input). It returns at least as many arrays
as the node has outputs (extra ones are dropped, e.g. Dropout's mask). Kernels never
modify their inputs: constants may be read-only stride-0 broadcasts.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

Kernel = Callable[[dict[str, Any], list["np.ndarray | None"]], list[np.ndarray]]

#: op_type -> kernel, for the default ONNX domain; ``"domain::op_type"`` for other domains.
KERNELS: dict[str, Kernel] = {}


def kernel_key(op_type: str, domain: str = "") -> str:
    """The :data:`KERNELS` key of an operator: its type, prefixed ``domain::`` outside ONNX's."""
    return f"{domain}::{op_type}" if domain else op_type


def kernel(*op_types: str, domain: str = "") -> Callable[[Kernel], Kernel]:
    """Register the decorated function as the kernel of each of ``op_types`` (in ``domain``)."""

    def register(fn: Kernel) -> Kernel:
        for op in (kernel_key(o, domain) for o in op_types):
            if op in KERNELS:
                raise ValueError(f"kernel for {op} registered twice")
            KERNELS[op] = fn
        return fn

    return register


def load_all() -> dict[str, Kernel]:
    """Import every kernel module (they register on import) and return the registry."""
    import importlib
    import pkgutil

    from corefold.executor import kernels as pkg

    for mod in pkgutil.iter_modules(pkg.__path__):
        if not mod.name.endswith("_test"):
            importlib.import_module(f"{pkg.__name__}.{mod.name}")
    return KERNELS
