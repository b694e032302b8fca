"""The ``corefold`` command.

Each subcommand lives in its own module ``corefold.cli.<name>`` with two functions:
``add_arguments(parser)`` and ``run(args) -> int``. Heavy imports stay inside ``run`` so
``corefold --help`` starts fast.

Exit statuses: 0 success; 1 a check that ran and found a difference (``--check``); 2 the
user's input is at fault (a :class:`~corefold.errors.CorefoldError` anywhere, or a bad
argument), reported in one line on stderr naming the culprit; 70 an internal error (a
corefold bug: :class:`~corefold.errors.InternalError` or any unexpected exception), one
line asking for a report, with the traceback when ``COREFOLD_DEBUG=1``; 141 the output pipe closed (``corefold ... | head``); 130 interrupted
(Ctrl-C) and 143 terminated (SIGTERM), both after removing any partly written output (either
signal is deferred while numba compiles or loads a kernel: :func:`_on_signal`); after either,
:func:`main` leaves both signals ignored, since the process is exiting.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import traceback

from corefold.cli.common import jit_notice
from corefold.errors import EXIT_INTERNAL_ERROR, EXIT_USER_ERROR, CorefoldError, InternalError


class _OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad argument is one line on stderr (no usage block) and exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USER_ERROR, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that every ``finally`` (temporary outputs) runs."""


#: Where raising :class:`Terminated` or :class:`KeyboardInterrupt` is deferred, and for how long (:func:`_on_signal`).
_COMPILERS = (f"{os.sep}numba{os.sep}", f"{os.sep}llvmlite{os.sep}")
_RETRY_SECONDS = 0.01


def _in_compiler(frame) -> bool:
    """Whether ``frame`` or one of its callers runs numba's or llvmlite's Python code
    (compiling a kernel or loading it from the cache). O(stack depth)."""
    while frame is not None:
        if any(part in frame.f_code.co_filename for part in _COMPILERS):
            return True
        frame = frame.f_back
    return False


def _on_signal(signum, frame):  # noqa: ARG001 - signal handler signature
    """SIGTERM raises :class:`Terminated`, SIGINT :class:`KeyboardInterrupt`, in the main
    thread; a SIGALRM is a deferred one of them taken again (``_pending``)."""
    global _pending
    if signum == signal.SIGALRM:
        if _pending is None:
            return  # a retry whose signal was taken already (a second one came first)
        signum = _pending
    # NOTE: an exception raised while numba compiles or loads a kernel leaves its C state
    # half-built, and the process then died of SIGSEGV (1 run in 25 of a SIGTERM during
    # `topology generate` on a loaded machine) with its temporary output left behind; so
    # the signal is taken again 10 ms later (SIGALRM) until the compiler has returned
    if hasattr(signal, "setitimer") and _in_compiler(frame):
        _pending = signum
        signal.signal(signal.SIGALRM, _on_signal)
        signal.setitimer(signal.ITIMER_REAL, _RETRY_SECONDS)
        return
    _pending = None
    if hasattr(signal, "setitimer"):
        signal.setitimer(signal.ITIMER_REAL, 0)  # a retry still armed would take this one again, as SIGTERM
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated()


#: The signal a SIGALRM retry stands for (:func:`_on_signal`).
_pending: int | None = None

#: Subcommands in pipeline order (M5 quantize, M3 split and order, M4 topology and map): (name, module, help).
COMMANDS: list[tuple[str, str, str]] = [
    ("inspect", "corefold.cli.inspect", "print a model's ops, parameters, MACs, memory and time on a target"),
    ("run", "corefold.cli.run", "run a model on corefold's reference executor (and check against ONNX Runtime)"),
    ("quantize", "corefold.cli.quantize", "range-aware post-training quantization to a QDQ ONNX model"),
    ("split", "corefold.cli.split", "cut operators whose data exceeds a core's memory into same-type pieces"),
    ("swap", "corefold.cli.swap", "fit a graph into a device memory budget by swapping and compressing tensors"),
    ("order", "corefold.cli.order", "reorder operators to minimise the simulated makespan on the target"),
    ("topology", "corefold.cli.topology", "generate, expand, convert and describe neuron-level topologies"),
    ("map", "corefold.cli.map", "place a neuron-level topology on the cores of a target"),
    ("lower", "corefold.cli.lower", "lower a model onto the target's core mesh into an executable (.cfx)"),
    ("compile", "corefold.cli.compile", "ONNX to a build: quantize, split, serial partitioning (M1), lower, link"),
    ("sim", "corefold.cli.sim", "run an executable (.cfx) or a build folder as the chip would: outputs, latency, "
                                "traffic, trace"),
]


