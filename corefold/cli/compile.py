"""``corefold compile MODEL -o build/``: ONNX in, a chain of executables out, simulated.

The whole pipeline as one :class:`~corefold.pipeline.Pipeline` of named passes (import,
quantize when ``--calib`` is given, split, serial partitioning (M1) with compile, split and
fuse, then link), then a simulation of the chain on seeded random inputs. The build folder
(``corefold.build_folder.write_build``) holds one ``.cfx`` per executable, each subgraph's
ONNX, ``manifest.json`` and ``report.html``; it is written beside its final place and
renamed into it. ``corefold sim build/`` runs it again.

Settings of M1: ``--preset``, then the flags below, then each ``--set NAME=VALUE``
(``--help-settings`` lists them all).
"""

from __future__ import annotations

import argparse

from corefold.cli.common import (
    add_shape_argument,
    add_target_argument,
    shape_bindings,
    value_bindings,
)
from corefold.cli.settings_args import add_settings_arguments

SETTINGS = "corefold.passes.serial.partition:SerialSettings"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="ONNX model file")
    p.add_argument("-o", "--output", required=True, metavar="build/", help="build folder to write")
    add_shape_argument(p)
    add_target_argument(p)
    p.add_argument("--calib", metavar="DATA", help="calibration data (.npz or folder of .npy; see corefold quantize): "
                   "quantize before compiling")
    p.add_argument("--bits", type=int, default=8, choices=(4, 8, 16), help="quantization bits with --calib (default 8)")
    p.add_argument("--fusion", choices=("a", "b", "c", "d", "optimal", "none"), default=None,
                   help="M1 fusion strategy: a attribute groups, b pairs, c forward greedy, d bidirectional, optimal "
                        "the minimum number of executables (default: the preset's, optimal)")
    p.add_argument("--preset", choices=("fast", "default", "strong", "seed"), default="default",
                   help="M1 preset; default: the fewest executables (optimal); fast: forward greedy without the "
                        "reference; strong: optimal on one compile process per CPU; seed: the seed's one round of "
                        "bidirectional fusion (d) (default: default)")
    p.add_argument("--compiler-cmd", metavar="CMD",
                   help="compile each candidate subgraph with a command instead of corefold's backend, e.g. "
                        "\"vendorc {onnx} -o {out}\"; a non-zero exit is a compile failure (no simulation)")
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help="compile processes (1: this process; 0: one per CPU; default 1)")
    p.add_argument("--ray", metavar="auto|ADDRESS", default=None,
                   help="compile candidates on a Ray cluster (the 'ray' extra)")
    p.add_argument("--no-table", action="store_true",
                   help="skip the fusion strategy table (every strategy compiled and simulated for the report)")
    p.add_argument("--no-sim", action="store_true", help="do not simulate the chain for the report")
    p.add_argument("--no-polish", action="store_true",
                   help="keep the candidates' executables (list-scheduling order on each core) instead of lowering "
                        "the kept subgraphs again with the M3 order search")
    p.add_argument("--seed", type=int, default=0, help="seed of the simulated inputs (default 0)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    add_settings_arguments(p, SETTINGS)


def settings_from_args(args: argparse.Namespace):
    """The preset, then the flags, then ``--set``.

    Raises:
        CorefoldError: a flag or setting out of range.
    """
    from dataclasses import replace

    from corefold.errors import CorefoldError
    from corefold.passes.serial import SerialSettings
    from corefold.settings import override, preset

    settings = preset(SerialSettings, args.preset)
    if args.fusion is not None:
        settings = replace(settings, fusion=args.fusion)
    if args.workers is not None:
        if args.workers < 0:
            raise CorefoldError(f"--workers must be >= 0, got {args.workers}")
        settings = replace(settings, workers=args.workers)
    if args.ray is not None:
        settings = replace(settings, ray=args.ray)
    return override(settings, args.set).checked()


def run(args: argparse.Namespace) -> int:
    import time
    from pathlib import Path

    from corefold.build_folder import write_build
    from corefold.compile import CompileSettings, compile_model
    from corefold.frontend.onnx import load_model
    from corefold.io import OutputPathError, check_output
    from corefold.target import parse_target, target_source

    target_file = args.target if Path(args.target).suffix == ".toml" else None
    inputs = [i for i in (args.model, target_file, args.calib) if i is not None]
    out = check_output(args.output, inputs=inputs, option="-o", folder=True)
    for src in inputs:
        if out.resolve() in Path(src).resolve().parents:
            raise OutputPathError(f"-o '{out}': holds the input '{src}'; replacing the build would delete it")
    if out.is_dir() and any(out.iterdir()) and not (out / "manifest.json").is_file():
        raise OutputPathError(f"-o '{out}': a non-empty folder that is not a corefold build (refusing to replace it)")
    serial = settings_from_args(args)
    compiler = None
    if args.compiler_cmd:
        from corefold.toolchain import CommandCompiler

        compiler = CommandCompiler(args.compiler_cmd)
    target_toml, origin = target_source(args.target)
    target = parse_target(target_toml, origin)
    t0 = time.perf_counter()
    graph = load_model(args.model, shape_bindings(args), values=value_bindings(args))
    calib = quantize = None
    if args.calib:
        from corefold.passes.quantize import QuantizeSettings, load_calibration

        calib = load_calibration(args.calib, graph)
        quantize = QuantizeSettings(bits=args.bits)
    settings = CompileSettings(strategies_table=not args.no_table, simulate=not args.no_sim, seed=args.seed,
                               polish=not args.no_polish)
    build = compile_model(graph, target, serial=serial, settings=settings, calib=calib, quantize=quantize,
                          compiler=compiler, progress=not args.quiet)
    folder = write_build(build, out, target_toml=target_toml)
    _print_summary(build, folder, time.perf_counter() - t0)
    return 0


def _print_summary(build, folder, seconds: float) -> None:
    from corefold.build_folder import balance_line

    res = build.serial
    print(f"{build.graph.name} on {build.target.name}: {len(res.pieces)} executable(s) "
          f"(fusion {res.strategy}; minimum {res.minimum_executables}), {res.compile_calls} compile calls, "
          f"{res.fits_calls} fit checks, {seconds:.1f} s")
    for i, (p, sub) in enumerate(zip(res.pieces, build.subgraphs, strict=True)):
        lat = ""
        if build.simulation is not None and i < len(build.simulation.runs):
            lat = f", simulated {build.simulation.runs[i].report.latency_s * 1e6:.1f} us"
        out_bytes = res.crossing_bytes[i] if i < len(res.crossing_bytes) else 0
        print(f"  part{i}: operators {p.start}..{p.end - 1} ({len(sub)} nodes), {out_bytes} bytes to the next{lat}")
    if res.balance is not None and len(res.pieces) > 1:
        print(f"  {balance_line(res.balance.to_json())}")
    if build.polished:
        print(f"  {build.polished} of {len(res.pieces)} executable(s) replaced by a faster lowering (M3 order search; no parallel pieces)")
    if build.table:
        print("  strategy  executables  compile calls  latency (list-scheduling orders)")
        for name, r in build.table.items():
            lat = build.latency_by_strategy.get(name)
            lat_s = f"{lat * 1e6:.1f} us" if lat is not None else "-"
            print(f"  {name:<8}  {len(r.pieces):>11}  {r.compile_calls:>13}  {lat_s}")
    if build.simulation is not None:
        print(f"simulated latency {build.simulation.report.latency_s * 1e6:.1f} us")
    inside = res.ends_inside_patterns()
    if inside:
        print(f"note: {len(inside)} executable(s) end inside an integer pattern (part{', part'.join(map(str, inside))}): "
              f"no range ending outside one fitted, so the operator there runs in float, not exactly as the "
              f"integer execution")
    print(f"wrote {folder}/ (manifest.json, report.html, {len(res.pieces)} .cfx)")
