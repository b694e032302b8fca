import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corefold.errors import CapacityError
from corefold.executor import random_inputs, run
from corefold.ir import parse, to_text, verify
from corefold.passes.order.random_network import random_network
from corefold.passes.split import split_graph, touched_bytes
from corefold.passes.split.split import needs_fit
from corefold.target import load_target

TARGET = load_target("npu")

NET = """\
graph s
input x: float32[2, 8, 16, 16]
const w: float32[16, 8, 3, 3] = fill(0.1)
const b: float32[16] = fill(0.5)
const dw: float32[16, 1, 3, 3] = fill(0.2)
const s: float32[16] = fill(1.5)
const m: float32[16] = fill(0.25)
const vr: float32[16] = fill(1.5)
const fw: float32[1024, 10] = fill(0.01)
const gw: float32[10, 1024] = fill(0.02)
const gc: float32[10] = fill(0.3)
node conv = Conv(x, w, b) attrs {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]} -> (c: float32[2, 16, 16, 16])
node bn = BatchNormalization(c, s, b, m, vr) -> (n: float32[2, 16, 16, 16])
node relu = Relu(n) -> (r: float32[2, 16, 16, 16])
node dconv = Conv(r, dw) attrs {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "group": 16} -> (d: float32[2, 16, 16, 16])
node pool = MaxPool(d) attrs {"kernel_shape": [2, 2], "strides": [2, 2]} -> (p: float32[2, 16, 8, 8])
node tr = Transpose(p) attrs {"perm": [0, 2, 3, 1]} -> (t: float32[2, 8, 8, 16])
node soft = Softmax(t) attrs {"axis": 3} -> (a: float32[2, 8, 8, 16])
node cat = Concat(p, p) attrs {"axis": 1} -> (q: float32[2, 32, 8, 8])
node flat = Flatten(p) attrs {"axis": 1} -> (f: float32[2, 1024])
node mm = MatMul(f, fw) -> (y: float32[2, 10])
node gemm = Gemm(f, gw, gc) attrs {"transB": 1, "alpha": 0.5} -> (z: float32[2, 10])
output a
output q
output y
output z
"""


def _random_weights(g, seed=1):
    rng = np.random.default_rng(seed)
    for v in g.constants.values():
        if v.name == "sc":  # Resize scales stay as written
            continue
        data = rng.standard_normal(v.shape).astype(v.dtype) * 0.3
        if v.name == "vr":  # a variance: positive, or BatchNormalization gives NaN
            data = np.abs(data) + np.float32(0.5)
        v.set_const(data)


@pytest.mark.parametrize("threshold", [60_000, 20_000, 9_000])
def test_split_fits_every_op_and_keeps_outputs(threshold):
    g = parse(NET)
    _random_weights(g)
    feeds = random_inputs(g, 0)
    ref = run(g, feeds)
    res = split_graph(g, TARGET, threshold=threshold)
    verify(g)
    assert res.modified and res.splits
    for n in g.nodes:
        assert not needs_fit(n) or touched_bytes(n) <= threshold, (n.name, touched_bytes(n))
    out = run(g, feeds)
    assert set(out) == set(ref)  # graph outputs keep their names
    for k in ref:
        assert np.isfinite(ref[k]).all()
        np.testing.assert_allclose(out[k], ref[k], rtol=1e-5, atol=1e-5)


def test_batch_and_output_channel_splits_need_no_partial_sums():
    """Cutting batch or output channels computes each output element from the same products
    as the whole operator. The results agree to float32 reassociation only, not bit for bit:
    BLAS blocks the inner dimension differently for a smaller M or N, and which kernel it
    picks depends on the CPU (OpenBLAS's SkylakeX kernels differed by 3e-6 relative on an
    AVX-512 EPYC, Prescott's by 4e-6 here). Hence rtol 1e-5."""
    g = parse(NET)
    _random_weights(g)
    feeds = random_inputs(g, 0)
    ref = run(g, feeds)
    res = split_graph(g, TARGET, threshold=40_000)
    assert not any(n.op_type == "Sum" for n in g.nodes)  # no partial sums at this threshold
    assert res.splits["conv"] >= 2
    out = run(g, feeds)
    for k in ref:
        np.testing.assert_allclose(out[k], ref[k], rtol=1e-5, atol=1e-6)


