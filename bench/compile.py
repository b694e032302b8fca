"""M1 serial partitioning on real models: every fusion strategy against the optimal reference, in one run.

For each model, ``corefold compile``'s front half runs once: import, operator splitting
(``SplitPass``), cut at the seed's target nodes, compile every piece with
``corefold.backend.lower`` and split the failing ones until all compile
(``corefold.passes.serial.partition.prepare``). Then each fusion strategy (``a`` attribute
groups, ``b`` pairs, ``c`` forward greedy, ``d`` bidirectional) fuses that same split
chain on a compile cache seeded with the split phase's compiles, and ``optimal`` (the
minimum number of executables: the greedy cover over every position of the order, each
step found with ``backend.fits`` and confirmed by a compile) runs on its own, without the
split phase, exactly as ``corefold.passes.serial.compare_strategies`` does; each chain is linked (DRAM between
executables, host at the model's boundary) and simulated with ``corefold.sim.simulate_chain``
on seeded random inputs. Per strategy it prints:

* ``exes``: executables; ``/min``: over the optimal reference's minimum (cutting at any
  position of the order); ``/chn``: over the fewest any fusion of the split chain can
  reach (the DP over the chain's cut points: the fusion strategies' own optimum, so the
  gap between ``/chn`` and ``/min`` is what the split phase's cut positions cost);
* ``calls``: full compiles (``backend.lower``), the split phase's included (``optimal`` has
  none: it runs as ``--fusion optimal`` does, without the split phase); ``/opt``: over
  the optimal strategy's; ``fits``: fast feasibility checks (``backend.fits``);
* ``wall s``: the split phase's wall time (shared) plus the strategy's own fusion (for
  ``optimal``, its own cover only);
* ``DRAM KiB`` and ``host KiB``: bytes the executables read and write at their boundaries,
  by where they live;
* ``lat us``: simulated latency of the chain, and ``/opt`` over the optimal chain's.

Then, unless ``--no-compile-run``, the model is compiled again from scratch with
``corefold.compile.compile_model`` (the default strategy only, no strategy table,
simulation on, the optimal reference computed for the manifest as by default): that is what
``corefold compile`` does, timed from ONNX import to the simulated chain. ``--compile-only``
runs only that (goal 2).

Models (random weights, seeds explicit; nothing is downloaded):

* ``branchynet``: a BranchyNet-style multi-exit CNN built here with ``onnx.helper``
  (4 conv stages; after each of the first three an exit head, GlobalAveragePool -> Gemm, is
  a graph output, and the stage's feature map, the branch point, is a graph output too, so
  that the branch points are the seed's target nodes);
* ``bert``: ``transformers.BertModel`` from a small ``BertConfig`` (4 layers, hidden 256,
  sequence 64, vocabulary 512: a 1000-word table is over npu-2x2's per-core threshold and
  the split pass has no rule for Gather), ``output_hidden_states=True`` so every layer's hidden state is a graph
  output and a target node, exported with the TorchScript ``torch.onnx.export``
  (``dynamo=False``, opset 17);
* the onnx package's light models (``<onnx>/backend/test/data/light``);
* torchvision ``resnet18``, ``resnet50`` and ``vit_b_16`` (``weights=None`` after
  ``torch.manual_seed``), exported with ``torch.onnx.export`` (``dynamo=False``, opset 17).

The column ``check`` says whether each chain computes the model: for a float model, the
largest error of every tensor it passes between executables and of its outputs against
the reference executor on the same split graph, relative to each tensor's largest
magnitude (flagged ``!`` above 1e-5: split reductions only reassociate); an output made by
a Softmax is left out (random weights drive the light models' logits to 1e9, where a
reassociation decides the softmax; the tensors before it are compared).
With ``--int8`` every model is first quantized by corefold (int8 QDQ, min/max calibration
on 8 seeded random inputs, nearest weight rounding, as ``bench/backend.py`` does) and
``check`` says ``exact`` when each chain's simulated outputs equal corefold's integer
execution of the whole model (``IntegerRunner``) bit for bit, as ``corefold sim --check``
requires, else how many quantization steps they are from it at most (a model whose float
operators feed a QuantizeLinear, such as BERT's float MatMul before its GELU, rounds as
its pieces' BLAS blocks do, which depends on the CPU).

Every model compiles onto ``--target`` (default ``npu-2x2``: 2x2 cores of the npu core, on
which all of them need several executables). The numba kernels are compiled by a warm-up
compile of the BranchyNet before the first model, so no row pays for most of them.

Goals (issue 12): (1) the default strategy within 1.1x of the minimum executable count,
using at most 3x the compile calls of the optimal reference; (2) ``corefold compile`` of
resnet50 onto npu-2x2 in at most 10 minutes, of resnet18 in at most 2.

    PYTHONPATH=$PWD python bench/compile.py [--quick] [--int8] [--models branchynet,bert,...] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

STRATEGIES = ("a", "b", "c", "d", "optimal")
DEFAULT = "optimal"  # SerialSettings().fusion, checked in main()
LIGHT = ("squeezenet", "inception_v1", "inception_v2", "shufflenet", "densenet121", "resnet50", "bvlc_alexnet",
         "zfnet512", "vgg19")
TORCHVISION = ("resnet18", "resnet50", "vit_b_16")
QUICK = ("branchynet", "bert", "light_squeezenet")
GOAL_EXES, GOAL_CALLS = 1.1, 3.0
GOAL_COMPILE_S = {"tv_resnet18": 120.0, "tv_resnet50": 600.0}
#: A float chain's outputs against the reference executor, relative to each output's largest
#: magnitude: split reductions reassociate float sums (docs/backend.md's 1e-5)
FLOAT_TOLERANCE = 1e-5


# -- models ----------------------------------------------------------------------------------------
def branchynet(path: Path, seed: int) -> Path:
    """A multi-exit CNN (module docstring), weights from ``numpy.random.default_rng(seed)``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, inits, outputs = [], [], []

    def weight(name: str, shape: tuple[int, ...]) -> str:
        fan_in = int(np.prod(shape[1:]))
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32), name))
        return name

    x, c, hw = "input", 3, 64
    widths = (32, 64, 128, 256)
    for s, w in enumerate(widths):
        for j in range(2):  # two 3x3 convolutions per stage, the first one strided after stage 0
            stride = 2 if (j == 0 and s > 0) else 1
            y = f"s{s}c{j}"
            nodes.append(helper.make_node("Conv", [x, weight(f"{y}_w", (w, c, 3, 3)), weight(f"{y}_b", (w,))], [y],
                                          name=y, kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[stride, stride]))
            nodes.append(helper.make_node("Relu", [y], [f"{y}_r"], name=f"{y}_relu"))
            x, c = f"{y}_r", w
            hw = hw // stride
        if s < len(widths) - 1:  # the branch point: a graph output, and read by the exit and the next stage
            outputs.append(helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, c, hw, hw]))
        nodes.append(helper.make_node("GlobalAveragePool", [x], [f"exit{s}_gap"], name=f"exit{s}_gap"))
        nodes.append(helper.make_node("Flatten", [f"exit{s}_gap"], [f"exit{s}_flat"], name=f"exit{s}_flat"))
        nodes.append(helper.make_node("Gemm", [f"exit{s}_flat", weight(f"exit{s}_w", (10, c)), weight(f"exit{s}_b", (10,))],
                                      [f"exit{s}"], name=f"exit{s}_fc", transB=1))
        outputs.append(helper.make_tensor_value_info(f"exit{s}", TensorProto.FLOAT, [1, 10]))
    graph = helper.make_graph(nodes, "branchynet", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                                                   [1, 3, 64, 64])], outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def bert(path: Path, seed: int) -> Path:
    """A small BERT encoder exporting every hidden state (module docstring)."""
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=512, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                        intermediate_size=1024, max_position_embeddings=128, output_hidden_states=True)
    model = BertModel(config, add_pooling_layer=False).eval()
    ids = torch.randint(0, config.vocab_size, (1, 64), generator=torch.Generator().manual_seed(seed))

    class Hidden(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids):
            return tuple(self.m(input_ids=input_ids, return_dict=True).hidden_states)

    names = [f"hidden{i}" for i in range(config.num_hidden_layers + 1)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Hidden(model), (ids,), str(path), opset_version=17, dynamo=False, input_names=["input_ids"],
                          output_names=names)
    return path


