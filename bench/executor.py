"""Reference executor vs ONNX Runtime: time ratio and largest error per model.

For each of the nine models under ``<onnx>/backend/test/data/light`` plus two models built
here with random seeded weights (a MobileNet-style CNN and a transformer encoder block, whose
outputs are far from the light models' near-uniform ones, so the error column means
something), the model is imported with ``corefold.frontend.onnx.load_model`` and run by
``corefold.executor.run`` and by ONNX Runtime on the same seeded input. Each side gets one
warm-up run, then the median of ``--runs`` timed runs; corefold and ORT single-threaded take
turns so that load from other processes hits both alike, ORT default threads runs alone
afterwards (its idle threads spin and would slow the others). ORT
sessions are built once, with ``intra_op_num_threads=1`` (the headline peer: the executor's own loop is single threaded)
and with ORT's default thread count.

The light models' weights are single-value fills, which the importer keeps as stride-0
broadcasts and the Conv kernel then computes as one channel broadcast (exact, and far
cheaper than ORT's full convolution). To time the general kernel path that real weights
take, the bench by default materialises every such constant as a dense array first
(``--weights dense``); ``--weights as-imported`` times the graph exactly as ``corefold run``
sees it. With dense weights squeezenet's error column is large: its final Softmax over
~1e9 logits turns the ulp-level channel differences of an OpenBLAS convolution into
different probabilities (see ``_conv_fill`` in corefold/executor/kernels/conv.py).

NumPy's BLAS thread count is set by ``--blas-threads`` (default 1) through the
``OPENBLAS_NUM_THREADS``/``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` variables before NumPy loads.

Usage::

    python bench/executor.py [--runs 7] [--blas-threads 1] [--weights dense] [--models resnet,vgg] [--json out.json]
"""

from __future__ import annotations

import argparse
import os
import sys


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=7, help="timed runs per side (median reported)")
    p.add_argument("--blas-threads", type=int, default=1, help="NumPy BLAS threads (default 1)")
    p.add_argument("--models", default="", help="comma-separated substrings selecting models")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--weights", choices=["dense", "as-imported"], default="dense",
                   help="dense: materialise single-value constants (general kernel path); as-imported: as corefold run")
    p.add_argument("--json", default=None, help="also write the results to this JSON file")
    return p.parse_args(argv)


ARGS = parse_args() if __name__ == "__main__" else None
if ARGS is not None:  # must precede the NumPy import
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(ARGS.blas_threads)

import json  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from corefold.executor import random_inputs, run  # noqa: E402
from corefold.frontend.onnx import load_model  # noqa: E402

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


# -- extra models, random seeded weights ------------------------------------------------------
class _Builder:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.count = [], [], 0

    def weight(self, *shape: int, scale: float | None = None) -> str:
        fan_in = math.prod(shape[1:]) if len(shape) > 1 else shape[0]
        scale = scale if scale is not None else 1.0 / math.sqrt(fan_in)
        return self.const((self.rng.standard_normal(shape) * scale).astype(np.float32))

    def const(self, a: np.ndarray) -> str:
        self.count += 1
        name = f"w{self.count}"
        self.inits.append(numpy_helper.from_array(np.asarray(a), name))
        return name

    def op(self, op_type: str, inputs: list[str], **attrs) -> str:
        self.count += 1
        out = f"t{self.count}"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=f"n{self.count}", **attrs))
        return out

    def model(self, name: str, x: tuple[str, list], y: str) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, [helper.make_tensor_value_info(x[0], TensorProto.FLOAT, x[1])],
                                  [helper.make_tensor_value_info(y, TensorProto.FLOAT, None)], self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
        m.ir_version = 10
        return m


