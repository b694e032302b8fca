"""The BatchNormalization fold: outputs before and after (executor and ONNX Runtime), what
folds and what must not. Tolerance: the fold multiplies the weights by the normalisation's
scale before the convolution sums, not after, so each output moves by float32 rounding of a
few sums (observed up to 3e-7 of the output's scale); 1e-5 leaves room for any BLAS kernel."""

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from corefold.executor import random_inputs, run
from corefold.frontend.onnx import from_onnx, load_model
from corefold.frontend.onnx.check import ort_run
from corefold.frontend.onnx.exporter import to_onnx
from corefold.passes.fold import FoldPass, fold_batchnorm, normalisations_as_convs, sums_as_adds
from corefold.pipeline import CompileContext, Pipeline

RTOL = 1e-5
LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def _close(want: dict, got: dict) -> float:
    """Largest |got - want| over the outputs, relative to each output's largest magnitude."""
    return max(float(np.abs(got[k] - w).max()) / (float(np.abs(w).max()) or 1.0) for k, w in want.items())


def _model(tail: list[tuple[str, dict]], bias: bool = True, consumers: int = 1, seed: int = 0,
           outputs: tuple[str, ...] = ()) -> onnx.ModelProto:
    """x (1, 3, 8, 8) -> Conv 3x3 to 6 channels [-> each op of ``tail``] -> Relu -> y, with
    seeded random constants. ``tail``: (op, spec) with spec ``{"const": shape, "first": bool}``
    for a binary op (the constant first when ``first``), ``{"training_mode": 1}`` or {} for
    a BatchNormalization. ``consumers`` 2: the Conv's output is also read by a Sigmoid (a
    second output). ``outputs``: further graph outputs, by value name."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.standard_normal((6, 3, 3, 3)).astype(np.float32), "w")]
    conv_in = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(6).astype(np.float32), "b"))
        conv_in.append("b")
    nodes = [helper.make_node("Conv", conv_in, ["c"], pads=[1, 1, 1, 1], name="conv")]
    prev = "c"
    for i, (op, spec) in enumerate(tail):
        out = f"t{i}"
        if op == "BatchNormalization":
            names = [f"bn{i}_{k}" for k in ("scale", "bias", "mean", "var")]
            vals = [rng.standard_normal(6), rng.standard_normal(6), rng.standard_normal(6), rng.uniform(0.5, 2, 6)]
            inits += [numpy_helper.from_array(v.astype(np.float32), n) for n, v in zip(names, vals, strict=True)]
            nodes.append(helper.make_node(op, [prev, *names], [out], epsilon=1e-3, name=f"bn{i}",
                                          **({"training_mode": 1} if spec.get("training_mode") else {})))
        else:
            c = rng.uniform(0.5, 2.0, spec["const"]).astype(np.float32)
            inits.append(numpy_helper.from_array(c, f"k{i}"))
            ins = [f"k{i}", prev] if spec.get("first") else [prev, f"k{i}"]
            nodes.append(helper.make_node(op, ins, [out], name=f"{op.lower()}{i}"))
        prev = out
    nodes.append(helper.make_node("Relu", [prev], ["y"], name="relu"))
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if consumers == 2:
        nodes.append(helper.make_node("Sigmoid", ["c"], ["s"], name="sigmoid"))
        outs.append(helper.make_tensor_value_info("s", TensorProto.FLOAT, None))
    outs += [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])], outs,
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)])


@pytest.mark.parametrize("tail,bias,folded", [
    ([("BatchNormalization", {})], True, 1),
    ([("BatchNormalization", {})], False, 1),
    # the onnx package's Inception v2 and DenseNet-121: Conv -> BN -> Mul -> Add -> Relu
    ([("BatchNormalization", {}), ("Mul", {"const": (6, 1, 1)}), ("Add", {"const": (6, 1, 1)})], False, 3),
    ([("Mul", {"const": (1, 6, 1, 1), "first": True}), ("Sub", {"const": ()}), ("Div", {"const": (1,)})], True, 3),
    ([("Add", {"const": (6, 1, 1), "first": True}), ("BatchNormalization", {})], True, 2),
])
def test_a_chain_of_per_channel_affine_nodes_folds_into_the_conv(tail, bias, folded):
    model = _model(tail, bias)
    g = from_onnx(model)
    feeds = random_inputs(g, seed=3)
    want = run(g, feeds)
    assert fold_batchnorm(g) == folded
    assert [n.op_type for n in g.nodes] == ["Conv", "Relu"]
    assert _close(want, run(g, feeds)) <= RTOL
    # the folded model loads in ONNX Runtime and computes what the original does there
    assert _close(ort_run(model, feeds), ort_run(to_onnx(g), feeds)) <= RTOL
    assert [v.name for v in g.outputs] == ["y"]


@pytest.mark.parametrize("tail,kwargs,left", [
    ([("BatchNormalization", {})], {"consumers": 2}, ["Conv", "BatchNormalization", "Relu", "Sigmoid"]),
    ([("Mul", {"const": (1, 6, 8, 8)})], {}, ["Conv", "Mul", "Relu"]),  # not per channel
    ([("Sub", {"const": (6, 1, 1), "first": True})], {}, ["Conv", "Sub", "Relu"]),  # k - x
    ([("Div", {"const": (6, 1, 1), "first": True})], {}, ["Conv", "Div", "Relu"]),  # k / x
    ([("Add", {"const": (6, 8, 1)})], {}, ["Conv", "Add", "Relu"]),
    # a chain stops at a graph output, which another node reads too: the rest stays
    ([("BatchNormalization", {}), ("Mul", {"const": (6, 1, 1)})], {"outputs": ("t0",)}, ["Conv", "Mul", "Relu"]),
    ([("Mul", {"const": (6, 1, 1)}), ("BatchNormalization", {})], {"outputs": ("t1",)}, ["Conv", "Relu"]),
])
def test_what_is_not_a_per_channel_affine_of_the_conv_alone_stays(tail, kwargs, left):
    g = from_onnx(_model(tail, **kwargs))
    feeds = random_inputs(g, seed=3)
    want = run(g, feeds)
    fold_batchnorm(g)
    assert [n.op_type for n in g.nodes] == left
    assert sorted(want) == sorted(v.name for v in g.outputs)
    assert _close(want, run(g, feeds)) <= RTOL


def test_a_chain_ending_in_a_graph_output_folds_and_the_output_keeps_its_name():
    """Conv -> BatchNormalization -> Mul, the Mul's output a graph output read by the Relu
    too: both fold, and the Conv's output is called as the Mul's was."""
    model = _model([("BatchNormalization", {}), ("Mul", {"const": (6, 1, 1)})], outputs=("t1",))
    g = from_onnx(model)
    feeds = random_inputs(g, seed=3)
    want = run(g, feeds)
    assert fold_batchnorm(g) == 2
    assert [n.op_type for n in g.nodes] == ["Conv", "Relu"] and g.nodes[0].outputs[0].name == "t1"
    assert [v.name for v in g.outputs] == ["y", "t1"]
    assert _close(want, run(g, feeds)) <= RTOL
    assert _close(ort_run(model, feeds), ort_run(to_onnx(g), feeds)) <= RTOL


def test_a_chain_after_a_normalisation_folds_into_it():
    """DenseNet-121's dense layers open with BatchNormalization -> Mul -> Add on the
    concatenated features (no convolution before them to fold into): the Mul and Add fold
    into the normalisation's scale and bias."""
    rng = np.random.default_rng(2)
    bn = [rng.standard_normal(6), rng.standard_normal(6), rng.standard_normal(6), rng.uniform(0.5, 2, 6)]
    inits = [numpy_helper.from_array(v.astype(np.float32), n) for n, v in zip("sbmv", bn, strict=True)]
    inits += [numpy_helper.from_array(rng.uniform(0.5, 2, (6, 1, 1)).astype(np.float32), "k"),
              numpy_helper.from_array(rng.standard_normal((1, 6, 1, 1)).astype(np.float32), "d")]
    nodes = [helper.make_node("Concat", ["x1", "x2"], ["c"], axis=1),
             helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"]),
             helper.make_node("Mul", ["n", "k"], ["p"]), helper.make_node("Add", ["d", "p"], ["q"]),
             helper.make_node("Relu", ["q"], ["y"])]
    model = helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 3, 5, 5]) for n in ("x1", "x2")],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits),
        opset_imports=[helper.make_opsetid("", 15)])
    g = from_onnx(model)
    feeds = random_inputs(g, seed=0)
    want = run(g, feeds)
    assert fold_batchnorm(g) == 2
    assert [n.op_type for n in g.nodes] == ["Concat", "BatchNormalization", "Relu"]
    assert _close(want, run(g, feeds)) <= RTOL
    assert _close(ort_run(model, feeds), ort_run(to_onnx(g), feeds)) <= RTOL


