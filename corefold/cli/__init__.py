"""The ``corefold`` command.

Each subcommand lives in its own module ``corefold.cli.<name>`` with two functions:
``add_arguments(parser)`` and ``run(args) -> int``. Heavy imports stay inside ``run`` so
``corefold --help`` starts fast. A :class:`~corefold.errors.CorefoldError` anywhere ends in
one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from corefold.errors import CorefoldError

#: Subcommands in pipeline order (M5 quantize, M3 split and order, M4 topology and map): (name, module, help).
COMMANDS: list[tuple[str, str, str]] = [
    ("inspect", "corefold.cli.inspect", "print a model's ops, parameters, MACs, memory and time on a target"),
    ("run", "corefold.cli.run", "run a model on corefold's reference executor (and check against ONNX Runtime)"),
    ("quantize", "corefold.cli.quantize", "range-aware post-training quantization to a QDQ ONNX model"),
    ("split", "corefold.cli.split", "cut operators whose data exceeds a core's memory into same-type pieces"),
    ("order", "corefold.cli.order", "reorder operators to minimise the simulated makespan on the target"),
    ("topology", "corefold.cli.topology", "generate, expand, convert and describe neuron-level topologies"),
    ("map", "corefold.cli.map", "place a neuron-level topology on the cores of a target"),
]


def build_parser() -> argparse.ArgumentParser:
    from corefold import __version__

    parser = argparse.ArgumentParser(prog="corefold", description="A compiler for many-core AI chips.")
    parser.add_argument("--version", action="version", version=f"corefold {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module, help_text in COMMANDS:
        p = sub.add_parser(name, help=help_text, description=help_text)
        mod = importlib.import_module(module)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except CorefoldError as exc:
        print(f"corefold {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"corefold {args.command}: interrupted", file=sys.stderr)
        return 130
