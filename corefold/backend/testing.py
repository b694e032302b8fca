"""Helpers for the backend's tests and benches: small targets and checked lowering."""

from __future__ import annotations

from importlib import resources

import numpy as np

from corefold.target import Target, parse_target


def npu_text() -> str:
    """The text of the ``npu`` preset."""
    return resources.files("corefold.target").joinpath("presets/npu.toml").read_text()


def small_target(width: int = 4, height: int = 4, sram_kib: float = 64, reserved_kib: float = 4,
                 instruction_kib: float = 256, noc_buffer_kib: float = 16, stream_bytes: int = 512,
                 dram_attach: str = "[[0, 1], [3, 2]]", dram_gbps: float = 25.6,
                 more: tuple[tuple[str, str], ...] = ()) -> Target:
    """The ``npu`` preset's core on a smaller mesh with less SRAM (splits and spills happen);
    ``more`` replaces further lines of the preset's text (old, new)."""
    text = npu_text()
    for old, new in [("width = 8 ", f"width = {width} "), ("height = 8 ", f"height = {height} "),
                     ("sram_kib = 1024", f"sram_kib = {sram_kib}"),
                     ("sram_reserved_kib = 64", f"sram_reserved_kib = {reserved_kib}"),
                     ("instruction_kib = 256", f"instruction_kib = {instruction_kib}"),
                     ("buffer_kib = 16", f"buffer_kib = {noc_buffer_kib}"),
                     ("stream_buffer_bytes = 512", f"stream_buffer_bytes = {stream_bytes}"),
                     ("dram_attach = [[0, 3], [0, 4], [7, 3], [7, 4]]", f"dram_attach = {dram_attach}"),
                     ("dram_gbps = 25.6", f"dram_gbps = {dram_gbps}"), *more]:
        assert old in text, old
        text = text.replace(old, new, 1)
    return parse_target(text, "small target")


def max_relative_error(want: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> float:
    """Largest ``|want - got|`` over outputs, relative to each output's largest magnitude."""
    worst = 0.0
    for k, w in want.items():
        w = np.asarray(w, np.float64)
        g = np.asarray(got[k], np.float64)
        scale = float(np.abs(w).max()) if w.size else 0.0
        worst = max(worst, float(np.abs(w - g).max()) / (scale or 1.0) if w.size else 0.0)
    return worst
