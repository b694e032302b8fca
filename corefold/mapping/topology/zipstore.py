"""A minimal zip container for archives of many small members (PKWARE APPNOTE 6.3).

Python's :mod:`zipfile` spends about 20 us of bookkeeping per member (three seeks, a
``ZipInfo`` object, a file-like wrapper); a topology archive has one member per vertex,
10^6 and more. This module writes and reads the same standard format in bulk: members
are compressed with raw deflate and written in batches; the central directory is parsed
once into NumPy arrays; members with increasing offsets are read in one block per chunk.
Zip64 (more than 65,534 members, offsets beyond 4 GiB) is written and read. What it reads:
deflate or stored members without encryption, i.e. what corefold, Python's ``zipfile``
and Info-ZIP ``zip`` write.
"""

from __future__ import annotations

import os
import struct
import zlib
from array import array
from pathlib import Path

import numpy as np

_LOCAL = struct.Struct("<IHHHHHIIIHH")  # 30 bytes
_CENTRAL = struct.Struct("<IHHHHHHIIIHHHHHII")  # 46 bytes
_EOCD = struct.Struct("<IHHHHIIH")  # 22 bytes
_EOCD64 = struct.Struct("<IQHHIIQQQQ")  # 56 bytes
_LOCATOR64 = struct.Struct("<IIQI")  # 20 bytes
_SIG_LOCAL, _SIG_CENTRAL, _SIG_EOCD = 0x04034B50, 0x02014B50, 0x06054B50
_SIG_EOCD64, _SIG_LOCATOR64 = 0x06064B50, 0x07064B50
#: Offsets at or above this go into a Zip64 extra field (a module constant so tests can lower it).
ZIP64_LIMIT = 0xFFFFFFFF
_DOS_DATE = (0 << 9) | (1 << 5) | 1  # 1980-01-01
_DEFLATE, _STORED = 8, 0


class ZipFormatError(ValueError):
    """The file is not a readable zip of the supported kind (message says why)."""


class ZipStoreWriter:
    """Append deflated members to a new zip file; :meth:`close` writes the directory.

    Member names must be ASCII. Timestamps are fixed (1980-01-01) so output is reproducible.
    The directory entries wait in compact arrays (about 30 bytes per member: 10^7 members
    cost 0.3 GB, where Python lists of ints and bytes cost 2 GB).
    """

    def __init__(self, path: str | Path, level: int = 1):
        self.level = level
        self._f = open(path, "wb")
        self._pos = 0
        self._names = bytearray()
        self._name_len = array("H")
        self._crc = array("I")
        self._csize = array("Q")
        self._usize = array("Q")
        self._offset = array("Q")

    def add_many(self, names: list[str], datas: list[bytes]) -> None:
        """Compress and append members (one write for the whole batch)."""
        pieces = []
        pos = self._pos
        level = self.level
        for name, data in zip(names, datas, strict=True):
            bname = name.encode("ascii")
            comp = zlib.compress(data, level, wbits=-15)
            crc = zlib.crc32(data)
            header = _LOCAL.pack(_SIG_LOCAL, 20, 0, _DEFLATE, 0, _DOS_DATE, crc, len(comp), len(data), len(bname), 0)
            pieces += (header, bname, comp)
            self._names += bname
            self._name_len.append(len(bname))
            self._crc.append(crc)
            self._csize.append(len(comp))
            self._usize.append(len(data))
            self._offset.append(pos)
            pos += len(header) + len(bname) + len(comp)
        self._f.write(b"".join(pieces))
        self._pos = pos

    def add(self, name: str, data: bytes) -> None:
        self.add_many([name], [data])

    def close(self) -> None:
        """Write the central directory (with Zip64 records when needed) and close."""
        if self._f.closed:
            return
        cd_start = self._pos
        pieces = []
        count = len(self._name_len)
        cd_size = 0
        at = 0
        names = bytes(self._names)
        for i in range(count):
            name = names[at:at + self._name_len[i]]
            at += self._name_len[i]
            crc, cs, us, off = self._crc[i], self._csize[i], self._usize[i], self._offset[i]
            extra = b""
            if off >= ZIP64_LIMIT:
                extra = struct.pack("<HHQ", 0x0001, 8, off)
                off = 0xFFFFFFFF
            version = 45 if extra else 20
            pieces += (_CENTRAL.pack(_SIG_CENTRAL, (3 << 8) | version, version, 0, _DEFLATE, 0, _DOS_DATE, crc, cs, us,
                                     len(name), len(extra), 0, 0, 0, 0o100644 << 16, off), name, extra)
            cd_size += 46 + len(name) + len(extra)
            if len(pieces) >= 3 << 16:  # write the directory in blocks, not as one bytes object
                self._f.write(b"".join(pieces))
                pieces = []
        self._f.write(b"".join(pieces))
        end = cd_start + cd_size
        if count >= 0xFFFF or cd_start >= ZIP64_LIMIT or cd_size >= ZIP64_LIMIT:
            self._f.write(_EOCD64.pack(_SIG_EOCD64, 44, 45, 45, 0, 0, count, count, cd_size, cd_start))
            self._f.write(_LOCATOR64.pack(_SIG_LOCATOR64, 0, end, 1))
        self._f.write(_EOCD.pack(_SIG_EOCD, 0, 0, min(count, 0xFFFF), min(count, 0xFFFF),
                                 min(cd_size, 0xFFFFFFFF), min(cd_start, 0xFFFFFFFF), 0))
        self._f.close()

    def abort(self) -> None:
        self._f.close()


