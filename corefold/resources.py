"""The machine's own limits, checked before work that would exceed them.

A model whose tensors need more memory than the machine has ends in one line naming the
amount ("needs 224 GiB of activations, 21.3 GiB available"), not in a MemoryError half way.
"""

from __future__ import annotations

import os

from corefold.errors import CapacityError


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
