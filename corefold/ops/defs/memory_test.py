"""The memory-domain kernels: swap is bit-exact, compression within each format's bound."""

import numpy as np
import pytest

from corefold.ops.defs.memory import COMPRESS_FORMATS, compress, decompress


@pytest.mark.parametrize("name", list(COMPRESS_FORMATS))
def test_compression_error_is_within_the_stated_bound(name):
    fmt = COMPRESS_FORMATS[name]
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(20000) * np.exp(rng.uniform(-6, 6, 20000))).astype(np.float32)
    x[:3] = [0.0, -0.0, 1e-30]
    parts = compress(x, fmt)
    assert parts[0].dtype == fmt.dtype
    scale = float(parts[1]) if len(parts) > 1 else 1.0
    y = decompress(parts[0], parts[1] if len(parts) > 1 else None, fmt)
    assert y.dtype == np.float32
    err = np.abs(y.astype(np.float64) - x)
    assert np.all(err <= fmt.bound(x, scale)), float(np.max(err - fmt.bound(x, scale)))
    assert parts[0].nbytes * 4 == x.nbytes * fmt.itemsize


def test_the_bound_is_tight_enough_to_fail():
    # fp16's bound with bf16's rounding must fail: the test above can catch a wrong format
    x = np.linspace(1, 2, 1001, dtype=np.float32)
    y = decompress(compress(x, COMPRESS_FORMATS["bf16"])[0], None, COMPRESS_FORMATS["bf16"])
    assert np.any(np.abs(y - x) > COMPRESS_FORMATS["fp16"].bound(x))


def test_zero_tensor_and_saturation():
    z = np.zeros((4, 4), np.float32)
    for fmt in COMPRESS_FORMATS.values():
        parts = compress(z, fmt)
        assert np.array_equal(decompress(parts[0], parts[1] if len(parts) > 1 else None, fmt), z)
    q, s = compress(np.array([448.0, -1000.0, 1.0], np.float32), COMPRESS_FORMATS["fp8"])
    assert np.isfinite(q.astype(np.float32)).all()


def test_entries_run_through_the_table_and_infer_what_the_kernels_return():
    from corefold import ops
    from corefold.ir.domains import MEMORY_DOMAIN

    x = np.linspace(-3, 3, 24, dtype=np.float32).reshape(2, 3, 4)
    for name in COMPRESS_FORMATS:
        attrs = {"format": name}
        c = ops.get("Compress", MEMORY_DOMAIN)
        parts = c.kernel(attrs, [x])
        assert [(p.shape, p.dtype) for p in parts] == [(tuple(s), d) for s, d in c.infer(attrs, [(x.shape, x.dtype)], [None])]
        d = ops.get("Decompress", MEMORY_DOMAIN)
        (y,) = d.kernel({**attrs, "to": "float32"}, parts)
        assert (y.shape, y.dtype) == (x.shape, np.dtype(np.float32))
        assert np.all(np.abs(y - x) <= COMPRESS_FORMATS[name].bound(x, float(parts[1]) if len(parts) > 1 else 1.0))
    for name in ("SwapOut", "SwapIn"):
        (h,) = ops.get(name, MEMORY_DOMAIN).kernel({}, [x])
        assert np.array_equal(h, x) and h is not x
    with pytest.raises(ValueError, match="fp4"):
        ops.get("Compress", MEMORY_DOMAIN).infer({"format": "fp4"}, [(x.shape, x.dtype)], [None])

