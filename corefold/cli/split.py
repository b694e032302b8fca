"""``corefold split MODEL -o OUT.onnx``: cut operators whose data exceeds a core's memory
into same-type pieces joined by Slice and Concat (SPEC M3 §7).

``--set threshold=BYTES`` replaces the target's core memory threshold (``--help-settings``)."""

from __future__ import annotations

import argparse

from corefold.cli.common import (
    add_shape_argument,
    add_target_argument,
    shape_bindings,
    value_bindings,
)
from corefold.cli.settings_args import add_settings_arguments

SETTINGS = "corefold.passes.split.split:SplitSettings"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="ONNX model file")
    p.add_argument("-o", "--output", required=True, metavar="OUT.onnx", help="split model to write")
    add_shape_argument(p)
    add_target_argument(p)
    add_settings_arguments(p, SETTINGS)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from corefold.frontend.onnx import load_model, save_model
    from corefold.io import atomic_output, check_outputs
    from corefold.passes.split import SplitPass, SplitSettings
    from corefold.pipeline import CompileContext, Pipeline
    from corefold.settings import override
    from corefold.target import load_target

    target_file = args.target if Path(args.target).suffix == ".toml" else None
    check_outputs([("-o", args.output)], inputs=[args.model, target_file])
    settings = override(SplitSettings(), args.set).checked()
    target = load_target(args.target)
    graph = load_model(args.model, shape_bindings(args), values=value_bindings(args))
    before = len(graph)
    ctx = CompileContext(target=target, settings={"split": settings})
    result = Pipeline([SplitPass()]).run(graph, ctx)
    report = result.steps[0][1].report
    with atomic_output(args.output) as tmp:
        save_model(graph, tmp)
    where = f"({target.name})" if settings.threshold is None else "(--set threshold)"
    print(f"threshold {report['threshold']} bytes per operator {where}")
    splits = report["splits"]
    if splits:
        print(f"split     {len(splits)} operators into {sum(splits.values())} pieces; "
              f"nodes {before} -> {len(graph)}")
        for name, k in sorted(splits.items(), key=lambda kv: -kv[1])[:10]:
            print(f"  {name}: {k} pieces")
    else:
        print(f"split     nothing: every operator fits; nodes {before}")
    print(f"wrote     {args.output}")
    return 0
