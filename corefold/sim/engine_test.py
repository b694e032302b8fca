"""The timing engine against timelines computed by hand, and its invariants on random task graphs."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corefold.sim.engine import DeadlockError, Engine, Stage


def _stages(tl, task):
    sel = tl.stage_task == task
    return list(zip(tl.stage_start[sel].tolist(), tl.stage_end[sel].tolist(), strict=True))


def test_one_server_is_first_come_first_served():
    e = Engine()
    u = e.resource("u")
    a = e.task([Stage(u, 2.0)])
    b = e.task([Stage(u, 3.0)])
    tl = e.run()
    assert _stages(tl, a) == [(0.0, 2.0)]
    assert _stages(tl, b) == [(2.0, 5.0)]
    assert tl.makespan == 5.0


def test_two_servers_run_in_parallel():
    e = Engine()
    u = e.resource("u", servers=2)
    a, b, c = (e.task([Stage(u, d)]) for d in (2.0, 3.0, 1.0))
    tl = e.run()
    assert _stages(tl, a) == [(0.0, 2.0)]
    assert _stages(tl, b) == [(0.0, 3.0)]
    assert _stages(tl, c) == [(2.0, 3.0)]  # the server that frees first
    assert sorted(tl.stage_server.tolist()) == [0, 0, 1]


def test_dependency_waits_for_the_finish():
    e = Engine()
    u, v = e.resource("u"), e.resource("v")
    a = e.task([Stage(u, 2.0, latency=0.5)])
    b = e.task([Stage(v, 3.0)], deps=[a])
    tl = e.run()
    assert tl.finish[a] == 2.5  # latency after the last stage counts
    assert _stages(tl, b) == [(2.5, 5.5)]


def test_transfer_without_contention_is_hops_times_latency_plus_size_over_bandwidth():
    e = Engine()
    links = [e.resource(f"l{i}") for i in range(3)]
    t = e.task([Stage(link, 4.0, latency=1.0) for link in links])
    tl = e.run()
    assert _stages(tl, t) == [(0.0, 4.0), (1.0, 5.0), (2.0, 6.0)]
    assert tl.finish[t] == 3 * 1.0 + 4.0


def test_streams_fed_slower_than_a_shared_link_interleave_on_it():
    """Two 10 ns streams from slow sources (1 B/ns) meet on a 10 B/ns link. Held for each
    whole stream, the link takes the second only when the first has passed (at 11 ns
    instead of 10); shared, each reserves it for its own 1 ns of transmission, so both
    tails pass at 10 ns, and the link is busy 2 ns in all (their bytes over its rate)."""
    for shared, finish in ((False, [10.0, 11.0]), (True, [10.0, 10.0])):
        e = Engine()
        a, b = e.resource("a"), e.resource("b")
        link = e.resource("link", shared=shared)
        x = e.task([Stage(a, 10.0), Stage(link, 1.0)])
        y = e.task([Stage(b, 10.0), Stage(link, 1.0)])
        tl = e.run()
        assert [tl.finish[x], tl.finish[y]] == finish
        if shared:
            assert _stages(tl, x)[1] == (0.0, 1.0) and _stages(tl, y)[1] == (1.0, 2.0)
            assert tl.busy_seconds(3)[link] == 2.0


def test_contention_serialises_only_the_shared_link():
    e = Engine()
    a, b, c = (e.resource(n) for n in "abc")
    x = e.task([Stage(a, 4.0, 1.0), Stage(b, 4.0, 1.0)], name="x")
    y = e.task([Stage(b, 4.0, 1.0), Stage(c, 4.0, 1.0)], name="y")
    tl = e.run()
    # y reaches b at 0, x at 1: y first; x's head waits on b until 4
    assert _stages(tl, y) == [(0.0, 4.0), (1.0, 5.0)]
    assert _stages(tl, x) == [(0.0, 4.0), (4.0, 8.0)]
    assert tl.finish[x] == 9.0 and tl.finish[y] == 6.0


def test_the_tail_cannot_overtake_a_slow_upstream_link():
    e = Engine()
    slow, fast = e.resource("slow"), e.resource("fast")
    t = e.task([Stage(slow, 10.0, 1.0), Stage(fast, 2.0, 1.0)])
    tl = e.run()
    assert _stages(tl, t) == [(0.0, 10.0), (1.0, 11.0)]
    assert tl.finish[t] == 12.0


def test_a_queue_issues_in_order():
    e = Engine()
    other, u = e.resource("other"), e.resource("u")
    x = e.task([Stage(other, 5.0)])
    q = e.queue()
    a = e.task([Stage(u, 1.0)], deps=[x], queue=q)
    b = e.task([Stage(u, 1.0)], queue=q)
    tl = e.run()
    assert _stages(tl, a) == [(5.0, 6.0)]
    assert _stages(tl, b) == [(6.0, 7.0)]


def test_without_a_queue_the_ready_task_goes_first():
    e = Engine()
    other, u = e.resource("other"), e.resource("u")
    x = e.task([Stage(other, 5.0)])
    a = e.task([Stage(u, 1.0)], deps=[x])
    b = e.task([Stage(u, 1.0)])
    tl = e.run()
    assert _stages(tl, b) == [(0.0, 1.0)]
    assert _stages(tl, a) == [(5.0, 6.0)]


def test_a_queue_on_two_servers_issues_in_order_but_runs_in_parallel():
    e = Engine()
    other, u = e.resource("other"), e.resource("u", servers=2)
    x = e.task([Stage(other, 5.0)])
    q = e.queue()
    a = e.task([Stage(u, 1.0)], deps=[x], queue=q)
    b = e.task([Stage(u, 1.0)], queue=q)
    tl = e.run()
    assert _stages(tl, a) == [(5.0, 6.0)]
    assert _stages(tl, b) == [(5.0, 6.0)]


def test_a_barrier_finishes_with_its_last_dependency():
    e = Engine()
    u, v = e.resource("u"), e.resource("v")
    a = e.task([Stage(u, 2.0)])
    b = e.task([Stage(v, 3.0)])
    sync = e.task([], deps=[a, b])
    c = e.task([Stage(u, 1.0)], deps=[sync])
    tl = e.run()
    assert tl.start[sync] == tl.finish[sync] == 3.0
    assert _stages(tl, c) == [(3.0, 4.0)]


def test_tasks_that_never_become_ready_are_reported():
    # the API cannot build a cycle (dependencies are earlier tasks, queues follow the order
    # tasks are added); break the engine's bookkeeping to check its own invariant check
    e = Engine()
    u = e.resource("u")
    a = e.task([Stage(u, 1.0)], name="a")
    b = e.task([Stage(u, 1.0)], deps=[a], name="b")
    e._edge_from.append(b)  # a also waits for b
    e._edge_to.append(a)
    e._pending[a] += 1
    with pytest.raises(DeadlockError, match="2 of 2 tasks never ran; the first, 'a', waits for 1"):
        e.run()


def test_bad_tasks_are_refused():
    e = Engine()
    u = e.resource("u")
    with pytest.raises(ValueError, match="not an earlier task"):
        e.task([Stage(u, 1.0)], deps=[0])
    with pytest.raises(ValueError, match="duration"):
        e.task([Stage(u, -1.0)])
    with pytest.raises(ValueError, match="no resource"):
        e.task([Stage(7, 1.0)])
    for d, lat in ((math.nan, 0.0), (math.inf, 0.0), (1.0, math.nan), (1.0, -1e-9), (-math.inf, math.inf)):
        with pytest.raises(ValueError, match=f"'t': stage on 'u' has duration {d} and latency {lat}"):
            e.task([Stage(u, 1.0), Stage(u, d, lat)], name="t")
    with pytest.raises(ValueError, match="'t': no resource -1"):
        e.task([Stage(u, 1.0), Stage(-1, 1.0)], name="t")
    with pytest.raises(ValueError, match="dependency -1 is not an earlier task"):
        e.task([], deps=[-1])
    assert e.num_tasks == 0 and e.tasks == []  # nothing refused was added
    big = e.task([Stage(u, 1e308), Stage(u, 1e308)], name="big")  # finite, though the sum is not
    assert e.tasks[big].stages[1].duration == 1e308
    t = e.task([Stage(u, 2.0, 0.5)], name="t", category="c", args={"k": 1})
    assert e.num_tasks == 2 and e.tasks[t].stages == (Stage(u, 2.0, 0.5),) and e.tasks[t].args == {"k": 1}


@st.composite
def _task_graphs(draw):
    n_res = draw(st.integers(1, 4))
    servers = [draw(st.integers(1, 3)) for _ in range(n_res)]
    n = draw(st.integers(1, 30))
    tasks = []
    for i in range(n):
        stages = [(draw(st.integers(0, n_res - 1)), draw(st.floats(0, 5)), draw(st.floats(0, 2)))
                  for _ in range(draw(st.integers(0, 3)))]
        deps = sorted(set(draw(st.lists(st.integers(0, i - 1), max_size=3)))) if i else []
        queue = draw(st.sampled_from([None, 0, 1]))
        tasks.append((stages, deps, queue))
    return servers, tasks


@settings(max_examples=150, deadline=None)
@given(_task_graphs())
def test_random_task_graphs_keep_every_invariant(problem):
    servers, spec = problem
    e = Engine()
    res = [e.resource(f"r{i}", s) for i, s in enumerate(servers)]
    queues = [e.queue(), e.queue()]
    for stages, deps, queue in spec:
        e.task([Stage(res[r], d, l) for r, d, l in stages], deps=deps,
               queue=None if queue is None else queues[queue])
    tl = e.run()
    eps = 1e-9
    for t, (stages, deps, _queue) in enumerate(spec):
        # starts after every dependency, stages in order, each at least its duration
        assert all(tl.start[t] >= tl.finish[d] - eps for d in deps)
        got = _stages(tl, t)
        assert len(got) == len(stages)
        prev = None
        for (s, en), (_r, d, lat) in zip(got, stages, strict=True):
            assert en - s >= d - eps
            if prev is not None:
                assert s >= prev[0] + prev[2] - eps and en >= prev[1] + prev[2] - eps
            prev = (s, en, lat)
        lower = tl.start[t] + sum(d for _r, d, _l in stages[-1:]) + (stages[-1][2] if stages else 0)
        assert tl.finish[t] >= lower - eps
    # no server holds two stages at once
    for r in range(len(servers)):
        for k in range(servers[r]):
            sel = (tl.stage_resource == r) & (tl.stage_server == k)
            iv = sorted(zip(tl.stage_start[sel], tl.stage_end[sel], strict=True))
            assert all(b[0] >= a[1] - eps for a, b in zip(iv, iv[1:], strict=False))
    # queues issue in order
    for q in (0, 1):
        members = [t for t, (_s, _d, qq) in enumerate(spec) if qq == q]
        starts = tl.start[members]
        assert np.all(np.diff(starts) >= -eps)
    # deterministic
    assert np.array_equal(e.run().finish, tl.finish)


def _reference_run(e: Engine) -> dict:
    """The engine's rules as plain Python over ``e``'s task objects (the loop the compiled
    run replaced, kept as its oracle): each array of the :class:`Timeline`."""
    import heapq

    tasks = e.tasks
    n = len(tasks)
    pending = list(e._pending)
    ready = [0.0] * n
    start, finish = [np.nan] * n, [np.nan] * n
    free = [[0.0] * r.servers for r in e.resources]
    head, issued = [0] * len(e._queues), [0.0] * len(e._queues)
    rec: list[tuple] = []
    heap: list[tuple] = []
    seq = 0

    def eligible(t):
        q = tasks[t].queue
        return q < 0 or e._queues[q][head[q]] == t

    for t in range(n):
        if pending[t] == 0 and eligible(t):
            heap.append((0.0, seq, t, 0, 0.0))
            seq += 1
    heapq.heapify(heap)
    while heap:
        now, _, t, j, tail = heapq.heappop(heap)
        stages = tasks[t].stages
        ended = None
        if j < len(stages):
            r, dur, lat = stages[j]
            servers = free[r]
            k = min(range(len(servers)), key=servers.__getitem__)
            s = max(now, servers[k])
            reserved = s + dur
            end = max(reserved, tail) if j else reserved
            servers[k] = reserved if e.resources[r].shared else end
            rec.append((t, r, k, s, servers[k]))
            began = s
            if j + 1 < len(stages):
                heapq.heappush(heap, (s + lat, seq, t, j + 1, end + lat))
                seq += 1
            else:
                ended = end + lat
        else:
            began = ended = now
        if j == 0:
            start[t] = began
            q = tasks[t].queue
            if q >= 0:
                head[q] += 1
                issued[q] = began
                if head[q] < len(e._queues[q]):
                    nxt = e._queues[q][head[q]]
                    if pending[nxt] == 0:
                        heapq.heappush(heap, (max(ready[nxt], began), seq, nxt, 0, 0.0))
                        seq += 1
        if ended is None:
            continue
        finish[t] = ended
        for u in tasks[t].succs:
            ready[u] = max(ready[u], ended)
            pending[u] -= 1
            if pending[u] == 0 and eligible(u):
                q = tasks[u].queue
                heapq.heappush(heap, (ready[u] if q < 0 else max(ready[u], issued[q]), seq, u, 0, 0.0))
                seq += 1
    cols = list(zip(*rec, strict=True)) if rec else [()] * 5
    return {"start": np.array(start), "finish": np.array(finish), "stage_task": np.array(cols[0], np.int64),
            "stage_resource": np.array(cols[1], np.int64), "stage_server": np.array(cols[2], np.int64),
            "stage_start": np.array(cols[3], np.float64), "stage_end": np.array(cols[4], np.float64)}


@settings(max_examples=150, deadline=None)
@given(_task_graphs(), st.lists(st.booleans(), min_size=4, max_size=4))
def test_the_compiled_run_is_the_plain_python_rules_to_the_bit(problem, shared):
    """Every start, finish and stage of the compiled run (:func:`engine._run_tasks`) equals the
    plain-Python loop's exactly, shared and dedicated resources mixed."""
    servers, spec = problem
    e = Engine()
    res = [e.resource(f"r{i}", s, shared=shared[i % 4]) for i, s in enumerate(servers)]
    queues = [e.queue(), e.queue()]
    for stages, deps, queue in spec:
        e.task([Stage(res[r], d, l) for r, d, l in stages], deps=deps,
               queue=None if queue is None else queues[queue])
    tl = e.run()
    want = _reference_run(e)
    for field, array in want.items():
        assert np.array_equal(getattr(tl, field), array, equal_nan=True), field
