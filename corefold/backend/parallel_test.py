import numpy as np
import pytest

from corefold.backend.executable import Compute
from corefold.backend.lower import LowerSettings, lower
from corefold.backend.parallel import (
    FLOOR_PIECES,
    ROOMY_WEIGHTLESS,
    ROOMY_WEIGHTS,
    cut_for_parallelism,
)
from corefold.backend.testing import max_relative_error, small_target
from corefold.backend.tile import copy_graph
from corefold.executor import random_inputs, run
from corefold.ir import Graph
from corefold.ir.shapes import infer_node
from corefold.passes.split.rows import cut_rows
from corefold.sim import run_simulation

WHOLE = LowerSettings(order_budget_seconds=0.0, pieces_per_core=0.0)


def _one_op(op: str, attrs: dict, x_shape: tuple, w_shape: tuple | None = None, seed: int = 0) -> Graph:
    rng = np.random.default_rng(seed)
    g = Graph(op.lower())
    ins = [g.add_input("x", x_shape, "float32")]
    if w_shape is not None:
        ins.append(g.add_constant("w", rng.standard_normal(w_shape).astype(np.float32)))
        ins.append(g.add_constant("b", rng.standard_normal(w_shape[0]).astype(np.float32)))
    n = g.make_node(op, ins, attrs, name="op")
    infer_node(n)
    g.outputs = [n.outputs[0]]
    return g


@pytest.mark.parametrize("op,attrs,x_shape,w_shape,k", [
    ("Conv", {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]}, (1, 3, 17, 9), (4, 3, 3, 3), 5),
    ("Conv", {"kernel_shape": [7, 7], "strides": [2, 2], "pads": [3, 2, 3, 2]}, (1, 2, 30, 11), (3, 2, 7, 7), 4),
    ("Conv", {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [0, 0, 0, 0], "dilations": [2, 2]},
     (1, 2, 20, 8), (3, 2, 3, 3), 3),
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [0, 0, 0, 0], "ceil_mode": 1}, (1, 4, 56, 56),
     None, 5),
    ("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 1, 1, 1]}, (1, 2, 13, 13), None, 3),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1], "count_include_pad": 1},
     (1, 3, 13, 13), None, 6),
])
def test_row_bands_compute_what_the_operator_computes(op, attrs, x_shape, w_shape, k):
    g = _one_op(op, attrs, x_shape, w_shape)
    feeds = random_inputs(g, 1)
    want = run(g, feeds)
    cut = copy_graph(g)
    join = cut_rows(cut, next(n for n in cut.nodes if n.op_type == op), k)
    cut.sort()
    pieces = [n for n in cut.nodes if n.op_type == op]
    assert len(pieces) == k and join.op_type == "Concat" and join.attrs["axis"] == 2
    assert sum(p.outputs[0].shape[2] for p in pieces) == g.outputs[0].shape[2]
    got = run(cut, feeds)
    assert max_relative_error(want, got) <= 1e-6


def _independent_matmuls(k: int, rows: int = 64, inner: int = 256, cols: int = 1024, seed: int = 0) -> Graph:
    """``k`` MatMuls of one input with equal-sized weights, each its own graph output."""
    rng = np.random.default_rng(seed)
    g = Graph("independent")
    x = g.add_input("x", (rows, inner), "float32")
    for i in range(k):
        w = g.add_constant(f"w{i}", (rng.standard_normal((inner, cols)) / 16).astype(np.float32))
        n = g.make_node("MatMul", [x, w], name=f"mm{i}")
        infer_node(n)
        g.outputs.append(n.outputs[0])
    return g


def _target(cores_per_side: int):
    """A compute-bound chip: links, DMA engines and DRAM 8x faster than the preset's,
    one DRAM channel per core."""
    attach = "[[0, 0]]" if cores_per_side == 1 else "[[0, 0], [1, 0], [0, 1], [1, 1]]"
    return small_target(width=cores_per_side, height=cores_per_side, sram_kib=8192, reserved_kib=64,
                        dram_attach=attach, dram_gbps=204.8 * cores_per_side ** 2,
                        more=(("bytes_per_cycle = 64", "bytes_per_cycle = 512"),
                              ("link_bytes_per_cycle = 32", "link_bytes_per_cycle = 256")))


def _matmul_cores(exe) -> list[tuple[int, int]]:
    return [p.core for p in exe.programs for ins in p.instructions
            if isinstance(ins, Compute) and exe.ops[ins.op].op_type == "MatMul"]


@pytest.mark.parametrize("settings", [WHOLE, LowerSettings(order_budget_seconds=0.0)])
def test_independent_matmuls_go_to_distinct_cores_and_run_k_times_faster(settings):
    k = 4
    g = _independent_matmuls(k)
    feeds = random_inputs(g, 0)
    want = run(g, feeds)
    one = lower(g, _target(1), WHOLE)
    mesh = lower(g, _target(2), settings)
    if settings is WHOLE:  # one task per MatMul, each on its own core
        assert len(set(_matmul_cores(mesh))) == k == len(_matmul_cores(mesh))
    else:  # pieces of the MatMuls, over every core
        assert len(set(_matmul_cores(mesh))) == k
    assert len(set(_matmul_cores(one))) == 1
    slow = run_simulation(one, feeds, _target(1))
    fast = run_simulation(mesh, feeds, _target(2))
    assert max_relative_error(want, slow.outputs) <= 1e-5
    assert max_relative_error(want, fast.outputs) <= 1e-5
    # the matmuls dominate (16.8 M MACs each, 16.4 us on one core; the 64 KiB input and
    # 256 KiB outputs move in about 1 us), so four cores run them nearly four times faster
    # (cut into pieces by default, the MatMuls balance less well over the cores: the
    # cut aims at pieces_per_core pieces per core whatever parallelism the graph has)
    speedup = slow.report.latency_s / fast.report.latency_s
    assert (0.75 if settings is WHOLE else 0.6) * k <= speedup <= k * 1.01


def _conv_chain(seed: int = 0) -> Graph:
    """conv 3x3 -> relu -> maxpool -> conv 1x1 -> relu on a 1x32x48x48 image (the first
    conv's 42 M MACs dominate)."""
    rng = np.random.default_rng(seed)
    g = Graph("chain")
    cur = g.add_input("x", (1, 32, 48, 48), "float32")
    for op, attrs, w in [("Conv", {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]}, (64, 32, 3, 3)),
                         ("Relu", {}, None),
                         ("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [0, 0, 0, 0]}, None),
                         ("Conv", {"kernel_shape": [1, 1], "strides": [1, 1], "pads": [0, 0, 0, 0]}, (16, 64, 1, 1)),
                         ("Relu", {}, None)]:
        ins = [cur]
        if w is not None:
            ins += [g.add_constant(f"w{len(g.nodes)}", (rng.standard_normal(w) / 4).astype(np.float32)),
                    g.add_constant(f"b{len(g.nodes)}", rng.standard_normal(w[0]).astype(np.float32))]
        n = g.make_node(op, ins, attrs, name=f"{op.lower()}{len(g.nodes)}")
        infer_node(n)
        cur = n.outputs[0]
    g.outputs = [cur]
    return g


