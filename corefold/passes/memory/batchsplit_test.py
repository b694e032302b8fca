"""Batch splitting: the cut graph computes the same values (executor on ONNX graphs), its
floor drops, and budget mode plans budgets below the unsplit floor."""

import numpy as np
import pytest

from corefold.executor import run
from corefold.ir import parse, verify
from corefold.passes.memory import BudgetError, MemorySettings, measure, plan_memory
from corefold.passes.memory.batchsplit import (
    SplitRefused,
    find_region,
    split_for_budget,
    split_region,
)
from corefold.passes.memory.memory_pass import clone_graph
from corefold.passes.memory.memsim import floor_bytes
from corefold.passes.memory.program import build_program
from corefold.target import load_target

N, D, V = 96, 8, 512
EPS = float(np.finfo(np.float32).eps) / 2  # unit roundoff


def _head(n: int = N, d: int = D, v: int = V, fc: bool = True):
    """A wide classifier head's training step in ONNX operators (a masked-LM head in small):
    logits, log-softmax, loss; gradient of the input, the weight and the bias. Without
    ``fc``, ``z = h w`` is an input (computed once, outside the graph)."""
    f, lv = f"float32[{n}, {v}]", f"float32[{n}, {d}]"
    zline = "node fc = MatMul(h, w) -> (z: {f})" if fc else "input z: {f}"
    txt = f"""graph head
input h: {lv}
input y: {f}
const w: float32[{d}, {v}] = fill(0.0)
const b: float32[{v}] = fill(0.0)
const inv: float32[] = [{1.0 / n}]
const axz: int64[1] = [0]
{zline.format(f=f)}
node addb = Add(z, b) -> (logits: {f})
node ls = LogSoftmax(logits) attrs {{"axis": 1}} -> (L: {f})
node ly = Mul(L, y) -> (LY: {f})
node tot = ReduceSum(LY) attrs {{"keepdims": 0}} -> (s: float32[])
node neg = Neg(s) -> (nl: float32[])
node lossm = Mul(nl, inv) -> (loss: float32[])
node ex = Exp(L) -> (P: {f})
node gsub = Sub(P, y) -> (G: {f})
node gsc = Mul(G, inv) -> (G2: {f})
node wt = Transpose(w) attrs {{"perm": [1, 0]}} -> (wT: float32[{v}, {d}])
node gh = MatMul(G2, wT) -> (grad_h: {lv})
node ht = Transpose(h) attrs {{"perm": [1, 0]}} -> (hT: float32[{d}, {n}])
node gw = MatMul(hT, G2) -> (grad_w: float32[{d}, {v}])
node gb = ReduceSum(G2, axz) attrs {{"keepdims": 0}} -> (grad_b: float32[{v}])
output loss
output grad_h
output grad_w
output grad_b
"""
    g = parse(txt)
    rng = np.random.default_rng(0)
    g.constants["w"].set_const(rng.standard_normal((d, v)).astype(np.float32))
    g.constants["b"].set_const(rng.standard_normal(v).astype(np.float32))
    feeds = {"h": rng.standard_normal((n, d)).astype(np.float32),
             "y": np.eye(v, dtype=np.float32)[rng.integers(0, v, n)]}
    if not fc:
        feeds["z"] = feeds["h"] @ g.constants["w"].const
    return g, feeds


def _cut(g, k):
    g2 = clone_graph(g)
    p = build_program(g2)
    _, step = floor_bytes(p)
    region = find_region(p, p.compute[step])
    records = split_region(g2, p, region, k)
    verify(g2)
    return g2, region, records


