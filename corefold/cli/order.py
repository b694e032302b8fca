"""``corefold order MODEL -o OUT.onnx``: issue operators in the order with the smallest
simulated makespan on the target (SPEC M3), and report it against the lower bound."""

from __future__ import annotations

import argparse
import json

from corefold.cli.common import (
    add_shape_argument,
    add_target_argument,
    atomic_output,
    check_outputs,
    shape_bindings,
    value_bindings,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="ONNX model file")
    p.add_argument("-o", "--output", required=True, metavar="OUT.onnx", help="reordered model to write")
    add_shape_argument(p)
    add_target_argument(p)
    p.add_argument("--preset", choices=("fast", "default", "strong"), default="default",
                   help="search effort preset (default: default)")
    p.add_argument("--budget-seconds", type=float, default=None, metavar="S",
                   help="search budget (overrides the preset's)")
    p.add_argument("--key-nodes-per-segment", type=int, default=None, metavar="M",
                   help="join M consecutive key-node segments into one (default 1)")
    p.add_argument("--seed", type=int, default=None, help="seed of the random search (default 0)")
    p.add_argument("--report", metavar="r.json", help="write makespans, bound and search time as JSON")
    p.add_argument("--gantt", metavar="g.png", help="draw the per-unit timeline (needs matplotlib)")


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from tqdm import tqdm

    from corefold.errors import CorefoldError
    from corefold.frontend.onnx import load_model, save_model
    from corefold.passes.order import PRESETS, order_graph, segments
    from corefold.target import load_target

    check_outputs([("-o", args.output), ("--report", args.report), ("--gantt", args.gantt)], inputs=[args.model])

    target = load_target(args.target)
    graph = load_model(args.model, shape_bindings(args), values=value_bindings(args))
    settings = PRESETS[args.preset]
    if args.budget_seconds is not None:
        if args.budget_seconds < 0:
            raise CorefoldError(f"--budget-seconds must be >= 0, got {args.budget_seconds}")
        settings = replace(settings, budget_seconds=args.budget_seconds)
    if args.key_nodes_per_segment is not None:
        if args.key_nodes_per_segment < 1:
            raise CorefoldError(f"--key-nodes-per-segment must be >= 1, got {args.key_nodes_per_segment}")
        settings = replace(settings, key_nodes_per_segment=args.key_nodes_per_segment)
    if args.seed is not None:
        settings = replace(settings, seed=args.seed)
    nseg = len(segments(graph, settings.key_nodes_per_segment))
    with tqdm(total=nseg, desc="segments", unit="seg", disable=None, leave=False) as bar:
        res = order_graph(graph, target, settings, progress=bar)
    save_model(graph, args.output)  # atomic: temp file, then rename
    b = res.bound
    us = 1e6
    print(f"model     {args.model}: {len(graph)} nodes, {res.segments} segments "
          f"({res.enumerated_segments} enumerated)")
    print(f"makespan  before {res.makespan_before * us:.2f} us -> after {res.makespan_after * us:.2f} us "
          f"({res.makespan_before / res.makespan_after:.3f}x)")
    print(f"bound     {b.value * us:.2f} us, binding: {b.binding} "
          f"({', '.join(f'{k} {v * us:.2f}' for k, v in b.terms.items())})")
    print(f"ratio     makespan / bound = {res.makespan_after / b.value:.3f}" if b.value > 0 else "ratio     -")
    print("baselines " + ", ".join(f"{k} {v * us:.2f} us" for k, v in res.baselines.items()))
    print(f"search    {res.search_seconds:.2f} s; wrote {args.output}")
    if args.report:
        with atomic_output(args.report) as tmp:
            tmp.write_text(json.dumps(res.report(), indent=2) + "\n")
    if args.gantt:
        from corefold.passes.order.gantt import draw_gantt

        with atomic_output(args.gantt) as tmp:
            draw_gantt(res.schedule, tmp, f"{graph.name}: makespan {res.makespan_after * us:.1f} us, "
                                          f"bound {b.value * us:.1f} us ({b.binding})")
    return 0