def torchvision_model(name: str, path: Path, seed: int) -> Path:
    import torch
    import torchvision

    torch.manual_seed(seed)
    model = getattr(torchvision.models, name)(weights=None).eval()
    x = torch.randn(1, 3, 224, 224)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), str(path), opset_version=17, dynamo=False, input_names=["input"],
                          output_names=["logits"])
    return path


def all_models() -> list[str]:
    import onnx

    light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    return (["branchynet", "bert"] + [f"light_{n}" for n in LIGHT if (light / f"light_{n}.onnx").is_file()]
            + [f"tv_{n}" for n in TORCHVISION])


def model_path(name: str, folder: Path, seed: int) -> Path:
    """The ONNX file of ``name`` (exported into ``folder`` where needed)."""
    import onnx

    if name == "branchynet":
        return branchynet(folder / "branchynet.onnx", seed)
    if name == "bert":
        return bert(folder / "bert.onnx", seed)
    if name.startswith("light_"):
        return Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"{name}.onnx"
    if name.startswith("tv_"):
        return torchvision_model(name[3:], folder / f"{name}.onnx", seed)
    raise SystemExit(f"bench/compile.py: unknown model '{name}' (choose from {', '.join(all_models())})")


def int8_model(path: Path, folder: Path, seed: int) -> Path:
    """``path`` quantized to int8 QDQ by corefold (module docstring), written into ``folder``."""
    from corefold.frontend.onnx import load_model, save_model
    from corefold.passes.quantize import QuantizeSettings, load_calibration, quantize_graph

    graph = load_model(path)
    rng = np.random.default_rng(seed)
    calib = folder / f"{path.stem}_calib.npz"
    np.savez(calib, **{v.name: rng.standard_normal((8,) + tuple(v.shape[1:])).astype(v.dtype)
                       if np.issubdtype(v.dtype, np.floating) else
                       np.zeros((8,) + tuple(v.shape[1:]), v.dtype) for v in graph.inputs})
    quantize_graph(graph, load_calibration(calib, graph),
                   QuantizeSettings(calibration="minmax", weight_rounding="nearest", max_batches=8), progress=False)
    out = folder / f"{path.stem}_int8.onnx"
    save_model(graph, out)
    return out