def test_the_reader_of_a_graph_input_takes_at_least_input_pieces_bands():
    """``input_pieces``: the conv reading the graph input, cut into 15 row bands by its time
    alone, is cut into 20 (at most its 24 bands of two rows), the ops after it follow the
    finer cut, and the tiled graph computes the original's outputs; a floor below what the
    time asks for changes nothing."""
    g = _conv_chain()
    t = small_target(width=4, height=4, sram_kib=1024, reserved_kib=64)
    feeds = random_inputs(g, 3)
    counts = {}
    for input_pieces in (0, 8, 20, 40):
        cut = copy_graph(g)
        cut_for_parallelism(cut, t, pieces_per_core=1.0, input_pieces=input_pieces)
        first = [n for n in cut.nodes if n.op_type == "Conv" and n.name.startswith("conv0")]
        relu = [n for n in cut.nodes if n.op_type == "Relu" and n.name.startswith("relu1")]
        assert len(relu) == len(first)
        assert all(n.inputs[0].producer is not None for n in first)  # each reads its slice of the input
        assert max_relative_error(run(g, feeds), run(cut, feeds)) <= 1e-6
        counts[input_pieces] = len(first)
    assert counts == {0: 15, 8: 15, 20: 20, 40: 24}


def test_cut_for_parallelism_bands_a_conv_chain_and_follows_the_producer():
    g = _conv_chain()
    t = small_target(width=4, height=4, sram_kib=1024, reserved_kib=64)
    cut = copy_graph(g)
    assert cut_for_parallelism(cut, t, pieces_per_core=2.0) >= 3
    first = [n for n in cut.nodes if n.name.startswith("conv0_rows")]
    relus = [n for n in cut.nodes if n.op_type == "Relu" and n.name.startswith("relu1")]
    assert len(first) >= 2 and len(relus) == len(first)  # the Relu is cut as its producer was
    assert all(r.outputs[0].shape == c.outputs[0].shape for r, c in zip(relus, first, strict=True))
    feeds = random_inputs(g, 2)
    assert max_relative_error(run(g, feeds), run(cut, feeds)) <= 1e-6


def test_a_banded_conv_chain_uses_more_cores_runs_faster_and_matches():
    g = _conv_chain()
    t = small_target(width=4, height=4, sram_kib=1024, reserved_kib=64)
    feeds = random_inputs(g, 3)
    want = run(g, feeds)
    whole = run_simulation(lower(g, t, WHOLE), feeds, t)
    banded_exe = lower(g, t, LowerSettings(order_budget_seconds=0.0))
    banded = run_simulation(banded_exe, feeds, t)
    assert max_relative_error(want, banded.outputs) <= 1e-5
    assert banded_exe.meta["cores_used"] > lower(g, t, WHOLE).meta["cores_used"]
    assert banded.report.latency_s < whole.report.latency_s


def _conv3x3_then(name: str, out_channels: int, scale: float, after, seed: int = 0) -> Graph:
    """A padded 3 x 3 Conv from 32 channels on 32 x 32 (weights N(0, 1) / ``scale``), then
    the node ``after(graph, conv_output, x)`` makes, the graph's output."""
    rng = np.random.default_rng(seed)
    g = Graph(name)
    x = g.add_input("x", (1, 32, 32, 32), "float32")
    w = g.add_constant("w", (rng.standard_normal((out_channels, 32, 3, 3)) / scale).astype(np.float32))
    b = g.add_constant("b", rng.standard_normal(out_channels).astype(np.float32))
    conv = g.make_node("Conv", [x, w, b], {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]},
                       name="conv")
    infer_node(conv)
    last = after(g, conv.outputs[0], x)
    infer_node(last)
    g.outputs = [last.outputs[0]]
    return g


def _residual_conv(seed: int = 0) -> Graph:
    """y = Conv3x3(x) + x on a 1x32x32x32 image (36 KiB of weights)."""
    return _conv3x3_then("residual", 32, 16, lambda g, y, x: g.make_node("Add", [y, x], name="add"), seed)


def test_a_reader_of_a_cut_weights_join_follows_its_leaf_pieces_within_the_noc_streams():
    from corefold.backend.parallel import joined_cut
    from corefold.backend.tile import cut_weights

    g = _residual_conv()
    # 8 KiB streams: a core receives from at most 8 others
    t = small_target(width=4, height=4, sram_kib=1024, reserved_kib=64, noc_buffer_kib=4, stream_bytes=512)
    assert t.noc_streams_per_core == 8
    cut = copy_graph(g)
    assert cut_weights(cut, 10 * 1024) == 1  # the Conv: 4 pieces of 8 output channels
    cut.sort()
    assert joined_cut(next(n for n in cut.nodes if n.op_type == "Add").inputs[0]) == (1, 4)
    cut_for_parallelism(cut, t, pieces_per_core=64.0)
    convs = [n for n in cut.nodes if n.op_type == "Conv"]
    adds = [n for n in cut.nodes if n.op_type == "Add"]
    # each quarter cut again (into bands of rows), but into at most 8 pieces in all (the
    # NoC streams); the Add follows the channel join, each quarter in two (a multiple of
    # the quarters, within the 8 streams): every piece reads one quarter
    assert 4 < len(convs) <= 8
    assert [a.outputs[0].shape[1] for a in adds] == [4] * 8
    feeds = random_inputs(g, 4)
    assert max_relative_error(run(g, feeds), run(cut, feeds)) <= 1e-6


def _squeeze_excite(seed: int = 0) -> Graph:
    """y = Sigmoid(Conv1x1(GlobalAveragePool(h))) * h, h = Conv3x3(x), as torchvision's SE
    block writes it: the [1, C, 1, 1] scale is the Mul's first input."""
    rng = np.random.default_rng(seed)
    g = Graph("se")
    x = g.add_input("x", (1, 16, 32, 32), "float32")
    conv = g.make_node("Conv", [x, g.add_constant("w", (rng.standard_normal((32, 16, 3, 3)) / 8).astype(np.float32))],
                       {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]}, name="conv")
    pool = g.make_node("GlobalAveragePool", [conv.outputs[0]], name="pool")
    fc = g.make_node("Conv", [pool.outputs[0], g.add_constant("v", rng.standard_normal((32, 32, 1, 1)).astype(np.float32))],
                     {"kernel_shape": [1, 1]}, name="fc")
    sig = g.make_node("Sigmoid", [fc.outputs[0]], name="sigmoid")
    mul = g.make_node("Mul", [sig.outputs[0], conv.outputs[0]], name="scale")
    for n in (conv, pool, fc, sig, mul):
        infer_node(n)
    g.outputs = [mul.outputs[0]]
    return g


def _cut_for_a_4x4_mesh(g: Graph):
    """(target, a copy of ``g`` cut for 4 pieces per core of a 4 x 4 mesh of 1 MiB cores,
    the row bands of its ``conv``)."""
    t = small_target(width=4, height=4, sram_kib=1024, reserved_kib=64)
    cut = copy_graph(g)
    cut_for_parallelism(cut, t, pieces_per_core=4.0)
    return t, cut, [n for n in cut.nodes if n.name.startswith("conv_rows")]


def test_a_broadcast_scale_follows_the_cut_of_its_full_size_input():
    """An SE block's ``scale * h`` is cut as ``h``'s producer was (bands of rows), not left
    whole because its first input, the [1, C, 1, 1] scale, is no cut's join: whole, the
    float EfficientNet-B0 sent each 225 KB product from one core to every reader."""
    g = _squeeze_excite()
    _, cut, bands = _cut_for_a_4x4_mesh(g)
    muls = [n for n in cut.nodes if n.op_type == "Mul"]
    assert len(bands) >= 2 and len(muls) == len(bands)
    assert [m.outputs[0].shape for m in muls] == [c.outputs[0].shape for c in bands]
    feeds = random_inputs(g, 5)
    assert max_relative_error(run(g, feeds), run(cut, feeds)) <= 1e-6


