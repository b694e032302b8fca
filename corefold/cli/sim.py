"""``corefold sim model.cfx`` or ``corefold sim build/``: run an executable, or a build's
chain of executables, as the chip would (functional and timed).

A build folder (``corefold compile``) runs its executables in the manifest's order, the
tensors between them staying in DRAM and the model's inputs and outputs crossing the host
link; the report has a single executable's keys, summed over the chain, plus
``executables`` (each one's report) and the trace has one process group per executable,
laid end to end.

Prints latency against the roofline bound, weight loading, SRAM peak, NoC, DRAM and host
traffic, unit utilisation and where the critical path of each executable spends its
latency (:mod:`corefold.sim.critical`; the report's ``critical_path``, per executable of a
build folder) and the operators longest on it; writes the outputs (``-o``), the report
(``--report``), every operator's pieces, cores, span, engine time and time on the critical
path as CSV (``--profile``, :mod:`corefold.sim.profile`; a build folder's rows name their
executable), a Chrome trace for Perfetto (``--trace``) and the link heatmap
(``--heatmap``). Every output path is checked before the simulation starts and written
atomically.

``--check MODEL`` runs the ONNX model in ONNX Runtime on the same inputs and compares:
a float output within ``1e-5`` of its scale (``max |reference|``: split reductions add in
another order); an output of a Softmax or LogSoftmax that is not passes when the
normaliser's input, as the chip computed it, is within ``1e-5`` of its scale of ONNX
Runtime's (:func:`_check_logits`: random weights drive a deep model's logits to 1e9,
where a softmax turns rounding into another distribution). For a quantized (QDQ) model, every output must equal corefold's integer
execution of MODEL exactly, and every quantized tensor of MODEL, computed by that
execution from ONNX Runtime's values of its operator's inputs, within one step of ONNX
Runtime's (:func:`_check_quantized`; end to end, one-step differences propagate through a
deep model, so the outputs' distance from ONNX Runtime is printed, not judged). Exit
status 1 if anything is off.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from corefold.errors import CorefoldError

#: ``--check``: float outputs within this fraction of their scale.
FLOAT_TOLERANCE = 1e-5


class ReferenceRunError(CorefoldError):
    """ONNX Runtime, the reference of ``--check``, refused the model or its inputs."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("executable", metavar="model.cfx|build/",
                   help="executable written by corefold lower, or a build folder written by corefold compile")
    p.add_argument("--target", metavar="T", default=None,
                   help="the target it was built for (preset or TOML; default: the bundled preset whose "
                        "fingerprint matches)")
    p.add_argument("--inputs", metavar="IN.npz", help="inputs keyed by input name (default: seeded random)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("-o", "--output", metavar="OUT.npz", help="write the outputs keyed by output name")
    p.add_argument("--check", metavar="MODEL",
                   help="compare with ONNX Runtime on MODEL (float: 1e-5 of the output scale; quantized: equal to "
                        "corefold's integer execution, every operator within one step of ONNX Runtime); exit 1 "
                        "on a mismatch")
    p.add_argument("--report", metavar="r.json", help="write the report (latency_s, roofline_s, ...) as JSON")
    p.add_argument("--profile", metavar="ops.csv",
                   help="write each operator's pieces, cores, span, engine time and time on the critical path as CSV")
    p.add_argument("--trace", metavar="trace.json", help="write a Chrome trace-event file (opens in Perfetto UI)")
    p.add_argument("--heatmap", metavar="links.png", help="draw the bytes per NoC link (needs matplotlib)")


def run(args: argparse.Namespace) -> int:
    from corefold.cli.common import atomic_output, check_outputs

    check_outputs([("-o", args.output), ("--report", args.report), ("--profile", args.profile),
                   ("--trace", args.trace), ("--heatmap", args.heatmap)],
                  inputs=[args.executable, args.inputs, args.check])
    if args.heatmap:
        try:
            import matplotlib  # noqa: F401 - only whether it is there
        except ImportError:
            raise CorefoldError("--heatmap needs matplotlib: pip install 'corefold[plot]'") from None
    from pathlib import Path

    from corefold.backend.cfx import load as load_executable
    from corefold.cli.run import load_npz
    from corefold.sim import random_inputs, run_simulation
    from corefold.sim.critical import critical_path
    from corefold.sim.profile import operator_profile
    from corefold.target import load_target

    target = load_target(args.target) if args.target else None
    if Path(args.executable).is_dir():
        return _run_build(args, target)
    exe = load_executable(args.executable, target)
    feeds = load_npz(args.inputs) if args.inputs else random_inputs(exe, seed=args.seed)
    logits = LogitsProbe(args.check)
    sim = run_simulation(exe, feeds, target, probe=logits.probe)
    path = critical_path(sim.timed)
    profile = operator_profile(exe, sim.timed, path)
    _print_summary(args.executable, sim, path, profile)
    if args.output:
        with atomic_output(args.output, suffix=".npz") as tmp:
            with open(tmp, "wb") as f:
                np.savez(f, **sim.outputs)
        print(f"wrote {args.output}")
    if args.report:
        sim.report.write(args.report, extra={"critical_path": path.to_json()})
        print(f"wrote {args.report}")
    if args.profile:
        _write_profile(args.profile, [o.row() for o in profile])
    if args.trace:
        sim.write_trace(args.trace)
        print(f"wrote {args.trace} (open it in https://ui.perfetto.dev)")
    if args.heatmap:
        from corefold.sim.plot import draw_link_heatmap

        draw_link_heatmap(sim.link_bytes, args.heatmap)
        print(f"wrote {args.heatmap}")
    if args.check:
        return check_against_ort(args.check, feeds, sim.outputs, logits.seen)
    return 0


class LogitsProbe:
    """``--check``'s probe: the input of every Softmax / LogSoftmax of the model that makes
    a graph output, as the chip computed it (the functional run's probe), by node name;
    nothing without ``--check`` or when the model cannot be read here (``--check``
    reports that itself)."""

    def __init__(self, model_path: str | None):
        self.names: set[str] = set()
        self.seen: dict[str, np.ndarray] = {}
        if model_path:
            from corefold.frontend.onnx import load_model
            from corefold.ir.analysis import normalised_outputs

            try:
                self.names = {n.name for n in normalised_outputs(load_model(model_path)).values()}
            except CorefoldError:
                pass
        self.probe = self._probe if self.names else None

    def _probe(self, op, arrays) -> None:
        if op.name in self.names:
            self.seen[op.name] = arrays[0]


def build_inputs(exes, model_inputs: list[str], seed: int) -> dict[str, np.ndarray]:
    """Seeded random values for a chain's model inputs (as ``random_inputs`` draws them
    for one executable, over the first executable reading each input)."""
    from types import SimpleNamespace

    from corefold.sim import random_inputs

    wanted, ios = set(model_inputs), {}
    for exe in exes:
        for io in exe.inputs:
            if io.name in wanted:
                ios.setdefault(io.name, io)
    return random_inputs(SimpleNamespace(inputs=[ios[n] for n in model_inputs if n in ios]), seed=seed)


def _run_build(args: argparse.Namespace, target) -> int:
    import json

    from corefold.build_folder import load_build
    from corefold.cli.common import atomic_output
    from corefold.cli.run import load_npz
    from corefold.sim import simulate_chain
    from corefold.sim.critical import critical_path
    from corefold.sim.profile import operator_profile, summary

    exes, doc, target = load_build(args.executable, target)
    feeds = load_npz(args.inputs) if args.inputs else build_inputs(exes, doc.get("inputs", []), args.seed)
    logits = LogitsProbe(args.check)
    chain = simulate_chain(exes, feeds, target, probe=logits.probe)
    outputs = {name: chain.tensors[name] for name in doc.get("outputs", []) if name in chain.tensors}
    r = chain.report
    print(f"simulated {args.executable}: {len(exes)} executable(s), {r.instructions} instructions")
    paths = [critical_path(run.timed) for run in chain.runs]
    profiles = [operator_profile(exe, run.timed, path) for exe, run, path in zip(exes, chain.runs, paths, strict=True)]
    for i, (run, path) in enumerate(zip(chain.runs, paths, strict=True)):
        print(f"  {doc['executables'][i]['name']}: {run.report.latency_s * 1e6:10.2f} us, "
              f"DRAM {run.report.dram_bytes:,} bytes, host {run.report.host_bytes:,} bytes")
        print(f"    critical path {path.summary()}")
        if top := summary(profiles[i]):
            print(f"    longest on it {top}")
    ratio = r.latency_s / r.roofline_s if r.roofline_s > 0 else float("inf")
    print(f"latency      {r.latency_s * 1e6:10.2f} us   roofline {r.roofline_s * 1e6:.2f} us, "
          f"latency / roofline {ratio:.2f}")
    print(f"NoC          {r.noc_bytes:,} byte-hops   DRAM {r.dram_bytes:,} bytes   host {r.host_bytes:,} bytes")
    for name, arr in outputs.items():
        print(f"{name}: {arr.dtype.name}{list(arr.shape)}")
    if args.output:
        with atomic_output(args.output, suffix=".npz") as tmp:
            with open(tmp, "wb") as f:
                np.savez(f, **outputs)
        print(f"wrote {args.output}")
    if args.report:
        report = chain.report_json()
        for entry, path in zip(report["executables"], paths, strict=True):
            entry["critical_path"] = path.to_json()
        with atomic_output(args.report, suffix=".json") as tmp:
            tmp.write_text(json.dumps(report, indent=1, default=float))
        print(f"wrote {args.report}")
    if args.profile:
        _write_profile(args.profile, [{"executable": e["name"], **o.row()}
                                      for e, prof in zip(doc["executables"], profiles, strict=True) for o in prof])
    if args.trace:
        with atomic_output(args.trace, suffix=".json") as tmp:
            tmp.write_text(json.dumps(chain_trace(chain, [e["name"] for e in doc["executables"]])))
        print(f"wrote {args.trace} (open it in https://ui.perfetto.dev)")
    if args.heatmap:
        from corefold.sim.plot import draw_link_heatmap
        from corefold.sim.report import link_bytes_array

        draw_link_heatmap(link_bytes_array(r), args.heatmap)
        print(f"wrote {args.heatmap}")
    if args.check:
        return check_against_ort(args.check, feeds, outputs, logits.seen)
    return 0


def chain_trace(chain, names: list[str]) -> dict:
    """One Chrome trace for a chain: each executable's events shifted to start where the
    previous one ended, its processes prefixed by its name and given their own ids."""
    from corefold.sim.trace import trace_events

    events, offset_us, pid_base = [], 0.0, 0
    for name, run in zip(names, chain.runs, strict=True):
        evs = trace_events(run.timed.engine, run.timed.timeline)["traceEvents"]
        top = 0
        for e in evs:
            e = dict(e)
            top = max(top, int(e.get("pid", 0)))
            e["pid"] = pid_base + int(e.get("pid", 0))
            if "ts" in e:
                e["ts"] = float(e["ts"]) + offset_us
            if e.get("name") == "process_name":
                e["args"] = {"name": f"{name}: {e['args']['name']}"}
            events.append(e)
        pid_base += top + 1
        offset_us += run.report.latency_s * 1e6
    return {"traceEvents": events, "displayTimeUnit": "ns"}


def _write_profile(path: str, rows: list[dict]) -> None:
    from corefold.cli.common import atomic_output
    from corefold.sim.profile import write_csv

    with atomic_output(path, suffix=".csv") as tmp:
        write_csv(tmp, rows)
    print(f"wrote {path} ({len(rows)} operators)")


def _mib(n: float) -> str:
    return f"{n / 2**20:.2f} MiB"


def _print_summary(path: str, sim, critical=None, profile=None) -> None:
    r, t = sim.report, sim.target
    used = sum(1 for v in r.sram_peak_bytes if v)
    print(f"simulated {path} on {t.name} ({t.width}x{t.height} cores): {r.instructions} instructions on "
          f"{len(sim.timed.task)} cores")
    ratio = r.latency_s / r.roofline_s if r.roofline_s > 0 else float("inf")
    print(f"latency      {r.latency_s * 1e6:10.2f} us   roofline {r.roofline_s * 1e6:.2f} us "
          f"({sim.roofline.binding}-bound), latency / roofline {ratio:.2f}")
    print(f"load         {r.load_s * 1e6:10.2f} us   (resident weights over the host link, apart from the latency)")
    peak = int(np.argmax(r.sram_peak_bytes))
    print(f"SRAM peak    {_mib(r.sram_peak_bytes[peak])} of {_mib(r.sram_capacity_bytes)} on core "
          f"({peak % t.width},{peak // t.width}); {used} cores hold data")
    links = sim.link_bytes
    y, x, d = np.unravel_index(int(np.argmax(links)), links.shape) if links.size else (0, 0, 0)
    print(f"NoC          {r.noc_bytes:,} byte-hops; busiest link ({x},{y}) {'NESW'[d]}: {int(links.max(initial=0)):,} bytes")
    print(f"DRAM         {r.dram_bytes:,} bytes   host {r.host_bytes:,} bytes")
    print("utilisation  " + "  ".join(f"{k} {v:.3f}" for k, v in r.utilisation.items()))
    if critical is not None:
        print(f"critical path {critical.summary()}")
    if profile:
        from corefold.sim.profile import summary

        if top := summary(profile):
            print(f"longest on it {top}")
    for name, arr in sim.outputs.items():
        print(f"{name}: {arr.dtype.name}{list(arr.shape)}" + (
            f"  min {arr.min():.6g}  max {arr.max():.6g}" if arr.size and np.issubdtype(arr.dtype, np.number) else ""))


def output_steps(model_path: str) -> dict[str, float]:
    """Per graph output of an ONNX model, its quantization step: the largest scale of the
    DequantizeLinear that produces it (absent for a float output)."""
    from corefold.frontend.onnx import load_model
    from corefold.passes.quantize.check import output_steps as graph_steps

    return {k: v for k, v in graph_steps(load_model(model_path)).items() if v is not None}


def check_against_ort(model_path: str, feeds: dict[str, np.ndarray], outputs: dict[str, np.ndarray],
                      logits: dict[str, np.ndarray] | None = None) -> int:
    """Compare ``outputs`` with ONNX Runtime's on ``model_path`` (module docstring); 0 or 1.
    ``logits``: the simulated input of each Softmax / LogSoftmax that makes an output, by
    node name (:class:`LogitsProbe`): where such an output is off, its input is compared
    instead (module docstring).

    Raises:
        ReferenceRunError: ONNX Runtime cannot run the model on these inputs.
    """
    from corefold.frontend.onnx.check import ort_session

    quantized = _check_quantized(model_path, feeds, outputs)
    if quantized is not None:
        return quantized

    ref = _reference(model_path, lambda: _ort_outputs(ort_session(model_path, qdq_exact=True), feeds))
    steps = output_steps(model_path)
    ok_all = True
    for name, got in outputs.items():
        if not _comparable(name, got, ref, model_path, "ONNX Runtime's"):
            ok_all = False
            continue
        want = ref[name]
        diff = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)), initial=0.0))
        if np.issubdtype(want.dtype, np.integer):
            limit, what = 1.0, "one integer step"
        elif name in steps:
            limit, what = steps[name] * (1 + 1e-6), f"one quantization step ({steps[name]:.3g})"
        else:
            scale = float(np.max(np.abs(want), initial=0.0)) or 1.0
            limit, what = FLOAT_TOLERANCE * scale, f"{FLOAT_TOLERANCE:g} x output scale {scale:.3g}"
        ok = diff <= limit
        line = f"check {name}: max abs error {diff:.3g} vs ONNX Runtime, limit {what}: {'ok' if ok else 'MISMATCH'}"
        if not ok and logits:
            ok, line = _check_logits(model_path, feeds, name, logits, line)
        ok_all &= ok
        print(line)
    if not ok_all:
        print("check failed: outputs differ from ONNX Runtime", file=sys.stderr)
        return 1
    return 0


