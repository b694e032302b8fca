"""Checks of an operator's facets against its own kernel, for the families' tests.

:func:`check_facets` runs the kernel on concrete inputs and asserts that

* the shape inference (``infer``, through :func:`corefold.ops.infer_types`) gives the
  kernel's output shapes and dtypes;
* the cost facet gives a unit kind and a finite, non-negative amount of work (MACs for
  matrix operators);
* every split axis the ``split`` facet offers is sound: the operator cut in two along it
  (inputs sliced as the axis says, the piece's ``group`` set for grouped axes) and the
  pieces joined (concatenated, or added for a reduction) reproduces the uncut outputs,
  as ``corefold.passes.split`` will rely on;
* the parameter inputs it names exist, and its quantization facet is well formed.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from corefold import ops
from corefold.ops.ort_oracle_test import run_kernel


def _pieces(extent: int) -> list[tuple[int, int]]:
    mid = extent // 2
    return [(0, mid), (mid, extent)] if extent >= 2 else [(0, extent)]


def check_split(op: str, inputs: Sequence[np.ndarray | None], attrs: dict[str, Any], full: list[np.ndarray],
                rtol: float = 1e-5, atol: float = 1e-6, domain: str = "") -> int:
    """Assert every split axis of ``op`` on ``inputs`` is sound (module docstring); return
    how many axes were checked."""
    entry = ops.get(op, domain)
    if not callable(entry.split):
        return 0
    ins = [None if a is None else (tuple(np.shape(a)), np.asarray(a).dtype) for a in inputs]
    outs = [(tuple(r.shape), r.dtype) for r in full]
    axes, _ = entry.split(dict(attrs), ins, outs, list(inputs))
    for ax in axes:
        assert len(ax.inputs) == len(inputs), f"{op} split {ax.name}: {len(ax.inputs)} input cuts for {len(inputs)} inputs"
        parts: list[list[np.ndarray]] = []
        for j, (s, e) in enumerate(_pieces(ax.extent)):
            args = []
            for i, (a, m) in enumerate(zip(inputs, ax.inputs, strict=True)):
                if a is None:
                    args.append(None)
                elif m is None:
                    args.append(None if ax.reduce and i >= 2 and j > 0 else a)
                else:
                    index = [slice(None)] * np.ndim(a)
                    index[m[0]] = slice(s * m[1], e * m[1])
                    args.append(np.asarray(a)[tuple(index)])
            piece_attrs = dict(attrs)
            if ax.scales_group:
                piece_attrs["group"] = e - s
            parts.append(run_kernel(op, args, piece_attrs))
        for k, want in enumerate(full):
            pieces = [p[k] for p in parts]
            got = sum(p.astype(np.float64) for p in pieces) if ax.output is None else np.concatenate(pieces, axis=ax.output[0])
            assert got.shape == want.shape, f"{op} split {ax.name} output {k}: shape {got.shape} != {want.shape}"
            np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=rtol, atol=atol,
                                       err_msg=f"{op} split along {ax.name}")
    return len(axes)


def check_facets(op: str, inputs: Sequence[np.ndarray | None], attrs: dict[str, Any] | None = None,
                 rtol: float = 1e-5, atol: float = 1e-6, domain: str = "") -> list[np.ndarray]:
    """Assert the facets of ``op`` agree with its kernel on ``inputs`` (module docstring);
    every input is treated as a constant. Returns the kernel's outputs."""
    attrs = dict(attrs or {})
    entry = ops.get(op, domain)
    full = run_kernel(op, inputs, attrs)
    ins = [None if a is None else (tuple(np.shape(a)), np.asarray(a).dtype) for a in inputs]
    types = ops.infer_types(entry, attrs, ins, list(inputs))
    for k, r in enumerate(full):
        assert types[k] == (tuple(r.shape), r.dtype), f"{op} output {k}: inferred {types[k]}, kernel {r.shape} {r.dtype}"
    outs = [(tuple(r.shape), r.dtype) for r in full]
    unit, work, macs = ops.work(entry, attrs, ins, outs)
    assert unit in ("matrix", "vector", "dma", "free") and np.isfinite(work) and work >= 0
    assert macs == (int(work) if unit == "matrix" else 0)
    assert isinstance(entry.param_inputs, tuple) and all(0 <= i for i in entry.param_inputs)
    assert isinstance(entry.quant, ops.Quant)
    check_split(op, inputs, attrs, full, rtol, atol, domain)
    return full
