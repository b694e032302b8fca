import numpy as np

from corefold.mapping.topology.records import OK, decode_rows, encode_rows
from corefold.mapping.topology.varint import encode_varints


def test_fused_kernels_agree_with_the_numpy_varint_reference():
    rng = np.random.default_rng(0)
    counts = rng.integers(0, 6, 50)
    indptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    e = int(indptr[-1])
    fields = [rng.integers(0, 2, e), rng.integers(0, 2**20, e), rng.integers(1, 2**40, e),
              rng.integers(0, 2**63, e, dtype=np.int64).astype(np.uint64) * np.uint64(2)]
    fields = [f.astype(np.uint64) for f in fields]
    blob, bounds = encode_rows(indptr, *fields)
    for i in range(50):
        vals = [counts[i]]
        for j in range(indptr[i], indptr[i + 1]):
            vals += [f[j] for f in fields]
        assert blob[bounds[i]:bounds[i + 1]].tobytes() == encode_varints(np.array(vals, dtype=np.uint64)).tobytes()
    status, bad, ip, *back = decode_rows(blob, bounds[1:].copy())
    assert (status, bad) == (OK, -1)
    np.testing.assert_array_equal(ip, indptr)
    for a, b in zip(back, fields, strict=True):
        np.testing.assert_array_equal(a, b)