IMAGE = """\
graph img
input x: float32[1, 3, 64, 64]
const w: float32[16, 3, 3, 3] = fill(0.1)
const b: float32[16] = fill(0.5)
node conv = Conv(x, w, b) attrs {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]} -> (c: float32[1, 16, 64, 64])
node relu = Relu(c) -> (r: float32[1, 16, 64, 64])
node pool = MaxPool(r) attrs {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]} -> (p: float32[1, 16, 32, 32])
output p
"""


def test_an_image_too_big_for_a_core_is_cut_in_row_bands():
    """The 48 KiB image alone is over the 40,000 bytes: every output-channel piece of the
    convolution would read all of it, and its three input channels leave 16 KiB each
    beside their 256 KiB partial outputs, so no cut of the rule fits ("no dimension is
    left to cut", which ended ``corefold compile`` on 128 KiB cores at a 224 x 224
    model's first layer). Bands of output rows, each reading its rows and their halo, fit,
    and so do the Relu's and the pool's, whose rows follow; no partial sums."""
    g = parse(IMAGE)
    _random_weights(g)
    feeds = random_inputs(g, 0)
    ref = run(g, feeds)
    res = split_graph(g, TARGET, threshold=40_000)
    verify(g)
    assert res.splits["conv"] >= 2 and res.splits["pool"] >= 2
    assert all(n.name.startswith("conv_rows") for n in g.nodes if n.op_type == "Conv")
    assert all(n.name.startswith("pool_rows") for n in g.nodes if n.op_type == "MaxPool")
    assert not any(n.op_type == "Sum" for n in g.nodes)
    for n in g.nodes:
        assert not needs_fit(n) or touched_bytes(n) <= 40_000, (n.name, touched_bytes(n))
    out = run(g, feeds)
    np.testing.assert_allclose(out["p"], ref["p"], rtol=1e-5, atol=1e-5)


def test_nothing_to_split_changes_nothing():
    g = parse(NET)
    before = [n.name for n in g.nodes]
    res = split_graph(g, TARGET)
    assert not res.modified and [n.name for n in g.nodes] == before


def test_an_op_that_cannot_fit_names_itself_and_its_bytes(monkeypatch):
    import dataclasses

    from corefold import ops
    from corefold.ops.registry import TABLE

    g = parse(NET)
    with pytest.raises(CapacityError, match=r"node 'conv' \(Conv\), piece 'conv_part[0-9_part]*', touches \d+ "
                                            r"bytes, above the core memory threshold of 100 bytes"):
        split_graph(g, TARGET, threshold=100)
    g = parse(NET)
    monkeypatch.setitem(TABLE, ("", "Softmax"), dataclasses.replace(ops.get("Softmax"), split=ops.NONE))
    with pytest.raises(CapacityError, match="no split rule for Softmax"):
        split_graph(g, TARGET, threshold=9_000)


@given(st.integers(2, 10), st.integers(0, 1000), st.sampled_from([12_000, 30_000]), st.integers(1, 2))
@settings(max_examples=12, deadline=None)
def test_split_random_networks_gives_original_outputs(n, seed, threshold, batch):
    g = random_network(n, seed=seed, channels=16, size=8, batch=batch, ctrl_edges=2)
    feeds = random_inputs(g, seed)
    ref = run(g, feeds)
    split_graph(g, TARGET, threshold=threshold)
    verify(g)
    for node in g.nodes:
        assert not needs_fit(node) or touched_bytes(node) <= threshold
    out = run(g, feeds)
    for k in ref:
        np.testing.assert_allclose(out[k], ref[k], rtol=1e-4, atol=1e-5)


