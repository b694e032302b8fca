"""The tile step: the clean-up before fusion (nodes that compute their input unchanged), and
the row bands that make an image too large for one core fit."""

from __future__ import annotations

import numpy as np
import pytest

from corefold.backend import check_executable, lower, run_executable
from corefold.backend.executable import Compute
from corefold.backend.qdq import drop_identities
from corefold.backend.tile import copy_graph, tile
from corefold.errors import CompileError
from corefold.executor import random_inputs, run
from corefold.ir import Graph
from corefold.passes.quantize.integer import IntegerRunner
from corefold.passes.split.split import touched_bytes
from corefold.target import load_target


def _qdq_dropout(training=None, mask_out: bool = False, same_scale: bool = True, bits: str = "int8") -> Graph:
    """x -> Q -> DQ -> Conv(3 x 3, 8 ch) -> Q -> DQ -> Dropout -> Q -> DQ -> Conv -> Q -> DQ,
    as corefold's quantizer writes a Dropout (its output takes its input's scale)."""
    rng = np.random.default_rng(0)
    g = Graph("qdq_dropout")
    x = g.add_input("x", (1, 4, 12, 12), "float32")

    def node(op, ins, shape, dtype, attrs=None, name=None, num_outputs=1):
        n = g.make_node(op, ins, attrs or {}, name=name, num_outputs=num_outputs)
        for o in n.outputs:
            o.shape, o.dtype = shape, np.dtype(dtype)
        return n.outputs

    def qdq(v, s, name, shape):
        sc = g.add_constant(f"{name}_s", np.float32(s))
        zp = g.add_constant(f"{name}_z", np.zeros((), bits))
        q = node("QuantizeLinear", [v, sc, zp], shape, bits, name=f"{name}_q")[0]
        return node("DequantizeLinear", [q, sc, zp], shape, "float32", name=f"{name}_dq")[0]

    def conv(v, cin, name):
        wq = g.add_constant(f"{name}_wq", rng.integers(-127, 128, (8, cin, 3, 3)).astype(np.int8))
        ws = g.add_constant(f"{name}_ws", np.float32(0.004))
        wz = g.add_constant(f"{name}_wz", np.int8(0))
        w = node("DequantizeLinear", [wq, ws, wz], (8, cin, 3, 3), "float32", name=f"{name}_wdq")[0]
        return node("Conv", [v, w], (1, 8, 12, 12), "float32", {"pads": [1, 1, 1, 1]}, name=name)[0]

    shape = (1, 8, 12, 12)
    h = qdq(conv(qdq(x, 0.03, "in", (1, 4, 12, 12)), 4, "conv0"), 0.05, "c0", shape)
    ins = [h, g.add_constant("ratio", np.float32(0.5))]
    if training is not None:
        ins.append(g.add_constant("training", np.bool_(training)))
    outs = node("Dropout", ins, shape, "float32", name="drop", num_outputs=2)
    outs[1].dtype = np.dtype(bool)
    h = qdq(outs[0], 0.05 if same_scale else 0.06, "d", shape)
    g.outputs = [qdq(conv(h, 8, "conv1"), 0.1, "out", shape)]
    if mask_out:
        g.outputs.append(outs[1])
    return g


