"""``build/report.html``: one self-contained page about a compiled model.

Sections: the chain of executables (what each holds and what crosses between them), the
fusion strategies side by side, a per-core Gantt chart of the first executable's
simulated run, its NoC link heatmap, SRAM peak per core against capacity, and the
quantization summary. Every figure is inline SVG drawn here (no script, no external file),
so the page opens anywhere, offline. Rendering is O(events shown + cores + links).
"""

from __future__ import annotations

import html
import math
from typing import Any, Sequence

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}.note{color:#666;font-size:.9em}
svg text{font:11px system-ui,sans-serif}
"""
_UNIT_COLOURS = {"matrix": "#3b6fb6", "vector": "#e08a2c", "dma": "#4a9c5d", "noc": "#8e5ea2", "other": "#999"}


def _e(x: Any) -> str:
    return html.escape(str(x))


def _bytes(n: float) -> str:
    for scale, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"


def _seconds(s: float | None) -> str:
    if s is None:
        return "-"
    if s >= 1:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3f} ms"
    return f"{s * 1e6:.2f} us"


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def chain_svg(chain: Sequence[dict]) -> str:
    """Boxes for the executables in run order, arrows labelled with the bytes between them."""
    w, h, gap = 150, 64, 46
    width = max(1, len(chain)) * (w + gap)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h + 40}" role="img">']
    for i, c in enumerate(chain):
        x = i * (w + gap)
        parts.append(f'<rect x="{x}" y="10" width="{w}" height="{h}" rx="6" fill="#eef3fb" stroke="#3b6fb6"/>')
        parts.append(f'<text x="{x + 8}" y="28">{_e(c.get("name", f"part {i}"))}</text>')
        parts.append(f'<text x="{x + 8}" y="46">{_e(c.get("ops", "?"))} ops, {_e(_bytes(c.get("weight_bytes", 0)))}</text>')
        parts.append(f'<text x="{x + 8}" y="64">{_e(_seconds(c.get("latency_s")))}</text>')
        if i + 1 < len(chain):
            ax = x + w
            parts.append(f'<line x1="{ax}" y1="{10 + h / 2}" x2="{ax + gap - 4}" y2="{10 + h / 2}" stroke="#555" '
                         f'marker-end="url(#arrow)"/>')
            parts.append(f'<text x="{ax + 2}" y="{h + 30}">{_e(_bytes(c.get("bytes_out", 0)))}</text>')
    parts.insert(1, '<defs><marker id="arrow" markerWidth="8" markerHeight="8" refX="6" refY="3" orient="auto">'
                    '<path d="M0,0 L6,3 L0,6 z" fill="#555"/></marker></defs>')
    parts.append("</svg>")
    return "".join(parts)


def gantt_svg(events: Sequence[dict], max_tracks: int = 24, width: int = 1000) -> str:
    """Per-track busy intervals from Chrome trace events (``ph == "X"``; ``ts``/``dur`` in
    microseconds), one row per (process, thread), at most ``max_tracks`` rows."""
    names: dict[tuple[int, int], str] = {}
    procs: dict[int, str] = {}
    for ev in events:
        if ev.get("ph") == "M" and ev.get("name") == "thread_name":
            names[(ev["pid"], ev["tid"])] = ev["args"]["name"]
        if ev.get("ph") == "M" and ev.get("name") == "process_name":
            procs[ev["pid"]] = ev["args"]["name"]
    spans = [ev for ev in events if ev.get("ph") == "X"]
    if not spans:
        return '<p class="note">no simulated events</p>'
    tracks = sorted({(ev["pid"], ev["tid"]) for ev in spans})[:max_tracks]
    row = {t: i for i, t in enumerate(tracks)}
    t_end = max(ev["ts"] + ev["dur"] for ev in spans) or 1.0
    left, rh = 170, 16
    scale = (width - left - 10) / t_end
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{len(tracks) * rh + 30}" role="img">']
    for t, i in row.items():
        label = f"{procs.get(t[0], t[0])} {names.get(t, t[1])}"
        parts.append(f'<text x="2" y="{i * rh + 12}">{_e(label[:28])}</text>')
    for ev in spans:
        t = (ev["pid"], ev["tid"])
        if t not in row:
            continue
        name = names.get(t, "")
        colour = next((c for k, c in _UNIT_COLOURS.items() if k in name), _UNIT_COLOURS["other"])
        x = left + ev["ts"] * scale
        parts.append(f'<rect x="{x:.1f}" y="{row[t] * rh + 2}" width="{max(ev["dur"] * scale, 0.5):.1f}" '
                     f'height="{rh - 4}" fill="{colour}"><title>{_e(ev.get("name", ""))}</title></rect>')
    parts.append(f'<text x="{left}" y="{len(tracks) * rh + 22}">0</text>'
                 f'<text x="{width - 90}" y="{len(tracks) * rh + 22}">{_e(_seconds(t_end / 1e6))}</text></svg>')
    return "".join(parts)


def heatmap_svg(link_bytes: Sequence[Sequence[Sequence[float]]], cell: int = 34) -> str:
    """Each core a square shaded by the most bytes leaving it on any of its four links."""
    h = len(link_bytes)
    w = len(link_bytes[0]) if h else 0
    peak = max((max(d) for r in link_bytes for d in r), default=0) or 1
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w * cell + 120}" height="{h * cell + 10}" role="img">']
    for y in range(h):
        for x in range(w):
            v = max(link_bytes[y][x])
            level = int(255 - 200 * math.sqrt(v / peak))
            parts.append(f'<rect x="{x * cell}" y="{y * cell}" width="{cell - 2}" height="{cell - 2}" '
                         f'fill="rgb(255,{level},{level})"><title>core ({x},{y}): {_e(_bytes(v))}</title></rect>')
    parts.append(f'<text x="{w * cell + 8}" y="14">max {_e(_bytes(peak))}</text></svg>')
    return "".join(parts)


def sram_svg(peaks: Sequence[float], capacity: float, width: int = 1000) -> str:
    """A bar per core (row-major order): peak SRAM in use against the capacity line."""
    n = max(len(peaks), 1)
    bw = max(2.0, (width - 40) / n)
    hgt = 120
    cap = capacity or max(peaks, default=1) or 1
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{hgt + 30}" role="img">']
    for i, p in enumerate(peaks):
        bh = hgt * min(p / cap, 1.2)
        colour = "#c0392b" if p > cap else "#3b6fb6"
        parts.append(f'<rect x="{30 + i * bw:.1f}" y="{hgt - bh + 10:.1f}" width="{max(bw - 1, 1):.1f}" '
                     f'height="{bh:.1f}" fill="{colour}"><title>core {i}: {_e(_bytes(p))}</title></rect>')
    parts.append(f'<line x1="30" x2="{width}" y1="10" y2="10" stroke="#c0392b" stroke-dasharray="4"/>'
                 f'<text x="32" y="{hgt + 26}">capacity {_e(_bytes(cap))} per core</text></svg>')
    return "".join(parts)


def render(*, title: str, target: str, chain: Sequence[dict], fusion: Sequence[dict], sim: dict | None,
           events: Sequence[dict] = (), quant: dict | None = None, notes: Sequence[str] = ()) -> str:
    """The whole page as one HTML string."""
    body = [f"<h1>{_e(title)}</h1><p>target <b>{_e(target)}</b>; {len(chain)} executable(s)</p>"]
    body += [f'<p class="note">{_e(n)}</p>' for n in notes]
    body.append("<h2>Chain of executables</h2>" + chain_svg(chain))
    body.append(_table(["executable", "ops", "MACs", "weights", "to next", "simulated"],
                       [[c.get("name"), c.get("ops"), f"{c.get('macs', 0):.3g}", _bytes(c.get("weight_bytes", 0)),
                         _bytes(c.get("bytes_out", 0)), _seconds(c.get("latency_s"))] for c in chain]))
    if fusion:
        body.append("<h2>Fusion strategies</h2>")
        body.append(_table(["strategy", "executables", "compile calls", "DRAM bytes", "host bytes", "latency"],
                           [[f.get("strategy"), f.get("executables"), f.get("compile_calls"),
                             _bytes(f.get("dram_bytes", 0)), _bytes(f.get("host_bytes", 0)),
                             _seconds(f.get("latency_s"))] for f in fusion]))
    if sim is not None:
        body.append("<h2>First executable, simulated</h2>")
        body.append(_table(["latency", "roofline", "weight load", "NoC bytes x hops", "DRAM bytes", "instructions"],
                           [[_seconds(sim.get("latency_s")), _seconds(sim.get("roofline_s")),
                             _seconds(sim.get("load_s")), f"{sim.get('noc_bytes', 0):.3g}",
                             _bytes(sim.get("dram_bytes", 0)), sim.get("instructions")]]))
        body.append("<h3>Per-core units over time</h3>" + gantt_svg(events))
        if sim.get("link_bytes"):
            body.append("<h3>NoC link load</h3>" + heatmap_svg(sim["link_bytes"]))
        if sim.get("sram_peak_bytes"):
            body.append("<h3>SRAM peak per core</h3>" + sram_svg(sim["sram_peak_bytes"],
                                                                 float(sim.get("sram_capacity_bytes", 0))))
    if quant:
        modes = quant.get("modes", {})
        body.append("<h2>Quantization</h2>" + _table(
            ["tensors", "unsigned", "symmetric", "not quantized"],
            [[len(quant.get("tensors", {})), modes.get("unsigned", 0), modes.get("symmetric", 0),
              len(quant.get("not_quantized", {}))]]))
    return (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{_e(title)}</title>"
            f"<style>{_CSS}</style></head><body>{''.join(body)}</body></html>")
