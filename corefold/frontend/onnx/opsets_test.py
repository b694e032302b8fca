"""Each opset normalisation: a tiny model at an old opset, imported and exported at opset 21,
gives the same ONNX Runtime outputs as the original (rtol 1e-5); the reference executor on
the imported graph agrees with ONNX Runtime too (rtol 1e-4, atol 1e-5)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from corefold import ops as op_table
from corefold.executor import run
from corefold.frontend.onnx.check import roundtrip

F = TensorProto.FLOAT


def make(nodes, inputs, outputs, opset, inits=None, out_types=None):
    """A model: ``inputs`` name -> shape (float32, or (elem_type, shape)), ``inits`` name -> array."""
    ins = []
    for name, spec in inputs.items():
        et, shape = spec if isinstance(spec, tuple) and spec and isinstance(spec[1], (list, tuple)) else (F, spec)
        ins.append(helper.make_tensor_value_info(name, et, list(shape)))
    outs = [helper.make_tensor_value_info(o, (out_types or {}).get(o, F), None) for o in outputs]
    inits = [numpy_helper.from_array(np.asarray(a), n) for n, a in (inits or {}).items()]
    graph = helper.make_graph(nodes, "t", ins, outs, initializer=inits)
    ops = [helper.make_opsetid("", opset)]
    return helper.make_model(graph, opset_imports=ops, ir_version=helper.find_min_ir_version_for(ops))


def feeds_for(model, seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    init = {t.name for t in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name in init:
            continue
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        et = vi.type.tensor_type.elem_type
        out[vi.name] = (rng.standard_normal(shape).astype(np.float32) if et == F
                        else rng.integers(0, 5, shape).astype(helper.tensor_dtype_to_np_dtype(et)))
    return out


def assert_same(model, check_graph=None):
    """Round trip through ONNX Runtime (rtol 1e-5), and the reference executor on the
    imported graph against ONNX Runtime (rtol 1e-4, atol 1e-5)."""
    feeds = feeds_for(model)
    graph, exported, want, got = roundtrip(model, feeds)
    assert set(want) == set(got)
    assert all(callable(op_table.get(n.op_type).kernel) for n in graph.nodes)
    ours = run(graph, feeds)
    for k in want:
        assert want[k].shape == got[k].shape, k
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6, err_msg=k)
        assert tuple(graph.value(k).shape) == want[k].shape
        assert graph.value(k).dtype == want[k].dtype
        if ours is not None:
            assert ours[k].shape == want[k].shape and ours[k].dtype == want[k].dtype, k
            np.testing.assert_allclose(ours[k], want[k], rtol=1e-4, atol=1e-5, err_msg=f"executor: {k}")
    assert exported.opset_import[0].version == 21
    if check_graph:
        check_graph(graph)
    return graph


N = helper.make_node
X4 = {"x": [2, 3, 5, 6]}


def ops(graph):
    return [n.op_type for n in graph.nodes]


CASES = {
    "clip_attrs_9": (make([N("Clip", ["x"], ["y"], min=-0.5, max=0.7)], X4, ["y"], 9),
                     lambda g: len(g.nodes[0].inputs) == 3 and g.nodes[0].inputs[1].is_constant),
    "clip_max_only_9": (make([N("Clip", ["x"], ["y"], max=0.2)], X4, ["y"], 9),
                        lambda g: g.nodes[0].inputs[1] is None),
    "clip_inputs_13": (make([N("Clip", ["x", "", "m"], ["y"])], X4, ["y"], 13, {"m": np.float32(0.3)}), None),
    "squeeze_unsqueeze_11": (make([N("Unsqueeze", ["x"], ["u"], axes=[0, -1]), N("Squeeze", ["u"], ["y"], axes=[0, 5])],
                                  X4, ["y"], 11), lambda g: all(len(n.inputs) == 2 for n in g.nodes)),
    "squeeze_all_9": (make([N("Squeeze", ["x"], ["y"])], {"x": [1, 3, 1, 2]}, ["y"], 9), None),
    "reduce_mean_13": (make([N("ReduceMean", ["x"], ["y"], axes=[1, -1], keepdims=0)], X4, ["y"], 13), None),
    "reduce_mean_all_9": (make([N("ReduceMean", ["x"], ["y"])], X4, ["y"], 9), None),
    "reduce_mean_18": (make([N("ReduceMean", ["x", "a"], ["y"])], X4, ["y"], 18, {"a": np.array([2], np.int64)}), None),
    "split_attr_11": (make([N("Split", ["x"], ["a", "b"], axis=3, split=[2, 4])], X4, ["a", "b"], 11), None),
    "split_equal_9": (make([N("Split", ["x"], ["a", "b", "c"], axis=3)], X4, ["a", "b", "c"], 9),
                      lambda g: g.nodes[0].inputs[1].const.tolist() == [2, 2, 2]),
    "split_num_outputs_18": (make([N("Split", ["x"], ["a", "b", "c"], axis=2, num_outputs=3)], X4, ["a", "b", "c"], 18),
                             lambda g: g.nodes[0].inputs[1].const.tolist() == [2, 2, 1]),
    "slice_attrs_9": (make([N("Slice", ["x"], ["y"], starts=[1, -4], ends=[100, -1], axes=[1, 3])], X4, ["y"], 9), None),
    "slice_steps_13": (make([N("Slice", ["x", "s", "e", "a", "st"], ["y"])], X4, ["y"], 13,
                            {"s": np.array([-1, 4, 0], np.int64), "e": np.array([-100, 0, 9], np.int64),
                             "a": np.array([3, 2, 1], np.int64), "st": np.array([-2, -1, 2], np.int64)}), None),
    "pad_attrs_9": (make([N("Pad", ["x"], ["y"], pads=[0, 1, 2, 0, 0, 0, 1, 3], value=1.5)], X4, ["y"], 9), None),
    "pad_reflect_9": (make([N("Pad", ["x"], ["y"], mode="reflect", pads=[0, 0, 2, 1, 0, 0, 1, 2])], X4, ["y"], 9), None),
    "pad_edge_13": (make([N("Pad", ["x", "p"], ["y"], mode="edge")], X4, ["y"], 13,
                         {"p": np.array([0, 0, 1, 2, 0, 0, 3, 0], np.int64)}), None),
    "pad_axes_negative_18": (make([N("Pad", ["x", "p", "v", "a"], ["y"])], X4, ["y"], 18,
                                  {"p": np.array([1, -2, 2, 1], np.int64), "v": np.float32(-1),
                                   "a": np.array([1, -1], np.int64)}), None),
    "dropout_ratio_9": (make([N("Dropout", ["x"], ["y", "m"], ratio=0.3)], X4, ["y"], 9),
                        lambda g: g.nodes[0].inputs[1].const.item() == np.float32(0.3)),
    "dropout_mask_used_9": (make([N("Dropout", ["x"], ["y", "m"], ratio=0.3), N("Mul", ["y", "m"], ["z"])],
                                 X4, ["z"], 9), lambda g: ops(g) == ["Dropout", "Mul"]),
    "dropout_12": (make([N("Dropout", ["x", "r"], ["y", "m"])], X4, ["y", "m"], 12, {"r": np.float32(0.2)},
                        {"m": TensorProto.BOOL}), None),
    "batchnorm_spatial_7": (make([N("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-3, spatial=1)],
                                 X4, ["y"], 7, {"s": np.float32([1, 2, 3]), "b": np.float32([0, 1, -1]),
                                                "m": np.float32([0.5, 0, 1]), "v": np.float32([1, 2, 0.5])}),
                            lambda g: "spatial" not in g.nodes[0].attrs),
    "batchnorm_15": (make([N("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])], X4, ["y"], 15,
                          {"s": np.float32([1, 2, 3]), "b": np.float32([0, 1, -1]),
                           "m": np.float32([0.5, 0, 1]), "v": np.float32([1, 2, 0.5])}), None),
    "softmax_coerce_11": (make([N("Softmax", ["x"], ["y"], axis=1)], X4, ["y"], 11),
                          lambda g: ops(g) == ["Flatten", "Softmax", "Reshape"]),
    "softmax_default_axis_9": (make([N("Softmax", ["x"], ["y"])], {"x": [2, 7]}, ["y"], 9),
                               lambda g: g.nodes[0].attrs == {"axis": -1}),
    "softmax_13": (make([N("Softmax", ["x"], ["y"], axis=1)], X4, ["y"], 13), lambda g: ops(g) == ["Softmax"]),
    "upsample_nearest_9": (make([N("Upsample", ["x", "s"], ["y"], mode="nearest")], X4, ["y"], 9,
                                {"s": np.float32([1, 1, 3, 2])}), lambda g: ops(g) == ["Resize"]),
    "upsample_attr_7": (make([N("Upsample", ["x"], ["y"], mode="nearest", scales=[1.0, 1.0, 2.0, 3.0])], X4, ["y"], 7),
                        None),
    "resize_linear_10": (make([N("Resize", ["x", "s"], ["y"], mode="linear")], X4, ["y"], 10,
                              {"s": np.float32([1, 1, 2, 3])}), None),
    "resize_nearest_10": (make([N("Resize", ["x", "s"], ["y"], mode="nearest")], X4, ["y"], 10,
                               {"s": np.float32([1, 1, 3, 1.5])}), None),
    "resize_sizes_11": (make([N("Resize", ["x", "roi", "sc", "sz"], ["y"], mode="nearest")], X4, ["y"], 11,
                             {"roi": np.zeros(0, np.float32), "sc": np.zeros(0, np.float32),
                              "sz": np.array([2, 3, 7, 13], np.int64)}),
                        lambda g: g.nodes[0].inputs[1] is None and g.nodes[0].inputs[2] is None),
    "resize_scales_13": (make([N("Resize", ["x", "", "sc"], ["y"], mode="linear",
                                 coordinate_transformation_mode="half_pixel")], X4, ["y"], 13,
                              {"sc": np.float32([1, 1, 2, 2])}), None),
    "conv_same_upper_9": (make([N("Conv", ["x", "w"], ["y"], auto_pad="SAME_UPPER", strides=[2, 2])], X4, ["y"], 9,
                               {"w": np.random.default_rng(1).standard_normal((4, 3, 3, 2)).astype(np.float32)}),
                          lambda g: "auto_pad" not in g.nodes[0].attrs and "pads" in g.nodes[0].attrs),
    "conv_same_lower_11": (make([N("Conv", ["x", "w", "b"], ["y"], auto_pad="SAME_LOWER", strides=[1, 2])], X4, ["y"], 11,
                                {"w": np.random.default_rng(1).standard_normal((4, 3, 2, 2)).astype(np.float32),
                                 "b": np.float32([1, 2, 3, 4])}), None),
    "maxpool_same_upper_9": (make([N("MaxPool", ["x"], ["y"], auto_pad="SAME_UPPER", kernel_shape=[3, 2], strides=[2, 2])],
                                  X4, ["y"], 9), None),
    "avgpool_valid_ceil_11": (make([N("AveragePool", ["x"], ["y"], auto_pad="VALID", kernel_shape=[2, 2], strides=[2, 2],
                                      ceil_mode=1)], X4, ["y"], 11), None),
    "maxpool_ceil_pads_12": (make([N("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                                     ceil_mode=1)], X4, ["y"], 12), None),
    "conv_transpose_output_shape_11": (make([N("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], output_shape=[10, 12])],
                                            X4, ["y"], 11,
                                            {"w": np.random.default_rng(2).standard_normal((3, 2, 3, 3)).astype(np.float32)}),
                                       lambda g: "output_shape" not in g.nodes[0].attrs),
    "conv_transpose_pads_9": (make([N("ConvTranspose", ["x", "w"], ["y"], strides=[2, 1], pads=[1, 0, 0, 1],
                                      output_padding=[1, 0], group=3)], X4, ["y"], 9,
                                   {"w": np.random.default_rng(2).standard_normal((3, 2, 3, 3)).astype(np.float32)}), None),
    "conv_transpose_same_upper_11": (make([N("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], auto_pad="SAME_UPPER")],
                                          X4, ["y"], 11,
                                          {"w": np.random.default_rng(2).standard_normal((3, 2, 4, 3)).astype(np.float32)}),
                                     lambda g: g.value("y").shape == (2, 2, 10, 12)),
    "conv_transpose_same_lower_13": (make([N("ConvTranspose", ["x", "w"], ["y"], strides=[2, 3], auto_pad="SAME_LOWER")],
                                          X4, ["y"], 13,
                                          {"w": np.random.default_rng(2).standard_normal((3, 2, 3, 4)).astype(np.float32)}),
                                     None),
    "cast_9": (make([N("Cast", ["x"], ["y"], to=TensorProto.INT32)], X4, ["y"], 9, out_types={"y": TensorProto.INT32}),
               lambda g: g.nodes[0].attrs["to"] == "int32"),
    "constant_shape_arith_9": (make([N("Constant", [], ["c"], value=numpy_helper.from_array(np.array([0, -1], np.int64))),
                                     N("Shape", ["x"], ["s"]),
                                     N("Gather", ["s", "i"], ["g"], axis=0),
                                     N("Unsqueeze", ["g"], ["gu"], axes=[0]),
                                     N("Concat", ["gu", "c"], ["shape"], axis=0),
                                     N("Reshape", ["x", "shape"], ["y"])], X4, ["y"], 9,
                                    {"i": np.array(1, np.int64)}),
                               lambda g: ops(g) == ["Reshape"] and g.nodes[0].inputs[1].const.tolist() == [3, 0, -1]),
    "constant_of_shape_9": (make([N("ConstantOfShape", ["s"], ["c"], value=numpy_helper.from_array(np.float32([0.5]))),
                                  N("Add", ["x", "c"], ["y"])], X4, ["y"], 9, {"s": np.array([5, 6], np.int64)}),
                            lambda g: g.nodes[0].inputs[1].const.strides == (0, 0)),
    "constant_floats_13": (make([N("Constant", [], ["c"], value_floats=[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
                                 N("Mul", ["x", "c"], ["y"])], X4, ["y"], 13), None),
    "quantize_10": (make([N("QuantizeLinear", ["x", "s", "z"], ["q"]), N("DequantizeLinear", ["q", "s", "z"], ["y"])],
                         X4, ["y"], 10, {"s": np.float32(0.02), "z": np.uint8(128)}), None),
    "qdq_weights_kept_13": (make([N("DequantizeLinear", ["wq", "s"], ["w"], axis=0), N("Conv", ["x", "w"], ["y"])],
                                 X4, ["y"], 13, {"wq": np.arange(-27, 27, dtype=np.int8).reshape(2, 3, 3, 3),
                                                 "s": np.float32([0.01, 0.02])}),
                            lambda g: ops(g) == ["DequantizeLinear", "Conv"]),
    "quantize_axis_21": (make([N("QuantizeLinear", ["x", "s"], ["q"], axis=1, output_dtype=TensorProto.INT8),
                               N("DequantizeLinear", ["q", "s"], ["y"], axis=1)], X4, ["y"], 21,
                              {"s": np.float32([0.01, 0.02, 0.05])}), None),
    "layer_norm_17": (make([N("LayerNormalization", ["x", "s", "b"], ["y"], axis=-2, epsilon=1e-4)], X4, ["y"], 17,
                           {"s": np.ones((5, 6), np.float32) * 1.5, "b": np.arange(30, dtype=np.float32).reshape(5, 6)}),
                      None),
    "activations_9": (make([N("Relu", ["x"], ["a"]), N("Sigmoid", ["a"], ["b"]), N("HardSigmoid", ["b"], ["c"], alpha=0.3),
                            N("LeakyRelu", ["c"], ["d"], alpha=0.2), N("Tanh", ["d"], ["e"]), N("Erf", ["e"], ["f"]),
                            N("Sqrt", ["f"], ["g"]), N("Pow", ["g", "x"], ["h"]), N("Sum", ["h", "x", "g"], ["i"]),
                            N("Sub", ["i", "x"], ["j"]), N("Div", ["j", "two"], ["k"]),
                            N("LRN", ["k"], ["y"], size=3)], X4, ["y"], 9, {"two": np.float32(2)}), None),
    "hardswish_14": (make([N("HardSwish", ["x"], ["y"])], X4, ["y"], 14), None),
    "gemm_matmul_flatten_9": (make([N("Flatten", ["x"], ["f"], axis=2), N("Transpose", ["f"], ["t"], perm=[1, 0]),
                                    N("Gemm", ["t", "w", "b"], ["g"], transB=1, alpha=0.5, beta=2.0),
                                    N("MatMul", ["g", "w2"], ["y"])], X4, ["y"], 9,
                                   {"w": np.ones((4, 6), np.float32), "b": np.float32([1, 2, 3, 4]),
                                    "w2": np.arange(8, dtype=np.float32).reshape(4, 2)}), None),
    "global_pool_concat_9": (make([N("GlobalAveragePool", ["x"], ["p"]), N("Concat", ["p", "p"], ["y"], axis=1)],
                                  X4, ["y"], 9), None),
    "expand_identity_13": (make([N("Expand", ["x", "s"], ["e"]), N("Identity", ["e"], ["y"])], {"x": [3, 1]}, ["y"], 13,
                                {"s": np.array([2, 3, 4], np.int64)}), None),
    "gather_negative_13": (make([N("Gather", ["x", "i"], ["y"], axis=-1)], X4, ["y"], 13,
                                {"i": np.array([[-1, 0], [2, -3]], np.int64)}), None),
    # ops beyond the required set
    "logsoftmax_coerce_9": (make([N("LogSoftmax", ["x"], ["y"], axis=2)], X4, ["y"], 9),
                            lambda g: ops(g) == ["Flatten", "LogSoftmax", "Reshape"]),
    "reduce_sum_11": (make([N("ReduceSum", ["x"], ["y"], axes=[0, 2])], X4, ["y"], 11), None),
    "reduce_max_13": (make([N("ReduceMax", ["x"], ["y"], axes=[-1], keepdims=0)], X4, ["y"], 13), None),
    "misc_elementwise_13": (make([N("Abs", ["x"], ["a"]), N("Neg", ["a"], ["b"]), N("Exp", ["b"], ["c"]),
                                  N("Greater", ["c", "x"], ["m"]), N("Where", ["m", "c", "x"], ["w"]),
                                  N("Max", ["w", "x", "c"], ["mx"]), N("PRelu", ["mx", "slope"], ["pr"]),
                                  N("ArgMax", ["pr"], ["y"], axis=1, keepdims=0)], X4, ["y", "w"], 13,
                                 {"slope": np.float32([[[0.1]], [[0.2]], [[0.3]]])}, {"y": TensorProto.INT64}), None),
    "instance_norm_elu_9": (make([N("InstanceNormalization", ["x", "s", "b"], ["i"]), N("Elu", ["i"], ["y"])], X4, ["y"], 9,
                                 {"s": np.float32([1, 2, 3]), "b": np.float32([0, 1, 2])}), None),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_normalisation_matches_onnxruntime(case):
    model, check = CASES[case]
    graph = assert_same(model)
    if check is not None:
        assert check(graph), f"{case}: unexpected IR form\n{graph}"


def test_auto_pad_gives_explicit_pads():
    model = make([N("Conv", ["x", "w"], ["y"], auto_pad="SAME_UPPER", strides=[2, 2])], {"x": [1, 3, 7, 7]}, ["y"], 11,
                 {"w": np.ones((2, 3, 4, 4), np.float32)})
    graph = assert_same(model)
    # out 4, total = 3*2 + 4 - 7 = 3: upper puts the extra one at the end
    assert graph.nodes[0].attrs["pads"] == [1, 1, 2, 2]


def test_legacy_broadcast_opset6_against_numpy():
    """ONNX Runtime cannot run opset-6 Add/PRelu, so the reference here is NumPy."""
    b, c = np.float32([1, 2, 3]), np.arange(6, dtype=np.float32)
    w, bias, slope = np.ones((90, 2), np.float32), np.float32([1, 2]), np.float32([0.1, 0.2, 0.3])
    model = make([N("Add", ["x", "b"], ["a"], broadcast=1, axis=1), N("Mul", ["a", "c"], ["m"], broadcast=1),
                  N("Flatten", ["m"], ["f"]), N("Gemm", ["f", "w", "bias"], ["y"], broadcast=1),
                  N("PRelu", ["m", "s"], ["p"])],
                 X4, ["y", "p"], 6, {"b": b, "c": c, "w": w, "bias": bias, "s": slope})
    from corefold.frontend.onnx import from_onnx, to_onnx
    from corefold.frontend.onnx.check import ort_run

    graph = from_onnx(model)
    assert not any("broadcast" in n.attrs for n in graph.nodes)
    x = feeds_for(model)["x"]
    got = ort_run(to_onnx(graph), {"x": x})
    m = (x + b[None, :, None, None]) * c
    np.testing.assert_allclose(got["y"], m.reshape(2, -1) @ w + bias, rtol=1e-5)
    np.testing.assert_allclose(got["p"], np.where(m > 0, m, m * slope[None, :, None, None]), rtol=1e-6)
