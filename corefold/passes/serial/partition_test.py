"""Serial partitioning (SPEC M1) with stand-in compilers: the seed's example, split on
failure, every fusion strategy against a brute-force optimum, the chain computing the
model's outputs, and parallel compiles giving the same result."""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corefold.errors import CompileError
from corefold.executor import random_inputs, run
from corefold.ir import parse, verify
from corefold.passes.order.random_network import random_network
from corefold.passes.serial import (
    Piece,
    SerialSettings,
    compare_strategies,
    serial_partition,
    target_nodes,
)
from corefold.passes.serial.chain import Attributes, extract
from corefold.passes.serial.compilers import CompileService
from corefold.passes.serial.fusion import (
    GroupLimits,
    fuse_bidirectional,
    fuse_forward,
    fuse_pairs,
    minimum_chain,
)

# SPEC M1 §3: chain 1 -> 2 -> 4 -> 6 -> 8 -> 9 with data outputs 3 (from 2), 5 (from 4), 7 (from 6)
SEED = """\
graph seed
input x: float32[1, 4]
node n1 = Relu(x) -> (v1: float32[1, 4])
node n2 = Neg(v1) -> (v2: float32[1, 4])
node n4 = Exp(v2) -> (v4: float32[1, 4])
node n6 = Neg(v4) -> (v6: float32[1, 4])
node n8 = Abs(v6) -> (v8: float32[1, 4])
node n9 = Sqrt(v8) -> (v9: float32[1, 4])
output v2
output v4
output v6
output v9
"""


def accept_all(sub):
    return sub.name


def max_nodes(limit, sub):
    """Fails when the subgraph holds more than ``limit`` nodes (monotone)."""
    if len(sub) > limit:
        raise CompileError("core count", "test chip", len(sub), limit)
    return len(sub)


def max_weight(limit, sub):
    """Fails when the subgraph's constants exceed ``limit`` bytes (monotone)."""
    need = sum(v.nbytes for v in sub.constants.values())
    if need > limit:
        raise CompileError("SRAM", "test chip", need, limit)
    return need


def refuse_op(op, sub):
    if any(n.op_type == op for n in sub.nodes):
        raise CompileError("SRAM", "core (0,0)", 2e6, 1e6)
    return len(sub)


def run_chain(graph, result, feeds):
    """Run the executables' subgraphs one after another, passing values by name (as the
    chip passes them through DRAM)."""
    env = dict(feeds)
    for sub in result.subgraphs(graph):
        verify(sub)
        out = run(sub, {v.name: env[v.name] for v in sub.inputs})
        env.update(out)
    return {v.name: env[v.name] for v in graph.outputs}


def test_seed_example_cuts_at_target_nodes():
    g = parse(SEED)
    assert [n.name for n in target_nodes(g)] == ["n2", "n4", "n6"]
    res = serial_partition(g, accept_all, SerialSettings(fusion="none"))
    names = [[n.name for n in res.order[p.start:p.end]] for p in res.pieces]
    assert names == [["n1", "n2"], ["n4"], ["n6"], ["n8", "n9"]]  # {1,2,3}, {4,5}, {6,7}, {8,9}
    feeds = random_inputs(g, 0)
    want = run(g, feeds)
    got = run_chain(g, res, feeds)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])  # a serial cut moves values, never changes them


def test_every_output_of_a_multi_exit_network_is_stored():
    g = parse(SEED)
    res = serial_partition(g, accept_all, SerialSettings(fusion="none"))
    subs = res.subgraphs(g)
    emitted = {v.name for s in subs for v in s.outputs}
    assert {"v2", "v4", "v6", "v9"} <= emitted


def test_split_on_failure_until_every_piece_compiles_and_outputs_hold():
    g = random_network(24, seed=5, channels=4, size=4, batch=1, ctrl_edges=0)
    res = serial_partition(g, functools.partial(max_nodes, 5), SerialSettings(fusion="none"))
    assert all(len(p) <= 5 for p in res.pieces)
    assert [p.start for p in res.pieces][0] == 0 and res.pieces[-1].end == len(g)
    assert all(a.end == b.start for a, b in itertools.pairwise(res.pieces))
    feeds = random_inputs(g, 1)
    want, got = run(g, feeds), run_chain(g, res, feeds)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


