import json
import zipfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corefold.mapping.topology.archive import (
    FLAG_MATCHED,
    iter_archive,
    read_archive,
    read_manifest,
    vertex_member,
    write_archive,
)
from corefold.mapping.topology.generate import random_topology
from corefold.mapping.topology.model import Topology, TopologyError

FIELDS = ("indptr", "indices", "weights", "neuron_sizes", "synapses")


def _assert_same(a: Topology, b: Topology) -> None:
    for f in FIELDS:
        x, y = getattr(a, f), getattr(b, f)
        assert x.dtype == y.dtype, f
        np.testing.assert_array_equal(x, y, err_msg=f)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_round_trip_random_graphs_with_isolated_vertices_and_big_values(tmp_path, seed):
    t = random_topology(300, 1500, seed, max_weight=2**40, max_neuron_size=2**36, isolated=0.3)
    assert (t.degree() == 0).sum() > 50  # zero-degree vertices are present
    assert t.weights.max() >= 2**35 and t.neuron_sizes.max() >= 2**35  # 6-byte varints
    path = tmp_path / "t.zip"
    write_archive(t, path)
    _assert_same(t, read_archive(path))
    m = read_manifest(path)
    assert (m["vertices"], m["entries"], m["weight_encoding"]) == (300, t.indices.size, "integer")


def test_round_trip_float_weights_exact(tmp_path):
    t = random_topology(100, 400, 5)
    t.weights = np.random.default_rng(0).random(t.weights.size).astype(np.float32)
    t.weights = (t.weights + t.weights[_reverse(t)]) / 2  # symmetric
    t.validate()
    write_archive(t, tmp_path / "f.zip")
    assert read_manifest(tmp_path / "f.zip")["weight_encoding"] == "float32-bits"
    _assert_same(t, read_archive(tmp_path / "f.zip"))
    t.weights = np.round(t.weights * 100).astype(np.float32)  # integral floats: compact encoding
    write_archive(t, tmp_path / "g.zip")
    assert read_manifest(tmp_path / "g.zip")["weight_encoding"] == "integer"
    _assert_same(t, read_archive(tmp_path / "g.zip"))


def _reverse(t: Topology) -> np.ndarray:
    """Position of each entry's reverse entry."""
    rows = np.repeat(np.arange(t.num_vertices), t.degree())
    key = rows.astype(np.int64) * t.num_vertices + t.indices
    rkey = t.indices.astype(np.int64) * t.num_vertices + rows
    return np.searchsorted(key, rkey)


def test_documented_vertex_file_bytes(tmp_path):
    # docs/topology-archive.md worked example: 201 vertices, vertex 200 has 2 neurons;
    # vertex 0 links to 1 (weight 3) and to 200 (weight 300).
    t = Topology.from_edges(np.array([0, 0]), np.array([1, 200]), np.array([3, 300]), 201,
                            neuron_sizes=np.r_[np.ones(200, np.int64), 2])
    write_archive(t, tmp_path / "doc.zip")
    with zipfile.ZipFile(tmp_path / "doc.zip") as zf:
        assert zf.read("v/0").hex(" ") == "02 00 01 01 03 00 c8 01 02 ac 02"
        assert zf.read("v/200").hex(" ") == "01 00 00 01 ac 02"
        assert zf.read("v/7") == b"\x00"
        assert zf.read("vertices")[:4].hex(" ") == "01 00 01 01"  # v0: size 1, fan-in 0; v1: 1, 1
        assert all(i.compress_type == zipfile.ZIP_DEFLATED for i in zf.infolist())
        assert json.loads(zf.read("manifest.json"))["format"] == "corefold-topology-archive"


