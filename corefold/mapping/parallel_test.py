import time

from corefold.mapping.parallel import run_indexed


def test_results_come_back_in_index_order_whatever_finishes_first():
    def slow_first(i):
        time.sleep(0.02 * (4 - i))  # piece 0 finishes last
        return i * i

    for threads in (1, 2, 8):
        assert run_indexed(slow_first, 5, threads) == [0, 1, 4, 9, 16]
    assert run_indexed(slow_first, 0, 2) == []
