"""The backend and the simulator on real CNNs: simulated latency against the roofline, in one run.

Models: torchvision ``mobilenet_v3_small``, ``efficientnet_b0`` and ``resnet18`` (random
weights from ``torch.manual_seed(0)``, exported here with ``torch.onnx.export``: nothing is
downloaded; needs the ``torch`` extra), the light Inception v1 and SqueezeNet of the onnx
package, and the int8 version of each (corefold's quantizer, min/max calibration on 8
seeded random inputs, nearest weight rounding). A float model whose lowering onto the 8x8
``npu`` preset fails (its weights do not fit the cores' SRAM) is reported as such and runs
in int8 only. Every row lowers with ``corefold.backend.lower`` (default settings) and
simulates with ``corefold.sim.run_simulation``, and prints:

* ``lat/roof``: simulated latency over the roofline bound (``roofline_s``; the binding
  term in the next column); goal <= 1.5 on the 8x8 preset;
* ``SRAM``: the largest per-core SRAM peak over the capacity, and the mean over the cores
  used;
* ``lower s``, ``sim s``: wall time of lowering (goal <= 20 s; the machine's pace, a pure-Python
  loop timed first, tells how it compares across machines) and of the simulation, after a
  warm-up (:func:`warm_up`: the numba kernels' compilation, a minute on a fresh install, is
  printed apart);
* ``err``: the simulation against the reference executor (float: max |error| / output
  scale, must be <= 1e-5; an output made by a Softmax is compared at its logits, which
  the light models' random weights drive to 1e9, where a 4e-7 relative reassociation
  error decides the softmax) or the integer runner (int8: max |error| in steps, must be 0);
* below each row, where the time went: the busiest resources (busy time / latency) and
  the critical path split by instruction kind;
* with ``--what-if``, the latency of the same executable with compute, the NoC's bytes,
  repeated sends of one box (as one multicast), DRAM, or compute and the NoC's bytes counted
  as free (``corefold.sim.timed.WHAT_IF``): what each resource costs as lowered;
* ``naive x``: the speedup over the naive mapping, every operator on one core in file
  order: the operators cut to fit the core (the split pass) and issued in file order on
  that core's units by the M3 single-core simulator (``corefold.passes.order``), weights
  streamed from DRAM (they cannot stay resident in one core's SRAM), divided by the
  simulated latency; for int8 the same graph with one byte per element.

Then int8 ResNet-50 (torchvision, random weights) on the ``npu-array`` preset (2x2 chips):
its simulation wall time, goal <= 30 s.

Each row runs in a process of its own, forked from the warmed-up bench (:func:`apart`), as
``corefold lower`` runs in a process of its own: in one process a lowering runs slower
after the rows before it (the int8 EfficientNet-B0 lowered in 19.1-20.3 s first and in
22.5-25.1 s after the float one, stop 51), so a row's time would depend on the rows before
it. ``--in-process`` runs every row in the bench's own process, as before stop 51.

``--held-out`` adds the light ShuffleNet, Inception v2, DenseNet-121 and ResNet-50 of the
onnx package after the rows, reported apart from the goals: models no heuristic here was
tuned on, where the next bugs show first.

    PYTHONPATH=$PWD python bench/backend.py [--models resnet18,squeezenet,...] [--skip-resnet50] [--held-out] [--preset strong] [--what-if] [--in-process] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pickle
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TORCHVISION = ("mobilenet_v3_small", "efficientnet_b0", "resnet18")
LIGHT = {"inception_v1": "light_inception_v1.onnx", "squeezenet": "light_squeezenet.onnx"}
#: ``--held-out``: models of the onnx package's light set that no heuristic was tuned on
#: (Caffe2 exports with their BatchNormalization nodes apart; docs/backend.md, *Held-out models*).
HELD_OUT = {"shufflenet": "light_shufflenet.onnx", "inception_v2": "light_inception_v2.onnx",
            "densenet121": "light_densenet121.onnx", "light_resnet50": "light_resnet50.onnx"}
GOAL_RATIO, GOAL_LOWER_S, GOAL_RESNET50_SIM_S = 1.5, 20.0, 30.0


def export_torchvision(name: str, folder: Path) -> Path:
    """``torchvision.models.<name>`` with seeded random weights, exported to ONNX (opset 17)."""
    import torch
    import torchvision

    path = folder / f"{name}.onnx"
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None).eval()
    x = torch.randn(1, 3, 224, 224)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), str(path), opset_version=17, dynamo=False, input_names=["input"],
                          output_names=["logits"])
    return path


def model_paths(names: list[str], folder: Path) -> dict[str, Path]:
    import onnx

    light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    out = {}
    known = {**LIGHT, **HELD_OUT}
    for name in names:
        out[name] = light / known[name] if name in known else export_torchvision(name, folder)
    return out


def apart(fn, *args):
    """``fn(*args)`` in a forked child, its value pickled back (:mod:`bench/backend`'s
    docstring: each row in a process of its own); in this process where ``fork`` is
    missing. A child that fails raises RuntimeError here with its traceback. O(fn)."""
    if not hasattr(os, "fork"):
        return fn(*args)
    fd, path = tempfile.mkstemp(prefix="corefold-bench-", suffix=".pkl")
    os.close(fd)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: nothing it does returns past os._exit
        code = 0
        try:
            out = ("value", fn(*args))
        except BaseException as exc:  # noqa: BLE001 (every failure goes back to the bench)
            out, code = ("error", "".join(traceback.format_exception(exc))), 1
        try:
            with open(path, "wb") as f:
                pickle.dump(out, f)
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    try:
        with open(path, "rb") as f:
            kind, value = pickle.load(f)
    except (OSError, EOFError, pickle.UnpicklingError):
        raise RuntimeError(f"the row's process ended (wait status {status}) without a result") from None
    finally:
        os.unlink(path)
    if kind == "error":
        raise RuntimeError(f"in the row's process:\n{value}")
    return value


def machine_pace(n: int = 10**7, repeats: int = 2) -> float:
    """Seconds a pure-Python loop of ``n`` additions takes here (the fastest of ``repeats``):
    a lowering is mostly such Python, so ``lower s`` on two machines compares once divided
    by their paces (stop 50's machine: 0.42-0.45 s when nothing else ran). O(n)."""
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        total = 0
        for i in range(n):
            total += i
        best = min(best, time.perf_counter() - t0)
    return best


def warm_up(target, preset: str = "default") -> float:
    """Seconds to lower and simulate the bundled example (``corefold/examples/tiny_cnn.onnx``)
    once, untimed by the rows: the first lowering in a process compiles or loads the numba
    kernels of the mesh placement and the order search (a minute on a fresh install, where
    nothing is cached yet), which would otherwise count in the first row's lower time."""
    from corefold.backend.lower import PRESETS, lower
    from corefold.executor import random_inputs
    from corefold.frontend.onnx import load_model
    from corefold.sim import run_simulation

    t0 = time.perf_counter()
    graph = load_model(Path(__file__).resolve().parent.parent / "corefold" / "examples" / "tiny_cnn.onnx")
    run_simulation(lower(graph, target, PRESETS[preset]), random_inputs(graph, seed=0), target)
    return time.perf_counter() - t0


def quantized(graph, seed: int = 0):
    """``graph`` quantized in place to int8 QDQ (min/max on 8 seeded inputs)."""
    from corefold.passes.quantize import QuantizeSettings, load_calibration, quantize_graph

    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory() as tmp:
        arrays = {v.name: rng.standard_normal((8,) + tuple(v.shape[1:])).astype(np.float32) for v in graph.inputs}
        np.savez(Path(tmp) / "calib.npz", **arrays)
        quantize_graph(graph, load_calibration(Path(tmp) / "calib.npz", graph),
                       QuantizeSettings(calibration="minmax", weight_rounding="nearest", max_batches=8),
                       progress=False)
    return graph


def naive_latency(float_graph, target, int8: bool) -> float:
    """Every operator on one core, in file order (module docstring): the M3 single-core
    simulator's makespan. For int8, the same float graph with every tensor at one byte per
    element (cut to fit the core at that size), so that the naive mapping moves and keeps
    what the int8 executable does, without the QDQ graph's dequantized float weights."""
    from corefold.passes.order import baseline_orders, build_problem, simulate
    from corefold.passes.split import split_graph

    g = float_graph
    split_graph(g, target, threshold=target.core_memory_threshold * (4 if int8 else 1))
    if int8:
        for v in g.values():
            if v.dtype == np.float32:
                v.dtype = np.dtype(np.int8)
    problem = build_problem(g, target)
    return float(simulate(problem, baseline_orders(problem)["file"]))


def softmax_logits(graph) -> dict:
    """Softmax node name -> its input value, for every graph output a Softmax makes
    (through reshapes: ``corefold.ir.analysis.normalised_outputs``)."""
    from corefold.ir.analysis import normalised_outputs

    return {node.name: node.inputs[0] for node in normalised_outputs(graph).values()}


def float_error(graph, sim, feeds, logits: dict, seen: dict) -> float:
    """Max |error| / scale of the float simulation against the executor, over the graph
    outputs; an output made by a Softmax is compared at the Softmax's input (``logits``),
    as the chip computed it (``seen``: read by the functional run's probe). O(run)."""
    from corefold.executor import run

    if not logits:
        want = run(graph, feeds)
        return max(float(np.abs(sim.outputs[k] - ref).max()) / (float(np.abs(ref).max()) or 1.0)
                   for k, ref in want.items())
    kept = graph.outputs
    graph.outputs = list(logits.values())
    try:
        want = run(graph, feeds)
    finally:
        graph.outputs = kept
    return max(float(np.abs(seen[name] - want[v.name]).max()) / (float(np.abs(want[v.name]).max()) or 1.0)
               for name, v in logits.items())


#: ``--what-if``: the same executable timed again with these counted as free
#: (``corefold.sim.timed.WHAT_IF``), the latency each leaves.
WHAT_IFS = (("compute",), ("noc",), ("multicast",), ("dram",), ("compute", "noc"))


def measure(name: str, graph, target, quantize: bool, feeds, preset: str = "default", what_if: bool = False,
            workers: int = 1) -> dict:
    """Lower (with the ``preset``'s settings, its trials on ``workers`` processes), simulate,
    check; one row (with ``what_if``, also the latency of the same executable under each of
    :data:`WHAT_IFS`)."""
    from dataclasses import replace

    from corefold.backend.lower import PRESETS, lower
    from corefold.errors import CompileError
    from corefold.sim import run_simulation

    row: dict = {"model": name, "dtype": "int8" if quantize else "float32", "target": target.name}
    t0 = time.perf_counter()
    try:
        exe = lower(graph, target, replace(PRESETS[preset], workers=workers))
    except CompileError as exc:
        row.update(lower_s=time.perf_counter() - t0, error=str(exc))
        return row
    row["lower_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    logits = {} if quantize else softmax_logits(graph)
    seen: dict = {}

    def probe(op, arrays):
        if op.name in logits:
            seen[op.name] = arrays[0]

    sim = run_simulation(exe, feeds, target, probe=probe if logits else None)
    row["sim_s"] = time.perf_counter() - t0
    r = sim.report
    if quantize:
        from corefold.passes.quantize.integer import IntegerRunner

        want = IntegerRunner(graph).run(feeds)
        steps = 0.0
        for k, ref in want.items():
            step = _output_step(graph, k)
            steps = max(steps, float(np.abs(sim.outputs[k].astype(np.float64) - ref).max()) / step)
        row["err"] = steps
    else:
        row["err"] = float_error(graph, sim, feeds, logits, seen)
    used = [v for v in r.sram_peak_bytes if v]
    row.update(latency_s=r.latency_s, roofline_s=r.roofline_s, ratio=r.latency_s / r.roofline_s,
               binding=sim.roofline.binding, sram_peak=max(used) / r.sram_capacity_bytes,
               sram_mean=float(np.mean(used)) / r.sram_capacity_bytes, cores=len(used),
               instructions=r.instructions, load_s=r.load_s, utilisation=r.utilisation, noc_bytes=r.noc_bytes,
               dram_bytes=r.dram_bytes, explain=explain(sim, exe), tasks=exe.meta.get("tasks"),
               lowering=exe.meta.get("order"), tuning=exe.meta.get("tuning_final"))
    if what_if:
        from corefold.sim.timed import time_executable

        runs = {"+".join(w): time_executable(exe, target, frozenset(w)) for w in WHAT_IFS}
        row["what_if_s"] = {k: float(run.run_end - run.run_start) for k, run in runs.items()}
    return row


def _row(name: str, path: Path, target, quantize: bool, args, extras: bool = True) -> dict:
    """One row: the model loaded (and quantized), lowered, simulated and checked
    (:func:`measure`); with ``extras``, the naive mapping (unless ``--no-naive``) and the
    ``--what-if`` latencies (the ResNet-50 row has neither)."""
    from corefold.executor import random_inputs
    from corefold.frontend.onnx import load_model

    graph = load_model(path)
    feeds = random_inputs(graph, seed=0)
    if quantize:
        quantized(graph)
    row = measure(name, graph, target, quantize, feeds, args.preset, args.what_if and extras, args.workers)
    if "error" not in row and extras and not args.no_naive:
        row["naive_s"] = naive_latency(load_model(path), target, quantize)
    return row


def explain(sim, exe) -> str:
    """Where the run's time went: the three busiest resources during the run (busy / latency), the
    critical path (:mod:`corefold.sim.critical`) split into service time per instruction
    kind and waiting for a busy resource, and the two operators longest on it
    (:mod:`corefold.sim.profile`). O(T + S)."""
    from corefold.sim.critical import critical_path
    from corefold.sim.profile import operator_profile, summary

    tl, eng = sim.timed.timeline, sim.timed.engine
    lat = sim.report.latency_s
    lo, hi = sim.timed.run_start, sim.timed.run_end  # the run only: not the weight loading
    spans = np.clip(tl.stage_end, lo, hi) - np.clip(tl.stage_start, lo, hi)
    busy = np.bincount(tl.stage_resource, weights=spans, minlength=len(eng.resources))
    top = np.argsort(-busy)[:3]
    parts = [f"{eng.resources[r].name} {busy[r] / lat:.2f}" for r in top]
    cp = critical_path(sim.timed)
    cats = cp.by_category()
    waiting = sum(w for _, w in cats.values())
    path = ", ".join(f"{k} {v / lat:.2f}" for k, (v, _) in sorted(cats.items(), key=lambda kv: -kv[1][0]) if v > 0)
    longest = summary(operator_profile(exe, sim.timed, cp), 2)
    return (f"busiest: {'; '.join(parts)} | critical path: {path}, waiting for a resource {waiting / lat:.2f}"
            + (f" | longest on it: {longest}" if longest else ""))


def _output_step(graph, name: str) -> float:
    node = graph.value(name).producer
    if node is not None and node.op_type == "DequantizeLinear" and node.inputs[1].const is not None:
        return float(np.max(np.abs(node.inputs[1].const)))
    return 1.0


def _print_row(row: dict) -> None:
    head = f"{row['model']:<20}{row['dtype']:<8}"
    if "error" in row:
        print(f"{head}does not lower ({row['lower_s']:.1f} s): {row['error']}", flush=True)
        return
    naive = f"{row['naive_s'] / row['latency_s']:8.1f}" if row.get("naive_s") else f"{'-':>8}"
    print(f"{head}{row['latency_s'] * 1e6:10.1f}{row['roofline_s'] * 1e6:10.1f}{row['ratio']:9.2f} {row['binding']:<7}"
          f"{row['sram_peak']:6.2f}{row['sram_mean']:6.2f}{row['cores']:6d}{row['lower_s']:9.1f}{row['sim_s']:8.1f}"
          f"{row['err']:10.2g}{naive}", flush=True)
    print(f"{'':<28}{row['explain']}", flush=True)
    if "what_if_s" in row:
        print(f"{'':<28}what if free (same executable), us: " + ", ".join(
            f"{k} {v * 1e6:.1f}" for k, v in row["what_if_s"].items()), flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(TORCHVISION + tuple(LIGHT)),
                   help="comma-separated subset of: " + ", ".join(TORCHVISION + tuple(LIGHT)))
    p.add_argument("--skip-resnet50", action="store_true", help="leave out int8 ResNet-50 on npu-array")
    p.add_argument("--held-out", action="store_true",
                   help="also the held-out models, after the rows (not in the goals' counts): the light "
                        + ", ".join(HELD_OUT) + " of the onnx package, which no heuristic was tuned on (float "
                        "rows lower in minutes; the float light_resnet50's weights do not fit)")
    p.add_argument("--no-naive", action="store_true", help="leave out the naive mapping")
    p.add_argument("--dtypes", default="float32,int8", help="comma-separated subset of: float32, int8")
    p.add_argument("--json", help="write the rows as JSON")
    p.add_argument("--what-if", action="store_true",
                   help="time each executable again with compute, NoC bytes, repeated sends (multicast), DRAM, "
                        "or compute and NoC bytes counted as free: how much of the latency each sets")
    p.add_argument("--preset", default="default", choices=["fast", "default", "strong"],
                   help="lowering preset (strong: tunes the pieces, placement effort and clusterings on the timed simulation)")
    p.add_argument("--workers", type=int, default=1, metavar="N",
                   help="processes for each lowering's independent trials (0: one per CPU; the executables are the "
                        "same for every N, only the lower time moves) (default 1)")
    p.add_argument("--in-process", action="store_true",
                   help="run every row in this process (default: each in a process of its own, forked after the "
                        "warm-up, so that a row's lower s does not depend on the rows before it)")
    args = p.parse_args(argv)

    from corefold.backend.forks import worker_count
    from corefold.target import load_target

    npu = load_target("npu")
    rows = []
    print(f"warm-up: the bundled example lowered and simulated in {warm_up(npu, args.preset):.1f} s (numba's "
          "kernels: compiled on the first run after an install, about a minute, then loaded from its cache; "
          "not in any row's lower s)", flush=True)
    print(f"machine pace: a pure-Python loop of 10^7 additions in {machine_pace():.2f} s (lower s scales with it)",
          flush=True)
    print("rows: " + ("all in this process (--in-process)" if args.in_process else
                      "each in a process of its own, forked after the warm-up (--in-process: all in this one)"),
          flush=True)
    header = (f"{'model':<20}{'dtype':<8}{'lat us':>10}{'roof us':>10}{'lat/roof':>9} {'binds':<7}{'SRAM':>6}"
              f"{'mean':>6}{'cores':>6}{'lower s':>9}{'sim s':>8}{'err':>10}{'naive x':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        paths = model_paths(args.models.split(","), Path(tmp))
        print(header)
        print("-" * len(header))
        run = (lambda fn, *a: fn(*a)) if args.in_process else apart
        for name, path in paths.items():
            for quantize in [d == "int8" for d in args.dtypes.split(",")]:
                row = run(_row, name, path, npu, quantize, args)
                rows.append(row)
                _print_row(row)
        if args.held_out:
            print("held-out models (not in the goals' counts):")
            for name, path in model_paths(list(HELD_OUT), Path(tmp)).items():
                for quantize in [d == "int8" for d in args.dtypes.split(",")]:
                    row = run(_row, name, path, npu, quantize, args)
                    row["held_out"] = True
                    rows.append(row)
                    _print_row(row)
        if not args.skip_resnet50:
            path = export_torchvision("resnet50", Path(tmp))
            row = run(_row, "resnet50", path, load_target("npu-array"), True, args, False)
            rows.append(row)
            _print_row(row)
            print(f"\nint8 ResNet-50 on npu-array: simulated in {row.get('sim_s', float('nan')):.1f} s wall "
                  f"(goal <= {GOAL_RESNET50_SIM_S:.0f} s), lowered in {row['lower_s']:.1f} s")
    done = [r for r in rows if "error" not in r and r["target"] == npu.name and not r.get("held_out")]
    held = [r for r in rows if "error" not in r and r.get("held_out")]
    print("\ncolumns: latency and roofline bound in us; SRAM = max per-core peak / capacity, mean over the used "
          "cores; err = float: max |error| / output scale vs the executor, int8: steps vs the integer runner; "
          "naive x = naive latency / latency")
    if done:
        print(f"lat/roof <= {GOAL_RATIO} on the 8x8 preset: {sum(r['ratio'] <= GOAL_RATIO for r in done)} of "
              f"{len(done)} rows; lowering <= {GOAL_LOWER_S:.0f} s: {sum(r['lower_s'] <= GOAL_LOWER_S for r in done)} "
              f"of {len(done)} (trials on {worker_count(args.workers)} process(es)); geometric mean lat/roof {float(np.exp(np.mean(np.log([r['ratio'] for r in done])))):.2f}")
    if held:
        print(f"held-out rows: geometric mean lat/roof {float(np.exp(np.mean(np.log([r['ratio'] for r in held])))):.2f} "
              f"over {len(held)}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=float) + "\n")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    raise SystemExit(main())