MORE = """\
graph more
input x: float32[2, 8, 8, 8]
input u: float32[3, 4, 64]
const gw: float32[8, 4, 3, 3] = fill(0.1)
const aw: float32[24, 6] = fill(0.1)
const ac: float32[1, 6] = fill(0.2)
const mw: float32[64, 48] = fill(0.3)
const sc: float32[4] = [1.0, 1.0, 2.0, 2.0]
node gconv = Conv(x, gw) attrs {"group": 2, "kernel_shape": [3, 3], "pads": [1, 1, 1, 1]} -> (g: float32[2, 8, 8, 8])
node lrn = LRN(g) attrs {"size": 3} -> (l: float32[2, 8, 8, 8])
node avg = AveragePool(l) attrs {"kernel_shape": [2, 2], "strides": [2, 2]} -> (a: float32[2, 8, 4, 4])
node rs = Resize(a, _, sc) attrs {"mode": "nearest"} -> (r: float32[2, 8, 8, 8])
node gap = GlobalAveragePool(r) -> (p: float32[2, 8, 1, 1])
node flat = Flatten(r) attrs {"axis": 2} -> (f: float32[16, 64])
node tr = Transpose(f) -> (t: float32[64, 16])
node fl2 = Reshape(t, shp) -> (t2: float32[24, 16, 1, 1])
node mm3 = MatMul(u, mw) -> (m: float32[3, 4, 48])
node soft = LogSoftmax(m) attrs {"axis": 1} -> (s: float32[3, 4, 48])
output p
output t
output s
"""


@pytest.mark.parametrize("threshold", [8_000, 3_000])
def test_more_rules_keep_outputs(threshold):
    text = "\n".join(line for line in MORE.splitlines() if "fl2" not in line) + "\n"
    g = parse(text)
    _random_weights(g)
    feeds = random_inputs(g, 0)
    ref = run(g, feeds)
    res = split_graph(g, TARGET, threshold=threshold)
    verify(g)
    assert {"gconv", "lrn", "mm3"} <= set(res.splits)
    for n in g.nodes:
        assert not needs_fit(n) or touched_bytes(n) <= threshold, (n.name, touched_bytes(n))
    out = run(g, feeds)
    for k in ref:
        np.testing.assert_allclose(out[k], ref[k], rtol=1e-5, atol=1e-5)


def test_gemm_with_transposed_a_splits_rows_outputs_and_reduction():
    g = parse("""\
graph gemm
input a: float32[256, 8]
const b: float32[256, 32] = fill(0.1)
const c: float32[1, 32] = fill(0.2)
node gemm = Gemm(a, b, c) attrs {"transA": 1, "alpha": 0.5, "beta": 2.0} -> (y: float32[8, 32])
output y
""")
    _random_weights(g)
    feeds = random_inputs(g, 0)
    ref = run(g, feeds)
    res = split_graph(g, TARGET, threshold=2_500)
    verify(g)
    assert res.splits["gemm"] >= 2 and any(n.op_type == "Sum" for n in g.nodes)
    np.testing.assert_allclose(run(g, feeds)["y"], ref["y"], rtol=1e-5, atol=1e-5)