def build_parser() -> argparse.ArgumentParser:
    from corefold import __version__

    parser = _OneLineParser(prog="corefold", description="A compiler for many-core AI chips.")
    parser.add_argument("--version", action="version", version=f"corefold {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_OneLineParser)
    for name, module, help_text in COMMANDS:
        p = sub.add_parser(name, help=help_text, description=help_text)
        mod = importlib.import_module(module)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def _say(line: str) -> None:
    # a progress bar may have left the cursor mid-line on a non-terminal stderr
    sys.stderr.write(("\n" if _progress_mid_line() else "") + line + "\n")
    sys.stderr.flush()


def _progress_mid_line() -> bool:
    try:
        from tqdm import tqdm

        return bool(getattr(tqdm, "_instances", None))
    except ImportError:  # pragma: no cover - tqdm is a dependency
        return False


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _pipe_closed() -> int:
    """Exit status 141 (SIGPIPE's) after the reader of stdout went away, with stdout sent
    to /dev/null so that the interpreter's final flush raises nothing more."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return 141


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a bad argument (already printed)
        return int(exc.code or 0) if not isinstance(exc.code, str) else EXIT_USER_ERROR
    except BrokenPipeError:  # --help-settings | head
        return _pipe_closed()
    previous = interrupt = None
    try:
        previous = signal.signal(signal.SIGTERM, _on_signal)
        interrupt = signal.signal(signal.SIGINT, _on_signal)
        alarm = signal.getsignal(signal.SIGALRM) if hasattr(signal, "setitimer") else None
    except ValueError:  # not the main thread (tests on threads): no handler
        pass
    prog = f"corefold {args.command}"
    exiting = False  # interrupted or terminated: the process ends next
    try:
        with jit_notice(sys.stderr.isatty() and not getattr(args, "quiet", False)):
            return int(args._run(args) or 0)
    except CorefoldError as exc:
        _say(f"{prog}: error: {' '.join(str(exc).split())}")
        return EXIT_USER_ERROR
    except MemoryError:
        _say(f"{prog}: error: out of memory; the model or its inputs are too large for this machine")
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        exiting = True
        _say(f"{prog}: interrupted")
        return 130
    except Terminated:
        exiting = True
        _say(f"{prog}: terminated")
        return 143
    except BrokenPipeError:  # the reader went away (corefold ... | head): stop quietly, as Unix tools do
        return _pipe_closed()
    except (InternalError, Exception) as exc:  # noqa: BLE001 - a bug: report it as one
        if os.environ.get("COREFOLD_DEBUG"):
            traceback.print_exc()
        _say(f"{prog}: internal error, please report (with COREFOLD_DEBUG=1 for the traceback): {_one_line(exc)}")
        return EXIT_INTERNAL_ERROR
    finally:
        if previous is not None:
            # NOTE: after an interruption the process is exiting: one more Ctrl-C or SIGTERM
            # (a user pressing twice) is ignored, where the previous handlers let it kill the
            # interpreter's shutdown (Python puts SIGINT back to its default action: exit -2
            # after "interrupted", 10 of 10 double Ctrl-C 0.1 s apart)
            signal.signal(signal.SIGTERM, signal.SIG_IGN if exiting else previous)
            if interrupt is not None:
                signal.signal(signal.SIGINT, signal.SIG_IGN if exiting else interrupt)
            if alarm is not None:  # a deferred SIGTERM's retry, if still armed
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, alarm)
