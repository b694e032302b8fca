"""Vertex files of the archive: CSR rows <-> per-vertex varint records (Numba kernels).

A vertex file is ``count`` then ``count`` records ``flag, other, size, weight``, every
number a varint (:mod:`~corefold.mapping.topology.varint`, which is the NumPy reference
for the integer coding; these kernels fuse it with the record layout so a chunk is coded
in one pass without per-value temporaries). O(bytes) time.
"""

from __future__ import annotations

import numba
import numpy as np

#: Decode status codes (0 = fine).
OK, TOO_LONG, CUT_OFF, TOO_FEW, TOO_MANY, EMPTY = 0, 1, 2, 3, 4, 5
#: Completes "member 'v/<id>' ..." for each status.
STATUS_TEXT = {
    TOO_LONG: "has a varint longer than 10 bytes or beyond 64 bits",
    CUT_OFF: "ends in a cut-off varint (continuation bit set on its last byte)",
    TOO_FEW: "ends before the edge records its count announces",
    TOO_MANY: "has bytes after the edge records its count announces",
    EMPTY: "is empty",
}


@numba.njit(cache=True, inline="always")
def _len(v):  # pragma: no cover - numba
    n = 1
    while v >= np.uint64(128):
        v >>= np.uint64(7)
        n += 1
    return n


@numba.njit(cache=True, inline="always")
def _put(buf, pos, v):  # pragma: no cover - numba
    while v >= np.uint64(128):
        buf[pos] = np.uint8((v & np.uint64(0x7F)) | np.uint64(0x80))
        v >>= np.uint64(7)
        pos += 1
    buf[pos] = np.uint8(v)
    return pos + 1


@numba.njit(cache=True, nogil=True)
def encode_rows(indptr, flags, other, size, wcode):  # pragma: no cover - numba
    """Encode rows into one byte blob; row i is ``blob[bounds[i]:bounds[i+1]]``.

    ``indptr`` int64[k+1] local (starts at 0); ``flags, other, size, wcode`` uint64 per entry.
    """
    k = indptr.shape[0] - 1
    bounds = np.empty(k + 1, np.int64)
    total = 0
    for i in range(k):
        bounds[i] = total
        total += _len(np.uint64(indptr[i + 1] - indptr[i]))
        for e in range(indptr[i], indptr[i + 1]):
            total += _len(flags[e]) + _len(other[e]) + _len(size[e]) + _len(wcode[e])
    bounds[k] = total
    buf = np.empty(total, np.uint8)
    pos = 0
    for i in range(k):
        pos = _put(buf, pos, np.uint64(indptr[i + 1] - indptr[i]))
        for e in range(indptr[i], indptr[i + 1]):
            pos = _put(buf, pos, flags[e])
            pos = _put(buf, pos, other[e])
            pos = _put(buf, pos, size[e])
            pos = _put(buf, pos, wcode[e])
    return buf, bounds


@numba.njit(cache=True, inline="always")
def _get(buf, pos, end):  # pragma: no cover - numba
    """(value, next position, status)."""
    v = np.uint64(0)
    shift = 0
    while pos < end:
        b = buf[pos]
        pos += 1
        if shift == 63 and b > 1:
            return v, pos, TOO_LONG
        v |= np.uint64(b & 0x7F) << np.uint64(shift)
        if b < 128:
            return v, pos, OK
        shift += 7
        if shift > 63:
            return v, pos, TOO_LONG
    return v, pos, CUT_OFF


@numba.njit(cache=True, nogil=True)
def decode_rows(buf, file_end):  # pragma: no cover - numba
    """Decode concatenated vertex files (file i ends at ``file_end[i]``).

    Returns ``(status, bad_file, indptr, flags, other, size, wcode)``; on a non-zero status
    ``bad_file`` is the offending file's index and the arrays are meaningless.
    """
    k = file_end.shape[0]
    cap = buf.shape[0] // 4 + 1  # a record takes at least 4 bytes
    indptr = np.zeros(k + 1, np.int64)
    flags = np.empty(cap, np.uint64)
    other = np.empty(cap, np.uint64)
    size = np.empty(cap, np.uint64)
    wcode = np.empty(cap, np.uint64)
    pos = 0
    out = 0
    for f in range(k):
        end = file_end[f]
        if pos == end:
            return EMPTY, f, indptr, flags, other, size, wcode
        if buf[end - 1] >= 128:
            return CUT_OFF, f, indptr, flags, other, size, wcode
        count, pos, st = _get(buf, pos, end)
        if st != OK:
            return st, f, indptr, flags, other, size, wcode
        if count > np.uint64((end - pos) // 4):
            return TOO_FEW, f, indptr, flags, other, size, wcode
        for _ in range(np.int64(count)):
            a, pos, s1 = _get(buf, pos, end)
            b, pos, s2 = _get(buf, pos, end)
            c, pos, s3 = _get(buf, pos, end)
            d, pos, s4 = _get(buf, pos, end)
            st = max(max(s1, s2), max(s3, s4))
            if st == CUT_OFF:
                return TOO_FEW, f, indptr, flags, other, size, wcode
            if st != OK:
                return st, f, indptr, flags, other, size, wcode
            flags[out] = a
            other[out] = b
            size[out] = c
            wcode[out] = d
            out += 1
        if pos != end:
            return TOO_MANY, f, indptr, flags, other, size, wcode
        indptr[f + 1] = out
    return OK, -1, indptr, flags[:out], other[:out], size[:out], wcode[:out]