def test_streaming_chunks_cover_every_vertex_and_keep_flags(tmp_path):
    t = random_topology(500, 4000, 3, max_weight=9)
    flags = (np.arange(t.indices.size) % 3 == 0).astype(np.uint8) * FLAG_MATCHED
    write_archive(t, tmp_path / "s.zip", flags=flags)
    chunks = list(iter_archive(tmp_path / "s.zip", chunk_bytes=2000))
    assert len(chunks) > 3
    assert [c.first for c in chunks] == list(np.cumsum([0] + [c.num_vertices for c in chunks[:-1]]))
    np.testing.assert_array_equal(np.concatenate([c.flags for c in chunks]), flags)
    np.testing.assert_array_equal(np.concatenate([c.indices for c in chunks]), t.indices)


def _rewrite(src, dst, member, data):
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, data if info.filename == member else zin.read(info.filename))


@pytest.fixture
def small_archive(tmp_path):
    t = random_topology(40, 200, 7, max_weight=1000)
    write_archive(t, tmp_path / "ok.zip")
    return t, tmp_path / "ok.zip"


def test_truncated_archive_is_a_named_error(small_archive, tmp_path):
    _, path = small_archive
    data = path.read_bytes()
    cut = tmp_path / "cut.zip"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(TopologyError, match="cut.zip"):
        read_archive(cut)


@pytest.mark.parametrize("member,data,match", [
    ("v/3", b"\x02\x00\x01\x01\x01\x00", "'v/3' ends before the edge records"),
    ("v/3", b"\x01\x00\x01\x01\x01\x00", "'v/3' has bytes after the edge records"),
    ("v/4", b"\x01\x00\x85", "'v/4' ends in a cut-off varint"),
    ("v/4", b"\x01\x00" + b"\x80" * 10 + b"\x01\x01\x01", "'v/4' has a varint longer than 10"),
    ("v/5", b"", "'v/5' is empty"),
    ("v/6", b"\x01\x00\x63\x01\x01", "'v/6': edge 0 names vertex id outside"),
    ("v/7", b"\x01\x04\x01\x01\x01", "'v/7': edge 0 has a flag with reserved bits"),
    ("v/8", b"\x01\x00\x01\x07\x01", "'v/8': edge 0 gives a neighbour size"),
    ("manifest.json", b"{", "not JSON"),
    ("vertices", b"\x01", "'vertices' holds 1 values"),
])
def test_corrupt_members_are_named(small_archive, tmp_path, member, data, match):
    _, path = small_archive
    bad = tmp_path / "bad.zip"
    _rewrite(path, bad, member, data)
    with pytest.raises(TopologyError, match=match):
        read_archive(bad)


def test_missing_member_and_corrupt_deflate_are_named(small_archive, tmp_path):
    _, path = small_archive
    with zipfile.ZipFile(path) as zin, zipfile.ZipFile(tmp_path / "m.zip", "w") as zout:
        for info in zin.infolist():
            if info.filename != "v/9":
                zout.writestr(info.filename, zin.read(info.filename))
    with pytest.raises(TopologyError, match="no member 'v/9'"):
        read_archive(tmp_path / "m.zip")
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(vertex_member(10))
    start = info.header_offset + 30 + len(info.filename)
    data[start:start + info.compress_size] = b"\xff" * info.compress_size
    (tmp_path / "d.zip").write_bytes(bytes(data))
    with pytest.raises(TopologyError, match="'v/10' does not inflate"):
        read_archive(tmp_path / "d.zip")


def test_not_an_archive(tmp_path):
    (tmp_path / "x.zip").write_text("hello")
    with pytest.raises(TopologyError, match="not a readable zip"):
        read_archive(tmp_path / "x.zip")


@settings(max_examples=25, deadline=None)
@given(n=st.integers(0, 12), m=st.integers(0, 40), seed=st.integers(0, 2**16), big=st.booleans())
def test_round_trip_property(tmp_path_factory, n, m, seed, big):
    t = random_topology(n, m if n else 0, seed, max_weight=2**56 if big else 3, max_neuron_size=2**50 if big else 1)
    path = tmp_path_factory.mktemp("p") / "t.zip"
    write_archive(t, path)
    _assert_same(t, read_archive(path))


