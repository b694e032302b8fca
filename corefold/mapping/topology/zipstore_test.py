import zipfile

import numpy as np
import pytest

from corefold.mapping.topology import zipstore
from corefold.mapping.topology.zipstore import ZipFormatError, ZipStoreReader, ZipStoreWriter


def _write(path, members, level=1):
    w = ZipStoreWriter(path, level)
    w.add_many([k for k in members if k.startswith("v/")], [v for k, v in members.items() if k.startswith("v/")])
    for k, v in members.items():
        if not k.startswith("v/"):
            w.add(k, v)
    w.close()


def _members(count, seed=0):
    rng = np.random.default_rng(seed)
    out = {f"v/{i}": rng.integers(0, 4, rng.integers(0, 40)).astype(np.uint8).tobytes() for i in range(count)}
    out["manifest.json"] = b'{"x": 1}'
    return out


def test_python_zipfile_reads_what_we_write_and_we_read_what_it_writes(tmp_path):
    members = _members(300)
    _write(tmp_path / "a.zip", members)
    with zipfile.ZipFile(tmp_path / "a.zip") as zf:
        assert zf.testzip() is None
        assert {i.filename: zf.read(i) for i in zf.infolist()} == members
        assert {i.compress_type for i in zf.infolist()} == {zipfile.ZIP_DEFLATED}
    for method in (zipfile.ZIP_DEFLATED, zipfile.ZIP_STORED):
        with zipfile.ZipFile(tmp_path / "b.zip", "w", method) as zf:
            for k in reversed(list(members)):  # out of order: per-member reads
                zf.writestr(k, members[k])
        with ZipStoreReader(tmp_path / "b.zip") as r:
            assert r.read_ids(0, 300) == [members[f"v/{i}"] for i in range(300)]
            assert r.read("manifest.json") == members["manifest.json"]


def test_zip64_member_count_and_offsets(tmp_path, monkeypatch):
    members = _members(70_000, seed=1)  # beyond the 65,535 members of plain zip
    _write(tmp_path / "big.zip", members)
    with zipfile.ZipFile(tmp_path / "big.zip") as zf:
        assert len(zf.infolist()) == 70_001 and zf.read("v/69999") == members["v/69999"]
    with ZipStoreReader(tmp_path / "big.zip") as r:
        assert r.read_ids(69_990, 10) == [members[f"v/{i}"] for i in range(69_990, 70_000)]
        assert r.cumulative_sizes(70_000)[-1] == sum(len(members[f"v/{i}"]) for i in range(70_000))
    monkeypatch.setattr(zipstore, "ZIP64_LIMIT", 1000)  # offsets past 1000 go to Zip64 extras
    small = _members(200, seed=2)
    _write(tmp_path / "x64.zip", small)
    with zipfile.ZipFile(tmp_path / "x64.zip") as zf:
        assert zf.testzip() is None and zf.read("v/199") == small["v/199"]
    with ZipStoreReader(tmp_path / "x64.zip") as r:
        assert r.read_ids(0, 200) == [small[f"v/{i}"] for i in range(200)]


def test_damage_is_reported(tmp_path):
    members = _members(50)
    _write(tmp_path / "a.zip", members)
    data = (tmp_path / "a.zip").read_bytes()
    (tmp_path / "t.zip").write_bytes(data[:-30])
    with pytest.raises(ZipFormatError, match="truncated"):
        ZipStoreReader(tmp_path / "t.zip")
    r = ZipStoreReader(tmp_path / "a.zip")
    with pytest.raises(KeyError):
        r.read_ids(45, 10)
    with pytest.raises(KeyError):
        r.read("nothing")
    r.close()
    bad = bytearray(data)
    with zipfile.ZipFile(tmp_path / "a.zip") as zf:
        info = zf.getinfo("v/3")
    at = info.header_offset + 30 + len("v/3")
    bad[at:at + info.compress_size] = bytes(info.compress_size)  # zeros: a valid stored block? no: CRC fails
    (tmp_path / "c.zip").write_bytes(bytes(bad))
    with ZipStoreReader(tmp_path / "c.zip") as r, pytest.raises(ZipFormatError, match="'v/3'"):
        r.read_ids(0, 10)