# -- measuring ---------------------------------------------------------------------------------------
def boundary_bytes(exes) -> tuple[int, int]:
    """(DRAM bytes, host bytes) the linked executables read and write at their boundaries."""
    from corefold.build_folder import io_bytes

    pairs = [io_bytes(exe) for exe in exes]
    return sum(d for d, _ in pairs), sum(h for _, h in pairs)


def strategy_table(path: Path, target, seed: int, workers: int, simulate: bool, log, balance_trials: int = 6) -> dict:
    """Split once, fuse with every strategy, link and simulate each chain (module docstring)."""
    from corefold.backend.qdq import is_quantized
    from corefold.compile import fits_for, latency_for, link, lower_for, split_threshold
    from corefold.executor import random_inputs
    from corefold.frontend.onnx import load_model
    from corefold.passes.quantize.integer import IntegerRunner
    from corefold.passes.serial import SerialSettings
    from corefold.passes.serial.compilers import CompileService
    from corefold.passes.serial.partition import fuse_prepared, optimal_directly, prepare
    from corefold.passes.split import SplitPass, SplitSettings
    from corefold.pipeline import CompileContext, Pipeline
    from corefold.sim import simulate_chain

    t0 = time.perf_counter()
    graph = load_model(path)
    feeds = random_inputs(graph, seed=seed)
    nodes_in = len(graph)
    want = None
    floats = simulate and not is_quantized(graph)
    if simulate and not floats:
        original = load_model(path)  # unsplit: its outputs' DequantizeLinear give their steps
        want = IntegerRunner(original).run(feeds)
    settings = SerialSettings(fusion=DEFAULT, workers=workers, balance_trials=balance_trials)
    split = SplitSettings(threshold=split_threshold(graph, target))  # as compile_model splits
    ctx = CompileContext(target=target, settings={"serial": settings, "split": split}, seed=seed)
    Pipeline([SplitPass()]).run(graph, ctx)
    compile_fn, fits_fn = lower_for(target), fits_for(target)

    def make(order, cache):
        return CompileService(graph, order, compile_fn, fits_fn, workers=workers, cache=cache)

    prep = prepare(graph, compile_fn, settings, make)
    split_s = time.perf_counter() - t0
    log(f"  split: {nodes_in} -> {len(graph)} operators, {len(prep.chain)} pieces after {prep.split_calls} compiles "
        f"in {split_s:.1f} s")
    rows = {}
    for s in STRATEGIES:
        t1 = time.perf_counter()
        if s == "optimal":  # as `--fusion optimal` runs: no split phase, its own compiles only
            res = optimal_directly(graph, settings, make, latency_for(target))  # cuts balanced, as compile_model does
        else:
            res = fuse_prepared(prep, settings, make, strategy=s, reference=(s == "d"))
        fuse_s = time.perf_counter() - t1
        exes = link(list(res.outcomes), graph)
        dram, host = boundary_bytes(exes)
        row = {"strategy": s, "executables": len(res.pieces), "compile_calls": res.compile_calls,
               "fits_calls": res.fits_calls, "wall_s": fuse_s if s == "optimal" else split_s + fuse_s,
               "fuse_s": fuse_s, "dram_bytes": dram,
               "host_bytes": host, "latency_s": None, "minimum_executables": res.minimum_executables,
               "chain_minimum_executables": res.chain_minimum_executables,
               # optimal: its cuts' balancing (compiles and timed runs on top of the cover's)
               "balance": res.balance.to_json() if res.balance is not None else None,
               "cover_calls": res.compile_calls - (res.balance.compiles if res.balance is not None else 0)}
        if simulate:
            t2 = time.perf_counter()
            chain = simulate_chain(exes, feeds, target)
            row["latency_s"] = chain.report.latency_s
            row["sim_s"] = time.perf_counter() - t2
            if want is not None:
                row["steps"] = _int8_steps(original, chain.tensors, want)
                row["exact"] = row["steps"] == 0
            if floats:
                row["float_error"] = _float_error(graph, feeds, chain.tensors)
        rows[s] = row
        log(f"  {s:<8} {row['executables']} executables, {row['compile_calls']} compiles, {row['fits_calls']} fits, "
            f"fused in {fuse_s:.1f} s" + (f", simulated in {row['sim_s']:.1f} s" if simulate else ""))
    minimum = rows["d"]["minimum_executables"]
    chain_minimum = rows["d"]["chain_minimum_executables"]
    for row in rows.values():
        row["minimum_executables"] = minimum
        row["chain_minimum_executables"] = chain_minimum
    return {"operators": nodes_in, "operators_split": len(graph), "pieces_after_split": len(prep.chain),
            "split_calls": prep.split_calls, "split_s": split_s, "strategies": rows}


