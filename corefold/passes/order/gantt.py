"""Per-unit Gantt chart of a simulated schedule (needs matplotlib: ``corefold[plot]``)."""

from __future__ import annotations

from pathlib import Path

from corefold.errors import CorefoldError
from corefold.passes.order.simulator import Schedule

_COLOURS = {"compute": "tab:blue", "load": "tab:orange", "store": "tab:green"}


def draw_gantt(sched: Schedule, path: str | Path, title: str = "") -> None:
    """Draw one row per unit (compute, load and store tasks coloured apart) into ``path``.

    Raises:
        CorefoldError: matplotlib is not installed.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise CorefoldError("--gantt needs matplotlib: pip install 'corefold[plot]'") from None
    timeline = sched.timeline()
    units = sorted(timeline, key=lambda u: (u.rstrip("0123456789"), u))
    fig, ax = plt.subplots(figsize=(12, 0.6 * len(units) + 1.5))
    scale = 1e6  # microseconds
    for row, unit in enumerate(units):
        for what, colour in _COLOURS.items():
            spans = [(t.start * scale, (t.end - t.start) * scale) for t in timeline[unit] if t.what == what]
            if spans:
                ax.broken_barh(spans, (row - 0.4, 0.8), facecolors=colour, edgecolor="black", linewidth=0.2,
                               label=what if row == 0 or what not in ax.get_legend_handles_labels()[1] else None)
    ax.set_yticks(range(len(units)), units)
    ax.set_xlabel("time (us)")
    ax.set_title(title or f"makespan {sched.makespan * scale:.1f} us")
    handles, labels = ax.get_legend_handles_labels()
    uniq = dict(zip(labels, handles, strict=False))
    ax.legend(uniq.values(), uniq.keys(), loc="upper right")
    fig.tight_layout()
    fig.savefig(path, format=Path(path).suffix.lstrip(".") or "png")
    plt.close(fig)
