"""``corefold lower MODEL -o model.cfx``: lower a model onto the target's core mesh (tile,
place, order, plan SRAM, route, emit, pack; docs/backend.md) and write the executable.

Prints the cores used, the instructions by kind, the SRAM each core's buffers reach
against its capacity, the resident weights and the lowering time per step. A model that
does not fit ends in the backend's one-line :class:`~corefold.errors.CompileError` naming
the resource (exit 2), before anything is written. ``--plot`` draws the placement (needs
matplotlib), ``--report`` writes the executable's summary and the lowering statistics as
JSON. On a terminal, one line on stderr shows the step the lowering is at (``--quiet``:
none). Settings: the ``--preset``, then ``--seed``, then each ``--set NAME=VALUE``
(``--help-settings`` lists them).
"""

from __future__ import annotations

import argparse
import contextlib
import sys

from corefold.cli.common import (
    add_shape_argument,
    add_target_argument,
    shape_bindings,
    value_bindings,
)
from corefold.cli.settings_args import add_settings_arguments

SETTINGS = "corefold.backend.lower:LowerSettings"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="ONNX model file (float, or a QDQ model from corefold quantize)")
    p.add_argument("-o", "--output", required=True, metavar="model.cfx", help="executable to write")
    add_shape_argument(p)
    add_target_argument(p)
    p.add_argument("--preset", choices=("fast", "default", "strong"), default="default",
                   help="effort: fast (no order search), default, strong (tunes pieces, placement effort and clustering "
                        "on the timed simulation; 3-18x the time) (default: default)")
    p.add_argument("--seed", type=int, default=None, help="seed of the mesh placement (default 0); the default and strong presets also "
                   "try the seeds of trial_seeds (1, 2, 3) and keep the fastest: --set trial_seeds= for this one alone")
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help="processes for the lowering's independent trials (1: this process; 0: one per CPU; default "
                        "1); the executable is the same for every N")
    add_settings_arguments(p, SETTINGS)
    p.add_argument("--plot", metavar="placed.png", help="draw the placement on the mesh (needs matplotlib)")
    p.add_argument("--report", metavar="lower.json", help="write the executable's summary and lowering statistics")
    p.add_argument("--quiet", action="store_true", help="no progress line (it shows only on a terminal)")


def settings_from_args(args: argparse.Namespace):
    """The preset, then ``--seed``, then ``--set``.

    Raises:
        CorefoldError: a setting out of range.
        SettingsError: an unknown setting or a value of the wrong type.
    """
    from dataclasses import replace

    from corefold.backend.lower import PRESETS
    from corefold.errors import CorefoldError
    from corefold.settings import override

    settings = PRESETS[args.preset]
    if args.seed is not None:
        settings = replace(settings, seed=args.seed)
    if getattr(args, "workers", None) is not None:
        settings = replace(settings, workers=args.workers)
    settings = override(settings, args.set)
    if settings.workers < 0:
        raise CorefoldError(f"--workers must be >= 0, got {settings.workers}")
    if settings.placement_effort < 1:
        raise CorefoldError(f"--set placement_effort must be >= 1, got {settings.placement_effort}")
    if not settings.order_budget_seconds >= 0:
        raise CorefoldError(f"--set order_budget_seconds must be >= 0, got {settings.order_budget_seconds}")
    if not settings.spread or not all(s > 0 for s in settings.spread):
        raise CorefoldError(f"--set spread: one value or more, each > 0, got {list(settings.spread)}")
    if not settings.pieces_per_core >= 0:
        raise CorefoldError(f"--set pieces_per_core must be >= 0, got {settings.pieces_per_core}")
    if not settings.headroom or not all(h >= 0 for h in settings.headroom):
        raise CorefoldError(f"--set headroom: one value or more, each >= 0, got {list(settings.headroom)}")
    if not all(p >= 0 for p in settings.tune_pieces):
        raise CorefoldError(f"--set tune_pieces: every value must be >= 0, got {list(settings.tune_pieces)}")
    if not all(e >= 1 for e in settings.tune_efforts):
        raise CorefoldError(f"--set tune_efforts: every value must be >= 1, got {list(settings.tune_efforts)}")
    return settings


def run(args: argparse.Namespace) -> int:
    import importlib.util
    import json
    import time
    from pathlib import Path

    from corefold.errors import CorefoldError
    from corefold.io import atomic_outputs, check_outputs

    target_file = args.target if Path(args.target).suffix == ".toml" else None
    check_outputs([("-o", args.output), ("--report", args.report), ("--plot", args.plot)],
                  inputs=[args.model, target_file])
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        raise CorefoldError("--plot needs matplotlib: pip install 'corefold[plot]'")
    settings = settings_from_args(args)

    from corefold.backend.cfx import to_bytes
    from corefold.backend.lower import lower
    from corefold.frontend.onnx import load_model
    from corefold.target import load_target

    target = load_target(args.target)
    graph = load_model(args.model, shape_bindings(args), values=value_bindings(args))
    t0 = time.perf_counter()
    with _progress(args.quiet) as step:
        exe = lower(graph, target, settings, progress=step)
    seconds = time.perf_counter() - t0
    data = to_bytes(exe)
    summary = lowering_summary(exe, target, seconds, len(data))
    paths = [args.output] + [p for p in (args.report, args.plot) if p]
    with atomic_outputs(paths) as tmps:
        tmps[0].write_bytes(data)
        rest = iter(tmps[1:])
        if args.report:
            next(rest).write_text(json.dumps(summary, indent=1, default=str) + "\n")
        if args.plot:
            import matplotlib.pyplot as plt

            from corefold.sim.placement import render_placement

            fig = render_placement(exe, target)
            fig.savefig(next(rest), format="png", dpi=110, bbox_inches="tight")
            plt.close(fig)
    print_summary(args.model, summary)
    print(f"wrote        {', '.join(paths)}")
    return 0