def compile_run(path: Path, target, seed: int, workers: int, balance_trials: int = 6) -> dict:
    """``corefold compile``'s work, timed from import to the simulated chain."""
    from corefold.compile import CompileSettings, compile_model
    from corefold.frontend.onnx import load_model
    from corefold.passes.serial import SerialSettings

    t0 = time.perf_counter()
    graph = load_model(path)
    build = compile_model(graph, target, serial=SerialSettings(fusion=DEFAULT, workers=workers,
                                                              balance_trials=balance_trials),
                          settings=CompileSettings(strategies_table=False, simulate=True, seed=seed))
    return {"compile_s": time.perf_counter() - t0, "executables": len(build.executables),
            "compile_calls": build.serial.compile_calls, "fits_calls": build.serial.fits_calls,
            "minimum_executables": build.serial.minimum_executables,
            "latency_s": build.simulation.report.latency_s}


def warm_up(target, folder: Path) -> float:
    """Compile and simulate the BranchyNet once (seed 1), so numba compiles (or loads from
    its cache) the kernels of lowering, placement and simulation before any row is timed.
    Kernels specialised on types only another model meets still compile in that model's
    first row."""
    t0 = time.perf_counter()
    compile_run(branchynet(folder / "warm.onnx", 1), target, 1, 1)
    return time.perf_counter() - t0