def _squeeze_excite_mean(keepdims: int, seed: int = 0) -> Graph:
    """The SE block with the pool written as ReduceMean over axes 2 and 3 (as some
    exporters write it); ``keepdims`` 0 reshapes the [1, C] mean back to [1, C, 1, 1]."""
    g = _squeeze_excite(seed)
    pool = next(n for n in g.nodes if n.op_type == "GlobalAveragePool")
    axes = g.add_constant("axes", np.array([-2, 3], np.int64))
    mean = g.make_node("ReduceMean", [pool.inputs[0], axes], {"keepdims": keepdims}, name="mean")
    infer_node(mean)
    out = mean.outputs[0]
    if not keepdims:
        shape = g.add_constant("shape", np.array([1, 32, 1, 1], np.int64))
        back = g.make_node("Reshape", [out, shape], name="back")
        infer_node(back)
        out = back.outputs[0]
    g.replace_all_uses(pool.outputs[0], out)
    g.remove_node(pool)
    g.sort()
    return g


@pytest.mark.parametrize("make", [_squeeze_excite, lambda: _squeeze_excite_mean(1), lambda: _squeeze_excite_mean(0)],
                         ids=["GlobalAveragePool", "ReduceMean", "ReduceMean-keepdims0"])
def test_a_mean_over_row_bands_sums_each_band_where_it_was_computed(make):
    """An SE block's pool behind a row cut becomes a ReduceSum per band, a Sum and a Div,
    and each band's sum runs on the core that computed the band: only 32 sums per band
    cross the NoC. Cut on channels as before, every pool piece read every band (the float
    EfficientNet-B0 sent each block's whole activation across the NoC: 256.1 -> 229.5 us)."""
    g = make()
    t, cut, bands = _cut_for_a_4x4_mesh(g)
    sums = [n for n in cut.nodes if n.op_type == "ReduceSum"]
    assert len(bands) >= 2 and len(sums) == len(bands)
    assert not [n for n in cut.nodes if n.op_type in ("GlobalAveragePool", "ReduceMean")]
    assert [n.op_type for n in cut.nodes if n.op_type in ("Sum", "Div")] == ["Sum", "Div"]
    feeds = random_inputs(g, 6)
    want = run(g, feeds)
    assert max_relative_error(want, run(cut, feeds)) <= 1e-6
    exe = lower(g, t, LowerSettings(order_budget_seconds=0.0))
    core_of = {exe.ops[i.op].name: p.core for p in exe.programs for i in p.instructions if isinstance(i, Compute)}
    band_sums = sorted(exe.ops[i.op].name for p in exe.programs for i in p.instructions
                       if isinstance(i, Compute) and exe.ops[i.op].op_type == "ReduceSum")
    assert len(band_sums) == len(bands)
    assert all(core_of[n] == core_of["conv_rows" + n.rsplit("_rows", 1)[1]] for n in band_sums)
    assert max_relative_error(want, run_simulation(exe, feeds, t).outputs) <= 1e-5


def _convs(name: str, x_shape: tuple, layers: list, scale: float, seed: int = 0) -> Graph:
    """A chain of Convs without bias on one input: ``layers`` of (name, attrs, weight
    shape), weights standard normal over ``scale``, seeded."""
    rng = np.random.default_rng(seed)
    g = Graph(name)
    cur = g.add_input("x", x_shape, "float32")
    for layer, attrs, w in layers:
        wv = g.add_constant(f"{layer}_w", (rng.standard_normal(w) / scale).astype(np.float32))
        n = g.make_node("Conv", [cur, wv], attrs, name=layer)
        infer_node(n)
        cur = n.outputs[0]
    g.outputs = [cur]
    return g


def _pointwise_depthwise(seed: int = 0) -> Graph:
    """conv 3x3 stride 4 (16 -> 96 channels, 32 x 32 -> 8 x 8, cut in rows: its weights are
    smaller than its input) -> pointwise conv (96 -> 192) -> depthwise conv 3x3 (192
    groups), the expand half of an MBConv block at a late layer's size."""
    return _convs("mbconv", (1, 16, 32, 32), [
        ("conv0", {"kernel_shape": [3, 3], "strides": [4, 4], "pads": [1, 1, 1, 1]}, (96, 16, 3, 3)),
        ("pw", {"kernel_shape": [1, 1]}, (192, 96, 1, 1)),
        ("dw", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "group": 192}, (192, 1, 3, 3))], 8, seed)


def test_a_pointwise_conv_with_too_few_rows_cuts_channels_and_the_depthwise_conv_follows_them():
    """An 8 x 8 layer has 4 bands of two rows, fewer than the pointwise conv's time asks
    for, and its weights (72 KiB) outweigh its input (24 KiB): it takes its own cut on
    output channels, every piece reading the whole input. The depthwise conv after it
    follows those channels, each piece reading only its own groups, instead of being cut
    in rows across all of them (on the int8 EfficientNet-B0, 232 -> 203 us)."""
    g = _pointwise_depthwise()
    t = small_target(width=4, height=4, sram_kib=1024, reserved_kib=64)
    cut = copy_graph(g)
    cut_for_parallelism(cut, t, pieces_per_core=2.0)
    convs = [n for n in cut.nodes if n.op_type == "Conv"]
    first, pw, dw = ([n for n in convs if n.name.startswith(p)] for p in ("conv0", "pw", "dw"))
    assert 2 <= len(first) <= 4 and all(n.name.startswith("conv0_rows") for n in first)
    assert len(pw) > 4  # more pieces than bands of rows
    assert all(n.outputs[0].shape[2:] == (8, 8) and n.inputs[0].shape == (1, 96, 8, 8) for n in pw)
    assert sum(n.outputs[0].shape[1] for n in pw) == 192
    assert [n.outputs[0].shape for n in dw] == [n.outputs[0].shape for n in pw]
    assert all(n.inputs[0].shape == n.outputs[0].shape and n.attrs["group"] == n.outputs[0].shape[1] for n in dw)
    feeds = random_inputs(g, 6)
    assert max_relative_error(run(g, feeds), run(cut, feeds)) <= 1e-6


def _wide_pointwise(seed: int = 0) -> Graph:
    """conv 3x3 stride 2 (16 -> 512 channels, 16 x 16 -> 8 x 8) -> pointwise conv (512 ->
    256): a late layer's heavy 1 x 1 convolution on few rows, as SqueezeNet's ``conv10``."""
    return _convs("wide_pointwise", (1, 16, 16, 16), [
        ("conv0", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, (512, 16, 3, 3)),
        ("pw", {"kernel_shape": [1, 1]}, (256, 512, 1, 1))], 16, seed)