@contextlib.contextmanager
def _progress(quiet: bool):
    """A one-line progress display on stderr (on a terminal, unless ``quiet``): the step
    :func:`~corefold.backend.lower` is at, the steps so far and the time."""
    from tqdm import tqdm

    # a few dozen steps at most: each one is shown (mininterval 0)
    with tqdm(desc="lower", unit="step", file=sys.stderr, leave=False, disable=True if quiet else None,
              mininterval=0, bar_format="{desc} [{elapsed}, step {n_fmt}]") as bar:
        def step(text: str) -> None:
            bar.set_description_str(f"lower: {text}", refresh=False)
            bar.update(1)

        yield step


def lowering_summary(exe, target, seconds: float, file_bytes: int) -> dict:
    """The executable's :meth:`~corefold.backend.Executable.summary` plus, per core, its
    instructions and the SRAM its buffers reach (the highest address, which bounds the
    live bytes at any time), the capacity, the weights' dtypes, the lowering times, and what
    the lowering chose and tried (``trials``; with the strong preset, ``tuning``)."""
    from collections import Counter

    summary = exe.summary()
    weight_dtypes = Counter()
    for b in exe.buffers:
        if b.kind == "weight":
            weight_dtypes[b.dtype] += b.nbytes
    summary.update({
        "graph": exe.meta.get("graph"),
        "target_digest": exe.target.digest,
        "mesh": [exe.target.width, exe.target.height],
        "cores": [list(c) for c in exe.cores],
        "instructions_per_core": [len(p.instructions) for p in exe.programs],
        "sram_extent_bytes": [exe.sram_extent(c) for c in exe.cores],
        "sram_capacity_bytes": target.sram_bytes,
        "weight_bytes_by_dtype": dict(weight_dtypes),
        "spills": exe.meta.get("spills", 0),
        "file_bytes": file_bytes,
        "lower_wall_s": round(seconds, 4),
        "lower_seconds": exe.meta.get("lower_seconds", {}),
        # what the lowering chose and what each trial measured (spread, headroom, min_rows,
        # pieces, seed, ..., and each *_tried list of [value, list latency or error])
        "trials": exe.meta.get("order", {}),
    })
    if "tuning_final" in exe.meta:  # the strong preset: its tuned pair against its settings untuned
        summary["tuning"] = {"pairs": exe.meta.get("tuning", []), "final": exe.meta["tuning_final"]}
    return summary


def _kib(n: float) -> str:
    return f"{n / 2**10:.1f} KiB" if n < 2**20 else f"{n / 2**20:.2f} MiB"


def print_summary(model: str, s: dict) -> None:
    w, h = s["mesh"]
    print(f"lowered      {model} ({s['graph']}) onto {s['target']} ({w}x{h} cores)")
    per = s["instructions_per_core"]
    if len(per) <= 8:
        detail = ", ".join(f"({x},{y}) {n}" for (x, y), n in zip(s["cores"], per, strict=True))
    else:
        detail = f"{min(per)} to {max(per)}, mean {sum(per) / len(per):.1f}"
    packed = "; tasks packed onto cores by SRAM (list scheduling ran out of cores)" if s["trials"].get("packed") else ""
    print(f"cores        {s['cores_used']} of {w * h} used; instructions per core: {detail}{packed}")
    kinds = ", ".join(f"{k} {n}" for k, n in s["instructions_by_kind"].items() if n)
    print(f"instructions {s['instructions']} ({kinds}); {s['ops']} ops")
    extents, cap = s["sram_extent_bytes"], s["sram_capacity_bytes"]
    i = max(range(len(extents)), key=extents.__getitem__) if extents else 0
    if extents:
        x, y = s["cores"][i]
        mean = sum(extents) / len(extents)
        print(f"SRAM         peak {_kib(extents[i])} of {_kib(cap)} ({extents[i] / cap:.1%}) on core ({x},{y}); "
              f"mean {mean / cap:.1%} over used cores; {s['spills']} spills to DRAM")
    dtypes = ", ".join(f"{d} {n:,} B" for d, n in s["weight_bytes_by_dtype"].items()) or "none"
    print(f"weights      {s['weight_bytes']:,} bytes resident ({dtypes}); {s['dram_bytes']:,} bytes of DRAM regions")
    steps = ", ".join(f"{k} {v:.2f}" for k, v in s["lower_seconds"].items())
    print(f"lower time   {s['lower_wall_s']:.2f} s ({steps}); executable {s['file_bytes']:,} bytes")