def failure(exc: BaseException) -> dict:
    """One line and the traceback's last frame of an exception; ``clean`` when it is a
    CorefoldError (one-line user-facing error: CompileError, CapacityError, ...)."""
    from corefold.errors import CorefoldError

    frames = traceback.extract_tb(exc.__traceback__)
    last = frames[-1] if frames else None
    where = f"{last.filename}:{last.lineno} in {last.name}" if last else "?"
    return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", "where": where,
            "clean": isinstance(exc, CorefoldError)}


# -- printing ----------------------------------------------------------------------------------------
HEADER = (f"{'model':<22}{'strategy':<9}{'exes':>5}{'/min':>6}{'/chn':>6}{'calls':>7}{'/opt':>6}{'fits':>6}{'wall s':>9}"
          f"{'DRAM KiB':>11}{'host KiB':>10}{'lat us':>10}{'/opt':>6}{'check':>9}")


def _float_error(graph, feeds: dict, tensors: dict) -> float:
    """The largest error of a float chain, relative to each tensor's largest magnitude, over
    every tensor it passed between executables and every graph output not made by a Softmax
    (through reshapes), against the reference executor on the same (split) graph. O(run)."""
    from corefold.executor import run
    from corefold.ir.analysis import normalised_outputs

    hidden = set(normalised_outputs(graph))
    values = {v.name for v in graph.values()}
    names = [k for k in tensors if k in values and k not in feeds and k not in hidden]
    if not names:
        return 0.0
    want = run(graph, feeds, outputs=names)
    return max(float(np.max(np.abs(tensors[k].astype(np.float64) - v))) / max(float(np.max(np.abs(v))), 1e-30)
               for k, v in want.items())


def _int8_steps(graph, tensors: dict, want: dict) -> float:
    """The largest distance of an int8 chain's outputs from the integer execution, in
    quantization steps (a dequantized output's step is its DequantizeLinear's scale; a float
    output not dequantized counts its raw difference). O(outputs)."""
    from corefold.passes.quantize.check import output_steps

    steps = output_steps(graph)
    return max((float(np.max(np.abs(tensors[k].astype(np.float64) - v.astype(np.float64)), initial=0.0))
                / (steps.get(k) or 1.0) for k, v in want.items()), default=0.0)


def _check_cell(row: dict) -> str:
    """``exact`` or the steps from the integer execution for an int8 chain, the relative error
    of a float one (flagged above :data:`FLOAT_TOLERANCE`), ``-`` when not simulated."""
    if "exact" in row:
        return "exact" if row["exact"] else f"{row['steps']:.0f} steps"
    if "float_error" in row:
        return f"{row['float_error']:.1e}" + ("!" if row["float_error"] > FLOAT_TOLERANCE else "")
    return "-"


def print_model(name: str, result: dict) -> None:
    if "error" in result:
        print(f"{name:<22}FAILED ({'clean CorefoldError' if result['clean'] else 'NOT a CorefoldError'}): "
              f"{result['error']} [{result['where']}]", flush=True)
        return
    rows = result.get("strategies", {})
    opt = rows.get("optimal")
    for s, r in rows.items():
        minimum = r["minimum_executables"] or 0
        chain_min = r.get("chain_minimum_executables") or 0
        lat = f"{r['latency_s'] * 1e6:10.1f}" if r["latency_s"] is not None else f"{'-':>10}"
        lat_ratio = (f"{r['latency_s'] / opt['latency_s']:6.2f}" if r["latency_s"] and opt["latency_s"]
                     else f"{'-':>6}")
        print(f"{name if s == STRATEGIES[0] else '':<22}{s + ('*' if s == DEFAULT else ''):<9}{r['executables']:5d}"
              f"{r['executables'] / minimum if minimum else float('nan'):6.2f}"
              f"{r['executables'] / chain_min if chain_min else float('nan'):6.2f}{r['compile_calls']:7d}"
              f"{r['cover_calls'] / max(opt['cover_calls'], 1):6.2f}{r['fits_calls']:6d}{r['wall_s']:9.1f}"
              f"{r['dram_bytes'] / 1024:11.0f}{r['host_bytes'] / 1024:10.0f}{lat}{lat_ratio}"
              f"{_check_cell(r):>9}", flush=True)
    if "compile" in result:
        c = result["compile"]
        if "error" in c:
            print(f"{'' if rows else name:<22}compile_model: FAILED after {c['compile_s']:.0f} s: {c['error']} "
                  f"[{c['where']}]", flush=True)
        else:
            print(f"{'' if rows else name:<22}compile_model ({DEFAULT}): {c['executables']} executables, "
                  f"{c['compile_calls']} compiles, {c['fits_calls']} fits (reference: {c['minimum_executables']}), "
                  f"{c['compile_s']:.1f} s from import to simulated chain, latency {c['latency_s'] * 1e6:.1f} us",
                  flush=True)