@pytest.mark.parametrize("k", [2, 5, 96])
def test_pieces_compute_the_same_values(k):
    g, feeds = _head(fc=False)
    g2, region, records = _cut(g, k)
    assert {r["op"] for r in records} == {"addb", "ls", "ly", "tot", "ex", "gsub", "gsc", "gh", "gw", "gb"}
    assert all(r["pieces"] == k for r in records)
    assert len(region.groups) == 1 and region.units == N
    pieces = {n.name: n for n in g2.nodes if isinstance(n.meta.get("batch_split"), dict)}
    assert len(pieces) == k * len(records)
    # every piece of a row-wise or element-wise operator holds exactly the rows of the whole
    inner = ["logits", "L", "LY", "P", "G", "G2"]
    names = [v.name for n in pieces.values() for v in n.outputs]
    want = run(g, feeds, outputs=inner + ["grad_h"])
    got = run(g2, feeds, outputs=names)
    rows = {}
    for n in pieces.values():
        of, j = n.meta["batch_split"]["of"], n.meta["batch_split"]["piece"]
        rows.setdefault(of, {})[j] = got[n.outputs[0].name]
    bounds = [j * N // k for j in range(k + 1)]
    for op, name in [("addb", "logits"), ("ls", "L"), ("ly", "LY"), ("ex", "P"), ("gsub", "G"), ("gsc", "G2")]:
        for j in range(k):
            assert np.array_equal(rows[op][j], want[name][bounds[j]:bounds[j + 1]]), (op, j)
    # matrix products: each row is an inner product over the same terms; BLAS may order
    # the additions differently for another row count: |diff| <= 2 gamma_K |A| |B|
    w = g.constants["w"].const
    full = run(g, feeds)
    out = run(g2, feeds)
    g2v = want["G2"]
    assert np.all(np.abs(out["grad_h"] - full["grad_h"]) <= 2 * _gam(V) * (np.abs(g2v) @ np.abs(w.T)))
    # summed over the pieces (weight and bias gradients, the loss): reassociated sums of N terms
    assert np.all(np.abs(out["grad_w"] - full["grad_w"]) <= 2 * _gam(N) * (np.abs(feeds["h"].T) @ np.abs(g2v)))
    assert np.all(np.abs(out["grad_b"] - full["grad_b"]) <= 2 * _gam(N) * np.abs(g2v).sum(0))
    assert abs(out["loss"] - full["loss"]) <= 2 * _gam(N * V) * np.abs(want["LY"]).sum() / N + 1e-12


def _gam(m: int) -> float:
    return m * EPS / (1 - m * EPS)


def test_row_pieces_of_a_matrix_product_are_within_its_rounding_bound():
    g, feeds = _head()
    g2, region, records = _cut(g, 4)
    assert "fc" in {r["op"] for r in records}
    names = {n.meta["batch_split"]["piece"]: n.outputs[0].name for n in g2.nodes
             if isinstance(n.meta.get("batch_split"), dict) and n.meta["batch_split"]["of"] == "fc"}
    got = run(g2, feeds, outputs=list(names.values()))
    z = run(g, feeds, outputs=["z"])["z"]
    ab = np.abs(feeds["h"]) @ np.abs(g.constants["w"].const)
    for j, name in names.items():
        lo, hi = j * N // 4, (j + 1) * N // 4
        assert np.all(np.abs(got[name] - z[lo:hi]) <= 2 * _gam(D) * ab[lo:hi])


def test_floor_drops_and_pieces_run_one_after_another():
    g, _ = _head()
    before, _ = floor_bytes(build_program(g))
    g2, _, _ = _cut(g, 8)
    p = build_program(g2)
    after, _ = floor_bytes(p)
    assert after < before
    # piece j's operators all come before piece j + 1's (one piece's intermediates die first)
    seq = [n.meta["batch_split"]["piece"] for n in p.compute if isinstance(n.meta.get("batch_split"), dict)]
    assert seq == sorted(seq)
    # no value of the region's size is alive whole in the cut graph
    big = N * V * 4
    assert all(s.nbytes < big for s in p.storages.values() if not s.resident)


def test_budget_below_the_unsplit_floor_is_planned_by_cutting():
    g, feeds = _head()
    t = load_target("gpu-nvlink")
    floor, _ = floor_bytes(build_program(g))
    budget = int(floor * 0.8)
    with pytest.raises(BudgetError):
        plan_memory(clone_graph(g), t, MemorySettings(budget_bytes=budget, split="off"))
    res = plan_memory(clone_graph(g), t, MemorySettings(budget_bytes=budget))
    assert res.report["split"]["floor_unsplit"] == floor
    assert res.report["floor"] < budget and res.report["peak_after"] <= budget
    assert measure(res.graph, t).step_peak <= budget
    assert {o["op"] for o in res.report["split"]["ops"]} >= {"ls", "gsub"}
    out, full = run(res.graph, feeds), run(g, feeds)
    assert np.allclose(out["grad_w"], full["grad_w"], rtol=1e-5, atol=1e-6)


def test_refusals_are_reported():
    g = parse("""graph r
input x: float32[64, 64]
node a = Relu(x) -> (y: float32[64, 64])
node t = corefold.aten::cholesky(y) -> (yt: float32[64, 64])
node s = ReduceSum(yt) attrs {"keepdims": 0} -> (o: float32[])
output o
""")
    p = build_program(g)
    with pytest.raises(SplitRefused, match="'t'"):
        find_region(p, p.compute[0])
    records, refused = split_for_budget(clone_graph(g), 1)
    assert records == [] and refused