def test_a_division_by_zero_or_a_negative_variance_stays():
    """Folded, a division by zero would put infinities into the weights, and a variance below
    ``-epsilon`` NaN: the node stays, and computes what it did."""
    model = _model([("Div", {"const": (6, 1, 1)})])
    g = from_onnx(model)
    div = next(n for n in g.nodes if n.op_type == "Div")
    k = div.inputs[1].const.copy()
    k[0, 0, 0] = 0.0
    div.inputs[1].set_const(k)
    assert fold_batchnorm(g) == 0
    model = _model([("BatchNormalization", {})])
    g = from_onnx(model)
    bn = next(n for n in g.nodes if n.op_type == "BatchNormalization")
    var = bn.inputs[4].const.copy()
    var[2] = -1.0
    bn.inputs[4].set_const(var)
    assert fold_batchnorm(g) == 0 and [n.op_type for n in g.nodes] == ["Conv", "BatchNormalization", "Relu"]


def test_a_normalisation_in_training_mode_stays():
    g = from_onnx(_model([("BatchNormalization", {"training_mode": 1})]))
    assert fold_batchnorm(g) == 0 and len(g.nodes) == 3


def test_a_weight_another_node_reads_is_not_changed_for_it():
    """Two convolutions share one weight; only one has a normalisation after it."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((4, 2, 1, 1)).astype(np.float32)
    bn = [rng.standard_normal(4), rng.standard_normal(4), rng.standard_normal(4), rng.uniform(0.5, 2, 4)]
    inits = [numpy_helper.from_array(w, "w")] + [numpy_helper.from_array(v.astype(np.float32), n)
                                                 for n, v in zip("sbmv", bn, strict=True)]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c1"]), helper.make_node("Conv", ["x", "w"], ["c2"]),
             helper.make_node("BatchNormalization", ["c1", "s", "b", "m", "v"], ["n1"]),
             helper.make_node("Relu", ["n1"], ["y1"])]
    model = helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5, 5])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y1", "c2")], inits),
        opset_imports=[helper.make_opsetid("", 15)])
    g = from_onnx(model)
    feeds = random_inputs(g, seed=0)
    want = run(g, feeds)
    assert fold_batchnorm(g) == 1
    assert np.array_equal(g.node(g.nodes[1].name).inputs[1].const, w)
    assert _close(want, run(g, feeds)) <= RTOL


def _randomised(graph, seed: int = 0) -> None:
    """The light models' constants are all 0.02: every float constant of more than one
    element becomes seeded noise (a variance stays positive), so that a wrong fold shows."""
    rng = np.random.default_rng(seed)
    for v in list(graph.values()):
        if v.const is not None and v.const.dtype == np.float32 and v.const.size > 1:
            data = rng.standard_normal(v.const.shape).astype(np.float32) * 0.1
            if any(u.node.op_type == "BatchNormalization" and u.index == 4 for u in v.uses()):
                data = np.abs(data) + 0.5
            v.set_const(data)


@pytest.mark.parametrize("name,folded,sums", [("shufflenet", 49, 13), ("inception_v2", 207, 0),
                                             ("densenet121", 301, 0), ("resnet50", 53, 16)])
def test_the_onnx_packages_real_models_fold_with_the_same_outputs(name, folded, sums):
    """Models no one here wrote (Caffe2 exports shipped by the onnx package): every
    Conv -> BatchNormalization (-> Mul -> Add) chain folds, the logits stay."""
    g = load_model(LIGHT / f"light_{name}.onnx")
    _randomised(g)
    g.outputs = [g.nodes[-1].inputs[0]]  # the logits: the Softmax of random weights saturates
    feeds = random_inputs(g, seed=0)
    want = run(g, feeds)
    ctx = CompileContext()
    Pipeline([FoldPass()]).run(g, ctx)
    assert ctx.reports[-1] == ("fold", {"folded": folded, "sums_as_adds": sums})
    assert not any(n.op_type == "Sum" for n in g.nodes)
    # DenseNet-121's 62 normalisations of concatenated features stay (their Mul and Add fold)
    assert sum(n.op_type == "BatchNormalization" for n in g.nodes) == (62 if name == "densenet121" else 0)
    assert _close(want, run(g, feeds)) <= RTOL
    # ... and become depthwise convolutions, as the quantizer makes them
    assert normalisations_as_convs(g) == (62 if name == "densenet121" else 0)
    assert not any(n.op_type == "BatchNormalization" for n in g.nodes)
    assert _close(want, run(g, feeds)) <= RTOL


@pytest.mark.parametrize("preset,folded", [("default", 3), ("seed", 0)])
def test_the_quantizer_folds_before_calibrating_unless_the_seeds_rule_is_asked(tmp_path, preset, folded):
    """M5 folds the chain first (``fold_batchnorm``; not in the seed's literal preset): the
    QDQ model has one quantized Conv, loads in ONNX Runtime, and stays near the float one."""
    from corefold.frontend.onnx.check import ort_session
    from corefold.passes.quantize import QuantizeSettings, load_calibration, quantize_graph
    from corefold.settings import preset as settings_preset

    tail = [("BatchNormalization", {}), ("Mul", {"const": (6, 1, 1)}), ("Add", {"const": (6, 1, 1)})]
    model = _model(tail, bias=False)
    g = from_onnx(model)
    rng = np.random.default_rng(5)
    np.savez(tmp_path / "calib.npz", x=rng.standard_normal((16, 3, 8, 8)).astype(np.float32))
    res = quantize_graph(g, load_calibration(tmp_path / "calib.npz", g), settings_preset(QuantizeSettings, preset),
                         progress=False)
    assert res.report["folded"] == folded
    ops = [n.op_type for n in g.nodes]
    assert ("BatchNormalization" in ops) == (folded == 0) and ops.count("Conv") == 1
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    got = ort_session(to_onnx(g), qdq_exact=True).run(None, {"x": x})[0]
    want = ort_run(model, {"x": x})["y"]
    sqnr = 10 * np.log10(np.sum(want.astype(np.float64) ** 2) / np.sum((got - want).astype(np.float64) ** 2))
    assert sqnr > 25


def test_a_sum_of_two_is_an_add_and_computes_the_same_bits():
    """Caffe2's residual ``Sum(a, b)`` (broadcasting, as Add does) becomes ``Add(a, b)`` with
    its name and output kept; a Sum of one or three inputs stays. The outputs are bitwise the
    same, in the executor and in ONNX Runtime."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Sum", ["x", "r"], ["s2"], name="residual"),
             helper.make_node("Sum", ["s2", "b"], ["y"], name="broadcast"),
             helper.make_node("Sum", ["y", "x", "r"], ["z"], name="three"),
             helper.make_node("Sum", ["z"], ["one"], name="single")]
    model = helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "one")],
        [numpy_helper.from_array(np.float32([[[0.5]], [[-1.5]], [[2.0]]]), "b")]),
        opset_imports=[helper.make_opsetid("", 13)])
    g = from_onnx(model)
    feeds = random_inputs(g, seed=0)
    want = run(g, feeds)
    assert sums_as_adds(g) == 2
    assert [(n.name, n.op_type) for n in g.nodes] == [("relu", "Relu"), ("residual", "Add"), ("broadcast", "Add"),
                                                     ("three", "Sum"), ("single", "Sum")]
    assert [v.name for v in g.outputs] == ["y", "one"]
    got = run(g, feeds)
    assert all(np.array_equal(want[k], got[k]) for k in want)
    ort_want, ort_got = ort_run(model, feeds), ort_run(to_onnx(g), feeds)
    assert all(np.array_equal(ort_want[k], ort_got[k]) for k in ort_want)


