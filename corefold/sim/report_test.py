"""Roofline, report JSON, chain combination and the link heatmap."""

import builtins
import json

import numpy as np
import pytest

from corefold.errors import CorefoldError
from corefold.sim.plot import draw_link_heatmap, link_segments
from corefold.sim.report import SimReport, combine, roofline
from corefold.target import load_target


def test_roofline_terms_by_hand():
    t = load_target("npu")  # 64 cores, 1024 MAC/cycle, 2 x 64 vector ops/cycle, 1 GHz, 25.6 GB/s
    r = roofline(macs=64 * 1024e9 * 1e-3, vector_ops=64 * 128e9 * 2e-3, compulsory_dram_bytes=25.6e9 * 5e-4, target=t)
    assert r.matrix_s == pytest.approx(1e-3)
    assert r.vector_s == pytest.approx(2e-3)
    assert r.dram_s == pytest.approx(5e-4)
    assert r.seconds == pytest.approx(2e-3) and r.binding == "vector"


def _report(latency, peak, link, util):
    return SimReport(latency_s=latency, roofline_s=latency / 2, load_s=1.0, sram_peak_bytes=peak,
                     sram_capacity_bytes=100, noc_bytes=int(np.sum(link)), link_bytes=link,
                     dram_bytes=10, host_bytes=5, instructions=7, utilisation=util)


def test_report_keys_are_exactly_the_issues(tmp_path):
    link = np.zeros((2, 3, 4), int).tolist()
    r = _report(2.0, [1] * 6, link, {"matrix": 0.5})
    path = tmp_path / "r.json"
    r.write(path)
    doc = json.loads(path.read_text())
    assert list(doc) == ["latency_s", "roofline_s", "load_s", "sram_peak_bytes", "sram_capacity_bytes",
                         "noc_bytes", "link_bytes", "dram_bytes", "host_bytes", "instructions", "utilisation"]
    assert np.asarray(doc["link_bytes"]).shape == (2, 3, 4)


def test_combine_adds_times_and_bytes_keeps_peaks_and_weights_utilisation():
    a = np.zeros((1, 2, 4), int)
    a[0, 0, 1] = 8
    b = np.zeros((1, 2, 4), int)
    b[0, 1, 3] = 4
    ra = _report(1.0, [10, 20], a.tolist(), {"matrix": 1.0, "vector": 0.0})
    rb = _report(3.0, [30, 5], b.tolist(), {"matrix": 0.0, "vector": 0.4})
    c = combine([ra, rb])
    assert c.latency_s == 4.0 and c.roofline_s == 2.0 and c.load_s == 2.0
    assert c.sram_peak_bytes == [30, 20]
    assert c.link_bytes == [[[0, 8, 0, 0], [0, 0, 0, 4]]]
    assert c.noc_bytes == 12 and c.dram_bytes == 20 and c.host_bytes == 10 and c.instructions == 14
    assert c.utilisation == pytest.approx({"matrix": 0.25, "vector": 0.3})
    with pytest.raises(ValueError, match="different meshes"):
        combine([ra, _report(1.0, [1], np.zeros((1, 1, 4), int).tolist(), {})])


def test_link_segments_skip_links_off_the_mesh():
    link = np.arange(2 * 3 * 4).reshape(2, 3, 4)
    segs, vals = link_segments(link)
    # 2x3 mesh: 2 rows x 2 horizontal segments x 2 directions + 3 columns x 1 x 2 = 14 links
    assert segs.shape == (14, 2, 2)
    # the east bar of (0, 0) carries link[0, 0, E] and lies between x = 0 and x = 1
    east = [(s, v) for s, v in zip(segs, vals, strict=True) if v == link[0, 0, 1]]
    assert len(east) == 1 and 0 < east[0][0][0][0] < east[0][0][1][0] < 1


def test_heatmap_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    link = np.zeros((3, 4, 4))
    link[1, 1, 1] = 1e6
    out = tmp_path / "links.png"
    draw_link_heatmap(link, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_heatmap_without_matplotlib_says_so_in_one_line(tmp_path, monkeypatch):
    real = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(CorefoldError, match=r"needs matplotlib: pip install 'corefold\[plot\]'"):
        draw_link_heatmap(np.zeros((1, 1, 4)), tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()