def test_an_inference_dropout_and_the_requantize_it_leaves_are_removed_and_the_integers_unchanged():
    """In a QDQ model, ``DQ -> Dropout -> Q`` of one scale is the identity on the integers:
    the Dropout goes, then the ``Q(DQ(q))`` it leaves, and the second convolution reads
    the first one's integers. The copy computes what the graph does (executor and
    integer runner, exactly), and lowered on the 8 x 8 preset no dequantize or quantize
    is left on any core, with the simulation equal to the integer runner."""
    g = _qdq_dropout()
    feeds = random_inputs(g, 0)
    cleaned = copy_graph(g)
    assert drop_identities(cleaned) == 2
    assert [n.op_type for n in cleaned.nodes].count("QuantizeLinear") == 3
    assert "Dropout" not in [n.op_type for n in cleaned.nodes]
    for a, b in ((run(g, feeds), run(cleaned, feeds)), (IntegerRunner(g).run(feeds), IntegerRunner(cleaned).run(feeds))):
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])
    target = load_target("npu")
    exe = lower(g, target)
    check_executable(exe, target)
    names = [exe.ops[ins.op].name for p in exe.programs for ins in p.instructions if isinstance(ins, Compute)]
    assert not [n for n in names if n.startswith(("d_q", "d_dq", "c0_dq", "drop"))], names
    want = IntegerRunner(g).run(feeds)
    got = run_executable(exe, feeds)
    for k in want:
        np.testing.assert_array_equal(want[k], got[k])


@pytest.mark.parametrize("case", ["training", "mask read", "other scale", "int32"])
def test_what_changes_the_data_stays(case):
    """A Dropout in training mode, or whose mask is a graph output, stays; a Q after a DQ
    with another scale, or of 32-bit integers (``(q - z) * s / s`` need not round back),
    stays. The executor computes the same on the copy in every case."""
    g = {"training": lambda: _qdq_dropout(training=True), "mask read": lambda: _qdq_dropout(mask_out=True),
         "other scale": lambda: _qdq_dropout(same_scale=False), "int32": lambda: _qdq_dropout(bits="int32")}[case]()
    cleaned = copy_graph(g)
    dropped = drop_identities(cleaned)
    ops = [n.op_type for n in cleaned.nodes]
    if case in ("training", "mask read"):
        assert dropped == 0 and "Dropout" in ops
    else:
        assert dropped == 1 and "Dropout" not in ops and ops.count("QuantizeLinear") == 4
    feeds = random_inputs(g, 0)
    a, b = run(g, feeds), run(cleaned, feeds)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


def test_an_identity_goes_unless_it_makes_a_graph_output():
    g = Graph("ids")
    x = g.add_input("x", (2, 3), "float32")
    a = g.make_node("Identity", [x], {}, name="id0").outputs[0]
    a.shape, a.dtype = (2, 3), np.dtype("float32")
    b = g.make_node("Relu", [a], {}, name="relu").outputs[0]
    b.shape, b.dtype = (2, 3), np.dtype("float32")
    c = g.make_node("Identity", [b], {}, name="id1").outputs[0]
    c.shape, c.dtype = (2, 3), np.dtype("float32")
    g.outputs = [c]
    cleaned = copy_graph(g)
    assert drop_identities(cleaned) == 1
    assert [n.name for n in cleaned.nodes] == ["relu", "id1"]
    feeds = random_inputs(g, 0)
    np.testing.assert_array_equal(run(g, feeds)[c.name], run(cleaned, feeds)[c.name])


