"""The machine's own limits, checked before work that would exceed them.

A model whose tensors need more memory than the machine has ends in one line naming the
amount ("needs 224 GiB of activations, 21.3 GiB available"), not in a MemoryError half way.
"""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from corefold.errors import CapacityError

#: the cyclic collector's thresholds inside :func:`fewer_collections` (Python's own are
#: (700, 10, 10); mypy runs its build at (200,000, 30, 30) for the same reason)
FEWER_COLLECTIONS = (50_000, 20, 20)


def available_memory_bytes() -> int:
    """Memory the process may still use: ``MemAvailable`` of /proc/meminfo, else the free
    physical pages (sysconf)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 1 << 62


def gib(n: float) -> str:
    return f"{n / 2**30:.3g} GiB" if n >= 2**30 else f"{n / 2**20:.3g} MiB"


def check_memory(need: int, what: str, *, fraction: float = 0.9) -> None:
    """Refuse work that needs more than ``fraction`` of the available memory.

    Raises:
        CapacityError: ``"{what} needs X GiB, Y GiB available on this machine"``.
    """
    have = available_memory_bytes()
    if need > fraction * have:
        raise CapacityError(f"{what} needs {gib(need)}, {gib(have)} available on this machine")


_COLLECTIONS_LOCK = threading.Lock()
_collections_depth = 0
_collections_before: tuple[int, ...] = ()


@contextmanager
def fewer_collections(thresholds: tuple[int, int, int] = FEWER_COLLECTIONS) -> Iterator[None]:
    """Run the block with the cyclic garbage collector's thresholds raised to ``thresholds``
    (restored after, also on an exception).

    Lowering allocates millions of small acyclic objects (instructions, stages, tuples)
    while a large heap (the graph, its tiles, the trials' executables) stays alive; at
    Python's thresholds every 70,000 net allocations rescan that whole heap. Measured on
    the int8 Inception v1 (``bench/backend.py``'s slowest lowering, identical executable):
    14.2-16.2 s at the default thresholds, 9.2-9.7 s here, 8.8-11.1 s with the collector
    off. Cycles are still collected, only less often. Usable as a decorator.

    The thresholds are the process's: blocks nested or running in several threads at once
    share one setting, that of the outermost block, and the thresholds from before it come
    back when the last block ends. O(1).
    """
    global _collections_depth, _collections_before
    with _COLLECTIONS_LOCK:
        if _collections_depth == 0:
            _collections_before = gc.get_threshold()
            gc.set_threshold(*thresholds)
        _collections_depth += 1
    try:
        yield
    finally:
        with _COLLECTIONS_LOCK:
            _collections_depth -= 1
            if _collections_depth == 0:
                gc.set_threshold(*_collections_before)