def test_the_quantizer_computes_a_residual_sum_of_two_scales_in_integers(tmp_path):
    """A residual ``Sum(conv(x), x)``: its inputs take two scales, so as a Sum it ran in
    float between a DequantizeLinear and a QuantizeLinear; as the Add the quantizer makes
    of it, the integer runner computes it from the integers, within one output step of ONNX
    Runtime."""
    from corefold.frontend.onnx.check import ort_session
    from corefold.passes.quantize import QuantizeSettings, load_calibration, quantize_graph
    from corefold.passes.quantize.integer import IntegerRunner

    rng = np.random.default_rng(6)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Sum", ["c", "x"], ["s"], name="residual"),
             helper.make_node("Relu", ["s"], ["y"])]
    model = helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array((rng.standard_normal((4, 4, 3, 3)) * 2).astype(np.float32), "w")]),
        opset_imports=[helper.make_opsetid("", 13)])
    g = from_onnx(model)
    np.savez(tmp_path / "calib.npz", x=rng.standard_normal((16, 4, 6, 6)).astype(np.float32))
    res = quantize_graph(g, load_calibration(tmp_path / "calib.npz", g),
                         QuantizeSettings(calibration="minmax", weight_rounding="nearest"), progress=False)
    assert res.report["sums_as_adds"] == 1 and g.node("residual").op_type == "Add"
    runner = IntegerRunner(g)
    q_out = g.outputs[0].producer.inputs[0].producer  # the output's QuantizeLinear
    assert q_out.name in runner.integer_nodes
    x = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
    step = float(q_out.inputs[1].const)
    want = ort_session(to_onnx(g), qdq_exact=True).run(None, {"x": x})[0]
    got = runner.run({"x": x})[g.outputs[0].name]
    assert np.abs(got - want).max() <= step * 1.0001 + 4 * np.spacing(np.abs(want).max())


