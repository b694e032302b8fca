"""Files a command writes: checked before the work starts, written atomically; and the
one reader of the ``.npz`` archives commands read (:func:`open_npz`).

Every output of every command goes through :func:`check_outputs` (before any work: the
path is not a folder, its folder exists and is writable, it is not one of the inputs) and
:func:`atomic_output` (written to a temporary file beside it, renamed over it only when
complete). A command that fails, is interrupted or gets SIGTERM (the CLI turns it into an
exception, so ``finally`` blocks run) leaves neither a half-written file nor a temporary one.
"""

from __future__ import annotations

import os
import tempfile
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

from corefold.errors import CorefoldError


class OutputPathError(CorefoldError):
    """An output path cannot be written: a folder, a missing or read-only folder, or an input."""


def _same_file(a: Path, b: Path) -> bool:
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        pass
    return a.resolve() == b.resolve()


def check_output(path: str | os.PathLike, *, inputs: Iterable[str | os.PathLike | None] = (),
                 option: str = "-o", folder: bool = False) -> Path:
    """Check that ``path`` can be written without harm, before any work is done.

    Args:
        path: the output file (or folder, with ``folder=True``).
        inputs: files the command reads; the output may be none of them.
        option: how the user named the output, for the message (``-o``, ``--report``, ...).
        folder: the output is a folder the command creates or fills.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        OutputPathError: naming the option and the path.
    """
    p = Path(path)
    if str(path) == "":
        raise OutputPathError(f"{option}: empty output path")
    if folder:
        if p.exists() and not p.is_dir():
            raise OutputPathError(f"{option} '{p}': exists and is not a folder")
    elif p.is_dir():
        raise OutputPathError(f"{option} '{p}': is a folder, not a file")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.exists():
        raise OutputPathError(f"{option} '{p}': folder '{parent}' does not exist")
    if not parent.is_dir():
        raise OutputPathError(f"{option} '{p}': '{parent}' is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputPathError(f"{option} '{p}': folder '{parent}' is not writable")
    if p.exists() and not folder and not os.access(p, os.W_OK):
        raise OutputPathError(f"{option} '{p}': the file exists and is read-only")
    for src in inputs:
        if src is None:
            continue
        if _same_file(p, Path(src)):
            raise OutputPathError(f"{option} '{p}': is an input of the command; it would be overwritten")
    return p


def check_outputs(outputs: Sequence[tuple[str, str | os.PathLike | None]],
                  inputs: Iterable[str | os.PathLike | None] = ()) -> None:
    """:func:`check_output` for each ``(option, path)`` (``None`` paths are skipped), and
    no two outputs the same file.

    Raises:
        OutputPathError: the first bad output.
    """
    inputs = [i for i in inputs if i is not None]
    seen: list[tuple[str, Path]] = []
    for option, path in outputs:
        if path is None:
            continue
        p = check_output(path, inputs=inputs, option=option)
        for other_opt, other in seen:
            if _same_file(p, other):
                raise OutputPathError(f"{option} '{p}': is also the output of {other_opt}")
        seen.append((option, p))


@contextmanager
def atomic_output(path: str | os.PathLike, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it over ``path`` only on success.

    A failure (exception, including the CLI's SIGTERM exception) leaves no file at ``path``
    and no temporary file behind.

    Raises:
        OutputPathError: the folder is missing, or ``path`` is a folder.
    """
    final = Path(path)
    parent = final.parent if str(final.parent) else Path(".")
    if not parent.is_dir():
        raise OutputPathError(f"output folder '{parent}' does not exist")
    if final.is_dir():
        raise OutputPathError(f"output '{final}' is a folder, not a file")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=suffix or final.suffix, dir=parent)
    except PermissionError:
        raise OutputPathError(f"output folder '{parent}' is not writable") from None
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


@contextmanager
def atomic_outputs(paths: Sequence[str | os.PathLike]) -> Iterator[list[Path]]:
    """Several outputs that appear together or not at all: temporaries for each, renamed
    only when the block succeeds. (Renames are atomic one by one; a failure between two
    renames cannot be caused by the command's work, which is done by then.)"""
    with ExitStack() as stack:
        tmps = [stack.enter_context(atomic_output(p)) for p in paths]
        yield tmps


def open_npz(path: str | os.PathLike, what: str, error: Callable[[str], Exception]):
    """``numpy.load(path)`` as an ``.npz`` archive of named arrays (pickles refused), to be
    used as a context manager. ``what`` names the file in messages ("inputs file").

    Raises:
        ``error(message)``: the file is missing, a folder, not a zip archive, or a ``.npy``
            (one unnamed array, which ``numpy.load`` also reads).
    """
    import zipfile

    import numpy as np

    p = Path(path)
    if p.is_dir():
        raise error(f"{what} '{path}' is a folder, not an .npz file")
    if not p.is_file():
        raise error(f"{what} '{path}' does not exist")
    try:
        z = np.load(p, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise error(f"{what} '{path}' is not a readable .npz ({exc})") from None
    if not isinstance(z, np.lib.npyio.NpzFile):
        raise error(f"{what} '{path}' holds one unnamed array (a .npy), not an .npz of named arrays: "
                    f"save it with numpy.savez(path, NAME=array), NAME the model input")
    return z