def test_an_operator_that_never_compiles_is_named():
    g = parse(SEED)
    with pytest.raises(CompileError, match=r"SRAM of core \(0,0\).*operator 'n4' \(Exp\) alone"):
        serial_partition(g, functools.partial(refuse_op, "Exp"), SerialSettings(fusion="none"))


def _brute_minimum(chain, fits):
    best = len(chain)
    m = len(chain)
    for mask in range(1 << (m - 1)):
        bounds = [0] + [i + 1 for i in range(m - 1) if mask >> i & 1] + [m]
        if all(fits(Piece(chain[a].start, chain[b - 1].end)) for a, b in itertools.pairwise(bounds)):
            best = min(best, len(bounds) - 1)
    return best


@given(st.integers(0, 10_000), st.integers(2, 12))
@settings(max_examples=25, deadline=None)
def test_optimal_reference_is_the_brute_force_minimum(seed, m):
    """The two-pointer DP gives the fewest ranges that fit, checked by enumerating every
    grouping of a random chain under a monotone (weight-budget) feasibility."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 10, m)
    limit = int(rng.integers(int(sizes.max()), int(sizes.sum()) + 1))
    prefix = np.concatenate([[0], np.cumsum(sizes)])
    chain = [Piece(i, i + 1) for i in range(m)]

    def fits(p):
        return prefix[p.end] - prefix[p.start] <= limit

    class Svc:
        def fits(self, p):
            return fits(p)

    got = minimum_chain(chain, Svc())
    assert all(fits(p) for p in got)
    assert len(got) == _brute_minimum(chain, fits)


class _Fake:
    """A service whose compiles succeed by a rule on pieces; counts calls."""

    def __init__(self, ok):
        self.ok, self.calls = ok, 0
        data = type("Value", (), {"is_constant": False, "producer": None})()
        self.order = [type("Node", (), {"name": f"n{i}", "op_type": "Conv", "control_preds": (), "inputs": (data,)})()
                      for i in range(64)]

    def compile_many(self, pieces):
        from corefold.passes.serial.compilers import Outcome

        self.calls += len(pieces)
        return [Outcome(p, "exe") if self.ok(p) else Outcome(p, None, CompileError("SRAM", "x", 2, 1)) for p in pieces]

    def compile(self, p):
        return self.compile_many([p])[0]


def test_forward_greedy_follows_the_seed():
    """[000 §100-118]: fuse current + next; failure -> current final, next current; success
    -> fused final, the one after next current. Chain h i j k l with (h,i) fusable only."""
    chain = [Piece(i, i + 1) for i in range(5)]
    svc = _Fake(lambda p: (p.start, p.end) == (0, 2))
    assert fuse_forward(chain, svc) == [Piece(0, 2), Piece(2, 3), Piece(3, 4), Piece(4, 5)]
    svc = _Fake(lambda p: len(p) <= 2)
    assert fuse_forward(chain, svc) == [Piece(0, 2), Piece(2, 4), Piece(4, 5)]


def test_bidirectional_follows_the_seed():
    """[000 §120-131]: both ends at once; a failing forward pair finalises the earlier
    piece, a failing backward pair the later one. Chain h..m (6 pieces): forward (h,i) ok,
    backward (l,m) fails -> m final; then forward (j,k) ok and the walks meet at l."""
    chain = [Piece(i, i + 1) for i in range(6)]
    ok = {(0, 2), (2, 4), (3, 5)}
    svc = _Fake(lambda p: (p.start, p.end) in ok)
    assert fuse_bidirectional(chain, svc) == [Piece(0, 2), Piece(2, 4), Piece(4, 5), Piece(5, 6)]


def test_pairs_fuse_independently():
    chain = [Piece(i, i + 1) for i in range(5)]
    svc = _Fake(lambda p: p.start != 2)
    assert fuse_pairs(chain, svc) == [Piece(0, 2), Piece(2, 3), Piece(3, 4), Piece(4, 5)]


@pytest.mark.parametrize("strategy", ["a", "b", "c", "d", "optimal"])
def test_every_strategy_keeps_only_compiling_pieces(strategy):
    g = random_network(30, seed=2, channels=4, size=4, batch=1, ctrl_edges=0)
    limit = 3 * max(sum(v.nbytes for v in n.inputs if v is not None and v.is_constant) for n in g.nodes)
    compile_fn = functools.partial(max_weight, limit)
    res = serial_partition(g, compile_fn, SerialSettings(fusion=strategy, group_max_weight_bytes=limit))
    assert res.minimum_executables is not None and len(res.pieces) >= res.minimum_executables
    for sub in res.subgraphs(g):
        compile_fn(sub)
    feeds = random_inputs(g, 0)
    want, got = run(g, feeds), run_chain(g, res, feeds)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
    if strategy == "optimal":
        assert len(res.pieces) == res.minimum_executables


def test_compare_strategies_counts_each_strategy_apart():
    g = random_network(30, seed=4, channels=4, size=4, batch=1, ctrl_edges=0)
    limit = 3 * max(sum(v.nbytes for v in n.inputs if v is not None and v.is_constant) for n in g.nodes)
    table = compare_strategies(g, functools.partial(max_weight, limit), SerialSettings(group_max_weight_bytes=limit))
    assert set(table) == {"a", "b", "c", "d", "optimal"}
    minimum = table["optimal"].minimum_executables
    assert len(table["optimal"].pieces) == minimum
    assert all(len(r.pieces) >= minimum for r in table.values())
    assert all(r.compile_calls >= 1 for r in table.values())
    # the chain optimum: no strategy fuses the split chain into fewer, and it is reached by
    # brute force over every grouping of the split chain into contiguous ranges
    chain = table["d"].split_pieces
    chain_min = table["d"].chain_minimum_executables
    assert minimum <= chain_min <= min(len(r.pieces) for s, r in table.items() if s != "optimal")
    fn = functools.partial(max_weight, limit)
    order = table["d"].order

    def compiles(i, j):
        try:
            fn(extract(g, order, Piece(chain[i].start, chain[j - 1].end)))
            return True
        except CompileError:
            return False

    best = [0] + [len(chain) + 1] * len(chain)
    for j in range(1, len(chain) + 1):
        best[j] = min(best[i] + 1 for i in range(j) if compiles(i, j))
    assert chain_min == best[-1]


def test_process_pool_gives_the_same_partition():
    g = random_network(20, seed=7, channels=4, size=4, batch=1, ctrl_edges=0)
    fn = functools.partial(max_nodes, 4)
    one = serial_partition(g, fn, SerialSettings(workers=1))
    two = serial_partition(g, fn, SerialSettings(workers=2))
    assert one.pieces == two.pieces and one.compile_calls == two.compile_calls


def test_extract_keeps_constants_inputs_and_outputs():
    g = random_network(10, seed=1, channels=4, size=4, batch=1, ctrl_edges=2)
    order = g.topological_order()
    sub = extract(g, order, Piece(3, 7))
    verify(sub)
    assert [n.name for n in sub.nodes] == [n.name for n in order[3:7]]
    attrs = Attributes.of(order)
    assert attrs.total("nodes", Piece(3, 7)) == 4
    svc = CompileService(g, order, accept_all)
    assert svc.compile(Piece(0, 10)).ok and svc.calls == 1
    svc.compile(Piece(0, 10))
    assert svc.calls == 1  # cached


def test_group_limits_bound_strategy_a():
    g = random_network(16, seed=3, channels=4, size=4, batch=1, ctrl_edges=0)
    order = g.topological_order()
    attrs = Attributes.of(order)
    limits = GroupLimits(max_nodes=3)
    assert limits.within_max(attrs, Piece(0, 3)) and not limits.within_max(attrs, Piece(0, 4))


@given(st.integers(0, 10_000), st.integers(1, 40))
@settings(max_examples=30, deadline=None)
def test_galloping_cover_equals_the_dp_over_every_position(seed, n):
    """minimum_cover (greedy steps found by galloping) gives the DP's count over single
    positions, with far fewer feasibility checks."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 10, n)
    limit = int(rng.integers(int(sizes.max()), int(sizes.sum()) + 1))
    prefix = np.concatenate([[0], np.cumsum(sizes)])
    calls = []

    def fits(p):
        calls.append(p)
        return prefix[p.end] - prefix[p.start] <= limit

    from corefold.passes.serial.fusion import minimum_cover

    got = minimum_cover(0, n, fits)
    assert got[0].start == 0 and got[-1].end == n and all(fits(p) for p in got)

    class Svc:
        def fits(self, p):
            return prefix[p.end] - prefix[p.start] <= limit

    assert len(got) == len(minimum_chain([Piece(i, i + 1) for i in range(n)], Svc()))


