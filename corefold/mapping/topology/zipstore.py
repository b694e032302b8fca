"""A minimal zip container for archives of many small members (PKWARE APPNOTE 6.3).

Python's :mod:`zipfile` spends about 20 us of bookkeeping per member (three seeks, a
``ZipInfo`` object, a file-like wrapper); a topology archive has one member per vertex,
10^6 and more. This module writes and reads the same standard format in bulk: members
are compressed with raw deflate (or stored, level 0) and written in batches; the central directory is parsed
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

import numba
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


_CD_OK, _CD_CUT, _CD_SIGNATURE, _CD_NO_ZIP64 = 0, 1, 2, 3


@numba.njit(cache=True, nogil=True)
def _u16(b, p):  # pragma: no cover - numba
    return np.int64(b[p]) | (np.int64(b[p + 1]) << 8)


@numba.njit(cache=True, nogil=True)
def _u32(b, p):  # pragma: no cover - numba
    return _u16(b, p) | (_u16(b, p + 2) << 16)


@numba.njit(cache=True, nogil=True)
def _u64(b, p):  # pragma: no cover - numba
    return _u32(b, p) | (_u32(b, p + 4) << 32)


@numba.njit(cache=True, nogil=True)
def _scan_directory(cd, count, prefix):  # pragma: no cover - numba
    """Parse ``count`` central directory entries in one pass. O(directory bytes).

    Returns ``(status, bad_entry, ids, offset, csize, usize, crc, method, flag, name_at,
    name_len)``; ``ids`` is the decimal id of names ``<prefix><id>`` (no leading zero,
    at most 18 digits), else -1.
    """
    ids = np.full(count, -1, np.int64)
    offset = np.empty(count, np.int64)
    csize = np.empty(count, np.int64)
    usize = np.empty(count, np.int64)
    crc = np.empty(count, np.int64)
    method = np.empty(count, np.int64)
    flag = np.empty(count, np.int64)
    name_at = np.empty(count, np.int64)
    name_len = np.empty(count, np.int64)
    size = cd.shape[0]
    plen = prefix.shape[0]
    big = np.int64(0xFFFFFFFF)
    pos = 0
    for i in range(count):
        if pos + 46 > size:
            return _CD_CUT, i, ids, offset, csize, usize, crc, method, flag, name_at, name_len
        if _u32(cd, pos) != 0x02014B50:
            return _CD_SIGNATURE, i, ids, offset, csize, usize, crc, method, flag, name_at, name_len
        flag[i] = _u16(cd, pos + 8)
        method[i] = _u16(cd, pos + 10)
        crc[i] = _u32(cd, pos + 16)
        cs = _u32(cd, pos + 20)
        us = _u32(cd, pos + 24)
        nl = _u16(cd, pos + 28)
        el = _u16(cd, pos + 30)
        kl = _u16(cd, pos + 32)
        off = _u32(cd, pos + 42)
        at = pos + 46
        if at + nl + el + kl > size:
            return _CD_CUT, i, ids, offset, csize, usize, crc, method, flag, name_at, name_len
        name_at[i] = at
        name_len[i] = nl
        if us == big or cs == big or off == big:
            p = at + nl
            found = False
            while p + 4 <= at + nl + el:
                hid = _u16(cd, p)
                hsize = _u16(cd, p + 2)
                if hid == 1:
                    q = p + 4
                    if us == big:
                        us = _u64(cd, q)
                        q += 8
                    if cs == big:
                        cs = _u64(cd, q)
                        q += 8
                    if off == big:
                        off = _u64(cd, q)
                    found = True
                    break
                p += 4 + hsize
            if not found:
                return _CD_NO_ZIP64, i, ids, offset, csize, usize, crc, method, flag, name_at, name_len
        offset[i] = off
        csize[i] = cs
        usize[i] = us
        digits = nl - plen
        numbered = 1 <= digits <= 18
        for j in range(min(plen, nl)):
            if cd[at + j] != prefix[j]:
                numbered = False
        if numbered and digits > 1 and cd[at + plen] == 48:
            numbered = False
        v = np.int64(0)
        if numbered:
            for j in range(plen, nl):
                c = cd[at + j]
                if c < 48 or c > 57:
                    numbered = False
                    break
                v = v * 10 + (c - 48)
        if numbered:
            ids[i] = v
        pos = at + nl + el + kl
    return _CD_OK, -1, ids, offset, csize, usize, crc, method, flag, name_at, name_len


@numba.njit(cache=True, nogil=True)
def _put(out, p, value, nbytes):  # pragma: no cover - numba
    v = np.int64(value)
    for j in range(nbytes):
        out[p + j] = (v >> (8 * j)) & 0xFF


@numba.njit(cache=True, nogil=True)
def _pack_local(prefix, first, payload, pbounds, crc, usize, method, pos):  # pragma: no cover - numba
    """Members ``<prefix><first + i>`` holding ``payload[pbounds[i]:pbounds[i + 1]]``, each
    after its local header, as one byte array (the file at offset ``pos``). O(bytes).

    Returns ``(out, names, name_len, offsets)``.
    """
    k = pbounds.shape[0] - 1
    plen = prefix.shape[0]
    name_len = np.empty(k, np.int64)
    total = 0
    names_total = 0
    for i in range(k):
        v = first + i
        nd = 1
        while v >= 10:
            v //= 10
            nd += 1
        name_len[i] = plen + nd
        names_total += plen + nd
        total += 30 + plen + nd + pbounds[i + 1] - pbounds[i]
    out = np.empty(total, np.uint8)
    names = np.empty(names_total, np.uint8)
    offsets = np.empty(k, np.int64)
    p = 0
    q = 0
    for i in range(k):
        offsets[i] = pos + p
        cs = pbounds[i + 1] - pbounds[i]
        nl = name_len[i]
        _put(out, p, 0x04034B50, 4)
        _put(out, p + 4, 20, 2)
        _put(out, p + 6, 0, 2)
        _put(out, p + 8, method, 2)
        _put(out, p + 10, 0, 2)
        _put(out, p + 12, _DOS_DATE, 2)
        _put(out, p + 14, crc[i], 4)
        _put(out, p + 18, cs, 4)
        _put(out, p + 22, usize[i], 4)
        _put(out, p + 26, nl, 2)
        _put(out, p + 28, 0, 2)
        for j in range(plen):
            names[q + j] = prefix[j]
        v = first + i
        for j in range(nl - 1, plen - 1, -1):
            names[q + j] = 48 + v % 10
            v //= 10
        for j in range(nl):
            out[p + 30 + j] = names[q + j]
        p += 30 + nl
        src = pbounds[i]
        for j in range(cs):
            out[p + j] = payload[src + j]
        p += cs
        q += nl
    return out, names, name_len, offsets


@numba.njit(cache=True, nogil=True)
def _pack_directory(names, name_len, crc, csize, usize, offset, method, limit):  # pragma: no cover - numba
    """The central directory entries of every member, one byte array; offsets at or above
    ``limit`` go into a Zip64 extra field. O(members)."""
    count = name_len.shape[0]
    total = names.shape[0] + 46 * count
    for i in range(count):
        if np.int64(offset[i]) >= limit:
            total += 12
    out = np.empty(total, np.uint8)
    p = 0
    q = 0
    for i in range(count):
        big = np.int64(offset[i]) >= limit
        version = 45 if big else 20
        nl = name_len[i]
        _put(out, p, 0x02014B50, 4)
        _put(out, p + 4, (3 << 8) | version, 2)
        _put(out, p + 6, version, 2)
        _put(out, p + 8, 0, 2)
        _put(out, p + 10, method, 2)
        _put(out, p + 12, 0, 2)
        _put(out, p + 14, _DOS_DATE, 2)
        _put(out, p + 16, crc[i], 4)
        _put(out, p + 20, csize[i], 4)
        _put(out, p + 24, usize[i], 4)
        _put(out, p + 28, nl, 2)
        _put(out, p + 30, 12 if big else 0, 2)
        _put(out, p + 32, 0, 6)
        _put(out, p + 38, 0o100644 << 16, 4)
        _put(out, p + 42, 0xFFFFFFFF if big else offset[i], 4)
        for j in range(nl):
            out[p + 46 + j] = names[q + j]
        p += 46 + nl
        q += nl
        if big:
            _put(out, p, 0x0001, 2)
            _put(out, p + 2, 8, 2)
            _put(out, p + 4, offset[i], 8)
            p += 12
    return out


class ZipFormatError(ValueError):
    """The file is not a readable zip of the supported kind (message says why)."""


class ZipStoreWriter:
    """Append deflated (or stored) members to a new zip file; :meth:`close` writes the directory.

    Member names must be ASCII. Timestamps are fixed (1980-01-01) so output is reproducible.
    The directory entries wait in compact arrays (about 30 bytes per member: 10^7 members
    cost 0.3 GB, where Python lists of ints and bytes cost 2 GB).

    Args:
        path: the zip to create (overwritten).
        level: deflate level 1-9; 0 stores every member uncompressed (method 0: no deflate
            at all, not deflate's own level 0, which wraps the bytes in stored blocks).
    """

    def __init__(self, path: str | Path, level: int = 1):
        if not 0 <= level <= 9:
            raise ValueError(f"zip level {level}: must be in 0..9")
        self.level = level
        self._method = _STORED if level == 0 else _DEFLATE
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
        level, method = self.level, self._method
        for name, data in zip(names, datas, strict=True):
            bname = name.encode("ascii")
            comp = data if method == _STORED else zlib.compress(data, level, wbits=-15)
            crc = zlib.crc32(data)
            header = _LOCAL.pack(_SIG_LOCAL, 20, 0, method, 0, _DOS_DATE, crc, len(comp), len(data), len(bname), 0)
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

    def add_numbered(self, prefix: str, first: int, blob: np.ndarray, bounds: np.ndarray) -> None:
        """Append members ``<prefix><first>``, ``<prefix><first + 1>``, ... holding
        ``blob[bounds[i]:bounds[i + 1]]``: headers packed by a Numba kernel, one
        ``crc32`` (and, deflating, one ``compress``) call per member. O(bytes)."""
        blob = np.ascontiguousarray(blob, np.uint8)
        bounds = np.asarray(bounds, np.int64)
        view = memoryview(blob)
        spans = list(zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True))
        crc = np.fromiter((zlib.crc32(view[a:b]) for a, b in spans), np.int64, count=len(spans))
        usize = np.diff(bounds)
        if self._method == _STORED:
            payload, pbounds = blob, bounds
        else:
            level = self.level
            comps = [zlib.compress(view[a:b], level, wbits=-15) for a, b in spans]
            pbounds = np.zeros(len(comps) + 1, np.int64)
            np.cumsum(np.fromiter(map(len, comps), np.int64, count=len(comps)), out=pbounds[1:])
            payload = np.frombuffer(b"".join(comps), np.uint8)
        out, names, name_len, offsets = _pack_local(np.frombuffer(prefix.encode("ascii"), np.uint8), first, payload,
                                                    pbounds, crc, usize, self._method, self._pos)
        self._f.write(out)
        self._pos += out.shape[0]
        self._names += names.tobytes()
        self._name_len.frombytes(name_len.astype(np.uint16).tobytes())
        self._crc.frombytes(crc.astype(np.uint32).tobytes())
        self._csize.frombytes(np.diff(pbounds).astype(np.uint64).tobytes())
        self._usize.frombytes(usize.astype(np.uint64).tobytes())
        self._offset.frombytes(offsets.astype(np.uint64).tobytes())

    def close(self) -> None:
        """Write the central directory (with Zip64 records when needed) and close."""
        if self._f.closed:
            return
        cd_start = self._pos
        count = len(self._name_len)
        cd = _pack_directory(np.frombuffer(bytes(self._names), np.uint8), np.frombuffer(self._name_len, np.uint16),
                             np.frombuffer(self._crc, np.uint32), np.frombuffer(self._csize, np.uint64),
                             np.frombuffer(self._usize, np.uint64), np.frombuffer(self._offset, np.uint64),
                             self._method, ZIP64_LIMIT)
        cd_size = int(cd.shape[0])
        self._f.write(cd)
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
        status, bad, ids, offset, csize, usize, crc, method, flag, name_at, name_len = _scan_directory(
            np.frombuffer(cd, np.uint8), count, np.frombuffer(prefix, np.uint8))

        def name_of(i: int) -> str:
            return cd[name_at[i]:name_at[i] + name_len[i]].decode("utf-8", errors="replace")

        if status == _CD_CUT:
            raise ZipFormatError(f"central directory entry {bad} is cut off")
        if status == _CD_SIGNATURE:
            raise ZipFormatError(f"central directory entry {bad} has a bad signature")
        if status == _CD_NO_ZIP64:
            raise ZipFormatError(f"member '{name_of(bad)}' lacks its Zip64 extra field")
        if np.any(flag & 1):
            raise ZipFormatError(f"member '{name_of(int(np.argmax(flag & 1)))}' is encrypted")
        odd = (method != _DEFLATE) & (method != _STORED)
        if np.any(odd):
            i = int(np.argmax(odd))
            raise ZipFormatError(f"member '{name_of(i)}' uses compression method {int(method[i])} "
                                 "(only deflate and stored are read)")
        other_rows = np.flatnonzero(ids < 0)
        self.others: dict[str, int] = {name_of(int(i)): int(i) for i in other_rows}
        n_ids = count - other_rows.size
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

    def _extract_block(self, rows: np.ndarray, block: bytes, base: int) -> list[bytes] | None:
        """The members ``rows`` (increasing offsets) from one block starting at file offset
        ``base``, the local headers parsed with NumPy; ``None`` when any check fails (the
        caller then finds the culprit member by member). O(block bytes)."""
        off = self._offset[rows] - base
        cs = self._csize[rows]
        method = self._method[rows]
        stored = bool(off.size) and bool(np.all(method == _STORED))
        if off.size == 0 or off[-1] + 30 > len(block) or not (stored or np.all(method == _DEFLATE)):
            return None
        raw = np.frombuffer(block, np.uint8)
        field = off[:, None] + np.arange(30)[None, :]
        head = raw[field]
        sig = head[:, 0:4].copy().view("<u4").reshape(-1)
        lens = head[:, 26:30].copy().view("<u2").reshape(-1, 2).astype(np.int64)
        start = off + 30 + lens[:, 0] + lens[:, 1]
        if np.any(sig != _SIG_LOCAL) or np.any(start + cs > len(block)):
            return None
        view = memoryview(block)
        if stored:
            datas = [block[a:a + c] for a, c in zip(start.tolist(), cs.tolist(), strict=True)]
        else:
            decompress = zlib.decompress
            try:
                datas = [decompress(view[a:a + c], -15) for a, c in zip(start.tolist(), cs.tolist(), strict=True)]
            except zlib.error:
                return None
        sizes = np.fromiter(map(len, datas), np.int64, count=len(datas))
        crcs = np.fromiter(map(zlib.crc32, datas), np.int64, count=len(datas))
        if np.any(sizes != self._usize[rows]) or np.any(crcs != self._crc[rows]):
            return None
        return datas

    def _read_region(self, start: int, end: int) -> bytes:
        # pread: no shared file position, so threads may read the same archive at once
        return os.pread(self._f.fileno(), end - start, start)

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
            block = self._read_region(base, int(self._region_end[rows[-1]]))
            datas = self._extract_block(rows, block, base)
            if datas is not None:
                return datas
            view = memoryview(block)  # something is wrong: find and name the member
            return [self._extract(int(r), view, base, f"{prefix}{first + i}") for i, r in enumerate(rows)]
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