def test_slices_split_on_the_axes_they_leave_whole():
    """Magika (JAX -> tf2onnx) slices a [1, 1, 2048, 256] tensor over all four axes with
    ends 1e9 (a no-op strided_slice) and its conv output to 1 on the last axis; both
    exceeded a core and Slice had no split rule ("no split rule for Slice", exit 2). Each is
    cut on an axis it leaves whole, never on one it cuts or reverses."""
    g = parse("""\
graph slices
input x: float32[1, 1, 64, 256]
input z: float32[2, 64, 40, 2]
const st: int32[4] = [0, 0, 0, 0]
const en: int32[4] = [1000000000, 1000000000, 1000000000, 1000000000]
const ax: int32[4] = [0, 2, 1, 3]
const sp: int32[4] = [1, 1, 1, 1]
const st2: int64[2] = [0, -1]
const en2: int64[2] = [1, -1000]
const ax2: int64[2] = [3, 2]
const sp2: int64[2] = [1, -1]
node whole = Slice(x, st, en, ax, sp) -> (y: float32[1, 1, 64, 256])
node last = Slice(z, st2, en2, ax2, sp2) -> (w: float32[2, 64, 40, 1])
output y
output w
""")
    feeds = random_inputs(g, 0)
    ref = run(g, feeds)
    res = split_graph(g, TARGET, threshold=40_000)
    verify(g)
    assert res.splits["whole"] >= 2 and res.splits["last"] >= 2
    for n in g.nodes:
        assert not needs_fit(n) or touched_bytes(n) <= 40_000, (n.name, touched_bytes(n))
    pieces = [n for n in g.nodes if n.name.startswith("last_part")]
    assert all(n.inputs[0].shape[2] == 40 and n.inputs[0].shape[3] == 2 for n in pieces)  # the reversed axis whole
    out = run(g, feeds)
    for k in ref:
        np.testing.assert_array_equal(out[k], ref[k])


def test_attention_matmuls_split_over_heads_and_broadcast_batches():
    """ViT-B/16's attention MatMuls multiply two batched operands ([1, 12, 197, 197] x
    [1, 12, 197, 64], 3.07 MB) and had no axis to cut ("no dimension is left to cut"):
    MatMul split only with a 2-D weight B. A batch axis now cuts every operand that has it
    and reads whole one that broadcasts over it (``kb`` over the batch and heads)."""
    g = parse("""\
graph attention
input q: float32[2, 4, 16, 8]
input k: float32[2, 4, 8, 16]
input kb: float32[1, 8, 16]
node scores = MatMul(q, k) -> (s: float32[2, 4, 16, 16])
node probs = Softmax(s) attrs {"axis": -1} -> (p: float32[2, 4, 16, 16])
node mix = MatMul(p, q) -> (y: float32[2, 4, 16, 8])
node shared = MatMul(q, kb) -> (z: float32[2, 4, 16, 16])
output y
output z
""")
    feeds = random_inputs(g, 0)
    ref = run(g, feeds)
    for threshold in (2_500, 300):
        h = parse(to_text(g))
        res = split_graph(h, TARGET, threshold=threshold)
        verify(h)
        assert {"scores", "mix", "shared"} <= set(res.splits)
        for n in h.nodes:
            assert not needs_fit(n) or touched_bytes(n) <= threshold, (n.name, touched_bytes(n))
        out = run(h, feeds)
        if threshold == 2_500:  # batch and head cuts only: each piece computes the same products
            assert not any(n.op_type == "Sum" for n in h.nodes)
            shared = [n for n in h.nodes if n.name.startswith("shared_part")]
            assert len(shared) >= 8 and all(n.inputs[1].name == "kb" for n in shared)
            assert all(n.inputs[0].shape[:2] == (1, 1) for n in h.nodes if n.name.startswith("mix_part"))
        for key in ref:
            np.testing.assert_allclose(out[key], ref[key], rtol=1e-5, atol=1e-6)


def test_a_split_graph_is_freed_with_its_constant_slices():
    """The constant slices are kept with the graph (``graph.caches``): once nobody holds the
    graph it is collected, slices and all. Kept in a weak dictionary keyed by the graph, each
    slice's uses led back to the graph, which then lived as long as the process."""
    import gc
    import weakref

    graph = parse(NET)
    split_graph(graph, TARGET, threshold=4096)
    assert graph.caches["constant_slices"]  # the convolution's and the matmuls' weights were cut
    gone = weakref.ref(graph)
    del graph
    gc.collect()
    assert gone() is None