def test_optimal_cover_repaired_when_fits_overestimates():
    """The fast check said [3, 9) fits but it does not compile; the cover must still hold
    every operator once, in order, with only compiling ranges (a lost range [3, 4) between
    two of the chain's cut points once left the chain without an executable)."""
    from corefold.passes.serial.fusion import repair_cover

    chain = [Piece(0, 2), Piece(2, 4), Piece(4, 6), Piece(6, 9)]
    cover = [Piece(0, 3), Piece(3, 9)]
    svc = _Fake(lambda p: not (p.start <= 3 and p.end >= 8) and len(p) <= 4)
    got = repair_cover(cover, chain, svc)
    assert got == [Piece(0, 3), Piece(3, 4), Piece(4, 6), Piece(6, 9)]
    # a single operator that never compiles is the compiler's error
    svc = _Fake(lambda p: not p.start <= 5 < p.end)
    with pytest.raises(CompileError, match=r"operator 'n5' \(Conv\) alone"):
        repair_cover([Piece(0, 9)], chain, svc)


@given(st.integers(0, 10_000), st.integers(1, 40))
@settings(max_examples=30, deadline=None)
def test_compiled_cover_reaches_the_minimum_that_compiles_when_the_fast_check_overestimates(seed, n):
    """The fast check admits ranges up to ``loose`` bytes, the compiler only up to
    ``tight``: the optimal strategy's cover still compiles everywhere, covers every operator
    once in order, and has the fewest ranges that compile (the DP over every position)."""
    from corefold.passes.serial.compilers import Outcome
    from corefold.passes.serial.fusion import compiled_cover

    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 10, n)
    prefix = np.concatenate([[0], np.cumsum(sizes)])
    tight = int(rng.integers(int(sizes.max()), int(sizes.sum()) + 1))
    loose = tight + int(rng.integers(0, 20))

    def weight(p):
        return prefix[p.end] - prefix[p.start]

    class Svc:
        compiles = 0

        def fits(self, p):
            return weight(p) <= loose

        def compile(self, p):
            Svc.compiles += 1
            return Outcome(p, "exe") if weight(p) <= tight else Outcome(p, None, CompileError("SRAM", "x", 2, 1))

    class Exact:
        def fits(self, p):
            return weight(p) <= tight

    got = compiled_cover(0, n, Svc())
    assert got[0].start == 0 and got[-1].end == n
    assert all(a.end == b.start for a, b in zip(got, got[1:], strict=False))
    assert all(weight(p) <= tight for p in got)
    assert len(got) == len(minimum_chain([Piece(i, i + 1) for i in range(n)], Exact()))