@pytest.mark.parametrize("field, value, match", [
    (0, b"PK\x09\x09", "central directory entry 4 has a bad signature"),
    (8, b"\x01\x00", "member 'v/4' is encrypted"),
    (10, b"\x0c\x00", "member 'v/4' uses compression method 12"),
])
def test_a_damaged_directory_entry_is_named(tmp_path, field, value, match):
    """The directory scan names the entry (or member) whose central record is wrong."""
    _write(tmp_path / "a.zip", _members(20))
    data = bytearray((tmp_path / "a.zip").read_bytes())
    entries = [i for i in range(len(data) - 3) if data[i:i + 4] == b"PK\x01\x02"]
    at = entries[4] + field
    data[at:at + len(value)] = value
    (tmp_path / "b.zip").write_bytes(bytes(data))
    with pytest.raises(ZipFormatError, match=match):
        ZipStoreReader(tmp_path / "b.zip")


def test_names_that_are_not_vertex_ids_stay_named_members(tmp_path):
    """``v/007``, ``v/x`` and a 19-digit id are ordinary members, not vertices."""
    members = {"v/0": b"a", "v/1": b"b", "v/007": b"c", "v/x": b"d", "v/" + "9" * 19: b"e", "w/2": b"f"}
    _write(tmp_path / "a.zip", members)
    with ZipStoreReader(tmp_path / "a.zip") as r:
        assert r.read_ids(0, 2) == [b"a", b"b"]
        assert r.row_of_id.shape[0] == 2
        for name in ("v/007", "v/x", "v/" + "9" * 19):
            assert r.read(name) == members[name]


def test_level_zero_stores_members_and_checks_their_crc(tmp_path):
    """Level 0 writes method 0 (stored): Python's zipfile agrees on the method and the bytes,
    our bulk reader gives the members back, and a flipped byte fails the CRC-32, named."""
    members = _members(300, seed=3)
    _write(tmp_path / "s.zip", members, level=0)
    with zipfile.ZipFile(tmp_path / "s.zip") as zf:
        assert zf.testzip() is None
        assert {i.compress_type for i in zf.infolist()} == {zipfile.ZIP_STORED}
        assert {i.filename: zf.read(i) for i in zf.infolist()} == members
        at = zf.getinfo("v/7").header_offset
    with ZipStoreReader(tmp_path / "s.zip") as r:
        assert r.read_ids(0, 300) == [members[f"v/{i}"] for i in range(300)]
    raw = bytearray((tmp_path / "s.zip").read_bytes())
    assert len(members["v/7"]) > 0
    raw[at + 30 + len(b"v/7")] ^= 0xFF  # first data byte of v/7
    (tmp_path / "bad.zip").write_bytes(bytes(raw))
    with ZipStoreReader(tmp_path / "bad.zip") as r, pytest.raises(ZipFormatError, match="'v/7' fails its size or CRC"):
        r.read_ids(0, 300)
    with pytest.raises(ValueError, match="level 10"):
        ZipStoreWriter(tmp_path / "x.zip", 10)


@pytest.mark.parametrize("level", [0, 1])
def test_add_numbered_writes_the_same_bytes_as_add_many(tmp_path, monkeypatch, level):
    """The Numba-packed headers and directory equal the struct-packed ones byte for byte
    (Zip64 offset extras included)."""
    monkeypatch.setattr(zipstore, "ZIP64_LIMIT", 3000)
    members = _members(120, seed=4)
    datas = [members[f"v/{i}"] for i in range(120)]
    a = ZipStoreWriter(tmp_path / "a.zip", level)
    a.add_many([f"v/{i}" for i in range(120)], datas)
    a.add("manifest.json", members["manifest.json"])
    a.close()
    bounds = np.concatenate([[0], np.cumsum([len(d) for d in datas])])
    blob = np.frombuffer(b"".join(datas), np.uint8)
    b = ZipStoreWriter(tmp_path / "b.zip", level)
    b.add_numbered("v/", 0, blob[:bounds[7]], bounds[:8])
    b.add_numbered("v/", 7, blob[bounds[7]:], bounds[7:] - bounds[7])
    b.add("manifest.json", members["manifest.json"])
    b.close()
    assert (tmp_path / "a.zip").read_bytes() == (tmp_path / "b.zip").read_bytes()
    with zipfile.ZipFile(tmp_path / "b.zip") as zf:
        assert zf.testzip() is None and zf.read("v/119") == members["v/119"]