def mobilenet_like(seed: int) -> onnx.ModelProto:
    """Depthwise-separable CNN at 224x224: Conv/BN/HardSwish, depthwise convs, global pool,
    a nearest Resize branch, Gemm head."""
    b = _Builder(seed)

    def bn(t, c):
        return b.op("BatchNormalization", [t, b.const(1 + 0.1 * b.rng.standard_normal(c).astype(np.float32)),
                                           b.const(0.1 * b.rng.standard_normal(c).astype(np.float32)),
                                           b.const(0.1 * b.rng.standard_normal(c).astype(np.float32)),
                                           b.const(1 + b.rng.random(c).astype(np.float32))])

    t = b.op("Conv", ["x", b.weight(16, 3, 3, 3)], pads=[1, 1, 1, 1], strides=[2, 2])
    t = b.op("HardSwish", [bn(t, 16)])
    c = 16
    for out_c, stride in [(32, 1), (64, 2), (64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)]:
        t = b.op("Conv", [t, b.weight(c, 1, 3, 3, scale=1 / 3)], group=c, pads=[1, 1, 1, 1], strides=[stride, stride])
        t = b.op("Relu", [bn(t, c)])
        t = b.op("Conv", [t, b.weight(out_c, c, 1, 1)])
        t = b.op("HardSwish", [bn(t, out_c)])
        c = out_c
    up = b.op("Resize", [t, "", b.const(np.array([1, 1, 2, 2], np.float32))], mode="nearest")
    t = b.op("MaxPool", [up], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    t = b.op("GlobalAveragePool", [t])
    t = b.op("Flatten", [t])
    t = b.op("Gemm", [t, b.weight(1000, c), b.const(np.zeros(1000, np.float32))], transB=1)
    return b.model("mobilenet_like", ("x", [1, 3, 224, 224]), b.op("Softmax", [t]))


def transformer_block(seed: int, seq: int = 128, dim: int = 256, heads: int = 4) -> onnx.ModelProto:
    """One pre-norm transformer encoder layer: LayerNorm, multi-head attention (MatMul,
    Softmax), residual Add, LayerNorm, MLP with erf-Gelu built from Erf/Mul/Add."""
    b = _Builder(seed)
    hd = dim // heads
    x = "x"
    h = b.op("LayerNormalization", [x, b.const(np.ones(dim, np.float32)), b.const(np.zeros(dim, np.float32))])
    shape = b.const(np.array([1, seq, heads, hd], np.int64))
    qkv = []
    for _ in range(3):
        t = b.op("MatMul", [h, b.weight(dim, dim)])
        t = b.op("Reshape", [t, shape])
        qkv.append(b.op("Transpose", [t], perm=[0, 2, 1, 3]))
    kt = b.op("Transpose", [qkv[1]], perm=[0, 1, 3, 2])
    s = b.op("Mul", [b.op("MatMul", [qkv[0], kt]), b.const(np.array(1 / math.sqrt(hd), np.float32))])
    a = b.op("MatMul", [b.op("Softmax", [s], axis=-1), qkv[2]])
    a = b.op("Reshape", [b.op("Transpose", [a], perm=[0, 2, 1, 3]), b.const(np.array([1, seq, dim], np.int64))])
    x = b.op("Add", [x, b.op("MatMul", [a, b.weight(dim, dim)])])
    h = b.op("LayerNormalization", [x, b.const(np.ones(dim, np.float32)), b.const(np.zeros(dim, np.float32))])
    h = b.op("Add", [b.op("MatMul", [h, b.weight(dim, 4 * dim)]), b.const(np.zeros(4 * dim, np.float32))])
    g = b.op("Erf", [b.op("Mul", [h, b.const(np.array(1 / math.sqrt(2), np.float32))])])
    g = b.op("Mul", [b.op("Mul", [h, b.op("Add", [g, b.const(np.array(1, np.float32))])]),
                     b.const(np.array(0.5, np.float32))])
    y = b.op("Add", [x, b.op("MatMul", [g, b.weight(4 * dim, dim)])])
    return b.model("transformer_block", ("x", [1, seq, dim]), y)


# -- measurement -----------------------------------------------------------------------------
def _median_ms(fns: list, runs: int) -> list[tuple[float, float]]:
    """(median wall ms, median process-CPU ms) of each of ``fns`` after one warm-up each.

    The functions take turns, round after round, so that load from other processes hits
    them alike. CPU time is the steadier figure on a shared machine (it does not count time
    spent descheduled) but only means single-threaded work: the caller runs one thread.
    """
    for fn in fns:
        fn()
    wall: list[list[float]] = [[] for _ in fns]
    cpu: list[list[float]] = [[] for _ in fns]
    for _ in range(runs):
        for i, fn in enumerate(fns):
            w0, c0 = time.perf_counter(), time.process_time()
            fn()
            cpu[i].append(time.process_time() - c0)
            wall[i].append(time.perf_counter() - w0)
    return [(1000 * statistics.median(w), 1000 * statistics.median(c)) for w, c in zip(wall, cpu, strict=True)]


def densify(graph) -> int:
    """Replace every single-value (stride-0) constant by a dense copy; return how many."""
    count = 0
    for v in graph.constants.values():
        if v.const.size > 1 and all(s == 0 for s in v.const.strides):
            v.set_const(np.array(v.const))
            count += 1
    return count


def bench_model(name: str, path: Path, runs: int, seed: int, dense: bool = True) -> dict:
    import onnxruntime as ort

    graph = load_model(path)
    if dense:
        densify(graph)
    feeds = random_inputs(graph, seed)
    out_names = [v.name for v in graph.outputs]
    single = ort.SessionOptions()
    single.intra_op_num_threads = 1
    single.inter_op_num_threads = 1
    sess1 = ort.InferenceSession(str(path), single, providers=["CPUExecutionProvider"])
    sess_default = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    ort_feeds = {i.name: feeds[i.name] for i in sess1.get_inputs()}
    ours = run(graph, feeds)
    ref = dict(zip([o.name for o in sess1.get_outputs()], sess1.run(None, ort_feeds), strict=True))
    err = max(float(np.max(np.abs(ours[n].astype(np.float64) - ref[n]))) for n in out_names)
    scale = max(float(np.max(np.abs(ref[n]))) for n in out_names)
    (t_ours, c_ours), (t_ort1, c_ort1) = _median_ms([lambda: run(graph, feeds),
                                                     lambda: sess1.run(None, ort_feeds)], runs)
    # NOTE: alone, afterwards: ORT's default pool spins its idle threads after each run, which
    # would slow down whatever runs next on a 2-core machine.
    ((t_ortd, _),) = _median_ms([lambda: sess_default.run(None, ort_feeds)], runs)
    return {"model": name, "nodes": len(graph), "corefold_ms": t_ours, "ort1_ms": t_ort1, "ort_default_ms": t_ortd,
            "ratio_ort1": t_ours / t_ort1, "ratio_ort_default": t_ours / t_ortd,
            "corefold_cpu_ms": c_ours, "ort1_cpu_ms": c_ort1, "cpu_ratio_ort1": c_ours / c_ort1,
            "max_abs_error": err, "max_abs_output": scale}


def main(args: argparse.Namespace) -> int:
    import onnxruntime as ort

    models = [(p.stem.removeprefix("light_"), p) for p in sorted(LIGHT.glob("*.onnx"))]
    tmp = tempfile.TemporaryDirectory()
    for name, build in [("mobilenet_like", mobilenet_like), ("transformer_block", transformer_block)]:
        path = Path(tmp.name) / f"{name}.onnx"
        onnx.save(build(args.seed), str(path))
        models.append((name, path))
    if args.models:
        keys = [k for k in args.models.split(",") if k]
        models = [(n, p) for n, p in models if any(k in n for k in keys)]
    print(f"corefold executor vs ONNX Runtime {ort.__version__}; NumPy {np.__version__}, BLAS threads "
          f"{args.blas_threads}; ORT 1 thread and default threads (cores: {os.cpu_count()}); "
          f"median of {args.runs} runs after one warm-up; weights {args.weights}", flush=True)
    header = (f"{'model':<18}{'nodes':>6}{'corefold ms':>12}{'ORT-1T ms':>10}{'ratio':>7}{'cpu ratio':>10}"
              f"{'ORT-def ms':>11}{'ratio':>7}{'max abs err':>12}{'max |out|':>10}")
    print(header)
    print("-" * len(header))
    rows = []
    for name, path in models:
        r = bench_model(name, path, args.runs, args.seed, dense=args.weights == "dense")
        rows.append(r)
        print(f"{name:<18}{r['nodes']:>6}{r['corefold_ms']:>12.1f}{r['ort1_ms']:>10.1f}{r['ratio_ort1']:>7.2f}"
              f"{r['cpu_ratio_ort1']:>10.2f}{r['ort_default_ms']:>11.1f}{r['ratio_ort_default']:>7.2f}"
              f"{r['max_abs_error']:>12.2e}{r['max_abs_output']:>10.3g}", flush=True)
    def geomean(key):
        return math.exp(statistics.fmean(math.log(r[key]) for r in rows))

    geo1, geoc, geod = geomean("ratio_ort1"), geomean("cpu_ratio_ort1"), geomean("ratio_ort_default")
    print("-" * len(header))
    print(f"headline: corefold / ORT(1 thread) wall-time geometric mean {geo1:.2f}x (worst "
          f"{max(r['ratio_ort1'] for r in rows):.2f}x), CPU-time {geoc:.2f}x (worst "
          f"{max(r['cpu_ratio_ort1'] for r in rows):.2f}x); vs ORT default threads {geod:.2f}x wall")
    if args.json:
        summary = {"blas_threads": args.blas_threads, "weights": args.weights, "runs": args.runs, "onnxruntime": ort.__version__,
                   "numpy": np.__version__, "geomean_ratio_ort1": geo1, "geomean_cpu_ratio_ort1": geoc, "geomean_ratio_ort_default": geod,
                   "models": rows}
        tmp_path = Path(args.json).with_suffix(".tmp")
        tmp_path.write_text(json.dumps(summary, indent=2))
        tmp_path.replace(args.json)
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main(ARGS))
