"""The NoC link heatmap of a simulated run (needs matplotlib: ``corefold[plot]``).

Every directed link is drawn as a short bar beside the segment joining its two cores,
coloured by the bytes it carried: each direction sits on its own side of the segment, so
the two directions of a link pair are told apart. y grows downwards (southwards), as in
the executable and the report. O(H W).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from corefold.backend.executable import DIRECTION_STEP, DIRECTIONS
from corefold.errors import CorefoldError
from corefold.io import atomic_output

#: How far a bar sits beside the segment, in core pitches.
_OFFSET = 0.12


def link_segments(link_bytes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bars and their bytes: ``(segments (n, 2, 2), bytes (n,))`` for the links that exist.

    A link leaving the mesh (e.g. west of x = 0) is not drawn.
    """
    h, w, _ = link_bytes.shape
    segs, vals = [], []
    side = {"N": (_OFFSET, 0.0), "E": (0.0, -_OFFSET), "S": (-_OFFSET, 0.0), "W": (0.0, _OFFSET)}
    for d, name in enumerate(DIRECTIONS):
        dx, dy = DIRECTION_STEP[name]
        ox, oy = side[name]
        for y in range(h):
            for x in range(w):
                if not (0 <= x + dx < w and 0 <= y + dy < h):
                    continue
                a = (x + 0.2 * dx + ox, y + 0.2 * dy + oy)
                b = (x + 0.8 * dx + ox, y + 0.8 * dy + oy)
                segs.append((a, b))
                vals.append(link_bytes[y, x, d])
    return np.asarray(segs, dtype=np.float64).reshape(-1, 2, 2), np.asarray(vals, dtype=np.float64)


def draw_link_heatmap(link_bytes: np.ndarray, path: str | Path, title: str = "") -> None:
    """Draw the bytes of every directed link into a PNG at ``path`` (written atomically).

    Raises:
        CorefoldError: matplotlib is not installed.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.collections import LineCollection
    except ImportError:
        raise CorefoldError("--heatmap needs matplotlib: pip install 'corefold[plot]'") from None
    link_bytes = np.asarray(link_bytes)
    h, w, _ = link_bytes.shape
    segs, vals = link_segments(link_bytes)
    fig, ax = plt.subplots(figsize=(1.0 + 0.55 * w, 0.6 + 0.55 * h))
    ys, xs = np.mgrid[0:h, 0:w]
    ax.scatter(xs.ravel(), ys.ravel(), s=18, c="lightgrey", edgecolors="grey", zorder=1)
    if len(segs):
        lines = LineCollection(segs, array=vals, cmap="inferno_r", linewidths=3, zorder=2)
        lines.set_clim(0, max(float(vals.max()), 1.0))
        ax.add_collection(lines)
        fig.colorbar(lines, ax=ax, label="bytes")
    ax.set_xlim(-0.6, w - 0.4)
    ax.set_ylim(h - 0.4, -0.6)  # y grows southwards
    ax.set_aspect("equal")
    ax.set_xlabel("x (core)")
    ax.set_ylabel("y (core)")
    ax.set_title(title or f"NoC bytes per link (total {int(link_bytes.sum()):,})")
    with atomic_output(path, suffix=".png") as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
