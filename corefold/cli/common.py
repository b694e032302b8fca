"""Arguments and helpers shared by several subcommands."""

from __future__ import annotations

import argparse
import contextlib
import sys

from corefold.io import atomic_output, atomic_outputs, check_output, check_outputs  # noqa: F401 - re-exported for the subcommands


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


def non_negative_int(text: str) -> int:
    """An argparse type: an integer >= 0 (seeds, counts)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 0")
    return value


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 1")
    return value


def finite_float(text: str) -> float:
    """An argparse type: a finite number (no nan, no inf)."""
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def parse_value_binding(text: str) -> tuple[str, str]:
    """Parse ``name=path.npy`` into ``("name", "path.npy")`` (the file is read later)."""
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"--value {text!r}: expected NAME=FILE.npy")
    return name, path


def add_shape_argument(parser: argparse.ArgumentParser) -> None:
    """``--shape NAME=D0,D1,...`` and ``--value NAME=FILE.npy`` (both repeatable)."""
    parser.add_argument("--shape", action="append", type=parse_shape_binding, default=[], metavar="NAME=D0,D1,...",
                        help="bind an input's shape (repeatable); required for dynamic dimensions")
    parser.add_argument("--value", action="append", type=parse_value_binding, default=[], metavar="NAME=FILE.npy",
                        help="bind an input to the array in a .npy file, folded into the model as a constant "
                             "(repeatable): specialises on axes, shapes, indices, k, conditions given as inputs")


# the presets of corefold.target.load.PRESETS, written out so that --help imports no numpy
# (cli_test checks the two agree)
TARGET_PRESETS = ("npu", "npu-2x2", "npu-array", "neuromorphic", "gpu", "gpu-nvlink")


def add_target_argument(parser: argparse.ArgumentParser, default: str = "npu") -> None:
    parser.add_argument("--target", default=default, metavar="T",
                        help=f"target preset ({', '.join(TARGET_PRESETS)}) or TOML file (default: {default})")


def shape_bindings(args: argparse.Namespace) -> dict[str, tuple[int, ...]]:
    return dict(args.shape or [])


def value_bindings(args: argparse.Namespace) -> dict:
    """The arrays of ``--value NAME=FILE.npy``, by input name.

    Raises:
        DataError: a file is missing or not a NumPy ``.npy`` array, or a name is bound twice.
    """
    import numpy as np

    from corefold.errors import DataError

    values = {}
    for name, path in getattr(args, "value", None) or []:
        if name in values:
            raise DataError(f"--value {name}: the input is bound twice")
        try:
            values[name] = np.load(path, allow_pickle=False)
        except FileNotFoundError:
            raise DataError(f"--value {name}={path}: no such file") from None
        except IsADirectoryError:
            raise DataError(f"--value {name}={path}: is a folder, not a .npy file") from None
        except (ValueError, OSError, EOFError) as exc:
            raise DataError(f"--value {name}={path}: not a NumPy .npy array ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})") from None
        if not isinstance(values[name], np.ndarray):
            raise DataError(f"--value {name}={path}: holds several arrays (an .npz); give one .npy array")
    return values


#: The line :func:`jit_notice` prints when numba compiles a kernel.
JIT_NOTICE = ("corefold: compiling numba kernels (the first run after an install: about a minute; "
              "cached for later runs)")


@contextlib.contextmanager
def jit_notice(enabled: bool):
    """Within the block, print :data:`JIT_NOTICE` on stderr once, when numba first compiles
    a kernel (it loads them from its cache afterwards, without a compile event), so that a
    first run's minute of compilation is not taken for a hang. Does nothing unless
    ``enabled`` (the CLI: stderr is a terminal and no ``--quiet``). O(1) per compile."""
    if not enabled:
        yield
        return
    from numba.core import event
    from tqdm import tqdm

    class _Once(event.Listener):
        said = False

        def on_start(self, ev) -> None:  # noqa: ARG002 - the listener's signature
            if not self.said:
                self.said = True
                tqdm.write(JIT_NOTICE, file=sys.stderr)

        def on_end(self, ev) -> None:
            pass

    with event.install_listener("numba:compile", _Once()):
        yield
