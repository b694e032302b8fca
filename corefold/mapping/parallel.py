"""Running independent, seeded pieces of the mapper on threads.

The Numba kernels release the GIL, so threads run them in parallel. Every piece draws its
own seeds, and results come back in index order, so whatever the caller picks from them
does not depend on the number of threads or on scheduling.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, TypeVar

T = TypeVar("T")


def run_indexed(fn: Callable[[int], T], count: int, threads: int) -> list[T]:
    """``[fn(0), ..., fn(count - 1)]``, on up to ``threads`` threads (in this thread if 1)."""
    if threads > 1 and count > 1:
        with ThreadPoolExecutor(max_workers=min(threads, count)) as pool:
            return list(pool.map(fn, range(count)))
    return [fn(i) for i in range(count)]