def _check_logits(model_path: str, feeds: dict[str, np.ndarray], name: str, logits: dict[str, np.ndarray],
                  line: str) -> tuple[bool, str]:
    """An output of a Softmax / LogSoftmax off by more than the tolerance: whether its input
    (the logits, as the chip computed them) is within the tolerance of ONNX Runtime's, and
    the line that says so. A softmax of logits about 1e9 (random weights in a deep model:
    onnx's light ResNet-50) turns a reassociation's rounding, 1e-16 of the logits, into
    another distribution; the logits are what the chip must get right."""
    from corefold.frontend.onnx import load_model
    from corefold.frontend.onnx.check import ort_values
    from corefold.ir.analysis import REARRANGE, normalised_outputs

    node = normalised_outputs(load_model(model_path)).get(name)
    if node is None or node.name not in logits:
        return False, line
    # the logits by their name in MODEL: back through the reshapes the importer adds itself
    # (a Softmax of opset < 13 reads a Flatten of its input, named by the importer)
    names, v = [], node.inputs[0]
    while True:
        names.append(v.name)
        if v.producer is None or v.producer.op_type not in REARRANGE:
            break
        v = v.producer.inputs[0]
    ref = _reference(model_path, lambda: ort_values(model_path, feeds, names, qdq_exact=True))
    x = next((n for n in names if n in ref), None)
    got = logits[node.name]
    if x is None or ref[x].size != got.size:
        return False, line
    want = ref[x].reshape(got.shape)
    scale = float(np.max(np.abs(want), initial=0.0)) or 1.0
    diff = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)), initial=0.0))
    ok = diff <= FLOAT_TOLERANCE * scale
    if ok:
        line = line.removesuffix(": MISMATCH") + ": above it, but"
    return ok, (f"{line}\n  its {node.op_type}'s input '{x}' (logits up to {scale:.3g}): max abs error {diff:.3g}, "
                f"limit {FLOAT_TOLERANCE:g} x its scale: {'ok' if ok else 'MISMATCH'}"
                + (f" (the {node.op_type} of logits this large turns their rounding into another distribution)"
                   if ok else ""))


