"""``corefold run MODEL``: run the reference executor, optionally check against ONNX Runtime."""

from __future__ import annotations

import argparse
import sys
import zipfile

import numpy as np

from corefold.cli.common import (
    add_shape_argument,
    atomic_output,
    check_outputs,
    non_negative_int,
    shape_bindings,
    value_bindings,
)
from corefold.errors import CorefoldError, DataError


class ReferenceRunError(CorefoldError):
    """ONNX Runtime, the reference of ``--check``, refused the model or its inputs."""

#: ``--check`` tolerance, the same as the test suite's.
RTOL, ATOL = 1e-4, 1e-5


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="ONNX model file")
    add_shape_argument(p)
    p.add_argument("--inputs", metavar="IN.npz", help="inputs keyed by input name (default: seeded random)")
    p.add_argument("-o", "--output", metavar="OUT.npz", help="write the outputs keyed by output name")
    p.add_argument("--seed", type=non_negative_int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--check", action="store_true",
                   help=f"compare with ONNX Runtime; exit 1 if any output differs beyond rtol {RTOL}, atol {ATOL}")


def load_npz(path: str) -> dict[str, np.ndarray]:
    """Read an .npz of named arrays.

    Raises:
        DataError: the file is missing or not a readable .npz.
    """
    from corefold.io import open_npz

    with open_npz(path, "inputs file", DataError) as z:
        try:
            return {k: z[k] for k in z.files}
        except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
            raise DataError(f"inputs file '{path}' is not a readable .npz ({exc})") from None


def run(args: argparse.Namespace) -> int:
    from corefold.executor import random_inputs
    from corefold.executor import run as execute
    from corefold.frontend.onnx import load_model
    from corefold.ir.liveness import liveness
    from corefold.resources import check_memory

    check_outputs([("-o", args.output)], inputs=[args.model, args.inputs])
    values = value_bindings(args)
    graph = load_model(args.model, shape_bindings(args), values=values)
    check_memory(liveness(graph).peak_bytes(), f"running '{args.model}' (its live activations at the peak)")
    feeds = load_npz(args.inputs) if args.inputs else random_inputs(graph, seed=args.seed)
    outputs = execute(graph, feeds)
    for name, arr in outputs.items():
        print(f"{name}: {arr.dtype.name}{list(arr.shape)}  min {arr.min():.6g}  max {arr.max():.6g}  "
              f"mean {arr.mean():.6g}" if arr.size and np.issubdtype(arr.dtype, np.number)
              else f"{name}: {arr.dtype.name}{list(arr.shape)}")
    if args.output:
        with atomic_output(args.output) as tmp:
            with open(tmp, "wb") as f:
                np.savez(f, **outputs)
        print(f"wrote {args.output}")
    if args.check:
        return _check(args.model, {**feeds, **values}, outputs)  # ONNX Runtime is fed the bound values
    return 0


def _check(model_path: str, feeds: dict[str, np.ndarray], outputs: dict[str, np.ndarray]) -> int:
    import onnxruntime as ort

    try:
        sess = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
        ref = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds), strict=True))
    except Exception as exc:  # ORT raises its own exception types; report them as the reference's failure
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ReferenceRunError(f"--check: ONNX Runtime cannot run '{model_path}': {msg}") from None
    worst_ok = True
    for name, got in outputs.items():
        want = ref[name]
        if got.shape != want.shape:
            print(f"check {name}: shape {list(got.shape)} differs from ONNX Runtime's {list(want.shape)}")
            worst_ok = False
            continue
        g64, w64 = got.astype(np.float64), want.astype(np.float64)
        same_nan = np.isnan(g64) & np.isnan(w64)  # NaN where ONNX Runtime has NaN is agreement
        same_inf = np.isinf(g64) & (g64 == w64)
        diff = np.where(same_nan | same_inf, 0.0, np.abs(g64 - w64))
        diff = np.nan_to_num(diff, nan=np.inf)
        max_abs = float(diff.max()) if diff.size else 0.0
        rel = diff / np.maximum(np.abs(np.nan_to_num(w64)), 1e-30)
        max_rel = float(rel.max()) if rel.size else 0.0
        ok = bool(np.all(same_nan | same_inf | np.isclose(g64, w64, rtol=RTOL, atol=ATOL)))
        worst_ok &= ok
        print(f"check {name}: max abs error {max_abs:.3g}, max rel error {max_rel:.3g} vs ONNX Runtime: "
              f"{'ok' if ok else 'MISMATCH'} (rtol {RTOL}, atol {ATOL})")
    if not worst_ok:
        print("check failed: outputs differ from ONNX Runtime", file=sys.stderr)
        return 1
    return 0
