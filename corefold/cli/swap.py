"""``corefold swap [MODEL | --torch SPEC] --budget 4GiB -o OUT``: fit a graph into a device
memory budget by swapping tensors to the host and compressing them (SPEC M2).

Writes OUT (corefold's text form, with the control edges) and, for an ONNX model,
OUT.onnx (standard operators; the node order encodes the control edges). Prints the peak
before and after, the floor, the simulated time before and after, and what binds.
"""

from __future__ import annotations

import argparse
import json
import re

from corefold.cli.common import (
    add_shape_argument,
    add_target_argument,
    atomic_output,
    atomic_outputs,
    check_outputs,
    shape_bindings,
)

_UNITS = {"": 1, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
          "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}


def parse_bytes(text: str) -> int:
    """``4GiB``, ``512MiB``, ``4GB`` (10^9), ``4G`` (2^30), ``4e9`` -> bytes."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size like 4GiB, 512MiB, 4GB or 4e9")
    value = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: the budget must be positive")
    return int(value)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", nargs="?", help="ONNX model file (or --torch SPEC)")
    p.add_argument("--torch", metavar="SPEC",
                   help="a PyTorch training step instead: torchvision:NAME (e.g. resnet50, vgg16) or "
                        "transformers:bert-base (needs the torch extra)")
    p.add_argument("--batch", type=int, default=None, help="--torch: batch size (default 32; bert 8)")
    p.add_argument("--seq", type=int, default=None, help="--torch transformers: sequence length (default 512)")
    p.add_argument("--optimizer", choices=("none", "sgd", "adam"), default="none",
                   help="--torch: the optimizer step in the graph (adam adds its state to the memory)")
    p.add_argument("--budget", type=parse_bytes, default=None, metavar="SIZE",
                   help="device memory budget, e.g. 4GiB (default: the target's memory)")
    add_target_argument(p, default="gpu")
    p.add_argument("-o", "--output", metavar="OUT", help="transformed graph, text form (and OUT.onnx for ONNX input)")
    p.add_argument("--report", metavar="r.json", help="write the figures as JSON")
    p.add_argument("--profile", metavar="mem.png", help="plot the memory over time before and after (matplotlib)")
    p.add_argument("--export-policy", metavar="policy.py",
                   help="--torch: write the plan as a torch.autograd.graph.saved_tensors_hooks offload policy")
    add_shape_argument(p)
    p.add_argument("--preset", choices=("fast", "default", "strong", "seed"), default="default",
                   help="planner preset; seed = the seed's threshold rule (default: default)")
    p.add_argument("--reduction", choices=("swap", "compress", "both", "auto"), default=None,
                   help="what a reduction does (default swap: bit-exact)")
    p.add_argument("--compress", choices=("fp16", "bf16", "fp8", "int8"), default=None,
                   help="compression format for compress/both/auto (default fp16)")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="override one setting")
    p.add_argument("--help-settings", action="store_true", help="list every setting and preset, then exit")


def _gib(n: float) -> str:
    return f"{n / 2**30:.3f} GiB"


def _settings(args: argparse.Namespace):
    from dataclasses import replace

    from corefold.passes.memory import MemorySettings
    from corefold.settings import override, preset

    settings = preset(MemorySettings, args.preset)
    changes = {}
    if args.budget is not None:
        changes["budget_bytes"] = args.budget
    if args.reduction is not None:
        changes["reduction"] = args.reduction
    if args.compress is not None:
        changes["compress_format"] = args.compress
        if args.reduction is None:
            changes["reduction"] = "auto"
    return override(replace(settings, **changes), args.set)


def _load(args: argparse.Namespace):
    from corefold.errors import CorefoldError

    if args.torch:
        try:
            from corefold.frontend.torch import load_torch
        except ImportError as exc:
            raise CorefoldError(f"--torch needs the torch extra (pip install 'corefold[torch]'): {exc}") from None
        return load_torch(args.torch, batch=args.batch, seq=args.seq, optimizer=args.optimizer)
    from corefold.frontend.onnx import load_model

    return load_model(args.model, shape_bindings(args))


def run(args: argparse.Namespace) -> int:
    from corefold.errors import CorefoldError
    from corefold.passes.memory import MemorySettings

    if args.help_settings:
        from corefold.settings import describe

        print(describe(MemorySettings, _settings(args)))
        return 0
    if (args.model is None) == (args.torch is None):
        raise CorefoldError("give either an ONNX MODEL or --torch SPEC")
    if not args.output:
        raise CorefoldError("-o OUT is required")
    if args.export_policy and not args.torch:
        raise CorefoldError("--export-policy needs --torch (it names PyTorch saved tensors)")
    if not args.torch and (args.batch is not None or args.seq is not None or args.optimizer != "none"):
        raise CorefoldError("--batch, --seq and --optimizer apply to --torch models only")
    onnx_out = f"{args.output}.onnx" if not args.torch else None
    check_outputs([("-o", args.output), ("-o (ONNX)", onnx_out), ("--report", args.report),
                   ("--profile", args.profile), ("--export-policy", args.export_policy)], inputs=[args.model])
    settings = _settings(args)

    from corefold.ir import to_text
    from corefold.passes.memory import plan_memory
    from corefold.passes.memory.memory_pass import clone_graph
    from corefold.target import load_target

    target = load_target(args.target)
    graph = _load(args)
    result = plan_memory(graph, target, settings)
    r = result.report
    if args.export_policy and r.get("split"):
        raise CorefoldError("--export-policy: the plan cuts operators along the batch (eager PyTorch runs them "
                            "whole, so its saved tensors differ); add --set split=off or raise --budget")
    text = to_text(result.graph)
    paths = [args.output] + ([onnx_out] if onnx_out else [])
    with atomic_outputs(paths) as tmps:
        tmps[0].write_text(text)
        if onnx_out:
            from corefold.frontend.onnx import save_model
            from corefold.passes.memory.export import to_standard_ops

            save_model(to_standard_ops(clone_graph(result.graph)), tmps[1])
    source = args.torch or args.model
    print(f"model     {source}: {len(result.before.program.order)} nodes on {target.name}")
    if r["budget"] is not None:
        print(f"budget    {_gib(r['budget'])} ({r['budget']:,} bytes); floor {_gib(r['floor'])}")
    else:
        print(f"floor     {_gib(r['floor'])} (thresholds mode: no budget)")
    print(f"peak      before {_gib(r['peak_before'])} -> after {_gib(r['peak_after'])} "
          f"(simulated: {_gib(r['timed_peak_before'])} -> {_gib(r['timed_peak_after'])})")
    print(f"time      before {r['time_before'] * 1e3:.2f} ms -> after {r['time_after'] * 1e3:.2f} ms "
          f"(overhead {r['overhead'] * 100:.1f}%)")
    if r.get("split"):
        sp = r["split"]
        most = max(o["pieces"] for o in sp["ops"])
        print(f"cut       {len(sp['ops'])} operators along the batch into up to {most} pieces "
              f"(floor {_gib(sp['floor_unsplit'])} before cutting)")
    print(f"moved     {r['reductions']} tensors: {_gib(r['swapped_bytes'])} swapped, "
          f"{_gib(r['compressed_bytes'])} compressed, {r['restores']} restores")
    link = r["link"]
    if link.get("bound_by") == "link":
        print(f"binding   the host link: {_gib(link['excess_at_peak'])} must leave the device by the peak, "
              f"{link['transfer_needed'] * 1e3:.2f} ms of transfer against {link['compute_before_peak'] * 1e3:.2f} ms "
              "of compute before it")
    elif link.get("bound_by") == "choice":
        print("binding   the choice of tensors (the link could carry the excess in time)")
    print(f"wrote     {', '.join(paths)}")
    if args.report:
        with atomic_output(args.report) as tmp:
            tmp.write_text(json.dumps({"model": source, **r}, indent=2) + "\n")
    if args.profile:
        from corefold.passes.memory.plot import draw_profile

        with atomic_output(args.profile) as tmp:
            draw_profile(result.before.timed, result.after.timed, tmp, name=source, budget=r["budget"])
    if args.export_policy:
        from corefold.passes.memory.policy import write_policy

        with atomic_output(args.export_policy) as tmp:
            write_policy(result, tmp)
    return 0
