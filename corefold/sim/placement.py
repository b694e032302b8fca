"""The placement of an executable on the core mesh, as data and as a picture (``corefold
lower --plot``; drawing needs matplotlib: ``corefold[plot]``).

:func:`placement` reads an :class:`~corefold.backend.Executable`: which operators each core
computes (from its :class:`~corefold.backend.Compute` instructions and the op table) and
the bytes each pair of cores exchanges over the NoC (its :class:`~corefold.backend.Send`
instructions, with their XY routes), and those moved between cores and DRAM channels
(:class:`~corefold.backend.DmaLoad` / :class:`~corefold.backend.DmaStore`).
:func:`render_placement` draws it: one square per core, coloured by the operator type
taking most of the core's compute time and labelled with its operator counts; one polyline per
transfer along its route, as wide as its share of the bytes, with an arrow at the
receiver. y grows downwards (southwards), as in the executable. O(I + H W) for I
instructions.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from corefold.backend.executable import DIRECTION_STEP, Compute, DmaLoad, DmaStore, Executable, Send
from corefold.errors import CorefoldError

Core = tuple[int, int]

#: How far a transfer's line sits beside the segment joining two routers, in core pitches
#: (each direction on its own side, so the two directions of a link are told apart).
_SIDE = {"N": (0.1, 0.0), "E": (0.0, -0.1), "S": (-0.1, 0.0), "W": (0.0, 0.1)}


@dataclass
class Placement:
    """What an executable puts where.

    Attributes:
        width, height: the mesh (whole board).
        ops: per core, operator type -> how many Compute instructions of that type.
        seconds: per core, operator type -> its summed compute time on one unit.
        instructions: per core, its instruction count.
        sends: ``(src, dst) -> (bytes, route)`` summed over the Sends between two cores
            (route: the XY hops of the first; all Sends of a pair share it).
        dma: ``(core, channel router, "load" | "store") -> (bytes, route)``.
    """

    width: int
    height: int
    ops: dict[Core, Counter] = field(default_factory=dict)
    seconds: dict[Core, Counter] = field(default_factory=dict)
    instructions: dict[Core, int] = field(default_factory=dict)
    sends: dict[tuple[Core, Core], tuple[int, tuple]] = field(default_factory=dict)
    dma: dict[tuple[Core, Core, str], tuple[int, tuple]] = field(default_factory=dict)


def placement(exe: Executable, target) -> Placement:
    """The placement of ``exe`` on ``target`` (module docstring). O(I)."""
    dram_channels = target.dram_channels
    pl = Placement(exe.target.width, exe.target.height)
    sends: dict[tuple[Core, Core], list] = defaultdict(lambda: [0, ()])
    dma: dict[tuple[Core, Core, str], list] = defaultdict(lambda: [0, ()])

    def nbytes(view, dtype: str) -> int:
        return view.elements * np.dtype(dtype).itemsize

    for p in exe.programs:
        c = p.core
        pl.ops[c], pl.seconds[c] = Counter(), Counter()
        pl.instructions[c] = len(p.instructions)
        for ins in p.instructions:
            if isinstance(ins, Compute):
                op = exe.ops[ins.op]
                pl.ops[c][op.op_type] += 1
                pl.seconds[c][op.op_type] += (target.units[op.unit_kind].seconds(op.work, target.clock_hz)
                                              + target.units["vector"].seconds(op.activation_work, target.clock_hz))
            elif isinstance(ins, Send):
                entry = sends[(c, ins.dst_core)]
                entry[0] += nbytes(ins.src, exe.buffers[ins.src.ref].dtype)
                entry[1] = entry[1] or ins.route
            elif isinstance(ins, (DmaLoad, DmaStore)):
                load = isinstance(ins, DmaLoad)
                region = exe.regions[(ins.src if load else ins.dst).ref]
                entry = dma[(c, dram_channels[region.channel], "load" if load else "store")]
                entry[0] += nbytes(ins.src, region.dtype)
                entry[1] = entry[1] or ins.route
    pl.sends = {k: (int(v[0]), tuple(v[1])) for k, v in sends.items()}
    pl.dma = {k: (int(v[0]), tuple(v[1])) for k, v in dma.items()}
    return pl


def _route_points(route: tuple) -> list[tuple[float, float]]:
    """The polyline of a route: each hop's segment shifted to its direction's side."""
    pts = []
    for hx, hy, d in route:
        dx, dy = DIRECTION_STEP[d]
        ox, oy = _SIDE[d]
        pts += [(hx + ox, hy + oy), (hx + dx + ox, hy + dy + oy)]
    return pts


def _short(op_type: str) -> str:
    return op_type if len(op_type) <= 11 else op_type[:9] + "."


def _label(ops: Counter, lines: int) -> str:
    top = ops.most_common(lines)
    text = "\n".join(f"{_short(t)} x{n}" if n > 1 else _short(t) for t, n in top)
    rest = sum(ops.values()) - sum(n for _, n in top)
    return text + (f"\n+{rest} more" if rest else "")


def render_placement(exe: Executable, target, title: str = ""):
    """The placement of ``exe`` on ``target`` as a matplotlib figure (the caller saves and
    closes it).

    Raises:
        CorefoldError: matplotlib is not installed.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch, Rectangle
    except ImportError:
        raise CorefoldError("--plot needs matplotlib: pip install 'corefold[plot]'") from None
    pl = placement(exe, target)
    w, h = pl.width, pl.height
    totals: Counter = Counter()
    for c in pl.seconds.values():
        totals.update(c)
    kinds = [k for k, _ in totals.most_common()]
    main = {c: w.most_common(1)[0][0] for c, w in pl.seconds.items() if w}
    palette = plt.get_cmap("tab20").colors
    colour = {k: palette[(2 * i) % 20 if i < 10 else (2 * i + 1) % 20] for i, k in enumerate(kinds)}
    pitch = 1.25 if max(w, h) <= 4 else 0.95
    fig, ax = plt.subplots(figsize=(1.8 + pitch * w, 1.2 + pitch * h))
    font = 7 if max(w, h) <= 4 else 5
    for y in range(h):
        for x in range(w):
            c = (x, y)
            if c in main:
                face, alpha = colour[main[c]], 0.55
            elif c in pl.instructions:
                face, alpha = "white", 1.0
            else:
                face, alpha = "whitesmoke", 1.0
            ax.add_patch(Rectangle((x - 0.42, y - 0.42), 0.84, 0.84, facecolor=face, alpha=alpha,
                                   edgecolor="grey", linewidth=0.6, zorder=1))
            ax.text(x - 0.39, y - 0.39, f"{x},{y}", fontsize=font - 1, color="dimgrey", va="top", ha="left", zorder=4)
            if c in pl.instructions:
                ax.text(x, y + 0.02, _label(pl.ops[c], 3), fontsize=font, ha="center", va="center", zorder=4,
                        bbox={"facecolor": "white", "alpha": 0.6, "edgecolor": "none", "pad": 0.6})
                ax.text(x + 0.39, y + 0.39, f"{pl.instructions[c]} ins", fontsize=font - 1, color="dimgrey",
                        ha="right", va="bottom", zorder=4)
    for cx, cy in sorted(set(target.dram_channels)):
        ax.text(cx + 0.39, cy - 0.39, "D", fontsize=font, color="saddlebrown", ha="right", va="top", zorder=4,
                fontweight="bold")
    hx, hy = target.host_router
    ax.text(hx + 0.25, hy - 0.39, "H", fontsize=font, color="navy", ha="right", va="top", zorder=4, fontweight="bold")
    biggest = max([b for b, _ in pl.sends.values()] + [b for b, _ in pl.dma.values()] + [1])
    for nb, route in (v for _, v in sorted(pl.sends.items())):
        _draw_route(ax, route, 0.8 + 3.2 * nb / biggest, "crimson", "-")
    for nb, route in (v for _, v in sorted(pl.dma.items())):
        _draw_route(ax, route, 0.8 + 2.0 * nb / biggest, "saddlebrown", "--")
    if target.chips_x * target.chips_y > 1:
        for i in range(1, target.chips_x):
            ax.axvline(i * target.mesh_width - 0.5, color="black", linewidth=1.5)
        for j in range(1, target.chips_y):
            ax.axhline(j * target.mesh_height - 0.5, color="black", linewidth=1.5)
    handles = [Patch(facecolor=colour[k], alpha=0.55, edgecolor="grey", label=k) for k in kinds if k in main.values()][:12]
    from matplotlib.lines import Line2D

    handles += [Line2D([], [], color="crimson", label="NoC send"), Line2D([], [], color="saddlebrown",
                                                                           linestyle="--", label="DMA (D: DRAM)")]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=font + 1, frameon=False,
              title="main op of core", title_fontsize=font + 1)
    ax.set_xlim(-0.55, w - 0.45)
    ax.set_ylim(h - 0.45, -0.55)  # y grows southwards
    ax.set_aspect("equal")
    ax.set_xticks(range(w))
    ax.set_yticks(range(h))
    ax.set_xlabel("x (core)")
    ax.set_ylabel("y (core)")
    noc = sum(b * len(r) for b, r in pl.sends.values())
    ax.set_title(title or f"{exe.meta.get('graph', '')} on {exe.target.name}: {len(pl.instructions)} cores, "
                 f"{noc:,} byte-hops of NoC sends", fontsize=font + 2)
    fig.tight_layout()
    return fig


def _draw_route(ax, route: tuple, width: float, colour: str, style: str) -> None:
    pts = _route_points(route)
    if not pts:
        return
    xs, ys = zip(*pts, strict=True)
    ax.plot(xs, ys, color=colour, linewidth=width, linestyle=style, alpha=0.8, zorder=3, solid_capstyle="round")
    ax.annotate("", xy=pts[-1], xytext=pts[-2], zorder=3,
                arrowprops={"arrowstyle": "-|>", "color": colour, "lw": 0, "mutation_scale": 6 + 2 * width})


def draw_placement(exe: Executable, target, path: str | Path, title: str = "") -> None:
    """Draw the placement of ``exe`` into a PNG at ``path`` (written atomically).

    Raises:
        CorefoldError: matplotlib is not installed.
    """
    from corefold.io import atomic_output

    fig = render_placement(exe, target, title)
    import matplotlib.pyplot as plt

    with atomic_output(path, suffix=".png") as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
