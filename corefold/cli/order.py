"""``corefold order MODEL -o OUT.onnx``: issue operators in the order with the smallest
simulated makespan on the target (SPEC M3), and report it against the lower bound.

Settings: the ``--preset``, then the flags below, then each ``--set NAME=VALUE``
(``--help-settings`` lists them all)."""

from __future__ import annotations

import argparse
import json

from corefold.cli.common import (
    add_shape_argument,
    add_target_argument,
    shape_bindings,
    value_bindings,
)
from corefold.cli.settings_args import add_settings_arguments

SETTINGS = "corefold.passes.order.settings:OrderSettings"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="ONNX model file")
    p.add_argument("-o", "--output", required=True, metavar="OUT.onnx", help="reordered model to write")
    add_shape_argument(p)
    add_target_argument(p)
    p.add_argument("--preset", choices=("fast", "default", "strong", "seed"), default="default",
                   help="search effort preset; seed: the seed's literal enumerate-or-sample (default: default)")
    p.add_argument("--budget-seconds", type=float, default=None, metavar="S",
                   help="search budget (overrides the preset's)")
    p.add_argument("--key-nodes-per-segment", type=int, default=None, metavar="M",
                   help="join M consecutive key-node segments into one (default 1)")
    p.add_argument("--target-makespan", type=float, default=None, metavar="US",
                   help="stop searching once an order's simulated makespan is at most US microseconds")
    p.add_argument("--seed", type=int, default=0, help="seed of the random search (default 0)")
    add_settings_arguments(p, SETTINGS)
    p.add_argument("--report", metavar="r.json", help="write makespans, bound and search time as JSON")
    p.add_argument("--gantt", metavar="g.png", help="draw the per-unit timeline (needs matplotlib)")


def settings_from_args(args: argparse.Namespace):
    """The preset, then the flags, then ``--set``.

    Raises:
        CorefoldError: a flag or setting out of range.
    """
    from dataclasses import replace

    from corefold.errors import CorefoldError
    from corefold.passes.order.settings import OrderSettings
    from corefold.settings import override, preset

    settings = preset(OrderSettings, args.preset)
    if args.budget_seconds is not None:
        if not args.budget_seconds >= 0:
            raise CorefoldError(f"--budget-seconds must be >= 0, got {args.budget_seconds}")
        settings = replace(settings, budget_seconds=args.budget_seconds)
    if args.key_nodes_per_segment is not None:
        if args.key_nodes_per_segment < 1:
            raise CorefoldError(f"--key-nodes-per-segment must be >= 1, got {args.key_nodes_per_segment}")
        settings = replace(settings, key_nodes_per_segment=args.key_nodes_per_segment)
    if args.target_makespan is not None:
        if not args.target_makespan >= 0:
            raise CorefoldError(f"--target-makespan must be >= 0 microseconds, got {args.target_makespan}")
        settings = replace(settings, target_makespan=args.target_makespan * 1e-6)
    return override(settings, args.set).checked()


def run(args: argparse.Namespace) -> int:
    import importlib.util
    from pathlib import Path

    from corefold.errors import CorefoldError
    from corefold.frontend.onnx import load_model, save_model
    from corefold.io import atomic_outputs, check_outputs
    from corefold.passes.order import OrderPass
    from corefold.pipeline import CompileContext, Pipeline
    from corefold.target import load_target

    target_file = args.target if Path(args.target).suffix == ".toml" else None
    check_outputs([("-o", args.output), ("--report", args.report), ("--gantt", args.gantt)],
                  inputs=[args.model, target_file])
    if args.gantt and importlib.util.find_spec("matplotlib") is None:
        raise CorefoldError("--gantt needs matplotlib: pip install 'corefold[plot]'")
    settings = settings_from_args(args)
    target = load_target(args.target)
    graph = load_model(args.model, shape_bindings(args), values=value_bindings(args))
    ctx = CompileContext(target=target, settings={"order": settings}, seed=args.seed, progress=True)
    Pipeline([OrderPass()]).run(graph, ctx)
    res = ctx.data["order"]
    b = res.bound
    us = 1e6
    paths = [args.output] + [p for p in (args.report, args.gantt) if p]
    with atomic_outputs(paths) as tmps:
        save_model(graph, tmps[0])
        rest = iter(tmps[1:])
        if args.report:
            next(rest).write_text(json.dumps(res.report(), indent=2) + "\n")
        if args.gantt:
            from corefold.passes.order.gantt import draw_gantt

            draw_gantt(res.schedule, next(rest), f"{graph.name}: makespan {res.makespan_after * us:.1f} us, "
                                                 f"bound {b.value * us:.1f} us ({b.binding})")
    print(f"model     {args.model}: {len(graph)} nodes, {res.segments} segments "
          f"({res.enumerated_segments} enumerated)")
    speedup = f" ({res.makespan_before / res.makespan_after:.3f}x)" if res.makespan_after > 0 else ""
    print(f"makespan  before {res.makespan_before * us:.2f} us -> after {res.makespan_after * us:.2f} us{speedup}")
    print(f"bound     {b.value * us:.2f} us, binding: {b.binding} "
          f"({', '.join(f'{k} {v * us:.2f}' for k, v in b.terms.items())})")
    print(f"ratio     makespan / bound = {res.makespan_after / b.value:.3f}" if b.value > 0 else "ratio     -")
    print("baselines " + ", ".join(f"{k} {v * us:.2f} us" for k, v in res.baselines.items()))
    if settings.target_makespan is not None:
        print(f"target    {settings.target_makespan * us:.2f} us: "
              + ("reached, search stopped" if res.reached_target else "not reached"))
    print(f"search    {res.search_seconds:.2f} s; wrote {', '.join(paths)}")
    return 0