def test_banded_the_pointwise_conv_keeps_the_row_bands_each_cut_on_channels_reading_only_its_band():
    """A heavy pointwise conv on 8 rows, its time asking for more pieces than 4 bands of 2
    rows and its weights (512 KiB) outweighing its input (128 KiB): without ``bands`` it
    takes channel pieces that each read the whole input; with ``bands`` it keeps the
    producer's row bands (each reading its band of 2 rows) and each band is cut on output
    channels. Every channel of every row is computed once, and the tiled graph computes the
    original's outputs. Without SRAM to spare (2 x 2 cores of 896 KiB, of which the 807 KiB of weights
    take more than :data:`ROOMY_WEIGHTS`) ``bands`` changes nothing."""
    g = _wide_pointwise()
    t = small_target(width=4, height=4, sram_kib=1024, reserved_kib=64)
    plain, banded = copy_graph(g), copy_graph(g)
    cut_for_parallelism(plain, t, pieces_per_core=4.0)
    cut_for_parallelism(banded, t, pieces_per_core=4.0, bands=True)
    before = [n for n in plain.nodes if n.op_type == "Conv" and n.name.startswith("pw")]
    assert len(before) > 4 and all(n.inputs[0].shape == (1, 512, 8, 8) for n in before)  # whole input each
    pw = [n for n in banded.nodes if n.op_type == "Conv" and n.name.startswith("pw")]
    assert all(n.inputs[0].shape[1] == 512 and n.inputs[0].shape[2] == 2 for n in pw)  # a band each
    bands = {id(n.inputs[0]) for n in pw}
    assert len(bands) == 4 and len(pw) == 16  # 4 bands, each in 4 channel pieces
    assert sum(n.outputs[0].shape[1] * n.outputs[0].shape[2] for n in pw) == 256 * 8
    feeds = random_inputs(g, 6)
    assert max_relative_error(run(g, feeds), run(banded, feeds)) <= 1e-6
    tight = small_target(width=2, height=2, sram_kib=896, reserved_kib=64, dram_attach="[[0, 1], [1, 0]]")
    weights = sum(v.nbytes for v in g.values() if v.is_constant)
    assert weights > ROOMY_WEIGHTS * 4 * tight.sram_bytes
    a, b = copy_graph(g), copy_graph(g)
    cut_for_parallelism(a, tight, pieces_per_core=4.0)
    cut_for_parallelism(b, tight, pieces_per_core=4.0, bands=True)
    assert [n.name for n in a.nodes] == [n.name for n in b.nodes]


def test_banded_a_pooling_whose_time_asks_for_more_pieces_than_bands_cuts_each_band_on_channels():
    """A 5 x 5 max pool over 256 channels of 8 x 8: 4 bands of two rows without ``bands``;
    with ``bands`` each band is cut into 3 channel pieces too (the pool's 6.4 us of work
    against its 64 KiB output at 32 bytes a cycle, :func:`_band_pieces`), each piece
    reading its band's rows of its own channels, and the pieces compute the pool."""
    g = _one_op("MaxPool", {"kernel_shape": [5, 5], "strides": [1, 1], "pads": [2, 2, 2, 2]}, (1, 256, 8, 8))
    t = small_target(width=4, height=4, sram_kib=1024, reserved_kib=64)
    plain, banded = copy_graph(g), copy_graph(g)
    cut_for_parallelism(plain, t, pieces_per_core=8.0)
    cut_for_parallelism(banded, t, pieces_per_core=8.0, bands=True)
    before = [n for n in plain.nodes if n.op_type == "MaxPool"]
    after = [n for n in banded.nodes if n.op_type == "MaxPool"]
    assert len(before) == 4 and all(n.outputs[0].shape == (1, 256, 2, 8) for n in before)
    assert len(after) == 12 and all(n.outputs[0].shape[1] < 256 and n.outputs[0].shape[2] == 2 for n in after)
    assert all(n.inputs[0].shape[1] == n.outputs[0].shape[1] for n in after)  # its own channels only
    assert sum(n.outputs[0].shape[1] for n in after) == 256 * 4
    feeds = random_inputs(g, 2)
    assert max_relative_error(run(g, feeds), run(banded, feeds)) <= 1e-6


def _pointwise_chain(n: int, seed: int = 0) -> Graph:
    """``n`` pointwise convs (64 -> 64 channels) on a 1x64x32x32 image: 4.2 M MACs, 4.1 us
    each on the preset's matrix unit, 16 KiB of weights each."""
    rng = np.random.default_rng(seed)
    g = Graph("pointwise")
    cur = g.add_input("x", (1, 64, 32, 32), "float32")
    for i in range(n):
        w = g.add_constant(f"w{i}", (rng.standard_normal((64, 64, 1, 1)) / 8).astype(np.float32))
        c = g.make_node("Conv", [cur, w], {"kernel_shape": [1, 1]}, name=f"pw{i}")
        infer_node(c)
        cur = c.outputs[0]
    g.outputs = [cur]
    return g


@pytest.mark.parametrize("sram_kib,pieces", [(1024, 4), (24, 2)])
def test_with_sram_to_spare_a_chain_is_cut_into_short_pieces_over_a_quarter_of_the_cores(sram_kib, pieces):
    """Eight equal convs of 4.1 us on 16 cores at one piece per core: ``tau`` is 2.1 us, so
    the share of the work cuts each in 2. With the weights (128 KiB) within 20% of all
    cores' SRAM (``ROOMY_WEIGHTS``), each is cut into pieces of about 1 us instead, on at most 16 / 4
    cores (a chain runs one layer after the other: its latency is the sum of its longest
    pieces; on the int8 EfficientNet-B0, 203 -> 163 us). With 24 KiB cores the weights
    fill a third of the SRAM and the share of the work decides."""
    g = _pointwise_chain(8)
    t = small_target(width=4, height=4, sram_kib=sram_kib, reserved_kib=4)
    cut = copy_graph(g)
    cut_for_parallelism(cut, t, pieces_per_core=1.0)
    for i in range(8):
        bands = [n for n in cut.nodes if n.op_type == "Conv" and n.name.startswith(f"pw{i}_")]
        assert len(bands) == pieces, i
        assert sum(n.outputs[0].shape[2] for n in bands) == 32
    feeds = random_inputs(g, 7)
    assert max_relative_error(run(g, feeds), run(cut, feeds)) <= 1e-6


def test_sram_to_spare_counts_only_the_constants_the_nodes_read():
    """A constant no node reads any more (the split pass leaves the weights it replaced by
    slices in the graph) does not count: 4 MiB of it beside the 16 MiB chip's 128 KiB of
    weights leaves the chain cut into short pieces, as without it (it counted until stop
    28, int8 ResNet-18's 11.7 MB of weights as 30.8)."""
    g = _pointwise_chain(8)
    t = small_target(width=4, height=4, sram_kib=1024, reserved_kib=4)
    cut = copy_graph(g)
    cut.add_constant("replaced", np.zeros(4 * 2**20, np.uint8))
    assert cut.value("replaced").nbytes > ROOMY_WEIGHTS * 16 * t.sram_bytes
    cut_for_parallelism(cut, t, pieces_per_core=1.0)
    for i in range(8):
        assert len([n for n in cut.nodes if n.op_type == "Conv" and n.name.startswith(f"pw{i}_")]) == 4, i