def _normalised(rank: int = 4, training: bool = False, tail: bool = True, seed: int = 2) -> onnx.ModelProto:
    """Concat(x1, x2) -> BatchNormalization [-> Mul -> Add] -> Relu -> Conv 1x1 -> y on
    inputs of ``rank`` axes (N, 3, 5[, 5]): DenseNet's dense layer, whose normalisation has no
    convolution before it. Seeded random constants."""
    rng = np.random.default_rng(seed)
    bn = [rng.standard_normal(6), rng.standard_normal(6), rng.standard_normal(6), rng.uniform(0.5, 2, 6)]
    spatial = (5, 5)[: rank - 2]
    inits = [numpy_helper.from_array(v.astype(np.float32), n) for n, v in zip("sbmv", bn, strict=True)]
    inits += [numpy_helper.from_array(rng.uniform(0.5, 2, (6,) + (1,) * len(spatial)).astype(np.float32), "k"),
              numpy_helper.from_array(rng.standard_normal((6,) + (1,) * len(spatial)).astype(np.float32), "d"),
              numpy_helper.from_array(rng.standard_normal((4, 6) + (1,) * len(spatial)).astype(np.float32), "w")]
    nodes = [helper.make_node("Concat", ["x1", "x2"], ["c"], axis=1),
             helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"], name="norm",
                              **({"training_mode": 1} if training else {}))]
    if tail:
        nodes += [helper.make_node("Mul", ["n", "k"], ["p"]), helper.make_node("Add", ["d", "p"], ["q"])]
    nodes += [helper.make_node("Relu", ["q" if tail else "n"], ["r"]),
              helper.make_node("Conv", ["r", "w"], ["y"], name="conv")] if rank > 2 else \
        [helper.make_node("Relu", ["q" if tail else "n"], ["y"])]
    return helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 3, *spatial]) for n in ("x1", "x2")],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits if rank > 2 else inits[:4]),
        opset_imports=[helper.make_opsetid("", 15)])


