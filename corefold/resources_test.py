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


def test_fewer_collections_nested_keeps_the_outer_thresholds_and_restores_the_first_ones():
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
    assert seen == [FEWER_COLLECTIONS, FEWER_COLLECTIONS, FEWER_COLLECTIONS]
    assert gc.get_threshold() == before and gc.isenabled()


def test_fewer_collections_in_overlapping_threads_restores_the_thresholds_when_the_last_ends():
    import threading

    before = gc.get_threshold()
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def a():
        with fewer_collections():
            a_in.set()
            b_in.wait(5)
        seen["a left"] = gc.get_threshold()  # b is still inside
        a_out.set()

    def b():
        a_in.wait(5)
        with fewer_collections():
            b_in.set()
            a_out.wait(5)
        seen["b left"] = gc.get_threshold()

    threads = [threading.Thread(target=f) for f in (a, b)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(10)
    assert seen == {"a left": FEWER_COLLECTIONS, "b left": before}
    assert gc.get_threshold() == before