def goals(results: dict[str, dict]) -> list[str]:
    lines = []
    done = {m: r for m, r in results.items() if "strategies" in r}
    ok = ok_chain = 0
    worst_exes = worst_chain = worst_calls = 0.0
    for r in done.values():
        d, opt = r["strategies"][DEFAULT], r["strategies"]["optimal"]
        ex = d["executables"] / max(d["minimum_executables"] or 1, 1)
        exc = d["executables"] / max(d.get("chain_minimum_executables") or 1, 1)
        ca = d["cover_calls"] / max(opt["cover_calls"], 1)  # the balancing's compiles apart, below
        worst_exes, worst_chain, worst_calls = max(worst_exes, ex), max(worst_chain, exc), max(worst_calls, ca)
        ok += ex <= GOAL_EXES and ca <= GOAL_CALLS
        ok_chain += exc <= GOAL_EXES and ca <= GOAL_CALLS
    if done:
        lines.append(f"goal 1: strategy '{DEFAULT}' within {GOAL_EXES}x of the minimum executables using <= "
                     f"{GOAL_CALLS:.0f}x the optimal reference's compile calls: {ok} of {len(done)} models "
                     f"(worst {worst_exes:.2f}x executables, {worst_calls:.2f}x calls)")
        lines.append(f"  against the split chain's own minimum (fusion alone): {ok_chain} of {len(done)} models "
                     f"(worst {worst_chain:.2f}x executables)")
        for s in STRATEGIES:
            exes = [r["strategies"][s]["executables"] / max(r["strategies"][s]["minimum_executables"] or 1, 1)
                    for r in done.values()]
            calls = [r["strategies"][s]["cover_calls"] / max(r["strategies"]["optimal"]["cover_calls"], 1)
                     for r in done.values()]
            lines.append(f"  strategy {s:<8} geometric mean {float(np.exp(np.mean(np.log(exes)))):.2f}x the minimum "
                         f"executables (worst {max(exes):.2f}x), {float(np.exp(np.mean(np.log(calls)))):.2f}x the "
                         f"optimal reference's compile calls (worst {max(calls):.2f}x)")
        for m, r in done.items():
            b = r["strategies"]["optimal"].get("balance")
            if b and b["latency_before_s"]:
                lines.append(f"  optimal's cuts balanced on {m}: {b['moved']} moved, {b['compiles']} compiles more than "
                             f"its cover's {r['strategies']['optimal']['cover_calls']}, candidates' latency "
                             f"{b['latency_before_s'] * 1e6:.1f} -> {b['latency_after_s'] * 1e6:.1f} us "
                             f"({b['latency_after_s'] / b['latency_before_s']:.2f}x)")
    for m, limit in GOAL_COMPILE_S.items():
        c = results.get(m, {}).get("compile")
        if c is None:
            lines.append(f"goal 2: {m[3:]} compile onto the target in <= {limit:.0f} s: not run")
        elif "error" in c:
            lines.append(f"goal 2: {m[3:]} compile onto the target in <= {limit:.0f} s: FAILED ({c['error']})")
        else:
            lines.append(f"goal 2: {m[3:]} compile onto the target in <= {limit:.0f} s: {c['compile_s']:.0f} s "
                         f"({'met' if c['compile_s'] <= limit else 'NOT met'}; wall time on a shared, loaded machine)")
    return lines