def _conv_then_pool(x_shape=(1, 3, 64, 64), out_channels: int = 16, seed: int = 0) -> Graph:
    """Conv 3 x 3 (padded) -> MaxPool 2 x 2 stride 2, float, seeded weights."""
    rng = np.random.default_rng(seed)
    g = Graph("conv_pool")
    x = g.add_input("x", x_shape, "float32")
    w = g.add_constant("w", rng.standard_normal((out_channels, x_shape[1], 3, 3)).astype(np.float32))
    conv = g.make_node("Conv", [x, w], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, name="conv")
    conv.outputs[0].shape, conv.outputs[0].dtype = (1, out_channels) + x_shape[2:], np.dtype("float32")
    pool = g.make_node("MaxPool", [conv.outputs[0]], {"kernel_shape": [2, 2], "strides": [2, 2]}, name="pool")
    pool.outputs[0].shape = (1, out_channels, x_shape[2] // 2, x_shape[3] // 2)
    pool.outputs[0].dtype = np.dtype("float32")
    g.outputs = [pool.outputs[0]]
    return g


def test_a_conv_over_an_image_too_big_for_a_core_is_cut_in_row_bands_and_its_pool_follows():
    """48 KiB of image on cores of 40 KiB: cut on output channels every piece still reads
    the whole image, and the input channels (3) leave 16 KiB each plus their partial
    outputs, so the split pass found no cut ("no dimension is left to cut"). Bands of
    output rows, each reading its rows and their halo, fit; the max pool follows the bands
    (cut on channels, each piece would read every band). Row bands compute what the
    operator does (within 1e-5 of the largest output: BLAS blocks a smaller product
    differently, by CPU; see the split pass's tests)."""
    g = _conv_then_pool()
    target = load_target("npu")
    limit = 40 * 1024
    cut = tile(g, target, threshold=limit)
    convs = [n for n in cut.nodes if n.op_type == "Conv"]
    pools = [n for n in cut.nodes if n.op_type == "MaxPool"]
    assert len(convs) >= 2 and all(n.name.startswith("conv_rows") for n in convs)
    assert len(pools) >= 2 and all(n.name.startswith("pool_rows") for n in pools)
    assert all(touched_bytes(n) <= limit for n in convs + pools)
    feeds = random_inputs(g, 1)
    want, got = run(g, feeds), run(cut, feeds)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=0, atol=1e-5 * np.abs(want[k]).max())


def _qdq_tall_conv() -> Graph:
    """x [1, 1, 32, 512] -> Q -> DQ -> Conv with 64 kernels as tall as the image (one output
    row) -> Q -> DQ: one input channel, so not even its reduction can be cut."""
    rng = np.random.default_rng(0)
    g = Graph("tall")
    x = g.add_input("x", (1, 1, 32, 512), "float32")

    def node(op, ins, shape, dtype, attrs=None, name=None):
        n = g.make_node(op, ins, attrs or {}, name=name)
        n.outputs[0].shape, n.outputs[0].dtype = shape, np.dtype(dtype)
        return n.outputs[0]

    def qdq(v, s, name):
        sc, zp = g.add_constant(f"{name}_s", np.float32(s)), g.add_constant(f"{name}_z", np.int8(0))
        q = node("QuantizeLinear", [v, sc, zp], v.shape, "int8", name=f"{name}_q")
        return node("DequantizeLinear", [q, sc, zp], v.shape, "float32", name=f"{name}_dq")

    wq = g.add_constant("wq", rng.integers(-127, 128, (64, 1, 32, 1)).astype(np.int8))
    w = node("DequantizeLinear", [wq, g.add_constant("ws", np.float32(0.01)), g.add_constant("wz", np.int8(0))],
             (64, 1, 32, 1), "float32", name="wdq")
    y = node("Conv", [qdq(x, 0.03, "in"), w], (1, 64, 1, 512), "float32", {"kernel_shape": [32, 1]}, name="conv")
    g.outputs = [qdq(y, 0.5, "out")]
    return g


def test_an_integer_conv_that_no_cut_fits_is_out_of_sram():
    """Each output channel of the tall convolution reads the whole 16 KiB image, over the
    10 KiB a core takes; it has one output row, so no band helps, and one input channel, so
    its reduction cannot be cut either. That is an SRAM CompileError in one line (M1 splits
    on it), not an unsupported operator."""
    with pytest.raises(CompileError) as info:
        tile(_qdq_tall_conv(), load_target("npu"), threshold=10 * 1024)
    assert info.value.resource == "SRAM"
    assert "\n" not in str(info.value)