@pytest.mark.parametrize("rank", [3, 4])
def test_a_normalisation_with_no_convolution_before_it_becomes_a_depthwise_convolution(rank):
    """What is left after the fold (the normalisation took the Mul and Add after it)
    becomes a Conv of one 1-wide kernel per channel, with the node's name and output: the
    outputs of the executor and of ONNX Runtime stay within rounding."""
    model = _normalised(rank)
    g = from_onnx(model)
    feeds = random_inputs(g, seed=0)
    want = run(g, feeds)
    assert fold_batchnorm(g) == 2 and normalisations_as_convs(g) == 1
    assert [n.op_type for n in g.nodes] == ["Concat", "Conv", "Relu", "Conv"]
    conv = g.node("norm")
    assert conv.op_type == "Conv" and conv.attrs["group"] == 6 and conv.inputs[1].const.shape == (6,) + (1,) * (rank - 1)
    assert not any(v.name in ("s", "b", "m", "v") for v in g.values())  # the parameters no one reads are gone
    assert _close(want, run(g, feeds)) <= RTOL
    assert _close(ort_run(model, feeds), ort_run(to_onnx(g), feeds)) <= RTOL


def test_a_normalisation_that_is_no_depthwise_convolution_stays():
    """Training mode, a (N, C) input (no spatial axis for a Conv), a negative variance."""
    for g in (from_onnx(_normalised(training=True)), from_onnx(_normalised(rank=2, tail=False))):
        assert normalisations_as_convs(g) == 0 and any(n.op_type == "BatchNormalization" for n in g.nodes)
    g = from_onnx(_normalised(tail=False))
    var = g.node("norm").inputs[4]
    var.set_const(np.float32([1, 1, -2, 1, 1, 1]))
    assert normalisations_as_convs(g) == 0 and g.node("norm").op_type == "BatchNormalization"