def test_compiled_cover_raises_the_error_of_an_operator_that_never_compiles():
    from corefold.passes.serial.fusion import compiled_cover

    svc = _Fake(lambda p: not p.start <= 5 < p.end)
    svc.fits = lambda p: True
    with pytest.raises(CompileError, match=r"SRAM .*operator 'n5' \(Conv\) alone"):
        compiled_cover(0, 9, svc)


def test_optimal_with_a_fast_check_skips_the_split_phase():
    """With a fast check as exact as the compiler, ``optimal`` compiles each executable of
    its cover once and nothing else (no split phase), reaches the brute-force minimum over
    every position of the order, and the chain computes the model's outputs."""
    g = random_network(30, seed=5, channels=4, size=4, batch=1, ctrl_edges=0)
    limit = 3 * max(sum(v.nbytes for v in n.inputs if v is not None and v.is_constant) for n in g.nodes)
    compile_fn = functools.partial(max_weight, limit)

    def fits_fn(sub):
        try:
            compile_fn(sub)
        except CompileError as exc:
            return exc
        return None

    res = serial_partition(g, compile_fn, SerialSettings(fusion="optimal"), fits_fn=fits_fn)
    assert res.compile_calls == len(res.pieces) == res.minimum_executables > 1
    assert res.split_pieces == res.pieces and res.chain_minimum_executables is None
    order = res.order
    best = [0] + [len(order) + 1] * len(order)  # brute force over every position
    for j in range(1, len(order) + 1):
        best[j] = min(best[i] + 1 for i in range(j)
                      if sum({id(v): v.nbytes for n in order[i:j] for v in n.inputs
                              if v is not None and v.is_constant}.values()) <= limit)
    assert len(res.pieces) == best[-1]
    feeds = random_inputs(g, 0)
    want, got = run(g, feeds), run_chain(g, res, feeds)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


