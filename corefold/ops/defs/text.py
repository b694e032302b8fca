"""TfIdfVectorizer on integer token ids (opset 9); a pool of strings is refused, as corefold
has no string tensors.

The pool's n-grams (``pool_int64s``, grouped by length through ``ngram_counts``) map to
output columns (``ngram_indexes``). For every length n in ``[min_gram_length,
max_gram_length]`` and every skip distance d in ``1 .. max_skip_count + 1`` (only d = 1 for
unigrams), each row's n-grams ``x[s], x[s + d], ..., x[s + (n - 1) d]`` are compared with
the pool's n-grams of that length at once (a broadcast comparison), and matches are
counted. ``mode`` TF gives the counts, IDF ``weights[i]`` (default 1) where the count is
positive, TFIDF ``weights[i] * count``. O(rows * C * pool size * n * skips).
"""

from __future__ import annotations

import numpy as np

from corefold.ops.registry import op
from corefold.ops.schema import AS_IS, FLOAT, NONE, Cost, Quant


def _s(attrs, name, default):
    v = attrs.get(name, default)
    return v.decode() if isinstance(v, bytes) else str(v)


def _pool_grams(attrs) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """(n, pool n-grams (k, n), their output columns (k,)) per length n in range.

    Raises:
        ValueError: a pool of strings, or attributes that do not fit together.
    """
    if attrs.get("pool_strings"):
        raise ValueError("TfIdfVectorizer over strings is not supported (corefold has no string tensors)")
    pool = np.asarray(attrs.get("pool_int64s", []), np.int64)
    counts = [int(c) for c in attrs.get("ngram_counts", [])]
    indexes = np.asarray(attrs.get("ngram_indexes", []), np.int64)
    lo, hi = int(attrs.get("min_gram_length", 1)), int(attrs.get("max_gram_length", 1))
    out = []
    first_id = 0
    for i, start in enumerate(counts):
        n = i + 1
        end = counts[i + 1] if i + 1 < len(counts) else len(pool)
        k = (end - start) // n
        if k > 0 and lo <= n <= hi:
            grams = pool[start:start + k * n].reshape(k, n)
            cols = indexes[first_id:first_id + k]
            if len(cols) != k:
                raise ValueError("ngram_indexes has fewer entries than the pool has n-grams")
            # a repeated n-gram counts once, for its first occurrence
            _, keep = np.unique(grams, axis=0, return_index=True)
            keep.sort()
            out.append((n, grams[keep], cols[keep]))
        first_id += max(k, 0)
    return out


def _width(attrs) -> int:
    idx = attrs.get("ngram_indexes", [])
    return int(max(idx)) + 1 if len(idx) else 0


def _tfidf_infer(attrs, ins, consts):
    x, _ = ins[0]
    _pool_grams(attrs)
    if len(x) > 2:
        raise ValueError(f"input must be [C] or [B, C], got {list(x)}")
    lead = (x[0],) if len(x) == 2 else ()
    return [(lead + (_width(attrs),), np.dtype("float32"))]


@op("TfIdfVectorizer", normalise=AS_IS, infer=_tfidf_infer, split=NONE, quant=Quant(FLOAT), param_inputs=(0,),
    cost=Cost("vector", lambda attrs, ins, outs: float(np.prod(ins[0][0])) * max(1, len(attrs.get("pool_int64s", [])))))
def tfidf_vectorizer(attrs, inputs):
    """See the module docstring."""
    x = np.asarray(inputs[0])
    if x.ndim > 2:
        raise ValueError(f"TfIdfVectorizer: input must be [C] or [B, C], got {list(x.shape)}")
    rows = x.reshape(1, -1) if x.ndim < 2 else x
    rows = rows.astype(np.int64)
    b, c = rows.shape
    freq = np.zeros((b, _width(attrs)), np.float64)
    max_skip = int(attrs.get("max_skip_count", 0))
    for n, grams, cols in _pool_grams(attrs):
        for d in range(1, (max_skip if n > 1 else 0) + 2):
            starts = c - (n - 1) * d
            if starts <= 0:
                continue
            idx = np.arange(starts)[:, None] + np.arange(n)[None, :] * d  # (S, n)
            windows = rows[:, idx]  # (B, S, n)
            hits = (windows[:, :, None, :] == grams[None, None]).all(axis=-1).sum(axis=1)  # (B, k)
            np.add.at(freq, (slice(None), cols), hits)
    mode = _s(attrs, "mode", "TF")
    weights = np.asarray(attrs.get("weights", []), np.float64)
    if mode == "TF":
        y = freq
    elif mode == "IDF":
        y = np.where(freq > 0, weights if weights.size else 1.0, 0.0)
    elif mode == "TFIDF":
        y = freq * weights if weights.size else freq
    else:
        raise ValueError(f"TfIdfVectorizer: unknown mode {mode!r}")
    y = y.astype(np.float32)
    return [y[0] if x.ndim < 2 else y]