def _split_weight(concat_axis: int = 1, cout: int = 8, cin: int = 6, readers: int = 2) -> Graph:
    """A per-channel int8 weight (``cout`` output channels, scales on axis 0) dequantized in
    two pieces, concatenated, and sliced in two for two convolution pieces (the first
    ``readers`` of them in the graph), as the split pass leaves a QDQ convolution cut
    before M1 (the int8 light SqueezeNet on 128 KiB cores)."""
    rng = np.random.default_rng(3)
    g = Graph("split_weight")
    x = g.add_input("x", (1, cin, 7, 7), "float32")

    def node(op, ins, shape, attrs=None, name=None):
        n = g.make_node(op, ins, attrs or {}, name=name)
        n.outputs[0].shape, n.outputs[0].dtype = shape, np.dtype("float32")
        return n.outputs[0]

    w = rng.integers(-127, 128, (cout, cin, 3, 3)).astype(np.int8)
    scale = g.add_constant("w_s", rng.uniform(0.01, 0.1, cout).astype(np.float32))
    zp = g.add_constant("w_z", np.zeros(cout, np.int8))
    halves = np.split(w, 2, axis=concat_axis)
    parts = [node("DequantizeLinear", [g.add_constant(f"w_q{i}", h), scale, zp], h.shape, {"axis": 0}, f"dq{i}")
             for i, h in enumerate(halves)]
    whole = node("Concat", parts, w.shape, {"axis": concat_axis}, "cat")
    outs = []
    half = cout // 2
    for i in range(readers):
        bounds = [g.add_constant(f"b{i}_{k}", np.array(v, np.int64)) for k, v in
                  enumerate(([half * i], [half * i + half], [0]))]
        piece = node("Slice", [whole, *bounds], (half, cin, 3, 3), name=f"slice{i}")
        outs.append(node("Conv", [x, piece], (1, half, 5, 5), {"kernel_shape": [3, 3]}, f"conv{i}"))
    g.outputs.append(node("Concat", outs, (1, half * readers, 5, 5), {"axis": 1}, "out"))
    return g