# A quantizer's layout: every weight's DequantizeLinear first, then the operators
QDQ_WEIGHTS_FIRST = """\
graph qdq
input x: float32[1, 4]
const w1: int8[4, 4] = fill(3)
const w2: int8[4, 4] = fill(-2)
const s: float32[] = fill(0.25)
const z: int8[] = fill(0)
const shape: int64[2] = [4, 4]
node dq1 = DequantizeLinear(w1, s, z) -> (f1: float32[4, 4])
node dq2 = DequantizeLinear(w2, s, z) -> (f2: float32[4, 4])
node r2 = Reshape(f2, shape) -> (g2: float32[4, 4])
node m1 = MatMul(x, f1) -> (y1: float32[1, 4])
node a1 = Relu(y1) -> (h1: float32[1, 4])
node m2 = MatMul(h1, g2) -> (y2: float32[1, 4])
output y2
"""


def test_nodes_computed_from_constants_alone_are_cut_with_their_readers():
    """The weights' DequantizeLinear nodes (and a Reshape of one) move to just before the
    operator that reads them, so that no executable holds weight conversions alone and
    passes float weights through DRAM (the int8 light SqueezeNet on ``npu-2x2``: one of its
    executables held 18 weight DequantizeLinear nodes and nothing else, and lowering it,
    with no task at all, ended in an IndexError). With at most two nodes per executable,
    each MatMul shares one with its weight."""
    from corefold.passes.serial.partition import constants_beside_readers

    g = parse(QDQ_WEIGHTS_FIRST)
    feeds = random_inputs(g, 0)
    want = run(g, feeds)
    before = parse(QDQ_WEIGHTS_FIRST)
    cut_before = serial_partition(before, functools.partial(max_nodes, 3), SerialSettings(fusion="d"))
    assert constants_beside_readers(g) == 4
    assert [n.name for n in g.topological_order()] == ["dq1", "m1", "a1", "dq2", "r2", "m2"]
    assert constants_beside_readers(g) == 0  # already in place
    res = serial_partition(g, functools.partial(max_nodes, 3), SerialSettings(fusion="d"))
    assert [[n.name for n in sub.nodes] for sub in res.subgraphs(g)] == [["dq1", "m1", "a1"], ["dq2", "r2", "m2"]]
    assert [n.name for n in cut_before.order] == [n.name for n in res.order]  # serial_partition moved them itself
    np.testing.assert_array_equal(run_chain(g, res, feeds)["y2"], want["y2"])


def _split_weights_chain(layers: int) -> str:
    """``layers`` MatMuls, each reading a weight the split pass cut in three:
    three DequantizeLinear pieces and their Concat (the int8 light SqueezeNet on 128 KiB
    cores: ``fire6/expand3x3_w_0_dequantize_part0..3`` and their Concat)."""
    lines = ["graph split_weights", "input x: float32[1, 6]",
             "const s: float32[] = fill(0.5)", "const z: int8[] = fill(0)"]
    h = "x"
    for i in range(layers):
        for j in range(3):
            lines.append(f"const w{i}_{j}: int8[2, 6] = fill({j - 1})")
            lines.append(f"node dq{i}_{j} = DequantizeLinear(w{i}_{j}, s, z) -> (f{i}_{j}: float32[2, 6])")
        lines.append(f'node c{i} = Concat(f{i}_0, f{i}_1, f{i}_2) attrs {{"axis": 0}} -> (g{i}: float32[6, 6])')
        lines.append(f"node m{i} = MatMul({h}, g{i}) -> (y{i}: float32[1, 6])")
        lines.append(f"node a{i} = Relu(y{i}) -> (h{i}: float32[1, 6])")
        h = f"h{i}"
    lines.append(f"output {h}")
    return "\n".join(lines) + "\n"


def _compute_nodes(limit, sub):
    """A compiler that holds ``limit`` compute nodes: constants' nodes are folded into their
    readers (monotone)."""
    from corefold.passes.serial.cuts import constant_nodes

    need = len(sub) - len(constant_nodes(sub.topological_order()))
    if need > limit:
        raise CompileError("core count", "test chip", need, limit)
    return need


