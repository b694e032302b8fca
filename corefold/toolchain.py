"""A user's own compiler as M1's compile callable (``--compiler-cmd``).

Serial partitioning asks ``compile(subgraph)`` whether a candidate subgraph fits. With
``--compiler-cmd "vendorc {onnx} -o {out}"`` the answer comes from the user's real
toolchain: each candidate is written as an ONNX model, the command runs with ``{onnx}``
and ``{out}`` replaced by the model's and the output's paths, and a non-zero exit is a
compile failure (a :class:`~corefold.errors.CompileError` whose detail is the command's
last line of error output). The executable is whatever the command wrote to ``{out}``.
"""

from __future__ import annotations

import shlex
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from corefold.errors import CompileError, CorefoldError
from corefold.ir import Graph


@dataclass(frozen=True)
class ExternalExecutable:
    """What a user's compiler produced for one subgraph: its output file's bytes."""

    name: str
    data: bytes


@dataclass(frozen=True)
class CommandCompiler:
    """``compile(subgraph)`` through an external command (picklable: it travels to worker
    processes).

    Attributes:
        template: the command, with ``{onnx}`` and ``{out}`` placeholders.
        timeout: seconds before a compile counts as failed.
    """

    template: str
    timeout: float = 600.0

    def __post_init__(self) -> None:
        if "{onnx}" not in self.template:
            raise CorefoldError(f"--compiler-cmd {self.template!r}: needs an {{onnx}} placeholder for the model path")
        try:
            shlex.split(self.template)
        except ValueError as exc:
            raise CorefoldError(f"--compiler-cmd {self.template!r}: {exc}") from None

    def __call__(self, graph: Graph) -> ExternalExecutable:
        from corefold.frontend.onnx import save_model

        with tempfile.TemporaryDirectory(prefix="corefold-compile-") as tmp:
            model = Path(tmp) / f"{graph.name}.onnx"
            out = Path(tmp) / f"{graph.name}.out"
            save_model(graph, model)
            argv = [a.format(onnx=str(model), out=str(out)) for a in shlex.split(self.template)]
            try:
                proc = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout)
            except FileNotFoundError:
                raise CorefoldError(f"--compiler-cmd: no such program '{argv[0]}'") from None
            except subprocess.TimeoutExpired:
                raise CompileError("compile time", f"command '{argv[0]}'", self.timeout, self.timeout,
                                   f"subgraph '{graph.name}' timed out") from None
            if proc.returncode != 0:
                lines = [ln for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
                why = lines[-1].strip() if lines else f"exit status {proc.returncode}"
                raise CompileError("external compiler", f"command '{argv[0]}'", len(graph), len(graph) - 1,
                                   f"subgraph '{graph.name}' of {len(graph)} operators: {why}")
            return ExternalExecutable(graph.name, out.read_bytes() if out.exists() else b"")