class ZipStoreReader:
    """Random and bulk access to a zip's members by name.

    Members named ``<prefix><decimal id>`` (the archive's ``v/<id>``) are indexed by id in
    NumPy arrays; others in a small dict.

    Raises:
        ZipFormatError: (on opening) no end-of-central-directory record (truncated or not
            a zip), a malformed directory, encryption or a compression method other than
            deflate and stored.
    """

    def __init__(self, path: str | Path, prefix: str = "v/"):
        self._f = open(path, "rb")
        try:
            self._size = os.fstat(self._f.fileno()).st_size
            self._parse_directory(prefix.encode("ascii"))
        except BaseException:
            self._f.close()
            raise

    # -- directory ---------------------------------------------------------------------
    def _parse_directory(self, prefix: bytes) -> None:
        tail_len = min(self._size, 22 + 0xFFFF)
        self._f.seek(self._size - tail_len)
        tail = self._f.read(tail_len)
        at = tail.rfind(b"PK\x05\x06")
        if at < 0 or len(tail) - at < 22:
            raise ZipFormatError("no end-of-central-directory record (truncated, or not a zip)")
        _, disk, _, _, count, cd_size, cd_start, _ = _EOCD.unpack_from(tail, at)
        if disk:
            raise ZipFormatError("multi-disk zips are not supported")
        eocd_pos = self._size - tail_len + at
        if count == 0xFFFF or cd_size == 0xFFFFFFFF or cd_start == 0xFFFFFFFF:
            loc_pos = eocd_pos - _LOCATOR64.size
            self._f.seek(max(loc_pos, 0))
            loc = self._f.read(_LOCATOR64.size)
            if loc_pos < 0 or len(loc) < _LOCATOR64.size or _LOCATOR64.unpack(loc)[0] != _SIG_LOCATOR64:
                raise ZipFormatError("the Zip64 end-of-central-directory locator is missing")
            self._f.seek(_LOCATOR64.unpack(loc)[2])
            rec = self._f.read(_EOCD64.size)
            if len(rec) < _EOCD64.size or _EOCD64.unpack(rec)[0] != _SIG_EOCD64:
                raise ZipFormatError("the Zip64 end-of-central-directory record is missing")
            _, _, _, _, _, _, _, count, cd_size, cd_start = _EOCD64.unpack(rec)
        if cd_start + cd_size > eocd_pos:
            raise ZipFormatError("the central directory lies beyond the end of the file (truncated?)")
        self._f.seek(cd_start)
        cd = self._f.read(cd_size)
        if len(cd) != cd_size:
            raise ZipFormatError("the central directory is cut off")
        ids = np.empty(count, np.int64)
        offset = np.empty(count, np.int64)
        csize = np.empty(count, np.int64)
        usize = np.empty(count, np.int64)
        crc = np.empty(count, np.int64)
        method = np.empty(count, np.int64)
        self.others: dict[str, int] = {}
        other_rows: list[int] = []
        pos = 0
        n_ids = 0
        plen = len(prefix)
        unpack = _CENTRAL.unpack_from
        for i in range(count):
            if pos + 46 > cd_size:
                raise ZipFormatError(f"central directory entry {i} is cut off")
            (sig, _, _, flag, meth, _, _, c, cs, us, nl, el, kl, _, _, _, off) = unpack(cd, pos)
            if sig != _SIG_CENTRAL:
                raise ZipFormatError(f"central directory entry {i} has a bad signature")
            name = cd[pos + 46:pos + 46 + nl]
            if 0xFFFFFFFF in (cs, us, off):
                us, cs, off = self._zip64_extra(cd[pos + 46 + nl:pos + 46 + nl + el], us, cs, off, name)
            if flag & 1:
                raise ZipFormatError(f"member '{name.decode(errors='replace')}' is encrypted")
            if meth not in (_DEFLATE, _STORED):
                raise ZipFormatError(f"member '{name.decode(errors='replace')}' uses compression method {meth} "
                                     "(only deflate and stored are read)")
            offset[i], csize[i], usize[i], crc[i], method[i] = off, cs, us, c, meth
            if name[:plen] == prefix and name[plen:].isdigit() and (len(name) == plen + 1 or name[plen] != 48):
                ids[i] = int(name[plen:])
                n_ids += 1
            else:
                ids[i] = -1
                self.others[name.decode("utf-8", errors="replace")] = i
                other_rows.append(i)
            pos += 46 + nl + el + kl
        # region of each member: from its offset to the next member's (or the directory)
        order = np.argsort(offset, kind="stable")
        region_end = np.empty(count, np.int64)
        if count > 1:
            region_end[order[:-1]] = offset[order[1:]]
        if count:
            region_end[order[-1]] = cd_start
        self._offset, self._csize, self._usize = offset, csize, usize
        self._crc, self._method, self._region_end = crc, method, region_end
        numbered = ids >= 0
        top = int(ids.max()) + 1 if n_ids else 0
        self.row_of_id = np.full(top, -1, np.int64)
        self.row_of_id[ids[numbered]] = np.flatnonzero(numbered)

    @staticmethod
    def _zip64_extra(extra: bytes, us: int, cs: int, off: int, name: bytes) -> tuple[int, int, int]:
        p = 0
        while p + 4 <= len(extra):
            hid, size = struct.unpack_from("<HH", extra, p)
            if hid == 0x0001:
                vals = list(struct.unpack_from(f"<{size // 8}Q", extra, p + 4))
                if us == 0xFFFFFFFF:
                    us = vals.pop(0)
                if cs == 0xFFFFFFFF:
                    cs = vals.pop(0)
                if off == 0xFFFFFFFF:
                    off = vals.pop(0)
                return us, cs, off
            p += 4 + size
        raise ZipFormatError(f"member '{name.decode(errors='replace')}' lacks its Zip64 extra field")

    # -- members ---------------------------------------------------------------------------
    def _extract(self, row: int, block: bytes, base: int, name: str) -> bytes:
        off = int(self._offset[row]) - base
        if off < 0 or off + 30 > len(block):
            raise ZipFormatError(f"member '{name}' lies beyond the end of the file")
        sig, _, _, _, _, _, _, _, _, nl, el = _LOCAL.unpack_from(block, off)
        if sig != _SIG_LOCAL:
            raise ZipFormatError(f"member '{name}' has a bad local header")
        start = off + 30 + nl + el
        cs = int(self._csize[row])
        if start + cs > len(block):
            raise ZipFormatError(f"member '{name}' is cut off")
        raw = block[start:start + cs]
        try:
            data = zlib.decompress(raw, -15) if self._method[row] == _DEFLATE else bytes(raw)
        except zlib.error as exc:
            raise ZipFormatError(f"member '{name}' does not inflate ({exc})") from None
        if len(data) != self._usize[row] or zlib.crc32(data) != self._crc[row]:
            raise ZipFormatError(f"member '{name}' fails its size or CRC-32 check")
        return data

    def _read_region(self, start: int, end: int) -> bytes:
        self._f.seek(start)
        return self._f.read(end - start)

    def read(self, name: str) -> bytes:
        """One member by name.

        Raises:
            KeyError: no such member.
            ZipFormatError: the member is corrupt.
        """
        row = self.others.get(name)
        if row is None:
            raise KeyError(name)
        return self._extract(row, self._read_region(int(self._offset[row]), int(self._region_end[row])),
                             int(self._offset[row]), name)

    def read_ids(self, first: int, count: int, prefix: str = "v/") -> list[bytes]:
        """Members ``<prefix>first`` .. ``<prefix>first+count-1``; one block read when they
        are stored in order (as corefold writes them).

        Raises:
            KeyError: a member is missing (its name is the key).
            ZipFormatError: a member is corrupt (named).
        """
        ids = np.arange(first, first + count)
        rows = self.row_of_id[ids[ids < self.row_of_id.shape[0]]] if count else np.zeros(0, np.int64)
        if rows.shape[0] < count or np.any(rows < 0):
            missing = first + (int(np.argmax(rows < 0)) if np.any(rows < 0) else rows.shape[0])
            raise KeyError(f"{prefix}{missing}")
        offs = self._offset[rows]
        if count > 1 and np.all(np.diff(offs) > 0):
            base = int(offs[0])
            block = memoryview(self._read_region(base, int(self._region_end[rows[-1]])))
            return [self._extract(int(r), block, base, f"{prefix}{first + i}") for i, r in enumerate(rows)]
        return [self._extract(int(r), self._read_region(int(self._offset[r]), int(self._region_end[r])),
                              int(self._offset[r]), f"{prefix}{first + i}") for i, r in enumerate(rows)]

    def cumulative_sizes(self, n: int) -> np.ndarray:
        """int64[n + 1]: total uncompressed bytes of numbered members with id < i (missing: 0)."""
        sizes = np.zeros(n, np.int64)
        m = min(n, self.row_of_id.shape[0])
        rows = self.row_of_id[:m]
        ok = np.flatnonzero(rows >= 0)
        sizes[ok] = self._usize[rows[ok]]
        out = np.zeros(n + 1, np.int64)
        np.cumsum(sizes, out=out[1:])
        return out

    @property
    def num_members(self) -> int:
        return int(self._offset.shape[0])

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> "ZipStoreReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