@pytest.mark.parametrize("layers,limit", [(5, 3), (6, 4), (7, 5)])
def test_a_weight_cut_in_pieces_travels_with_each_reader(layers, limit):
    """A weight the split pass cut into pieces and concatenated is read by every range that
    needs it, never passed between ranges: each range holds its own copy of the nodes
    computing it (the int8 light SqueezeNet on 128 KiB cores: ranges ending inside a
    weight's pieces, or between the pieces of the convolution reading it, were refused
    for the float weight they would output, and the compile-checked greedy took 43, then
    54 executables, where the forward fusion found 11). Ranges end where no constant's node
    precedes the cut, and the cover is the fewest that compile (a DP over every position
    with the compiler itself)."""
    from corefold.passes.serial.chain import constant_derived
    from corefold.passes.serial.cuts import clean_ends

    g = parse(_split_weights_chain(layers))
    feeds = random_inputs(g, 0)
    want = run(g, feeds)
    compile_fn = functools.partial(_compute_nodes, limit)

    def fits_fn(sub):  # optimistic: one compute node more
        try:
            _compute_nodes(limit + 1, sub)
        except CompileError as e:
            return e
        return None

    res = serial_partition(g, compile_fn, SerialSettings(fusion="optimal"), fits_fn=fits_fn)
    order = res.order
    assert [n.name for n in order][:5] == ["dq0_0", "dq0_1", "dq0_2", "c0", "m0"]
    assert all(p.end in set(clean_ends(order)) for p in res.pieces)
    subs = res.subgraphs(g)
    assert not any(constant_derived(v) for sub in subs for v in sub.inputs)
    assert not any(constant_derived(v) for sub in subs for v in sub.outputs)

    n = len(order)

    def compiles(i, j):
        try:
            compile_fn(extract(g, order, Piece(i, j)))
            return True
        except CompileError:
            return False

    best = [0] + [n + 1] * n
    for j in range(1, n + 1):
        best[j] = min((best[i] + 1 for i in range(j) if compiles(i, j)), default=n + 1)
    assert len(res.pieces) == best[n]
    np.testing.assert_array_equal(run_chain(g, res, feeds)[f"h{layers - 1}"], want[f"h{layers - 1}"])


def test_a_weight_read_on_both_sides_of_a_cut_is_computed_on_both():
    """Two readers of one concatenated weight in different ranges: the later range computes
    the weight again from the constants, no value crosses the cut but the activation, and
    the chain computes the model's output."""
    from corefold.passes.serial.cuts import crossing

    g = parse(_split_weights_chain(1).replace("output h0", "node m9 = MatMul(h0, g0) -> (y9: float32[1, 6])\n"
                                                            "output y9"))
    feeds = random_inputs(g, 0)
    want = run(g, feeds)
    order = g.topological_order()
    cut = [n.name for n in order].index("m9")
    first, second = extract(g, order, Piece(0, cut)), extract(g, order, Piece(cut, len(order)))
    assert [v.name for v in first.outputs] == ["h0"] and [v.name for v in second.inputs] == ["h0"]
    assert [n.name for n in second.nodes] == ["dq0_0", "dq0_1", "dq0_2", "c0", "m9"]
    assert crossing(g, order).bytes[cut] == 6 * 4  # h0 alone
    res = type("R", (), {"subgraphs": lambda self, graph: [first, second]})()
    np.testing.assert_array_equal(run_chain(g, res, feeds)["y9"], want["y9"])


def _qdq_residual_chain(layers: int) -> str:
    """``layers`` quantized MatMul + Relu layers (``DQ -> MatMul -> Relu -> Q`` each), the
    first layer's dequantized input also read by a quantized Add at the end (a skip)."""
    rng = np.random.default_rng(5)
    lines = ["graph qdq_chain", "input x: float32[1, 8]",
             "const s: float32[] = fill(0.05)", "const sw: float32[] = fill(0.02)", "const z: int8[] = fill(0)",
             "node q_in = QuantizeLinear(x, s, z) -> (xq: int8[1, 8])",
             "node d_in = DequantizeLinear(xq, s, z) -> (xf: float32[1, 8])"]
    h = "xf"
    for i in range(layers):
        w = ", ".join(str(int(v)) for v in rng.integers(-60, 60, 64))
        lines += [f"const w{i}: int8[8, 8] = [{w}]",
                  f"node dw{i} = DequantizeLinear(w{i}, sw, z) -> (wf{i}: float32[8, 8])",
                  f"node m{i} = MatMul({h}, wf{i}) -> (y{i}: float32[1, 8])",
                  f"node r{i} = Relu(y{i}) -> (a{i}: float32[1, 8])",
                  f"node q{i} = QuantizeLinear(a{i}, s, z) -> (hq{i}: int8[1, 8])",
                  f"node d{i} = DequantizeLinear(hq{i}, s, z) -> (hf{i}: float32[1, 8])"]
        h = f"hf{i}"
    lines += [f"node add = Add(xf, {h}) -> (sf: float32[1, 8])",
              "node q_out = QuantizeLinear(sf, s, z) -> (yq: int8[1, 8])",
              "output yq"]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("fusion", ["optimal", "c"])