def test_streaming_writer_in_several_calls(tmp_path):
    from corefold.mapping.topology.archive import ArchiveWriter

    t = random_topology(60, 400, 9, max_weight=5)
    with ArchiveWriter(tmp_path / "w.zip", t.neuron_sizes, t.synapses) as w:
        for a, b in [(0, 1), (1, 25), (25, 25), (25, 60)]:  # global indptr slices, one empty
            w.write_rows(t.indptr[a:b + 1], t.indices, t.weights)
    _assert_same(t, read_archive(tmp_path / "w.zip"))
    with pytest.raises(TopologyError, match="30 of 60 vertices written"):
        with ArchiveWriter(tmp_path / "short.zip", t.neuron_sizes, t.synapses) as w:
            w.write_rows(t.indptr[:31], t.indices, t.weights)
    with pytest.raises(TopologyError, match="more rows than"):
        with ArchiveWriter(tmp_path / "long.zip", t.neuron_sizes[:10], t.synapses[:10]) as w:
            w.write_rows(t.indptr[:12], t.indices, t.weights)


def test_directions_round_trip_through_archive_and_npz(tmp_path):
    from corefold.mapping.topology.io import load_topology, save_topology
    from corefold.mapping.topology.model import Topology

    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, 50, 300), rng.integers(0, 50, 300)
    topo = Topology.from_edges(src, dst, num_vertices=50, directions=True)
    topo.validate()
    # bit 0: row vertex -> neighbour; checked against the synapse list itself
    pairs = {(int(a), int(b)) for a, b in zip(src, dst, strict=True) if a != b}
    for v in range(50):
        for e in range(topo.indptr[v], topo.indptr[v + 1]):
            u = int(topo.indices[e])
            assert bool(topo.sends[e] & 1) == ((v, u) in pairs) and bool(topo.sends[e] & 2) == ((u, v) in pairs)
    for name in ("t.zip", "t.npz"):
        save_topology(topo, tmp_path / name)
        back = load_topology(tmp_path / name)
        np.testing.assert_array_equal(back.sends, topo.sends)
    plain = Topology(topo.indptr, topo.indices, topo.weights, topo.neuron_sizes, topo.synapses)
    save_topology(plain, tmp_path / "p.zip")
    assert load_topology(tmp_path / "p.zip").sends is None


def test_a_broken_direction_is_named():
    import pytest

    from corefold.mapping.topology.model import Topology, TopologyError

    topo = Topology.from_edges(np.array([0, 1, 2]), np.array([1, 2, 0]), directions=True)
    topo.sends[0] = 3  # vertex 0's entry says both ways, vertex 1's mirror says one way
    with pytest.raises(TopologyError, match="vertex 0 .*directions"):
        topo.validate()


def test_stored_archive_reads_back_identical_to_deflated(tmp_path):
    """``level=0`` (stored members, what out-of-core coarsening writes) reads back the same
    topology and flags as the deflated default; only the container differs (method 0)."""
    t = random_topology(400, 3000, 5, max_weight=2**20, isolated=0.1)
    flags = (np.random.default_rng(5).random(t.indices.size) < 0.3).astype(np.uint8) * FLAG_MATCHED
    write_archive(t, tmp_path / "d.zip", flags=flags)
    write_archive(t, tmp_path / "s.zip", flags=flags, level=0)
    _assert_same(read_archive(tmp_path / "d.zip"), read_archive(tmp_path / "s.zip"))
    got = np.concatenate([ch.flags for ch in iter_archive(tmp_path / "s.zip", chunk_bytes=2000)])
    np.testing.assert_array_equal(got, flags)
    with zipfile.ZipFile(tmp_path / "s.zip") as zf:
        assert {i.compress_type for i in zf.infolist()} == {zipfile.ZIP_STORED}
        assert zf.read(vertex_member(3)) == zipfile.ZipFile(tmp_path / "d.zip").read(vertex_member(3))