def _check_quantized(model_path: str, feeds: dict[str, np.ndarray], outputs: dict[str, np.ndarray]) -> int | None:
    """``--check`` of a quantized (QDQ) model: 0 or 1, or None for a float model (or one the
    integer runner does not cover), which is compared end to end.

    Every output must equal corefold's integer execution of the model
    (:class:`~corefold.passes.quantize.integer.IntegerRunner`: exactly for an output of a
    DequantizeLinear or an integer output, float ones within 1e-5 of their scale), and
    every quantized tensor, computed from ONNX Runtime's values of its operator's inputs,
    within one step of ONNX Runtime's
    (:func:`~corefold.passes.quantize.check.operator_steps`). The outputs' distance from
    ONNX Runtime end to end is printed, not judged: single operators one step apart
    propagate, so a deep model's outputs may be several steps apart (int8 EfficientNet-B0:
    3 to 6) though every operator is within one."""
    from corefold.frontend.onnx import load_model
    from corefold.frontend.onnx.check import ort_session
    from corefold.passes.quantize.check import operator_steps
    from corefold.passes.quantize.integer import IntegerRunner

    graph = load_model(model_path)
    if not any(n.op_type == "QuantizeLinear" for n in graph.nodes):
        return None
    try:
        exact = IntegerRunner(graph).run(feeds)
    except CorefoldError:
        return None
    ref = _reference(model_path, lambda: _ort_outputs(ort_session(model_path, qdq_exact=True), feeds))
    counts, worst_at = _reference(model_path, lambda: operator_steps(model_path, load_model(model_path), feeds))
    steps = output_steps(model_path)
    ok_all = True
    for name, got in outputs.items():
        if not _comparable(name, got, exact, model_path, "the model's"):
            ok_all = False
            continue
        want = np.asarray(exact[name])
        diff = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)), initial=0.0))
        step = 1.0 if np.issubdtype(want.dtype, np.integer) else steps.get(name)
        if step is not None:
            ok = diff == 0.0
            ort = ""
            if name in ref:
                far = float(np.max(np.abs(got.astype(np.float64) - np.asarray(ref[name], np.float64)), initial=0.0))
                ort = f"; {far / step:.0f} step(s) from ONNX Runtime end to end"
            print(f"check {name}: {diff / step:.0f} steps from corefold's integer execution (exact required){ort}: "
                  f"{'ok' if ok else 'MISMATCH'}")
        else:
            scale = float(np.max(np.abs(want), initial=0.0)) or 1.0
            ok = diff <= FLOAT_TOLERANCE * scale
            print(f"check {name}: max abs error {diff:.3g} vs corefold's integer execution, limit "
                  f"{FLOAT_TOLERANCE:g} x output scale {scale:.3g}: {'ok' if ok else 'MISMATCH'}")
        ok_all &= ok
    total = sum(counts.values())
    worst = max(counts, default=0)
    ok = worst <= 1
    ok_all &= ok
    print(f"check operators: {total} quantized tensors, each computed from ONNX Runtime's inputs, are "
          f"{counts.get(0, 0)} equal to ONNX Runtime's, {counts.get(1, 0)} one step apart"
          + (f", worst {worst} steps at '{worst_at}'" if worst > 1 else "")
          + f" (limit one step): {'ok' if ok else 'MISMATCH'}")
    if not ok_all:
        print("check failed: outputs differ from the model's integer execution, or an operator from ONNX Runtime",
              file=sys.stderr)
        return 1
    return 0


def _ort_outputs(sess, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds), strict=True))


def _reference(model_path: str, compute):
    """``compute()``, whatever ONNX Runtime raises in it reported as the reference's failure.

    Raises:
        ReferenceRunError: ONNX Runtime cannot run the model on these inputs.
    """
    try:
        return compute()
    except CorefoldError:
        raise
    except Exception as exc:  # ORT raises its own exception types
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ReferenceRunError(f"--check: ONNX Runtime cannot run '{model_path}': {msg}") from None


def _comparable(name: str, got: np.ndarray, ref: dict[str, np.ndarray], model_path: str, whose: str) -> bool:
    """Whether ``ref`` has output ``name`` of ``got``'s shape; prints why not."""
    if name not in ref:
        print(f"check {name}: not an output of {model_path}")
        return False
    if got.shape != np.shape(ref[name]):
        print(f"check {name}: shape {list(got.shape)} differs from {whose} {list(np.shape(ref[name]))}")
        return False
    return True
