import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corefold.passes.order import build_problem, simulate
from corefold.passes.order.candidates import enumerate_orders, local_preds
from corefold.passes.order.list_schedule import carry_move, iterated_local_search, local_search
from corefold.passes.order.random_network import random_mixed_network, random_network
from corefold.passes.order.simulator import initial_state
from corefold.target import load_target

TARGET = load_target("npu")


def _edges(problem):
    return problem.pred_ptr, problem.pred_idx, problem.succ_ptr, problem.succ_idx


def _is_topological(problem, order):
    pos = np.empty(len(order), np.int64)
    pos[order] = np.arange(len(order))
    return all(pos[problem.pred_idx[k]] < pos[i] for i in range(len(order))
               for k in range(problem.pred_ptr[i], problem.pred_ptr[i + 1]))


@given(st.integers(2, 12), st.integers(0, 10_000), st.integers(0, 3), st.data())
@settings(max_examples=40, deadline=None)
def test_carry_move_keeps_a_topological_order(n, seed, ctrl, data):
    g = random_network(n, seed=seed, ctrl_edges=ctrl, channels=8, size=4, shuffle_file_order=True)
    problem = build_problem(g, TARGET)
    m = len(problem.nodes)
    cur = np.arange(m, dtype=np.int64)
    mark = np.zeros(m, np.bool_)
    trial = np.empty(m, np.int64)
    for _ in range(10):
        a = data.draw(st.integers(0, m - 1))
        b = data.draw(st.integers(0, m - 1))
        if a == b:
            continue
        carry_move(cur, a, b, *_edges(problem), mark, trial)
        assert sorted(trial) == list(range(m)) and _is_topological(problem, trial)
        assert not mark.any()
        cur = trial.copy()


def test_carry_move_is_a_plain_insertion_when_nothing_blocks_and_carries_a_chain():
    # x -> a -> b chain and an independent c: file order x, c, a, b (node indices 0..3)
    from corefold.ir import parse

    g = parse("graph chain\ninput x: float32[1, 8]\n"
              "node p = Relu(x) -> (y: float32[1, 8])\n"
              "node c = Relu(x) -> (z: float32[1, 8])\n"
              "node q = Relu(y) -> (w: float32[1, 8])\n"
              "output w\noutput z\n")
    problem = build_problem(g, TARGET)
    name = [nd.name for nd in problem.nodes]
    order = np.array([name.index(x) for x in ("p", "c", "q")], np.int64)
    mark = np.zeros(3, np.bool_)
    trial = np.empty(3, np.int64)
    # c to the front: nothing in the way, a plain insertion
    carry_move(order, 1, 0, *_edges(problem), mark, trial)
    assert [name[i] for i in trial] == ["c", "p", "q"]
    # p behind q: q depends on p, so q is carried and p ends last of the pair but before q
    carry_move(order, 0, 2, *_edges(problem), mark, trial)
    assert [name[i] for i in trial] == ["c", "p", "q"]
    # q to the front carries its predecessor p along
    carry_move(order, 2, 0, *_edges(problem), mark, trial)
    assert [name[i] for i in trial] == ["p", "q", "c"]


def test_iterated_local_search_leaves_the_insertion_local_optimum_for_the_optimum():
    """On this 14-operator graph (20,020 orders), insertion moves from the file order stall
    0.85% above the optimum (brute force); the iterated local search with carry moves
    reaches it with the same number of tries, for every seed tried.

    mutation: made ``iterated_local_search`` return its first round's local search ->
    this test fails (1.1393e-5 s instead of 1.1297e-5 s for seeds 0 and 1).
    """
    g = random_mixed_network(10, seed=32, channels=32, size=16, span=6)
    problem = build_problem(g, TARGET)
    n = len(problem.nodes)
    best = min(simulate(problem, o) for o in enumerate_orders(local_preds(problem, np.arange(n)), 100_000))
    start = np.arange(n, dtype=np.int64)
    stalled = [local_search(problem.arrays, initial_state(problem), start, *_edges(problem), n, 2000, s, -1.0,
                            0.0)[1] for s in range(2)]
    assert min(stalled) > best * (1 + 1e-3)
    for s in range(3):
        order, ms, _ = iterated_local_search(problem.arrays, initial_state(problem), start, *_edges(problem), n,
                                             2000, s, 200, 4, 0.5)
        assert _is_topological(problem, order)
        assert ms == pytest.approx(best, rel=1e-12) and simulate(problem, order) == pytest.approx(ms, rel=1e-12)
    # deterministic for a seed
    a = iterated_local_search(problem.arrays, initial_state(problem), start, *_edges(problem), n, 2000, 5, 200, 4, 0.5)
    b = iterated_local_search(problem.arrays, initial_state(problem), start, *_edges(problem), n, 2000, 5, 200, 4, 0.5)
    assert (a[0] == b[0]).all() and a[1] == b[1]
