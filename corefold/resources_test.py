"""The machine's own limits and the collector thresholds around lowering."""

import gc

import pytest

from corefold.resources import FEWER_COLLECTIONS, fewer_collections


def test_fewer_collections_raises_the_thresholds_inside_and_restores_them_after_an_error():
    before = gc.get_threshold()
    assert before != FEWER_COLLECTIONS
    with pytest.raises(RuntimeError):
        with fewer_collections():
            assert gc.get_threshold() == FEWER_COLLECTIONS
            raise RuntimeError("inside")
    assert gc.get_threshold() == before


def test_fewer_collections_as_a_decorator_nests_and_leaves_the_collector_enabled():
    seen = []

    @fewer_collections((1234, 5, 6))
    def inner():
        seen.append(gc.get_threshold())

    @fewer_collections()
    def outer():
        seen.append(gc.get_threshold())
        inner()
        seen.append(gc.get_threshold())

    before = gc.get_threshold()
    outer()
    assert seen == [FEWER_COLLECTIONS, (1234, 5, 6), FEWER_COLLECTIONS]
    assert gc.get_threshold() == before and gc.isenabled()
