"""Arguments and helpers shared by several subcommands."""

from __future__ import annotations

import argparse
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from corefold.errors import CorefoldError


def parse_shape_binding(text: str) -> tuple[str, tuple[int, ...]]:
    """Parse ``name=1,3,320,320`` into ``("name", (1, 3, 320, 320))``."""
    name, sep, dims = text.rpartition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"--shape {text!r}: expected NAME=D0,D1,...")
    try:
        shape = tuple(int(d) for d in dims.split(",") if d.strip() != "")
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shape {text!r}: dimensions must be integers") from None
    if any(d <= 0 for d in shape):
        raise argparse.ArgumentTypeError(f"--shape {text!r}: dimensions must be positive")
    return name, shape


def add_shape_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shape", action="append", type=parse_shape_binding, default=[], metavar="NAME=D0,D1,...",
                        help="bind an input's shape (repeatable); required for dynamic dimensions")


def add_target_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", default="npu", metavar="T",
                        help="target preset (npu, neuromorphic) or TOML file (default: npu)")


def shape_bindings(args: argparse.Namespace) -> dict[str, tuple[int, ...]]:
    return dict(args.shape or [])


@contextmanager
def atomic_output(path: str | os.PathLike, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it over ``path`` only on success.

    A failure (exception) leaves no file at ``path`` and no temporary file behind.
    """
    final = Path(path)
    if final.parent and not final.parent.exists():
        raise CorefoldError(f"output directory '{final.parent}' does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=suffix or final.suffix, dir=final.parent or ".")
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        # mkstemp creates 0600; give the result the mode a plain open() would have
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp_path, 0o666 & ~umask)
        os.replace(tmp_path, final)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()