def test_the_quantizer_computes_a_normalisation_without_a_convolution_in_integers(tmp_path):
    """DenseNet's ``Concat -> BatchNormalization -> Mul -> Add -> Relu -> Conv``: the
    quantizer folds the Mul and Add into the normalisation and makes it a depthwise
    convolution, so the integer runner computes it (Relu fused) from the integers, within
    one output step of ONNX Runtime, and the QDQ model stays above 30 dB of the float one."""
    from corefold.frontend.onnx.check import ort_session
    from corefold.passes.quantize import QuantizeSettings, load_calibration, quantize_graph
    from corefold.passes.quantize.integer import IntegerRunner

    model = _normalised()
    g = from_onnx(model)
    rng = np.random.default_rng(7)
    np.savez(tmp_path / "calib.npz", **{n: rng.standard_normal((16, 3, 5, 5)).astype(np.float32) for n in ("x1", "x2")})
    res = quantize_graph(g, load_calibration(tmp_path / "calib.npz", g),
                         QuantizeSettings(calibration="minmax", weight_rounding="nearest"), progress=False)
    assert res.report["folded"] == 2 and res.report["normalisations_as_convs"] == 1
    runner = IntegerRunner(g)
    relu = next(n for n in g.nodes if n.op_type == "Relu")
    q = relu.outputs[0].uses()[0].node
    assert q.op_type == "QuantizeLinear" and q.name in runner.integer_nodes
    assert runner.plan[q][0].name == "norm"
    feeds = {n: rng.standard_normal((1, 3, 5, 5)).astype(np.float32) for n in ("x1", "x2")}
    step = float(g.outputs[0].producer.inputs[1].const)
    want = ort_session(to_onnx(g), qdq_exact=True).run(None, feeds)[0]
    got = runner.run(feeds)[g.outputs[0].name]
    assert np.abs(got - want).max() <= step * 1.0001 + 4 * np.spacing(np.abs(want).max())
    ref = ort_run(model, feeds)["y"].astype(np.float64)
    assert 10 * np.log10(np.sum(ref ** 2) / np.sum((want - ref) ** 2)) > 30
