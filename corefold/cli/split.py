"""``corefold split MODEL -o OUT.onnx``: cut operators whose data exceeds a core's memory
into same-type pieces joined by Slice and Concat (SPEC M3 §7)."""

from __future__ import annotations

import argparse

from corefold.cli.common import (
    add_shape_argument,
    add_target_argument,
    check_outputs,
    shape_bindings,
    value_bindings,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="ONNX model file")
    p.add_argument("-o", "--output", required=True, metavar="OUT.onnx", help="split model to write")
    add_shape_argument(p)
    add_target_argument(p)


def run(args: argparse.Namespace) -> int:
    from corefold.frontend.onnx import load_model, save_model
    from corefold.passes.split import split_graph
    from corefold.target import load_target

    check_outputs([("-o", args.output)], inputs=[args.model])
    target = load_target(args.target)
    graph = load_model(args.model, shape_bindings(args), values=value_bindings(args))
    before = len(graph)
    res = split_graph(graph, target)
    save_model(graph, args.output)  # atomic: temp file, then rename
    print(f"threshold {target.core_memory_threshold} bytes per operator ({target.name})")
    if res.splits:
        print(f"split     {len(res.splits)} operators into {sum(res.splits.values())} pieces; "
              f"nodes {before} -> {len(graph)}")
        for name, k in sorted(res.splits.items(), key=lambda kv: -kv[1])[:10]:
            print(f"  {name}: {k} pieces")
    else:
        print(f"split     nothing: every operator fits; nodes {before}")
    print(f"wrote     {args.output}")
    return 0
