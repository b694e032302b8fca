import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corefold.mapping.topology.varint import (
    VarintError,
    decode_varints,
    encode_varints,
    encoded_lengths,
)


def test_hand_written_bytes_from_the_docs():
    # docs/topology-archive.md: 0 -> 00, 1 -> 01, 127 -> 7f, 128 -> 80 01, 300 -> ac 02,
    # 2^35 -> 80 80 80 80 80 01 (6 bytes), 2^64 - 1 -> ff x9 01 (10 bytes)
    values = np.array([0, 1, 127, 128, 300, 2**35, 2**64 - 1], dtype=np.uint64)
    code = encode_varints(values)
    assert code.tobytes().hex(" ") == "00 01 7f 80 01 ac 02 80 80 80 80 80 01 ff ff ff ff ff ff ff ff ff 01"
    assert decode_varints(code.tobytes()).tolist() == values.tolist()
    assert encoded_lengths(values).tolist() == [1, 1, 1, 2, 2, 6, 10]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=2**64 - 1), max_size=200))
def test_round_trip_matches_a_scalar_reference(values):
    arr = np.array(values, dtype=np.uint64)
    code = encode_varints(arr)
    ref = bytearray()
    for v in values:  # the textbook loop
        while True:
            byte = v & 0x7F
            v >>= 7
            ref.append(byte | (0x80 if v else 0))
            if not v:
                break
    assert code.tobytes() == bytes(ref)
    assert decode_varints(bytes(ref)).tolist() == values


def test_truncated_and_overlong_inputs_are_rejected():
    with pytest.raises(VarintError, match="cut off"):
        decode_varints(bytes([0x05, 0x80]))
    with pytest.raises(VarintError, match="longer than 10"):
        decode_varints(bytes([0x80] * 10 + [0x01]))
    with pytest.raises(VarintError, match="64 bits"):
        decode_varints(bytes([0xFF] * 9 + [0x02]))
    with pytest.raises(VarintError, match="non-negative"):
        encode_varints(np.array([3, -1]))
    assert decode_varints(b"").size == 0