@pytest.mark.parametrize("sram_kib,pools,convs", [(1024, 4, 4), (72, 4, 1), (40, 2, 1)])
def test_an_operator_without_weights_is_cut_short_while_the_weights_leave_some_room(sram_kib, pools, convs):
    """Sixteen 4.1 us convs (256 KiB of weights), then a 9.2 us 3 x 3 MaxPool, on 16 cores
    at one piece per core: ``tau`` is 4.7 us, so the share of the work leaves the convs
    whole and cuts the pool in 2. With room (1.6% of the SRAM) all get the floor of about
    1 us pieces on 16 / 4 cores; at 22% the convs' weights would be copied, so only the
    weightless pool gets it (``ROOMY_WEIGHTLESS``; int8 ResNet-18's quantizer, pool and
    residual Adds: 144.9 -> 131.3 us); at 40% neither does."""
    g = _pointwise_chain(16)
    pool = g.make_node("MaxPool", [g.outputs[0]], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, name="pool")
    infer_node(pool)
    g.outputs = [pool.outputs[0]]
    t = small_target(width=4, height=4, sram_kib=sram_kib, reserved_kib=4)
    cut = copy_graph(g)
    cut_for_parallelism(cut, t, pieces_per_core=1.0)
    assert len([n for n in cut.nodes if n.op_type == "MaxPool"]) == pools
    assert len([n for n in cut.nodes if n.op_type == "Conv" and n.name.startswith("pw0")]) == convs
    feeds = random_inputs(g, 3)
    assert max_relative_error(run(g, feeds), run(cut, feeds)) <= 1e-6


@pytest.mark.parametrize("in_channels,sram_kib,bands,per_band",
                         [(64, 1024, 4, 4), (16, 1024, 4, 1), (64, 80, 4, 4), (64, 48, 4, 1)])
