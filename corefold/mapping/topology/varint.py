"""Variable-length unsigned integers, vectorised (SPEC M4 §1, seed 003 §24, §65).

A value is split into 7-bit groups, least significant group first; each group is one byte
whose top bit is 1 when another byte of the same value follows and 0 on the value's last
byte (the LEB128 / protobuf "varint" encoding). 0 is ``00``; 300 = 0b10_0101100 is
``AC 02``. A uint64 takes at most 10 bytes.
"""

from __future__ import annotations

import numpy as np

#: The longest encoding of a 64-bit value.
MAX_BYTES = 10


class VarintError(ValueError):
    """The bytes are not a sequence of complete varints (message says why and where)."""


def encoded_lengths(values: np.ndarray) -> np.ndarray:
    """uint8[k]: bytes each value takes (1 to 10). O(k)."""
    v = np.asarray(values, dtype=np.uint64)
    nb = np.ones(v.shape, dtype=np.uint8)
    for j in range(1, MAX_BYTES):
        nb += v >= np.uint64(1 << (7 * j))
    return nb


def encode_varints(values: np.ndarray) -> np.ndarray:
    """Encode non-negative integers into one uint8 array, value after value. O(k).

    Raises:
        VarintError: a value is negative.
    """
    values = np.asarray(values)
    if values.dtype.kind == "i" and values.size and values.min() < 0:
        raise VarintError("varints hold non-negative integers only")
    v = values.astype(np.uint64, copy=False).reshape(-1)
    nb = encoded_lengths(v)
    ends = np.cumsum(nb, dtype=np.int64)
    out = np.empty(int(ends[-1]) if ends.size else 0, dtype=np.uint8)
    starts = ends - nb
    for j in range(int(nb.max()) if nb.size else 0):
        sel = np.flatnonzero(nb > j) if j else slice(None)
        group = ((v[sel] >> np.uint64(7 * j)) & np.uint64(0x7F)).astype(np.uint8)
        group |= np.where(nb[sel] > j + 1, np.uint8(0x80), np.uint8(0))
        out[starts[sel] + j] = group
    return out


def decode_varints(data: np.ndarray | bytes) -> np.ndarray:
    """Decode a byte string of complete varints into uint64 values. O(bytes).

    Raises:
        VarintError: the last value is cut off, or a value is longer than 10 bytes or
            exceeds 64 bits.
    """
    b = np.frombuffer(data, dtype=np.uint8) if isinstance(data, (bytes, bytearray, memoryview)) else np.asarray(data, np.uint8)
    if b.size == 0:
        return np.zeros(0, np.uint64)
    last = np.flatnonzero(b < 0x80)
    if last.size == 0 or last[-1] != b.size - 1:
        raise VarintError(f"the last varint is cut off (byte {b.size - 1} has its continuation bit set)")
    starts = np.empty_like(last)
    starts[0] = 0
    starts[1:] = last[:-1] + 1
    lengths = last - starts + 1
    longest = int(lengths.max())
    if longest > MAX_BYTES:
        at = int(starts[np.argmax(lengths > MAX_BYTES)])
        raise VarintError(f"the varint at byte {at} is longer than {MAX_BYTES} bytes")
    out = (b[starts] & 0x7F).astype(np.uint64)
    for j in range(1, longest):
        sel = np.flatnonzero(lengths > j)
        group = (b[starts[sel] + j] & 0x7F).astype(np.uint64)
        if j == MAX_BYTES - 1 and group.max() > 1:
            raise VarintError(f"the varint at byte {int(starts[sel][np.argmax(group > 1)])} exceeds 64 bits")
        out[sel] |= group << np.uint64(7 * j)
    return out
