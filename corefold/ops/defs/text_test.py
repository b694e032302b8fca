"""TfIdfVectorizer: ONNX's node cases, ONNX Runtime on random token ids over modes, n-gram
lengths and skips, and every facet against the kernel."""

from __future__ import annotations

import numpy as np
import pytest

from corefold.ops.facet_checks_test import check_facets
from corefold.ops.onnx_cases_test import case_params, check_case, check_ort


@pytest.mark.parametrize("case", case_params("tfidfvectorizer"))
def test_onnx_node_case(case):
    check_case(case)


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("grams,skip", [((1, 1), 0), ((1, 2), 0), ((2, 2), 2), ((1, 3), 1), ((2, 3), 3)])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("rows", [None, 3])
def test_tfidf_vectorizer(mode, grams, skip, weighted, rows):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 5, (rows, 12) if rows else (12,)).astype(np.int64)
    pool = [0, 1, 2, 3, 4] + [0, 1, 2, 2, 3, 4, 4, 0] + [1, 2, 3, 0, 0, 1]  # 5 unigrams, 4 bigrams, 2 trigrams
    attrs = {"mode": mode, "min_gram_length": grams[0], "max_gram_length": grams[1], "max_skip_count": skip,
             "ngram_counts": [0, 5, 13], "ngram_indexes": list(range(11)), "pool_int64s": pool}
    if weighted:
        attrs["weights"] = list(rng.uniform(0.5, 2, 11).round(3))
    check_ort("TfIdfVectorizer", [x], attrs)
    check_ort("TfIdfVectorizer", [x.astype(np.int32)], attrs)
    check_facets("TfIdfVectorizer", [x], attrs)