def main(argv=None) -> int:
    from corefold.passes.serial import SerialSettings

    assert SerialSettings().fusion == DEFAULT, "bench/compile.py: DEFAULT must be corefold's default strategy"
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", help="comma-separated subset of: " + ", ".join(all_models()))
    p.add_argument("--quick", action="store_true", help="only " + ", ".join(QUICK))
    p.add_argument("--target", default="npu-2x2", help="target preset or TOML path [npu-2x2]")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights and the simulated inputs [0]")
    p.add_argument("--workers", type=int, default=1, help="compile processes [1]")
    p.add_argument("--no-sim", action="store_true", help="do not simulate the chains (no latency column)")
    p.add_argument("--no-compile-run", action="store_true", help="skip the timed compile_model run per model")
    p.add_argument("--compile-only", action="store_true",
                   help="only the timed compile_model run per model (goal 2), no strategy table")
    p.add_argument("--int8", action="store_true",
                   help="quantize every model to int8 first (corefold's quantizer) and check each chain's exactness")
    p.add_argument("--balance-trials", type=int, default=6,
                   help="positions each of optimal's cuts tries to lower the chain's latency (0: the greedy's cuts) [6]")
    p.add_argument("--json", help="write the results as JSON")
    args = p.parse_args(argv)
    if args.json:
        from corefold.errors import CorefoldError
        from corefold.io import check_output

        try:
            check_output(args.json, option="--json")
        except CorefoldError as exc:
            raise SystemExit(f"bench/compile.py: {exc}") from None

    from corefold.target import load_target

    target = load_target(args.target)
    names = args.models.split(",") if args.models else list(QUICK if args.quick else all_models())

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        log(f"warm-up compile (numba kernels): {warm_up(target, Path(tmp)):.1f} s")
        for name in names:
            log(f"[{name}] exporting / loading")
            try:
                path = model_path(name, Path(tmp), args.seed)
                if args.int8:
                    path = int8_model(path, Path(tmp), args.seed)
                result = {} if args.compile_only else strategy_table(path, target, args.seed, args.workers,
                                                                     not args.no_sim, log, args.balance_trials)
            except Exception as exc:  # noqa: BLE001 - a bench records failures and goes on
                result = failure(exc)
                log(f"  FAILED: {result['error']} [{result['where']}]")
            if "error" not in result and not args.no_compile_run:
                log(f"[{name}] compile_model, strategy {DEFAULT}")
                t0 = time.perf_counter()
                try:
                    result["compile"] = compile_run(path, target, args.seed, args.workers, args.balance_trials)
                except Exception as exc:  # noqa: BLE001
                    result["compile"] = failure(exc) | {"compile_s": time.perf_counter() - t0}
            results[name + ("_int8" if args.int8 else "")] = result
            if args.json:  # after every model, so a long run keeps what it measured
                from corefold.io import atomic_output

                with atomic_output(args.json) as out:
                    out.write_text(json.dumps({"target": target.name, "seed": args.seed, "models": results},
                                              indent=1, default=float) + "\n")
    print(f"target {target.name}, seed {args.seed}, {args.workers} compile worker(s); '*' marks the default strategy")
    print(HEADER)
    print("-" * len(HEADER))
    for name, result in results.items():
        print_model(name, result)
    print("\ncolumns: /min = executables over the optimal reference's minimum; /chn = over the split chain's minimum (fusion alone); calls = full compiles (split phase "
          "included, optimal has none; optimal's include its cuts' balancing, counted apart below); /opt = over the "
          "optimal strategy's (its cover's calls for the calls column); fits = fast feasibility checks; wall s = "
          "split phase + the strategy's fusion (optimal: its own cover and balancing); DRAM/host KiB = bytes read and written at the executables' boundaries; lat us = "
          "simulated latency of the chain; check = int8 (--int8): exact when the chain's outputs equal the integer "
          "execution of the model, else the steps from it; float: their largest error relative to the reference executor's largest output "
          f"('!' above {FLOAT_TOLERANCE:g})")
    for line in goals(results):
        print(line)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    raise SystemExit(main())