@pytest.mark.parametrize("limit", [5, 7, 9])
def test_a_quantized_tensor_crosses_a_cut_as_integers_and_patterns_stay_whole(fusion, limit):
    """A DequantizeLinear travels with its readers, as a weight's does: a range reading a
    dequantized tensor computes it again from the integers, so nothing but int8 crosses a
    cut (the skip's too), and ranges end outside ``DQ -> op -> Q`` patterns, so every
    MatMul and the Add run in integers in their range, and the chain equals the integer
    runner on the whole model exactly. (The int8 ResNet-18 on 128 KiB cores: ranges cut
    between a convolution and its QuantizeLinear ran it in float; none compiled, and the
    per-core fallback took 41 executables that were one step off.)"""
    from corefold.passes.quantize.integer import IntegerRunner, integer_patterns

    g = parse(_qdq_residual_chain(6))
    feeds = {"x": np.random.default_rng(0).uniform(-3, 3, (1, 8)).astype(np.float32)}
    want = IntegerRunner(g).run(feeds)["yq"]
    compile_fn = functools.partial(_compute_nodes, limit)
    res = serial_partition(g, compile_fn, SerialSettings(fusion=fusion))
    subs = res.subgraphs(g)
    assert len(subs) >= 2
    env = dict(feeds)
    for sub in subs:
        crossing = [v for v in [*sub.inputs, *sub.outputs] if v.name not in ("x", "yq")]
        assert crossing and all(v.dtype == np.int8 for v in crossing)
        computed = {src.name for src, _act in integer_patterns(sub).values()}
        assert computed == {n.name for n in sub.nodes if n.op_type in ("MatMul", "Add")}
        env.update(IntegerRunner(sub).run({v.name: env[v.name] for v in sub.inputs}))
    np.testing.assert_array_equal(env["yq"], want)


def test_constant_derived_walks_a_graph_deeper_than_the_python_stack():
    """Whether a value comes from constants alone is decided without recursion: a chain of
    5000 nodes (the int8 EfficientNet-B0 split for 128 KiB cores ended in a RecursionError),
    both for a weight computed through 5000 nodes and for an activation."""
    from corefold.ir import Graph
    from corefold.passes.serial.chain import constant_derived

    g = Graph("deep")
    x = g.add_input("x", (1, 4), "float32")
    w = g.add_constant("w", np.ones((1, 4), np.float32))
    for i in range(5000):
        for name in ("x", "w"):
            v = x if name == "x" else w
            n = g.make_node("Relu", [v], {}, name=f"{name}{i}")
            n.outputs[0].shape, n.outputs[0].dtype = (1, 4), np.dtype("float32")
            x, w = (n.outputs[0], w) if name == "x" else (x, n.outputs[0])
    assert constant_derived(w) and not constant_derived(x)
    memo = {}
    assert not constant_derived(x, memo) and len(memo) == 5000 and not any(memo.values())


def test_a_range_that_must_end_inside_an_integer_pattern_is_reported():
    """When no range ending outside the patterns compiles (here at most 3 nodes per range,
    a pattern of DequantizeLinear, MatMul, Relu and QuantizeLinear needing 4), M1 cuts
    inside them and says so: ``ends_inside_patterns`` names those executables, and the
    report lists them; with room for whole patterns it is empty."""
    g = parse(_qdq_residual_chain(2))
    tight = serial_partition(g, functools.partial(_compute_nodes, 3), SerialSettings(fusion="c"))
    assert tight.ends_inside_patterns() and tight.report()["ends_inside_integer_patterns"] == \
        tight.ends_inside_patterns()
    roomy = serial_partition(parse(_qdq_residual_chain(2)), functools.partial(_compute_nodes, 7),
                             SerialSettings(fusion="c"))
    assert roomy.ends_inside_patterns() == [] and len(roomy.pieces) >= 2