def test_a_weight_dequantized_in_pieces_is_dequantized_after_its_concat_and_slices():
    """Concat and Slice of dequantized constants become the DequantizeLinear of the moved
    integers, each with its own output channels' scales; the floats are bit for bit the same.
    Lowered, a convolution piece then holds its own channels, not the whole weight: one
    reading half of a 110.6 KB float weight fits 96 KiB cores (it needed the whole weight
    before: the int8 light SqueezeNet's 32-channel piece of a 3 x 3 convolution, alone in an
    M1 range, needed 377.6 KiB of a 128 KiB core)."""
    from corefold.backend.qdq import dequantize_after_moves
    from corefold.backend.testing import small_target

    g = _split_weight()
    feeds = random_inputs(g, 0)
    want = run(g, feeds)["out_out"]
    c = copy_graph(g)
    assert dequantize_after_moves(c) == 3  # the Concat, then each Slice of its DequantizeLinear
    assert sorted(n.op_type for n in c.nodes) == ["Concat", "Conv", "Conv", "DequantizeLinear", "DequantizeLinear"]
    for conv in (n for n in c.nodes if n.op_type == "Conv"):
        dq = conv.inputs[1].producer
        q, s = dq.inputs[0].const, dq.inputs[1].const
        i = int(conv.name[-1])
        assert q.shape == (4, 6, 3, 3) and dq.attrs == {"axis": 0}
        np.testing.assert_array_equal(s, g.constants["w_s"].const[4 * i:4 * i + 4])
    np.testing.assert_array_equal(run(c, feeds)["out_out"], want)

    g = _split_weight(cout=64, cin=48, readers=1)
    feeds = random_inputs(g, 0)
    want = run(g, feeds)["out_out"]
    exe = lower(g, small_target(sram_kib=96, reserved_kib=4))
    assert max(b.nbytes for b in exe.buffers if b.kind == "weight") <= 32 * 48 * 9 * 4
    out = run_executable(exe, feeds)
    np.testing.assert_allclose(out["out_out"], want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


def test_a_concat_along_the_quantization_axis_stays():
    """Pieces concatenated along their per-channel axis carry different channels' scales in
    one tensor: the Concat stays (the Slices of it then have no DequantizeLinear to move)."""
    from corefold.backend.qdq import dequantize_after_moves

    g = _split_weight(concat_axis=0)
    assert dequantize_after_moves(g) == 0
    assert sum(n.op_type == "Concat" for n in g.nodes) == 2


def _quantized_linear(kind: str) -> Graph:
    """A float Conv (+ bias, Relu), MatMul or Gemm (+ bias, Sigmoid) whose every output
    element reads 32 KiB of int8 input, quantized by corefold (min/max over 4 seeded
    batches): on cores of 22 KiB only a cut over its reduced dimension fits."""
    import tempfile
    from pathlib import Path

    from corefold.passes.quantize import QuantizeSettings, load_calibration, quantize_graph

    rng = np.random.default_rng(0)
    g = Graph(kind)

    def node(op, ins, shape, attrs=None, name=None):
        n = g.make_node(op, ins, attrs or {}, name=name)
        n.outputs[0].shape, n.outputs[0].dtype = shape, np.dtype("float32")
        return n.outputs[0]

    if kind == "conv":
        x = g.add_input("x", (1, 512, 8, 8), "float32")
        w = g.add_constant("w", (0.05 * rng.standard_normal((16, 512, 8, 8))).astype(np.float32))
        b = g.add_constant("b", rng.standard_normal(16).astype(np.float32))
        y = node("Relu", [node("Conv", [x, w, b], (1, 16, 1, 1), {"kernel_shape": [8, 8]}, "conv")], (1, 16, 1, 1))
    elif kind == "matmul":
        x = g.add_input("x", (4, 8192), "float32")
        w = g.add_constant("w", (0.05 * rng.standard_normal((8192, 16))).astype(np.float32))
        y = node("MatMul", [x, w], (4, 16), name="mm")
    else:
        x = g.add_input("x", (2, 16384), "float32")
        w = g.add_constant("w", (0.05 * rng.standard_normal((16, 16384))).astype(np.float32))
        b = g.add_constant("b", rng.standard_normal(16).astype(np.float32))
        y = node("Sigmoid", [node("Gemm", [x, w, b], (2, 16), {"transB": 1}, "gemm")], (2, 16))
    g.outputs = [y]
    with tempfile.TemporaryDirectory() as d:
        calib = Path(d) / "calib.npz"
        np.savez(calib, x=rng.standard_normal((4,) + tuple(x.shape[1:])).astype(np.float32))
        quantize_graph(g, load_calibration(calib, g), QuantizeSettings(calibration="minmax", max_batches=4),
                       progress=False)
    return g


@pytest.mark.parametrize("kind", ["conv", "matmul", "gemm"])
def test_an_integer_operator_cut_over_its_reduction_sums_exact_partial_accumulators(kind, tmp_path):
    """Each piece computes its int32 partial accumulator (unit scales, the bias in the first
    piece), and one fused Sum at ``sx * sw`` requantizes them with the activation: the
    executable equals the integer runner bit for bit, saved and loaded again too. Before,
    such a pattern was left in float QDQ form (or, fused, refused as out of SRAM): its
    pieces ran in float, within a step of the integers but not equal to them."""
    from corefold.backend import load, save
    from corefold.backend.testing import small_target

    g = _quantized_linear(kind)
    target = small_target(8, 8, sram_kib=24, reserved_kib=2, dram_attach="[[0, 3], [7, 4]]")
    op_type = {"conv": "Conv", "matmul": "MatMul", "gemm": "Gemm"}[kind]
    cut = tile(g, target)
    pieces = [n for n in cut.nodes if n.op_type == op_type]
    sums = [n for n in cut.nodes if n.op_type == "Sum"]
    assert len(pieces) >= 2 and sums
    assert all(n.domain == "corefold.int" and n.outputs[0].dtype == np.int32 for n in pieces)
    assert all(n.domain == "corefold.int" and n.outputs[0].dtype != np.int32 for n in sums)
    with_bias = [n for n in pieces if len(n.inputs) > 2 and n.inputs[2] is not None]
    channels = g.outputs[0].shape[1 if kind == "conv" else -1]
    # the bias is added once per output channel, in one piece of its reduction
    assert sum(n.outputs[0].shape[1 if kind == "conv" else -1] for n in with_bias) == (kind != "matmul") * channels
    exe = lower(g, target)
    assert all(o.quant is not None for o in exe.ops if o.op_type in (op_type, "Sum"))
    feeds = random_inputs(g, 0)
    want = IntegerRunner(g).run(feeds)
    save(exe, tmp_path / "m.cfx")
    for got in (run_executable(exe, feeds), run_executable(load(tmp_path / "m.cfx"), feeds)):
        for k, v in want.items():
            np.testing.assert_array_equal(got[k], v)


def test_a_dequantized_weight_is_folded_in_a_graph_without_quantizelinear():
    """A float MatMul reading a dequantized weight larger than a core, in a graph with no
    QuantizeLinear (an M1 range holding the int8 BERT's intermediate MatMul alone): the
    weight becomes a float constant the split pass cuts, so the range lowers, as a longer
    one holding a QuantizeLinear did (the weight stayed one 1 MiB activation, and M1's
    reference cover raised "operator ... does not fit on its own")."""
    from corefold.backend.testing import small_target

    rng = np.random.default_rng(2)
    g = Graph("dq_matmul")
    x = g.add_input("x", (1, 16, 64), "float32")
    wq = g.add_constant("w_q", rng.integers(-127, 128, (64, 512)).astype(np.int8))
    s = g.add_constant("w_s", (0.01 + 0.01 * rng.random(512)).astype(np.float32))
    z = g.add_constant("w_z", np.zeros(512, np.int8))
    dq = g.make_node("DequantizeLinear", [wq, s, z], {"axis": 1}, name="dq_w")
    dq.outputs[0].shape, dq.outputs[0].dtype = (64, 512), np.dtype("float32")
    mm = g.make_node("MatMul", [x, dq.outputs[0]], {}, name="mm")
    mm.outputs[0].shape, mm.outputs[0].dtype = (1, 16, 512), np.dtype("float32")
    g.outputs = [mm.outputs[0]]
    target = small_target(sram_kib=96, reserved_kib=4)  # the float weight alone is 128 KiB
    cut = tile(g, target)
    assert not any(n.op_type == "DequantizeLinear" for n in cut.nodes)
    assert sum(n.op_type == "MatMul" for n in cut.nodes) >= 2
    feeds = random_inputs(g, 0)
    name = g.outputs[0].name
    want, got = run(g, feeds)[name], run_executable(lower(g, target), feeds)[name]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


def test_a_fused_operator_that_would_need_too_many_pieces_is_out_of_sram_at_once():
    """A 96-channel int8 3 x 3 convolution on an 8 x 8 image at 3.5 KiB per piece (a
    threshold ``lower`` retries with): no output-channel piece fits beside the 6 KiB input,
    so it is cut over its input channels, and its int32 partials and their Sum, each larger
    than the threshold, were cut again and again: 250,000 nodes and 45 s of M1's fit checks
    for one 3-layer chain. The cut now stops at ``MAX_PIECES`` nodes with an SRAM error
    naming the operator; at the core's own threshold the same convolution still tiles."""
    import tempfile
    from pathlib import Path

    from corefold.backend.lower_test import _conv_chain
    from corefold.backend.testing import small_target
    from corefold.passes.quantize import QuantizeSettings, load_calibration, quantize_graph
    from corefold.passes.split.split import MAX_PIECES

    g = _conv_chain(96, 8, 2, in_ch=96)
    with tempfile.TemporaryDirectory() as d:
        calib = Path(d) / "calib.npz"
        np.savez(calib, x=np.random.default_rng(0).standard_normal((4, 96, 8, 8)).astype(np.float32))
        quantize_graph(g, load_calibration(calib, g), QuantizeSettings(calibration="minmax", max_batches=4),
                       progress=False)
    target = small_target(sram_kib=16, reserved_kib=2)
    fine = tile(g, target)
    assert all(touched_bytes(n) <= target.core_memory_threshold for n in fine.nodes if n.domain == "corefold.int")
    with pytest.raises(CompileError) as exc:
        tile(g, target, threshold=3584)
    assert exc.value.resource == "SRAM" and f"more than {MAX_PIECES} pieces" in str(exc.value)
    assert "conv" in str(exc.value)


def _fire(scales: tuple[float, float, float] | None = None) -> Graph:
    """A SqueezeNet fire module, ``x -> Conv 1 x 1 -> Relu -> (Conv 1 x 1, Conv 3 x 3) -> Relu
    -> Concat -> Conv 1 x 1``, quantized by corefold (min/max over 4 seeded batches), or, with
    ``scales``, in hand-written QDQ whose Concat inputs (the first two scales) and output
    (the third) are quantized apart."""
    import tempfile
    from pathlib import Path

    from corefold.passes.quantize import QuantizeSettings, load_calibration, quantize_graph

    rng = np.random.default_rng(1)
    g = Graph("fire")

    def node(op, ins, shape, attrs=None, name=None, dtype="float32"):
        n = g.make_node(op, ins, attrs or {}, name=name)
        n.outputs[0].shape, n.outputs[0].dtype = shape, np.dtype(dtype)
        return n.outputs[0]

    def qdq(v, s, name):
        if scales is None:
            return v
        sc, zp = g.add_constant(f"{name}_s", np.float32(s)), g.add_constant(f"{name}_z", np.uint8(0))
        q = node("QuantizeLinear", [v, sc, zp], v.shape, name=f"{name}_q", dtype="uint8")
        return node("DequantizeLinear", [q, sc, zp], v.shape, name=f"{name}_dq")

    def conv(v, cout, k, name):
        cin = v.shape[1]
        w = (0.2 * rng.standard_normal((cout, cin, k, k))).astype(np.float32)
        if scales is None:
            wv = g.add_constant(f"{name}_w", w)
        else:
            wv = node("DequantizeLinear", [g.add_constant(f"{name}_wq", np.round(w / 0.01).clip(-127, 127).astype(np.int8)),
                                           g.add_constant(f"{name}_ws", np.float32(0.01)),
                                           g.add_constant(f"{name}_wz", np.int8(0))], w.shape, name=f"{name}_wdq")
        y = node("Conv", [v, wv], (1, cout, 16, 16), {"kernel_shape": [k, k], "pads": [k // 2] * 4}, name)
        return node("Relu", [y], y.shape, name=f"{name}_relu")

    x = g.add_input("x", (1, 8, 16, 16), "float32")
    s = conv(qdq(x, 0.03, "x"), 4, 1, "squeeze")
    a = qdq(conv(qdq(s, 0.05, "s"), 8, 1, "e1"), scales[0] if scales else 0, "e1")
    b = qdq(conv(qdq(s, 0.05, "s2"), 8, 3, "e3"), scales[1] if scales else 0, "e3")
    cat = qdq(node("Concat", [a, b], (1, 16, 16, 16), {"axis": 1}, "cat"), scales[2] if scales else 0, "cat")
    g.outputs = [qdq(conv(cat, 8, 1, "next"), 0.2, "out")]
    if scales is None:
        with tempfile.TemporaryDirectory() as d:
            calib = Path(d) / "calib.npz"
            np.savez(calib, x=rng.standard_normal((4, 8, 16, 16)).astype(np.float32))
            quantize_graph(g, load_calibration(calib, g), QuantizeSettings(calibration="minmax", max_batches=4),
                           progress=False)
    return g


@pytest.mark.parametrize("scales", [None, (0.05, 0.07, 0.06)])
def test_an_integer_concat_of_its_own_scale_is_a_view_and_one_that_rescales_stays_an_operator(scales):
    """corefold's quantizer ties a Concat's inputs to its output, so its fused integer form
    requantizes by one: it is lowered as the plain Concat (a view, no task: the expand
    convolutions' outputs go straight to the next convolution). Inputs quantized apart
    keep the integer operator, which rescales. Either way the executable equals the
    integer runner bit for bit."""
    g = _fire(scales)
    target = load_target("npu")
    cats = [n for n in tile(g, target).nodes if n.op_type == "Concat" and not n.meta.get("split_join")]
    assert len(cats) == 1
    assert cats[0].domain == ("" if scales is None else "corefold.int")
    exe = lower(g, target)
    concat_ops = [o for o in exe.ops if o.op_type == "Concat"]
    assert (len(concat_ops) == 0) == (scales is None)
    check_executable(exe, target)
    feeds = random_inputs(g, 0)
    want = IntegerRunner(g).run(feeds)
    got = run_executable(exe, feeds)
    for k, v in want.items():
        np.testing.assert_array_equal(got[k], v)
    assert any(np.any(v != 0) for v in want.values())


def _conv_bn_text(rng) -> str:
    """x -> Conv 3x3 (8 -> 16 channels, no bias) -> BatchNormalization -> Mul -> Add -> Relu
    -> y, the pattern of the onnx package's Inception v2, with seeded constants."""
    import json

    f = lambda a: json.dumps([round(float(v), 4) for v in np.ravel(a)])  # noqa: E731
    w = rng.standard_normal((16, 8, 3, 3)) * 0.3
    s, b, m = (rng.standard_normal(16) for _ in range(3))
    v = rng.uniform(0.5, 2.0, 16)
    k, d = rng.uniform(0.5, 2.0, (16, 1, 1)), rng.standard_normal((16, 1, 1))
    return f"""graph convbn opset 21
input x: float32[1, 8, 16, 16]
const w: float32[16, 8, 3, 3] = {f(w)}
const s: float32[16] = {f(s)}
const b: float32[16] = {f(b)}
const m: float32[16] = {f(m)}
const v: float32[16] = {f(v)}
const k: float32[16, 1, 1] = {f(k)}
const d: float32[16, 1, 1] = {f(d)}
node conv = Conv(x, w) attrs {{"pads": [1, 1, 1, 1]}} -> (c: float32[1, 16, 16, 16])
node bn = BatchNormalization(c, s, b, m, v) -> (n: float32[1, 16, 16, 16])
node mul = Mul(n, k) -> (p: float32[1, 16, 16, 16])
node add = Add(p, d) -> (q: float32[1, 16, 16, 16])
node relu = Relu(q) -> (y: float32[1, 16, 16, 16])
output y
"""


def test_a_float_conv_and_the_normalisation_after_it_run_as_one_operator():
    """The tile step folds Conv -> BatchNormalization -> Mul -> Add into the Conv (the Relu
    then fuses into it too): the cores run convolution pieces only, and the simulation
    computes what the graph does within float32 rounding (1e-5 of the output's scale, as
    every float lowering). The caller's graph keeps its nodes."""
    from corefold.ir import parse

    g = parse(_conv_bn_text(np.random.default_rng(0)))
    target = load_target("npu-2x2")
    exe = lower(g, target)
    check_executable(exe, target)
    assert {exe.ops[ins.op].op_type for p in exe.programs for ins in p.instructions
            if isinstance(ins, Compute)} == {"Conv"}
    assert [n.op_type for n in g.nodes] == ["Conv", "BatchNormalization", "Mul", "Add", "Relu"]
    feeds = random_inputs(g, 0)
    want, got = run(g, feeds)["y"], run_executable(exe, feeds)["y"]
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