def test_a_conv_with_too_few_rows_for_its_time_cuts_each_band_on_channels_while_that_beats_its_transfer(
        in_channels, sram_kib, bands, per_band):
    """A 3 x 3 Conv to 128 channels on 8 x 256: its time asks for 16 pieces, its 8 rows
    allow 4 bands of two. With 64 input channels (147 us, 4.5x the 33 us its 1 MiB output
    takes over one link) each band is cut again into 4 pieces of 32 output channels, each
    with its share of the weights; with 16 (37 us, 1.1x) a piece would compute for less
    time than its band takes to arrive, and the bands stay whole. The channel pieces copy
    no weights, so they are cut while the weights take at most ``ROOMY_WEIGHTLESS`` of the
    cores' SRAM (80 KiB cores: 23%), not beyond (48 KiB: 38%). Outputs agree within 1e-6
    (no reduction is split)."""
    g = _one_op("Conv", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, (1, in_channels, 8, 256),
                (128, in_channels, 3, 3))
    t = small_target(width=4, height=4, sram_kib=sram_kib, reserved_kib=4)
    share = g.nodes[0].inputs[1].nbytes / (16 * t.sram_bytes)
    assert (share <= ROOMY_WEIGHTS) == (sram_kib == 1024) and (share <= ROOMY_WEIGHTLESS) == (sram_kib > 48)
    cut = copy_graph(g)
    cut_for_parallelism(cut, t, pieces_per_core=1.0)
    convs = [n for n in cut.nodes if n.op_type == "Conv"]
    assert len(convs) == bands * per_band
    assert {n.outputs[0].shape for n in convs} == {(1, 128 // per_band, 2, 256)}
    assert all(n.inputs[1].shape == (128 // per_band, in_channels, 3, 3) for n in convs)
    # the bands' pieces of the same output channels read one constant, not a copy each
    # (stop 46: the int8 Inception v1's weights were 4.7x their size in the lowered graph)
    weights = {id(n.inputs[1]): n.inputs[1] for n in convs}
    assert len(weights) == per_band
    assert sum(v.nbytes for v in weights.values()) == g.nodes[0].inputs[1].nbytes
    feeds = random_inputs(g, 8)
    assert max_relative_error(run(g, feeds), run(cut, feeds)) <= 1e-6


@pytest.mark.parametrize("sram_kib", [1024, 20])
def test_with_sram_to_spare_a_conv_whose_weights_outweigh_its_input_is_cut_on_rows(sram_kib):
    """A 1 x 1 Conv of 96 -> 192 channels on 8 x 8: its weights (72 KiB) outweigh its input
    (24 KiB), so without room it is cut on output channels, every piece reading the whole
    input (at 20 KiB cores the weights take 22.5% of the 16 cores' SRAM). With room (1 MiB
    cores: 0.4%) it is cut into bands of rows whatever the weights, each band reading only
    its rows (int8 ResNet-50 on ``npu-array``: 809.1 -> 408.7 us). Outputs agree within
    1e-6 (no reduction is split)."""
    g = _one_op("Conv", {"kernel_shape": [1, 1]}, (1, 96, 8, 8), (192, 96, 1, 1))
    t = small_target(width=4, height=4, sram_kib=sram_kib, reserved_kib=4)
    conv = g.nodes[0]
    assert conv.inputs[1].nbytes > conv.inputs[0].nbytes
    assert (conv.inputs[1].nbytes <= ROOMY_WEIGHTS * 16 * t.sram_bytes) == (sram_kib == 1024)
    cut = copy_graph(g)
    cut_for_parallelism(cut, t, pieces_per_core=1.0)
    convs = [n for n in cut.nodes if n.op_type == "Conv"]
    assert len(convs) >= 4
    if sram_kib == 1024:  # four bands of two rows, each maybe cut again on channels
        assert {n.outputs[0].shape[2] for n in convs} == {2}
        assert {n.inputs[0].shape[2] for n in convs} == {2}
        assert sum(n.outputs[0].shape[1] for n in convs) == 4 * 192
    else:
        assert {n.outputs[0].shape[2] for n in convs} == {8}
        assert all(n.inputs[0].shape == (1, 96, 8, 8) for n in convs)
        assert sum(n.outputs[0].shape[1] for n in convs) == 192
    feeds = random_inputs(g, 9)
    assert max_relative_error(run(g, feeds), run(cut, feeds)) <= 1e-6


def _conv_lrn(seed: int = 0) -> Graph:
    """Conv 3x3 (32 -> 64 channels on 32 x 32) -> LRN: on 256 KiB cores the split pass
    cuts the Conv into two output-channel parts to fit, and the LRN, whose window spans
    channels, cannot follow that cut."""
    lrn = {"size": 5, "alpha": 1e-4, "beta": 0.75, "bias": 1.0}
    return _conv3x3_then("conv_lrn", 64, 8, lambda g, y, x: g.make_node("LRN", [y], lrn, name="lrn"), seed)


def test_an_operator_that_cannot_follow_a_channel_cut_takes_its_own_piece_count_on_rows():
    """The LRN behind the Conv's channel parts is cut on rows; it used to take the count of
    the channel cut it follows (four pieces of 2 us, against 0.26 us for a piece of its own
    cut). Its
    pieces compute the LRN (within 1e-6), and the lowered chip computes the executor's
    outputs (within 1e-5)."""
    from corefold.backend.tile import tile

    g = _conv_lrn()
    t = small_target(4, 4, 256, 64)
    cut = tile(g, t, t.core_memory_threshold, 8.0)
    parts = {n.name.split("_rows")[0] for n in cut.nodes if n.op_type == "Conv"}
    lrns = [n for n in cut.nodes if n.op_type == "LRN"]
    assert len(parts) == 2
    assert len(lrns) == t.noc_streams_per_core  # its own count, capped by a reader's NoC buffers
    assert all(n.outputs[0].shape == (1, 64, 1, 32) for n in lrns)
    feeds = random_inputs(g, 0)
    want = run(g, feeds)
    assert max_relative_error(want, run(cut, feeds)) <= 1e-6
    exe = lower(g, t, LowerSettings(order_budget_seconds=0.0))
    assert max_relative_error(want, run_simulation(exe, feeds, t).outputs) <= 1e-5


@pytest.mark.parametrize("noc_buffer_kib,pieces", [(16, 6), (1, 2), (0.5, 1)])
def test_a_depthwise_conv_behind_a_split_cuts_each_part_again_into_a_multiple_of_the_parts(noc_buffer_kib, pieces):
    """A 1 x 1 Conv split into two channel parts to fit (the split pass), then a depthwise
    3 x 3 Conv whose time asks for 6 pieces: it reads only its own channels, so it takes
    6 pieces (a multiple of the 2 parts, their boundary at channel 32 one of its own, so each
    piece reads one part) instead of the parts' 2 (float EfficientNet-B0's depthwise
    convolutions ran as 2 pieces of 12.9 us). A reader's NoC streams still bound it: with 2
    streams, 2 pieces; with 1, none (the multiple is never rounded up past them). Outputs
    agree within 1e-6."""
    from corefold.backend.parallel import joined_cut
    from corefold.backend.tile import cut_weights

    rng = np.random.default_rng(0)
    g = Graph("pw_dw")
    x = g.add_input("x", (1, 16, 32, 32), "float32")
    pw = g.make_node("Conv", [x, g.add_constant("w", rng.standard_normal((64, 16, 1, 1)).astype(np.float32))],
                     {"kernel_shape": [1, 1]}, name="pw")
    dw = g.make_node("Conv", [pw.outputs[0], g.add_constant("d", rng.standard_normal((64, 1, 3, 3)).astype(np.float32))],
                     {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "group": 64}, name="dw")
    for n in (pw, dw):
        infer_node(n)
    g.outputs = [dw.outputs[0]]
    cut = copy_graph(g)
    assert cut_weights(cut, 3 * 1024) == 1  # the 4 KiB pointwise weights: two parts of 32 channels
    cut.sort()
    assert joined_cut(next(n for n in cut.nodes if n.name == "dw").inputs[0]) == (1, 2)
    t = small_target(width=4, height=4, sram_kib=1024, reserved_kib=64, noc_buffer_kib=noc_buffer_kib,
                     stream_bytes=512)
    assert t.noc_streams_per_core == noc_buffer_kib * 2
    cut_for_parallelism(cut, t, pieces_per_core=1.0)
    dws = sorted((n for n in cut.nodes if n.op_type == "Conv" and n.name.startswith("dw")), key=lambda n: n.name)
    widths = [n.outputs[0].shape[1] for n in dws]
    assert len(dws) == pieces and sum(widths) == 64
    assert pieces == 1 or 32 in np.cumsum(widths)  # the parts' boundary
    feeds = random_inputs(g, 1)
    assert max_relative_error(run(g, feeds), run(cut, feeds)) <= 1e-6


def _pool_relu_lrn() -> Graph:
    """MaxPool 3 x 3 (16 channels on 48 x 48) -> Relu -> LRN, as Inception v1 starts (its
    int8 version: MaxPool -> DequantizeLinear -> LRN)."""
    g = Graph("pool_relu_lrn")
    x = g.add_input("x", (1, 16, 48, 48), "float32")
    pool = g.make_node("MaxPool", [x], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, name="pool")
    relu = g.make_node("Relu", [pool.outputs[0]], name="relu")
    lrn = g.make_node("LRN", [relu.outputs[0]], {"size": 5, "alpha": 1e-4, "beta": 0.75, "bias": 1.0}, name="lrn")
    for n in (pool, relu, lrn):
        infer_node(n)
    g.outputs = [lrn.outputs[0]]
    return g


def test_a_reader_of_channel_parts_each_cut_into_row_bands_follows_the_rows_across_the_parts():
    """The max pool split into two channel parts (as the split pass cuts one too big for a
    core), each part cut into row bands for the mesh: the Relu behind them follows the
    bands across the parts (each piece all 16 channels of one band's rows, so it starts
    when that band of both parts is in, and so does the LRN behind it) instead of the
    channel parts, each whole only once its last band is (int8 Inception v1, whose
    DequantizeLinear and LRN waited for the whole image there: 125.3 -> 108.7 us). Outputs
    agree within 1e-6; lowered, the chip computes the executor's outputs within 1e-5."""
    from corefold.backend.parallel import joined_cut
    from corefold.backend.tile import cut_along
    from corefold.passes.split.rules import candidate_axes

    g = _pool_relu_lrn()
    cut = copy_graph(g)
    pool = next(n for n in cut.nodes if n.op_type == "MaxPool")
    channels = next(a for a in candidate_axes(pool)[0] if not a.reduce and a.output is not None and a.output[0] == 1)
    cut_along(cut, pool, channels, 2)
    cut.sort()
    assert joined_cut(next(n for n in cut.nodes if n.op_type == "Relu").inputs[0]) == (1, 2)
    t = small_target(width=4, height=4, sram_kib=1024, reserved_kib=64)
    cut_for_parallelism(cut, t, pieces_per_core=4.0)
    pools = [n for n in cut.nodes if n.op_type == "MaxPool"]
    bands = sorted({n.outputs[0].shape[2] for n in pools})
    assert len(pools) >= 2 * 4 and all(n.outputs[0].shape[1] == 8 for n in pools)  # 2 parts x >= 4 bands
    for op in ("Relu", "LRN"):
        pieces = [n for n in cut.nodes if n.op_type == op]
        assert len(pieces) >= len(pools) // 2
        assert all(n.outputs[0].shape[1] == 16 for n in pieces)  # every channel of its rows
        assert sum(n.outputs[0].shape[2] for n in pieces) == 48 and max(n.outputs[0].shape[2] for n in pieces) <= bands[-1]
    feeds = random_inputs(g, 2)
    want = run(g, feeds)
    assert max_relative_error(want, run(cut, feeds)) <= 1e-6
    exe = lower(g, t, LowerSettings(order_budget_seconds=0.0))
    assert max_relative_error(want, run_simulation(exe, feeds, t).outputs) <= 1e-5


def _stem_then(stride: int) -> Graph:
    """Conv 3 x 3 (3 -> 16 channels on 112 x 32) -> depthwise Conv 3 x 3 of row stride
    ``stride``, as MobileNetV3 and Inception v1 start."""
    rng = np.random.default_rng(0)
    g = Graph("stem")
    x = g.add_input("x", (1, 3, 112, 32), "float32")
    stem = g.make_node("Conv", [x, g.add_constant("w", rng.standard_normal((16, 3, 3, 3)).astype(np.float32))],
                       {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, name="stem")
    dw = g.make_node("Conv", [stem.outputs[0], g.add_constant("d", rng.standard_normal((16, 1, 3, 3)).astype(np.float32))],
                     {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [stride, stride], "group": 16}, name="dw")
    for n in (stem, dw):
        infer_node(n)
    g.outputs = [dw.outputs[0]]
    return g


def test_a_row_cut_read_at_row_stride_2_takes_equal_bands_of_even_rows_one_per_reader_band():
    """The stem's time asks for 32 bands of its 112 rows (3 or 4 rows each) and its reader,
    of row stride 2, can take only 28 bands of 2 rows (56 // MIN_ROWS): each of those read
    two of the stem's bands, often on two cores (the float MobileNetV3's stem sent its whole
    output over one link: 66.8 -> 62.4 us). The stem now takes 28 bands of 4 rows, the
    reader's band j reading the stem's band j (and a halo row); a reader of stride 1 leaves
    the count to the time. Outputs within 1e-6; the lowered chip within 1e-5."""
    t = small_target(width=4, height=4, sram_kib=1024, reserved_kib=64)
    for stride, equal in ((2, True), (1, False)):
        g = _stem_then(stride)
        cut = copy_graph(g)
        cut_for_parallelism(cut, t, pieces_per_core=8.0)
        stems = [n.outputs[0].shape[2] for n in cut.nodes if n.op_type == "Conv" and n.name.startswith("stem")]
        readers = [n.outputs[0].shape[2] for n in cut.nodes if n.op_type == "Conv" and n.name.startswith("dw")]
        assert sum(stems) == 112 and (len(set(stems)) == 1 and stems[0] % 2 == 0) == equal
        if stride == 2:
            assert stems == [4] * 28 and readers == [2] * 28  # band j of the reader reads band j
        else:
            assert len(stems) == 32  # the time's count, bands of 3 and 4 rows
        feeds = random_inputs(g, 3)
        want = run(g, feeds)
        assert max_relative_error(want, run(cut, feeds)) <= 1e-6
    g = _stem_then(2)
    feeds = random_inputs(g, 4)
    exe = lower(g, t, LowerSettings(order_budget_seconds=0.0))
    assert max_relative_error(run(g, feeds), run_simulation(exe, feeds, t).outputs) <= 1e-5


def test_slices_cut_the_bands_of_a_heavy_conv_in_two_on_channels_and_keep_the_outputs():
    """The tiling for cores packed by SRAM (``slices`` 2): the row bands of a 3 x 3 conv
    with 147 KiB of weights (over :data:`SLICE_BYTES`) are each cut into two channel pieces,
    each holding half of the weights; the 18 KiB conv before it keeps whole bands. Every
    channel of every row is computed once, and the tiled graph computes the original's
    outputs."""
    from corefold.backend.lower_test import _conv_chain
    from corefold.backend.parallel import SLICE_BYTES

    g = _conv_chain(64, 16, 2, cols=16, in_ch=8)
    weights = {n.name: sum(v.nbytes for v in n.inputs if v is not None and v.is_constant) for n in g.nodes
               if n.op_type == "Conv"}
    assert weights["conv0"] <= SLICE_BYTES < weights["conv1"]
    t = small_target(width=4, height=4, sram_kib=1024, reserved_kib=64)
    plain, sliced = copy_graph(g), copy_graph(g)
    cut_for_parallelism(plain, t, pieces_per_core=1.0)
    cut_for_parallelism(sliced, t, pieces_per_core=1.0, slices=2)
    bands = [n for n in plain.nodes if n.op_type == "Conv" and n.name.startswith("conv1")]
    pieces = [n for n in sliced.nodes if n.op_type == "Conv" and n.name.startswith("conv1")]
    assert len(bands) >= 2 and len(pieces) == 2 * len(bands)
    assert all(n.outputs[0].shape[1] == 32 and n.inputs[1].shape[0] == 32 for n in pieces)
    assert sum(n.outputs[0].shape[1] * n.outputs[0].shape[2] for n in pieces) == 64 * 16
    assert ([n.name for n in plain.nodes if n.name.startswith("conv0")]
            == [n.name for n in sliced.nodes if n.name.startswith("conv0")])
    feeds = random_inputs(g, 7)
    assert max_relative_error(run(g, feeds), run(sliced, feeds)) <= 1e-6


@pytest.mark.parametrize("floor,pieces", [(16, 5), (2, 2)])
def test_with_sram_to_spare_the_floor_of_pieces_bounds_the_short_pieces(floor, pieces):
    """Eight convs of 4.1 us on 64 cores at a quarter of a piece per core: the share of the
    work cuts each in 2; with SRAM to spare each is cut into pieces of about 1 us (5), up to
    ``floor_pieces``, which :func:`~corefold.backend.lower.lower` halves with the pieces per
    core on each try after a resource ran out. The outputs stay the graph's."""
    g = _pointwise_chain(8)
    t = small_target(width=8, height=8, sram_kib=1024, reserved_kib=4)
    cut = copy_graph(g)
    cut_for_parallelism(cut, t, pieces_per_core=0.25, floor_pieces=floor)
    for i in range(8):
        assert len([n for n in cut.nodes if n.op_type == "Conv" and n.name.startswith(f"pw{i}_")]) == pieces, i
    feeds = random_inputs(g, 7)
    assert max_relative_error(run(g, feeds), run(cut, feeds)) <= 1e-6


def test_the_floor_of_pieces_has_one_default():
    """``FLOOR_PIECES`` (the floor :func:`cut_for_parallelism` and ``tile`` use unless told)
    and ``LowerSettings.floor_pieces`` (what ``lower`` passes) are the same number, so a
    lowering and a direct cut agree."""
    assert LowerSettings().floor_pieces == FLOOR_PIECES == 16


def test_a_grouped_pointwise_conv_with_too_few_rows_is_cut_into_its_groups():
    """ShuffleNet's pattern: a 3 x 3 convolution cut into row bands, then a 1 x 1
    convolution of four groups on a 7 x 7 map whose weights outweigh its input: too few rows
    for its time, so it takes a channel cut, which for a grouped convolution is whole groups
    (until stop 53 it found no channel axis and ran as one piece). The outputs stay."""
    rng = np.random.default_rng(4)
    g = Graph("grouped")
    x = g.add_input("x", (1, 64, 7, 7), "float32")
    w0 = g.add_constant("w0", (rng.standard_normal((64, 64, 3, 3)) / 24).astype(np.float32))
    c0 = g.make_node("Conv", [x, w0], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, name="c0")
    infer_node(c0)
    w1 = g.add_constant("w1", (rng.standard_normal((512, 16, 1, 1)) / 4).astype(np.float32))
    c1 = g.make_node("Conv", [c0.outputs[0], w1], {"kernel_shape": [1, 1], "group": 4}, name="gc")
    infer_node(c1)
    g.outputs = [c1.outputs[0]]
    t = small_target(width=8, height=8, sram_kib=1024, reserved_kib=4)
    cut = copy_graph(g)
    cut_for_parallelism(cut, t, pieces_per_core=8.0)
    rows = [n for n in cut.nodes if n.op_type == "Conv" and n.name.startswith("c0")]
    pieces = [n for n in cut.nodes if n.op_type == "Conv" and n.name.startswith("gc")]
    assert len(rows) >= 2 and len(pieces) == 4
    assert all(n.attrs.get("group", 1) == 1 and n.inputs[1].shape == (128, 16, 1, 1) for n in pieces)
    feeds = random_inputs(g, 7)
    assert max_relative_error(run(g, feeds), run(cut, feeds)) <= 1e-6


def _shuffle_unit(seed: int = 5):
    """ShuffleNet's unit as the onnx package's Caffe2 export writes it: a 1 x 1 convolution
    of four groups -> Relu -> channel shuffle (``Reshape (1, 4, 12, H, W) -> Transpose (0, 2,
    1, 3, 4) -> Reshape (1, 48, H, W)``) -> 3 x 3 depthwise convolution of stride 2 -> 1 x 1
    convolution of four groups, with seeded random weights."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    h = 32
    inits = [numpy_helper.from_array((rng.standard_normal((48, 4, 1, 1)) / 2).astype(np.float32), "w0"),
             numpy_helper.from_array((rng.standard_normal((48, 1, 3, 3)) / 3).astype(np.float32), "w1"),
             numpy_helper.from_array((rng.standard_normal((48, 12, 1, 1)) / 3).astype(np.float32), "w2"),
             numpy_helper.from_array(np.array([1, 4, 12, h, h], np.int64), "split"),
             numpy_helper.from_array(np.array([1, 48, h, h], np.int64), "merge")]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], group=4, kernel_shape=[1, 1], name="gconv0"),
             helper.make_node("Relu", ["c0"], ["r0"], name="relu"),
             helper.make_node("Reshape", ["r0", "split"], ["s0"], name="split"),
             helper.make_node("Transpose", ["s0"], ["s1"], perm=[0, 2, 1, 3, 4], name="shuffle"),
             helper.make_node("Reshape", ["s1", "merge"], ["s2"], name="merge"),
             helper.make_node("Conv", ["s2", "w1"], ["c1"], group=48, kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                              strides=[2, 2], name="dwconv"),
             helper.make_node("Conv", ["c1", "w2"], ["y"], group=4, kernel_shape=[1, 1], name="gconv1")]
    return helper.make_model(helper.make_graph(
        nodes, "shuffle", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, h, h])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits),
        opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("int8", [False, True])
def test_a_channel_shuffle_behind_row_bands_is_shuffled_band_by_band(int8, tmp_path):
    """The shuffle's reshapes regroup only the channels, so a band of rows of every channel
    stays a box through them (``boxes.kept_suffix``): the Transpose follows the convolution's
    row bands, the depthwise convolution after it follows them too, and no task gathers the
    whole tensor (until stop 54 one core gathered it, shuffled it in channel parts and sent
    the whole of it to each band of the depthwise convolution: the onnx package's int8
    ShuffleNet 106.8 -> 47.7 us). The executable computes what the executor does (float,
    1e-5 of the output's scale: the pieces' sums are the same sums, BLAS may block them
    otherwise) or exactly what the integer runner does (int8)."""
    from corefold.backend import check_executable, run_executable
    from corefold.backend.lgraph import build
    from corefold.backend.tile import tile
    from corefold.frontend.onnx import from_onnx
    from corefold.passes.quantize import QuantizeSettings, load_calibration, quantize_graph
    from corefold.passes.quantize.integer import IntegerRunner

    g = from_onnx(_shuffle_unit())
    if int8:
        rng = np.random.default_rng(1)
        np.savez(tmp_path / "calib.npz", x=rng.standard_normal((8, 16, 32, 32)).astype(np.float32))
        quantize_graph(g, load_calibration(tmp_path / "calib.npz", g),
                       QuantizeSettings(calibration="minmax", weight_rounding="nearest"), progress=False)
    t = small_target(width=8, height=8, sram_kib=1024, reserved_kib=4)
    tiled = tile(g, t, pieces_per_core=8.0)
    shuffles = [n for n in tiled.nodes if n.op_type == "Transpose"]
    assert len(shuffles) >= 2
    # each piece reads a band of rows (axis 3 of the 5-axis view), every channel group whole
    assert all(n.inputs[0].shape[:3] == (1, 4, 12) and n.inputs[0].shape[3] < 32 for n in shuffles)
    assert any("rows" in n.name for n in tiled.nodes if n.name.startswith("dwconv"))
    lg = build(tiled, t)
    assert not [task.name for task in lg.tasks if task.name.endswith("_gather") or
                (task.op is not None and task.op.op_type == "Reshape")]
    exe = lower(g, t)
    check_executable(exe, t)
    feeds = random_inputs(g, 3)
    got = run_executable(exe, feeds)
    if int8:
        want = IntegerRunner(g).run(feeds)
        assert all(np.array_equal(want[k], got[k]) for k in want)
    else:
        assert max_relative_error(run(g, feeds), got) <= 1e-5


def _heavy_conv(seed: int = 0) -> Graph:
    """conv 3x3 stride 2 (16 -> 32 channels, 16 x 16 -> 8 x 8) -> conv 3x3 (32 -> 192 on
    8 x 8): the second's weights (216 KiB, within a weight piece of a 1 MiB core) are 27
    times its input (8 KiB), as the 3 x 3 convolutions of a late Inception module's 7 x 7
    maps."""
    return _convs("heavy", (1, 16, 16, 16), [
        ("conv0", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, (32, 16, 3, 3)),
        ("heavy", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, (192, 32, 3, 3))], 24, seed)


@pytest.mark.parametrize("heavy_channels", [False, True])
def test_heavy_channels_cut_a_conv_whose_weights_dwarf_its_few_rows_on_output_channels(heavy_channels):
    """With SRAM to spare every convolution is cut in rows, each band copying the whole
    weights: an 8 x 8 map gives 4 bands of two rows, fewer than the heavy convolution's
    time asks for. With ``heavy_channels`` (a tiling knob the lowering tries) its weights,
    over ``HEAVY_WEIGHTS`` times its input, are cut on output channels instead: each piece
    keeps its share of them and reads the whole input, so no weight is copied (the held-out
    int8 Inception v2, whose 3 x 3 convolutions of 224 channels on 7 x 7 ran their bands on
    one core: 230.6 -> 188.8 us). The first convolution, lighter than its input, keeps its
    rows. Outputs agree within 1e-6 (no reduction is split), and the lowering of the cut
    graph simulates to the executor's outputs."""
    from corefold.backend.parallel import HEAVY_WEIGHTS

    g = _heavy_conv()
    heavy = g.nodes[1]
    assert heavy.inputs[1].nbytes > HEAVY_WEIGHTS * heavy.inputs[0].nbytes
    t = small_target(width=4, height=4, sram_kib=1024, reserved_kib=64)
    cut = copy_graph(g)
    cut_for_parallelism(cut, t, pieces_per_core=2.0, heavy_channels=heavy_channels)
    pieces = [n for n in cut.nodes if n.op_type == "Conv" and n.name.startswith("heavy")]
    first = [n for n in cut.nodes if n.op_type == "Conv" and n.name.startswith("conv0")]
    assert len(first) >= 2 and all(n.outputs[0].shape[2] < 8 for n in first)
    if heavy_channels:
        assert len(pieces) > 4
        assert all(n.inputs[0].shape == (1, 32, 8, 8) and n.outputs[0].shape[2:] == (8, 8) for n in pieces)
        assert [n.inputs[1].shape[0] for n in pieces] == [n.outputs[0].shape[1] for n in pieces]
        assert sum(n.outputs[0].shape[1] for n in pieces) == 192
    else:
        assert pieces and all(n.outputs[0].shape[2] < 8 for n in pieces)
        assert sum(n.inputs[1].nbytes for n in pieces) > heavy.inputs[1].nbytes  # copied per band
    feeds = random_inputs(g, 10)
    want = run(g, feeds)
    assert max_relative_error(want, run(cut, feeds)) <= 1e-6
    exe = lower(g, t, LowerSettings(order_budget_seconds=0.0, pieces_per_core=2.0,
                                    heavy_channels=(heavy_channels,)))
    ran = {exe.ops[i.op].name for p in exe.programs for i in p.instructions if isinstance(i, Compute)}
    ran = [n for n in ran if n.startswith("heavy")]
    assert len(ran) > 4 and all(("_rows" in n) != heavy_channels for n in ran)
    # split reductions reassociate: float32 within 1e-5 of the output scale
    assert max_relative_error(want, run_simulation(exe, feeds, t).outputs) <= 1e-5

