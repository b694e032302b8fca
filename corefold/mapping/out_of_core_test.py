from dataclasses import replace

import numpy as np
import pytest

from corefold.mapping import objectives
from corefold.mapping import out_of_core as ooc
from corefold.mapping.settings import MapSettings
from corefold.mapping.testing import conv_like_graph
from corefold.mapping.topology.archive import FLAG_MATCHED, ArchiveReader, write_archive
from corefold.target import load_target


def _target(w, h, neurons):
    t = load_target("neuromorphic")
    return replace(t, mesh_width=w, mesh_height=h, chips_x=1, chips_y=1, neurons_per_core=neurons,
                   synapses_per_core=None, unusable_cores=frozenset())


def _archive(tmp_path, n: int, stride: int):
    """A conv-like topology of ``n`` neurons with int64 weights, written as an archive."""
    topo = conv_like_graph(n, 4, stride=stride)
    topo.weights = np.asarray(topo.weights, np.int64)
    path = tmp_path / "g.zip"
    write_archive(topo, path)
    return topo, path


def _watch_levels(monkeypatch, check) -> None:
    """Call ``check(reader, mate, nc, coarse_path, flagged_path)`` after each streamed level
    is contracted."""
    real = ooc._contract_level

    def spy(reader, mate, coarse_of, nc, coarse_path, flagged_path, *rest):
        entries = real(reader, mate, coarse_of, nc, coarse_path, flagged_path, *rest)
        check(reader, mate, nc, coarse_path, flagged_path)
        return entries

    monkeypatch.setattr(ooc, "_contract_level", spy)


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(ooc, "CHUNK_BYTES", 4096)  # many chunks: partners across chunk borders


def test_streamed_levels_keep_every_vertex_and_capacity(tmp_path, small_chunks, monkeypatch):
    """A conv-like graph mapped out of core through several streamed levels: every vertex
    on one usable core, no core over capacity, the traffic estimate equal to a fresh
    evaluation, and the streamed evaluation equal to the in-memory one."""
    topo, path = _archive(tmp_path, 6000, 61)
    target = _target(4, 4, 420)
    levels = []

    def check(reader, mate, nc, coarse_path, flagged_path):
        with ArchiveReader(flagged_path) as fr:  # the flagged copy marks exactly the matched edges
            ch = fr.read_chunk(0, fr.num_vertices)
            rows = np.repeat(np.arange(fr.num_vertices), np.diff(ch.indptr))
            marked = (ch.flags & FLAG_MATCHED) > 0
            assert (mate[rows[marked]] == ch.indices[marked]).all()
            assert marked.sum() == 2 * int(np.count_nonzero(mate > np.arange(mate.size)))
        levels.append((reader.num_vertices, nc))

    _watch_levels(monkeypatch, check)
    settings = replace(MapSettings.preset("fast"), anneal_steps_per_group=500, stream_coarsest_entries=5000)
    m = ooc.map_archive(path, target, settings, seed=3, progress=False, workdir=tmp_path)
    assert len(levels) >= 3 and all(nc < n for n, nc in levels)
    assert not list(tmp_path.glob(".corefold-levels-*"))  # the levels are cleaned up
    xy = m.core_xy
    assert xy.shape == (6000, 2)
    core = xy[:, 1] * 4 + xy[:, 0]
    assert np.bincount(core).max() <= 420
    ev = objectives.evaluate(topo, xy, 4, 4, 4, 4, 1.0, (420, None))
    assert np.isclose(m.summary["traffic_estimate"], ev["traffic"])
    streamed = ooc.evaluate_archive(path, xy, target)
    for key in ("cut", "traffic", "lower_bound", "max_link_load"):
        assert np.isclose(streamed[key], ev[key]), key
    np.testing.assert_array_equal(streamed["fill"], ev["fill"])
    # far better than an arbitrary placement of the same groups
    rnd = np.random.default_rng(0).permutation(16)[core]
    ev_rnd = objectives.evaluate(topo, np.stack([rnd % 4, rnd // 4], axis=1), 4, 4, 4, 4, 1.0, (420, None))
    assert ev["traffic"] < 0.5 * ev_rnd["traffic"]


def test_auto_goes_out_of_core_only_beyond_the_budget(tmp_path):
    topo = conv_like_graph(500, 2)
    topo.weights = np.asarray(topo.weights, np.int64)
    write_archive(topo, tmp_path / "g.zip")
    entries = topo.indices.size
    s = MapSettings()
    assert not ooc.wants_out_of_core(tmp_path / "g.zip", s)
    assert ooc.wants_out_of_core(tmp_path / "g.zip", replace(s, memory_budget_gib=entries * 59 / 2**30))
    assert ooc.wants_out_of_core(tmp_path / "g.zip", replace(s, out_of_core="always"))
    assert not ooc.wants_out_of_core(tmp_path / "g.npz", replace(s, out_of_core="always"))


def test_stored_levels_map_exactly_as_deflated_ones(tmp_path, small_chunks, monkeypatch):
    """The default writes the streamed levels stored (``stream_deflate_level=0``): the same
    mapping as deflated levels, every vertex placed once within capacity, and the levels
    on disk really are stored."""
    import zipfile

    _, path = _archive(tmp_path, 3000, 37)
    target = _target(4, 2, 420)
    methods = []

    def check(reader, mate, nc, coarse_path, flagged_path):
        for p in (coarse_path, flagged_path):
            with zipfile.ZipFile(p) as zf:
                methods.append({i.compress_type for i in zf.infolist()})

    _watch_levels(monkeypatch, check)
    base = replace(MapSettings.preset("fast"), anneal_steps_per_group=500, stream_coarsest_entries=4000)
    assert base.stream_deflate_level == 0
    stored = ooc.map_archive(path, target, base, seed=5, progress=False, workdir=tmp_path)
    assert methods and all(m == {zipfile.ZIP_STORED} for m in methods)
    methods.clear()
    deflated = ooc.map_archive(path, target, replace(base, stream_deflate_level=1), seed=5, progress=False,
                               workdir=tmp_path)
    assert methods and all(m == {zipfile.ZIP_DEFLATED} for m in methods)
    np.testing.assert_array_equal(stored.core_xy, deflated.core_xy)
    core = stored.core_xy[:, 1] * 4 + stored.core_xy[:, 0]
    assert core.shape == (3000,) and core.min() >= 0 and core.max() < 8
    assert np.bincount(core).max() <= 420
