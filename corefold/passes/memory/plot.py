"""Memory profile plots (SPEC M2 §6): device memory over simulated time, tensor by tensor.

Each panel stacks, from the bottom: resident inputs and weights, the tensors not drawn
one by one ("other"), then the ``top`` largest tensors (bytes x lifetime) in allocation
order, each as its own band, as PyTorch's memory timeline does. Needs matplotlib (the
``plot`` extra). O(S log S + top x samples).
"""

from __future__ import annotations

import os

import numpy as np

from corefold.errors import CorefoldError
from corefold.passes.memory.memsim import TimedProfile

GIB = float(2**30)


def _panel(ax, timed: TimedProfile, title: str, budget: int | None, top: int, samples: int) -> None:
    end = float(timed.times[-1]) if timed.times.size else 1.0
    grid = np.linspace(0.0, end, samples)
    # exact total at each grid time: the curve just after the last event at or before it
    idx = np.searchsorted(timed.times, grid, side="right") - 1
    total = np.where(idx >= 0, timed.memory[np.maximum(idx, 0)], timed.resident).astype(np.float64)
    items = sorted(timed.lifetimes.items(), key=lambda kv: -(kv[0].nbytes * (kv[1][1] - kv[1][0])))[:top]
    items.sort(key=lambda kv: kv[1][0])
    bands = np.array([np.where((grid >= a) & (grid < b), s.nbytes, 0.0) for s, (a, b) in items]) \
        if items else np.zeros((0, samples))
    other = np.maximum(total - timed.resident - bands.sum(axis=0), 0.0)
    ms = grid * 1e3
    layers = [np.full(samples, float(timed.resident)), other] + list(bands)
    colors = ["#bbbbbb", "#dddddd"] + [f"C{i % 10}" for i in range(len(items))]
    ax.stackplot(ms, np.array(layers) / GIB, colors=colors, linewidth=0)
    ax.plot(ms, total / GIB, color="black", linewidth=0.8)
    if budget is not None:
        ax.axhline(budget / GIB, color="red", linestyle="--", linewidth=1, label=f"budget {budget / GIB:.2f} GiB")
        ax.legend(loc="upper right", fontsize=8)
    ax.set_title(f"{title}: peak {timed.peak / GIB:.2f} GiB, {end * 1e3:.1f} ms", fontsize=10)
    ax.set_ylabel("device memory (GiB)")


def draw_profile(before: TimedProfile, after: TimedProfile, path: str | os.PathLike, *, name: str = "",
                 budget: int | None = None, top: int = 120, samples: int = 1500) -> None:
    """Write a two-panel PNG (before, after) of device memory over simulated time.

    Raises:
        CorefoldError: matplotlib is not installed.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise CorefoldError("--profile needs matplotlib: pip install 'corefold[plot]'") from None
    fig, axes = plt.subplots(2, 1, figsize=(11, 7), sharey=True)
    _panel(axes[0], before, f"{name} before" if name else "before", budget, top, samples)
    _panel(axes[1], after, f"{name} after" if name else "after", budget, top, samples)
    axes[1].set_xlabel("simulated time (ms)")
    fig.tight_layout()
    fig.savefig(str(path), dpi=110, format="png")
    plt.close(fig)
