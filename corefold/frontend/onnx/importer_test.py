"""Import: dynamic dimensions and their binding, folding, errors naming the culprit."""

from __future__ import annotations

import glob
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from corefold.errors import DataError, ModelError, ShapeError, UnsupportedOpError
from corefold.executor import run
from corefold.frontend.onnx import from_onnx, load_model, save_model, to_onnx
from corefold.frontend.onnx.check import ort_run, roundtrip
from corefold.ir import verify
from corefold.ops import is_fill

N = helper.make_node
LIGHT = sorted(glob.glob(os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light/*.onnx")))


def dynamic_model(opset: int = 13) -> onnx.ModelProto:
    """x: N x 3 x H x W -> Conv -> Reshape to (N, -1) via Shape/Gather/Unsqueeze/Concat ->
    Gemm; a second output slices x with ends computed from its shape."""
    rng = np.random.default_rng(3)
    inits = {
        "w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
        "zero": np.array(0, np.int64), "minus1": np.array([-1], np.int64),
        "two": np.array([2], np.int64), "three": np.array([3], np.int64), "ax": np.array([0], np.int64),
    }
    nodes = [
        N("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        N("Shape", ["c"], ["s"]),
        N("Gather", ["s", "zero"], ["n"]),
        N("Unsqueeze", ["n", "ax"], ["n1"]),
        N("Concat", ["n1", "minus1"], ["target"], axis=0),
        N("Reshape", ["c", "target"], ["flat"]),
        N("ReduceMean", ["flat"], ["y"], axes=[1], keepdims=1),
        N("Shape", ["x"], ["sx"]),
        N("Slice", ["sx", "two", "three"], ["h"]),
        N("Cast", ["h"], ["hf"], to=TensorProto.FLOAT),
        N("Slice", ["x", "ax", "h", "two"], ["z"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("y", "z", "hf")]
    g = helper.make_graph(nodes, "dyn", [x], outs,
                          initializer=[numpy_helper.from_array(a, k) for k, a in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=7)


@pytest.mark.parametrize("shape", [(1, 3, 8, 10), (2, 3, 5, 7)])
def test_dynamic_model_bound_matches_onnxruntime(shape):
    model = dynamic_model()
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    graph, exported, want, got = roundtrip(model, {"x": x}, {"x": shape})
    ours = run(graph, {"x": x})
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(ours[k], want[k], rtol=1e-4, atol=1e-5)
    # shape arithmetic folded: no Shape/Gather/Concat/Cast left, Reshape target constant
    assert [n.op_type for n in graph.nodes] == ["Conv", "Reshape", "ReduceMean", "Slice"]
    assert graph.value("target").const.tolist() == [shape[0], -1]
    assert graph.value("hf").const.tolist() == [float(shape[2])]
    assert graph.inputs[0].shape == shape
    assert graph.value("flat").shape == (shape[0], 4 * shape[2] * shape[3])


def test_unbound_dimension_names_input_and_dim():
    with pytest.raises(ShapeError, match=r"'x' dimension 0 \('N'\)"):
        from_onnx(dynamic_model())
    with pytest.raises(ShapeError, match=r"'x' dimension 2 \('H'\)"):
        from_onnx(_with_dim(dynamic_model(), 0, 1))


def _with_dim(model, i, value):
    model = onnx.ModelProto.FromString(model.SerializeToString())
    model.graph.input[0].type.tensor_type.shape.dim[i].dim_value = value
    return model


def test_bad_bindings():
    with pytest.raises(ShapeError, match="no input 'y'"):
        from_onnx(dynamic_model(), {"x": (1, 3, 4, 4), "y": (1,)})
    with pytest.raises(ShapeError, match="dimension 1 is fixed at 3"):
        from_onnx(dynamic_model(), {"x": (1, 4, 4, 4)})
    with pytest.raises(ShapeError, match="rank 4"):
        from_onnx(dynamic_model(), {"x": (1, 3, 4)})


def test_non_constant_reshape_target_is_a_shape_error():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])
    t = helper.make_tensor_value_info("t", TensorProto.INT64, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([N("Reshape", ["x", "t"], ["y"], name="rs")], "g", [x, t], [y])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(ShapeError, match="'y', output of node 'rs' \\(Reshape\\).*input 't'"):
        from_onnx(model)


def test_unsupported_op_names_node_and_op():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([N("Relu", ["x"], ["r"], name="ok"), N("Frobnicate", ["r"], ["y"], name="weird")],
                          "g", [x], [y])
    with pytest.raises(UnsupportedOpError, match="node 'weird': operator Frobnicate"):
        from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))
    g = helper.make_graph([N("FusedConv", ["x"], ["y"], name="fc", domain="com.microsoft")], "g", [x], [y])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
    with pytest.raises(UnsupportedOpError, match="node 'fc'.*com.microsoft::FusedConv"):
        from_onnx(model)


def test_unsupported_opset():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    g = helper.make_graph([N("Relu", ["x"], ["y"])], "g", [x], [x])
    with pytest.raises(ModelError, match="opset 5"):
        from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 5)]))


def test_bad_files_name_the_file(tmp_path):
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(np.random.default_rng(0).bytes(3000))
    text = tmp_path / "text.onnx"
    text.write_text("graph tiny opset 21\n")
    data = open(LIGHT[0], "rb").read()
    files = [empty, junk, text, tmp_path / "missing.onnx"]
    for frac in (0.05, 0.5, 0.95):
        t = tmp_path / f"trunc{frac}.onnx"
        t.write_bytes(data[: int(len(data) * frac)])
        files.append(t)
    for f in files:
        with pytest.raises(ModelError) as info:
            load_model(f)
        assert str(f) in str(info.value), str(info.value)


def test_load_model_errors_name_the_file(tmp_path):
    path = tmp_path / "dyn.onnx"
    onnx.save(dynamic_model(), str(path))
    with pytest.raises(ShapeError, match=f"'{path}'.*'x' dimension 0"):
        load_model(path)
    graph = load_model(path, {"x": (1, 3, 4, 4)})
    assert graph.inputs[0].shape == (1, 3, 4, 4)


def test_initializer_inputs_are_constants_and_fills_stay_small():
    graph = load_model(LIGHT[[os.path.basename(p) for p in LIGHT].index("light_vgg19.onnx")])
    verify(graph)
    assert [v.name for v in graph.inputs] == ["data_0"]
    weights = [v for v in graph.constants.values() if v.size > 1000]
    assert weights and all(is_fill(v.const) for v in weights)
    assert sum(v.const.base.nbytes if v.const.base is not None else v.const.nbytes for v in weights) < 4096
    assert not any(n.op_type == "ConstantOfShape" for n in graph.nodes)


def test_save_and_reload_keeps_names_meta_and_order(tmp_path):
    model = dynamic_model()
    graph = from_onnx(model, {"x": (1, 3, 6, 6)})
    graph.nodes[0].meta["core"] = [0, 1]
    path = tmp_path / "out.onnx"
    # a valid topological order differing from file order: the two independent branches swapped
    graph.reorder([graph.nodes[3], graph.nodes[0], graph.nodes[1], graph.nodes[2]])
    save_model(graph, path)
    assert [p.name for p in tmp_path.iterdir()] == ["out.onnx"]  # no temp file left behind
    back = load_model(path)
    assert [n.name for n in back.nodes] == [n.name for n in graph.nodes]
    assert back.node(graph.nodes[1].name).meta == {"core": [0, 1]}
    assert [v.name for v in back.inputs] == ["x"] and [v.name for v in back.outputs] == ["y", "z", "hf"]
    x = np.random.default_rng(1).standard_normal((1, 3, 6, 6)).astype(np.float32)
    want, got = ort_run(model, {"x": x}), ort_run(str(path), {"x": x})
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


def test_constant_output_and_input_passthrough_export():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    outs = [helper.make_tensor_value_info(n, TensorProto.INT64, None) for n in ("s",)]
    outs.append(helper.make_tensor_value_info("x", TensorProto.FLOAT, None))
    g = helper.make_graph([N("Shape", ["x"], ["s"])], "g", [x], outs)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    graph = from_onnx(model)
    assert graph.outputs[0].is_constant and len(graph) == 0
    exported = to_onnx(graph)
    onnx.checker.check_model(exported, full_check=True)
    xv = np.ones((2, 3), np.float32)
    got = ort_run(exported, {"x": xv})
    assert got["s"].tolist() == [2, 3] and np.array_equal(got["x"], xv)


def arithmetic_model() -> onnx.ModelProto:
    """x: N x C x H x W -> Reshape to (N, C*H, W/2, 2) with the target computed by
    Shape/Gather/Mul/Div/Concat (integer shape arithmetic through the compute kernels)."""
    ints = {f"i{k}": np.array(k, np.int64) for k in range(4)}
    ints["two"] = np.array(2, np.int64)
    ints["ax"] = np.array([0], np.int64)
    nodes = [N("Shape", ["x"], ["s"])]
    for k in range(4):
        nodes.append(N("Gather", ["s", f"i{k}"], [f"d{k}"]))
    nodes += [
        N("Mul", ["d1", "d2"], ["ch"]),
        N("Div", ["d3", "two"], ["half"]),
        *[N("Unsqueeze", [v, "ax"], [f"{v}_u"]) for v in ("d0", "ch", "half", "two")],
        N("Concat", ["d0_u", "ch_u", "half_u", "two_u"], ["target"], axis=0),
        N("Relu", ["x"], ["r"]),
        N("Reshape", ["r", "target"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "C", "H", "W"])
    g = helper.make_graph(nodes, "arith", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          initializer=[numpy_helper.from_array(a, k) for k, a in ints.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)


@pytest.mark.parametrize("shape", [(1, 3, 4, 6), (2, 5, 3, 8)])
def test_shape_arithmetic_folds_through_compute_kernels_and_runs(shape):
    model = arithmetic_model()
    graph = from_onnx(model, {"x": shape})
    assert [n.op_type for n in graph.nodes] == ["Relu", "Reshape"]
    n, c, h, w = shape
    assert graph.value("target").const.tolist() == [n, c * h, w // 2, 2]
    x = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    want = ort_run(model, {"x": x})["y"]
    got = run(graph, {"x": x})["y"]
    np.testing.assert_array_equal(got, want)


def tiny_transformer() -> onnx.ModelProto:
    """int64 ids: B x S -> embeddings + positions (Range over the folded sequence length),
    LayerNormalization, one attention head with a padding mask (Equal/Where), Erf GELU,
    and a Reshape whose target comes from Shape arithmetic. Opset 17, B and S dynamic."""
    rng = np.random.default_rng(5)
    d, vocab = 8, 11
    w = {k: (rng.standard_normal(s) * 0.5).astype(np.float32) for k, s in
         {"emb": (vocab, d), "pos": (16, d), "wq": (d, d), "wk": (d, d), "wv": (d, d), "g": (d,), "b": (d,)}.items()}
    w.update({"zero": np.array(0, np.int64), "one": np.array(1, np.int64), "neg": np.float32(-1e9),
              "scale": np.float32(np.sqrt(d)), "half": np.float32(0.5), "onef": np.float32(1.0),
              "sqrt2": np.float32(np.sqrt(2)), "ax1": np.array([1], np.int64), "ax0": np.array([0], np.int64),
              "m1": np.array([-1], np.int64), "pad": np.array(0, np.int64)})
    nodes = [
        N("Gather", ["emb", "ids"], ["e"]),
        N("Shape", ["ids"], ["s"]), N("Gather", ["s", "one"], ["seq"]),
        N("Range", ["zero", "seq", "one"], ["positions"]), N("Gather", ["pos", "positions"], ["p"]),
        N("Add", ["e", "p"], ["x0"]),
        N("LayerNormalization", ["x0", "g", "b"], ["x"], axis=-1, epsilon=1e-5),
        N("MatMul", ["x", "wq"], ["q"]), N("MatMul", ["x", "wk"], ["k"]), N("MatMul", ["x", "wv"], ["v"]),
        N("Transpose", ["k"], ["kt"], perm=[0, 2, 1]), N("MatMul", ["q", "kt"], ["qk"]), N("Div", ["qk", "scale"], ["sc"]),
        N("Equal", ["ids", "pad"], ["is_pad"]), N("Unsqueeze", ["is_pad", "ax1"], ["mask"]),
        N("Where", ["mask", "neg", "sc"], ["masked"]), N("Softmax", ["masked"], ["attn"], axis=-1),
        N("MatMul", ["attn", "v"], ["ctx"]),
        N("Div", ["ctx", "sqrt2"], ["t0"]), N("Erf", ["t0"], ["t1"]), N("Add", ["t1", "onef"], ["t2"]),
        N("Mul", ["ctx", "t2"], ["t3"]), N("Mul", ["t3", "half"], ["gelu"]),
        N("Shape", ["gelu"], ["gs"]), N("Gather", ["gs", "ax0"], ["batch"]),
        N("Concat", ["batch", "m1"], ["target"], axis=0), N("Reshape", ["gelu", "target"], ["y"]),
    ]
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["B", "S"])
    g = helper.make_graph(nodes, "tiny_transformer", [ids], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          initializer=[numpy_helper.from_array(a, k) for k, a in w.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("shape", [(1, 5), (3, 9)])
def test_tiny_transformer_with_dynamic_batch_and_sequence(shape):
    model = tiny_transformer()
    ids = np.random.default_rng(6).integers(0, 11, shape).astype(np.int64)
    ids[:, 0] = 1  # at least one real token per row
    graph, exported, want, got = roundtrip(model, {"ids": ids}, {"ids": shape})
    assert not {"Shape", "Range", "Concat"} & {n.op_type for n in graph.nodes}
    assert graph.value("y").shape == (shape[0], shape[1] * 8)
    ours = run(graph, {"ids": ids})
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours["y"], want["y"], rtol=1e-4, atol=1e-5)
    with pytest.raises(ShapeError, match="'ids' dimension 0 \\('B'\\)"):
        from_onnx(model)


def test_every_operator_entry_has_every_facet():
    """The operator table: no facet left out (each is given or explicitly NONE), and every
    operator that reaches the IR can infer its shapes and has a kernel and a cost."""
    from corefold import ops

    missing = {e.op_type: e.missing_facets() for e in ops.entries() if e.missing_facets()}
    assert missing == {}
    for e in ops.entries():
        if e.refuse or e.infer is ops.NONE:
            continue
        assert callable(e.kernel) and isinstance(e.cost, ops.Cost), e.op_type


@pytest.mark.parametrize("dim", [-1, 0])
def test_non_positive_dim_value_is_dynamic_as_onnxruntime_reads_it(dim):
    """Paddle2ONNX writes ``dim_value: -1`` for a dynamic dimension: it needs --shape, and
    accepts it (ONNX Runtime runs such a model at any size)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])
    x.type.tensor_type.shape.dim[0].Clear()
    x.type.tensor_type.shape.dim[0].dim_value = dim
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    m = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
                          opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(ShapeError, match="dimension 0"):
        from_onnx(m)
    g = from_onnx(m, {"x": (4, 3)})
    assert g.inputs[0].shape == (4, 3)


def value_model() -> onnx.ModelProto:
    """``y = Reshape(Slice(x, starts, ends, axes), shape)``: every parameter an input."""
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 12]),
           helper.make_tensor_value_info("starts", TensorProto.INT64, [1]),
           helper.make_tensor_value_info("ends", TensorProto.INT64, [1]),
           helper.make_tensor_value_info("axes", TensorProto.INT64, [1]),
           helper.make_tensor_value_info("shape", TensorProto.INT64, [3])]
    g = helper.make_graph([N("Slice", ["x", "starts", "ends", "axes"], ["s"]), N("Reshape", ["s", "shape"], ["y"])],
                          "g", ins, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          initializer=[numpy_helper.from_array(np.array([0], np.int64), "axes")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_values_bind_parameter_inputs_into_a_static_graph(tmp_path):
    m = value_model()
    values = {"starts": np.array([1], np.int64), "ends": np.array([3], np.int64), "shape": np.array([2, 3, 4], np.int64)}
    x = np.arange(48, dtype=np.float32).reshape(4, 12)
    graph = from_onnx(m, {"x": (4, 12)}, values=values)
    verify(graph)
    assert [v.name for v in graph.inputs] == ["x"] and graph.value("y").shape == (2, 3, 4)
    want = ort_run(m, {"x": x, **values})["y"]
    np.testing.assert_array_equal(run(graph, {"x": x})["y"], want)
    # a bound value overrides an initializer that is also an input (IR < 4 style defaults)
    g2 = from_onnx(m, {"x": (4, 12)}, values={**values, "axes": np.array([1], np.int64),
                                              "starts": np.array([0], np.int64), "ends": np.array([6], np.int64),
                                              "shape": np.array([4, 2, 3], np.int64)})
    np.testing.assert_array_equal(run(g2, {"x": x})["y"], x[:, :6].reshape(4, 2, 3))
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    g3 = load_model(path, {"x": (4, 12)}, values=values)
    assert g3.value("y").shape == (2, 3, 4)


def test_value_binding_errors_name_the_input():
    m = value_model()
    ok = {"starts": np.array([1], np.int64), "ends": np.array([3], np.int64), "shape": np.array([2, 3, 4], np.int64)}
    with pytest.raises(ShapeError, match="--value nope=.*no input 'nope'"):
        from_onnx(m, {"x": (4, 12)}, values={**ok, "nope": np.zeros(1)})
    with pytest.raises(DataError, match="--value starts: the array has dtype int32, the input is int64"):
        from_onnx(m, {"x": (4, 12)}, values={**ok, "starts": np.array([1], np.int32)})
    with pytest.raises(DataError, match="--value shape: dimension 0 is fixed at 3 in the model, the array has 2"):
        from_onnx(m, {"x": (4, 12)}, values={**ok, "shape": np.array([24, 1], np.int64)})
    with pytest.raises(DataError, match="--value starts: the array has rank 0, the input has rank 1"):
        from_onnx(m, {"x": (4, 12)}, values={**ok, "starts": np.array(1, np.int64)})
    with pytest.raises(ShapeError, match="--shape x and --value x"):
        from_onnx(m, {"x": (4, 12)}, values={**ok, "x": np.zeros((4, 12), np.float32)})
    with pytest.raises(ShapeError, match="depends on input 'starts'"):
        from_onnx(m, {"x": (4, 12)}, values={"ends": ok["ends"], "shape": ok["shape"]})


def test_old_opsets_read_as_opset_6_when_nothing_changed():
    """Opset-1 Not means what opset-6 Not means; opset-1 Relu (consumed_inputs) does not."""
    x = helper.make_tensor_value_info("x", TensorProto.BOOL, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.BOOL, [2, 3])
    m = helper.make_model(helper.make_graph([N("Not", ["x"], ["y"])], "g", [x], [y]),
                          opset_imports=[helper.make_opsetid("", 1)])
    a = np.array([[True, False, True], [False, False, True]])
    np.testing.assert_array_equal(run(from_onnx(m), {"x": a})["y"], ~a)
    xf = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    m = helper.make_model(helper.make_graph([N("Relu", ["x"], ["y"])], "g", [xf], [xf]),
                          opset_imports=[helper.make_opsetid("", 3)])
    with pytest.raises(ModelError, match="opset 3 is not supported .*Relu changed since opset 3"):
        from_onnx(m)


@pytest.mark.parametrize("opset", [22, 23, 24, 25, 26, 27, 28])
def test_every_opset_to_28_is_read(opset):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [N("Relu", ["x"], ["r"]), N("Cast", ["r"], ["c"], to=TensorProto.FLOAT16),
             N("Cast", ["c"], ["y"], to=TensorProto.FLOAT)]
    m = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", opset)])
    a = np.float32([[1, -2, 3.3], [-4, 5, 0.1]])
    np.testing.assert_array_equal(run(from_onnx(m), {"x": a})["y"], np.maximum(a, 0).astype(np.float16).astype(np.float32))


def test_types_a_definition_rejects_are_one_line_model_errors():
    x = helper.make_tensor_value_info("x", TensorProto.UINT8, [2])
    m = helper.make_model(helper.make_graph([N("Relu", ["x"], ["y"], name="r")], "g", [x], [x]),
                          opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ModelError, match="node 'r' \\(Relu\\): input 0 'x' has type uint8, which Relu-14 does not accept"):
        from_onnx(m)
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [2])
    b = helper.make_tensor_value_info("b", TensorProto.DOUBLE, [2])
    m = helper.make_model(helper.make_graph([N("Add", ["a", "b"], ["y"], name="add")], "g", [a, b], [a]),
                          opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ModelError, match="input 1 'b' has type float64, another input of the same type parameter T"):
        from_onnx(m)


@pytest.mark.parametrize("elem", [TensorProto.BFLOAT16, TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2FNUZ,
                                  TensorProto.INT4, TensorProto.UINT4, TensorProto.FLOAT16])
def test_narrow_types_round_trip_through_export_and_onnxruntime(elem):
    """An initializer and an input of each narrow type are read, computed on (Transpose,
    Cast, Add) and written back; ONNX Runtime runs the exported model and agrees."""
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    w = np.float32([[0.5, -1.5], [2.0, 3.0]]).astype(dtype)
    x = helper.make_tensor_value_info("x", elem, [2, 2])
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2]), helper.make_tensor_value_info("z", elem, [2, 2])]
    nodes = [N("Transpose", ["x"], ["z"], perm=[1, 0]), N("Cast", ["z"], ["zf"], to=TensorProto.FLOAT),
             N("Cast", ["w"], ["wf"], to=TensorProto.FLOAT), N("Add", ["zf", "wf"], ["y"])]
    m = helper.make_model(helper.make_graph(nodes, "g", [x], outs, initializer=[numpy_helper.from_array(w, "w")]),
                          opset_imports=[helper.make_opsetid("", 21)])
    graph = from_onnx(m)
    assert graph.inputs[0].dtype == dtype
    feed = np.float32([[1, 2], [-1, 0]]).astype(dtype)
    got = run(graph, {"x": feed})
    np.testing.assert_array_equal(got["y"], feed.astype(np.float32).T + w.astype(np.float32))
    assert got["z"].dtype == dtype
    exported = to_onnx(graph)
    onnx.checker.check_model(exported, full_check=True)
    from corefold.frontend.onnx.node_cases import NodeCase, run_ort

    ort_y, ort_z = run_ort(NodeCase("t", exported.SerializeToString(), [([feed], [])], 0, 0))
    np.testing.assert_array_equal(ort_y, got["y"])
    np.testing.assert_array_equal(ort_z.astype(np.float32), got["z"].astype(np.float32))


def test_exporter_picks_the_opset_the_types_need():
    """bfloat16 Elu exists from opset 22: the export says so and ONNX Runtime loads it."""
    x = helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [3])
    m = helper.make_model(helper.make_graph([N("Elu", ["x"], ["y"])], "g", [x],
                                            [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [3])]),
                          opset_imports=[helper.make_opsetid("", 22)])
    exported = to_onnx(from_onnx(m))
    assert exported.opset_import[0].version == 22
    onnx.checker.check_model(exported, full_check=True)
    relu = helper.make_model(helper.make_graph([N("Relu", ["x"], ["y"])], "g", [x],
                                               [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [3])]),
                             opset_imports=[helper.make_opsetid("", 22)])
    assert to_onnx(from_onnx(relu)).opset_import[0].version == 21
