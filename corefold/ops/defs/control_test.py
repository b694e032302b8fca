"""If, Loop and Scan inlined or unrolled at import: the static graph computes what ONNX
Runtime computes on the original model (its control inputs fed with the values bound at
import), and decisions that depend on data are refused naming the node and the value."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from corefold.errors import UnsupportedOpError
from corefold.executor import run
from corefold.frontend.onnx import from_onnx
from corefold.frontend.onnx.check import ort_run
from corefold.ir import verify

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
N = helper.make_node
V = helper.make_tensor_value_info


def model(nodes, inputs, outputs, opset=17, inits=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def check(m, feeds, values, atol=1e-6):
    """Import with ``values`` bound, verify, run, and compare with ONNX Runtime fed
    ``feeds`` and ``values``; returns the graph."""
    graph = from_onnx(m, values=values)
    verify(graph)
    assert all(n.op_type not in ("If", "Loop", "Scan") for n in graph.nodes)
    got = run(graph, feeds)
    want = ort_run(m, {**feeds, **values})
    assert set(got) == set(want)
    for k in want:
        assert got[k].shape == want[k].shape and got[k].dtype == want[k].dtype, k
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=atol, err_msg=k)
    return graph


X = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)


def if_model():
    """``y = cond ? relu(x) * w : x - w`` with ``w`` from the outer scope."""
    then_g = helper.make_graph([N("Relu", ["x"], ["r"]), N("Mul", ["r", "w"], ["t"])], "then", [], [V("t", F, None)])
    else_g = helper.make_graph([N("Sub", ["x", "w"], ["e"])], "else", [], [V("e", F, None)])
    w = numpy_helper.from_array(np.float32([1, 2, 3, 4]), "w")
    return model([N("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
                 [V("x", F, [3, 4]), V("c", B, [])], [V("y", F, [3, 4])], inits=[w])


@pytest.mark.parametrize("cond", [True, False])
def test_if_with_a_bound_condition_imports_the_taken_branch(cond):
    graph = check(if_model(), {"x": X}, {"c": np.array(cond)})
    # the graph output keeps its name 'y' through an Identity
    assert [n.op_type for n in graph.nodes] == (["Relu", "Mul"] if cond else ["Sub"]) + ["Identity"]
    assert [v.name for v in graph.outputs] == ["y"]


@pytest.mark.parametrize("cond", [True, False])
def test_if_on_data_runs_both_branches_and_selects_with_where(cond):
    """A condition fed at run time: both branches are imported, Where picks the output."""
    graph = from_onnx(if_model())
    verify(graph)
    assert [n.op_type for n in graph.nodes] == ["Relu", "Mul", "Sub", "Where"]
    assert [v.name for v in graph.outputs] == ["y"]
    feeds = {"x": X, "c": np.array(cond)}
    np.testing.assert_allclose(run(graph, feeds)["y"], ort_run(if_model(), feeds)["y"], rtol=1e-6)


def verifier_model():
    """What openWakeWord's hey_jarvis model (a PyTorch 1.12 export) does: a score ``p``, and
    when ``p >= 0.5`` a second network's score instead: ``If(Cast(p >= 0.5))`` whose then
    branch reads the graph input from the outer scope and whose else branch is
    ``Identity(p)``; the condition is a [1, 1] tensor."""
    then_g = helper.make_graph([N("MatMul", ["x", "v"], ["t0"]), N("Sigmoid", ["t0"], ["t"])], "then", [],
                               [V("t", F, None)])
    else_g = helper.make_graph([N("Identity", ["p"], ["e"])], "else", [], [V("e", F, None)])
    w = numpy_helper.from_array(np.linspace(-1, 1, 4, dtype=np.float32).reshape(4, 1), "w")
    v = numpy_helper.from_array(np.linspace(1, -1, 4, dtype=np.float32).reshape(4, 1), "v")
    half = numpy_helper.from_array(np.float32(0.5), "half")
    return model([N("MatMul", ["x", "w"], ["s"]), N("Sigmoid", ["s"], ["p"]),
                  N("GreaterOrEqual", ["p", "half"], ["ge"]), N("Cast", ["ge"], ["c"], to=B),
                  N("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
                 [V("x", F, [1, 4])], [V("y", F, [1, 1])], opset=13, inits=[w, v, half])


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_if_on_a_computed_condition_matches_onnx_runtime_on_both_branches(sign):
    m = verifier_model()
    graph = from_onnx(m)
    verify(graph)
    x = (sign * np.float32([[2, 1, -1, -2]])).astype(np.float32)
    w, v = np.linspace(-1, 1, 4).reshape(4, 1), np.linspace(1, -1, 4).reshape(4, 1)
    p = 1 / (1 + np.exp(-(x @ w)))  # sigmoid(-+4.7): the else branch for +1, the then branch for -1
    want = ort_run(m, {"x": x})["y"]
    np.testing.assert_allclose(want, p if p[0, 0] < 0.5 else 1 / (1 + np.exp(-(x @ v))), rtol=1e-5)
    np.testing.assert_allclose(run(graph, {"x": x})["y"], want, rtol=1e-6)


def test_if_on_data_with_branches_of_different_shapes_is_refused_naming_node_and_output():
    then_g = helper.make_graph([N("Relu", ["x"], ["t"])], "then", [], [V("t", F, None)])
    else_g = helper.make_graph([N("ReduceSum", ["x"], ["e"], keepdims=0)], "else", [], [V("e", F, None)])
    m = model([N("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
              [V("x", F, [3, 4]), V("c", B, [])], [V("y", F, None)])
    with pytest.raises(UnsupportedOpError, match=r"node 'if_0' \(If\): the condition 'c' depends on data and "
                                                 r"output 'y' is float32\[3, 4\] in the then branch but "
                                                 r"float32\[\] in the else branch"):
        from_onnx(m)


def loop_model(with_cond: bool = True):
    """Loop M times over ``acc = acc * 0.5 + x[i]`` (a row per iteration, an If inside
    choosing by the iteration's parity) with a scan output of every ``acc``."""
    body = helper.make_graph(
        [N("Unsqueeze", ["i", "zero"], ["i1"]),
         N("Gather", ["x", "i1"], ["row"], axis=0),
         N("Squeeze", ["row", "zero"], ["row0"]),
         N("Mod", ["i", "two"], ["parity"]), N("Equal", ["parity", "zero_s"], ["even"]),
         N("If", ["even"], ["half"],
           then_branch=helper.make_graph([N("Identity", ["half_c"], ["h1"])], "t", [], [V("h1", F, None)]),
           else_branch=helper.make_graph([N("Identity", ["quarter_c"], ["h2"])], "e", [], [V("h2", F, None)])),
         N("Mul", ["acc", "half"], ["scaled"]), N("Add", ["scaled", "row0"], ["acc_out"]),
         N("Identity", ["cond"], ["cond_out"]), N("Identity", ["acc_out"], ["scan"])],
        "body", [V("i", I64, []), V("cond", B, []), V("acc", F, [4])],
        [V("cond_out", B, []), V("acc_out", F, [4]), V("scan", F, [4])],
        initializer=[numpy_helper.from_array(np.array([0], np.int64), "zero"),
                     numpy_helper.from_array(np.array(2, np.int64), "two"),
                     numpy_helper.from_array(np.array(0, np.int64), "zero_s"),
                     numpy_helper.from_array(np.float32(0.5), "half_c"),
                     numpy_helper.from_array(np.float32(0.25), "quarter_c")])
    ins = [V("x", F, [3, 4]), V("m", I64, [])] + ([V("c", B, [])] if with_cond else [])
    return model([N("Loop", ["m", "c" if with_cond else "", "a0"], ["acc", "accs"], body=body)],
                 ins + [V("a0", F, [4])], [V("acc", F, [4]), V("accs", F, None)])


@pytest.mark.parametrize("trips", [1, 3])
def test_loop_with_a_bound_trip_count_is_unrolled(trips):
    a0 = np.float32([1, -1, 2, 0])
    graph = check(loop_model(), {"x": X, "a0": a0}, {"m": np.array(trips, np.int64), "c": np.array(True)})
    assert sum(n.op_type == "Add" for n in graph.nodes) == trips


def test_loop_without_condition_runs_its_trip_count():
    check(loop_model(with_cond=False), {"x": X, "a0": np.float32([1, 2, 3, 4])}, {"m": np.array(2, np.int64)})


def test_loop_of_no_iteration_with_a_scan_output_is_refused():
    for values in ({"m": np.array(3, np.int64), "c": np.array(False)}, {"m": np.array(0, np.int64), "c": np.array(True)}):
        with pytest.raises(UnsupportedOpError, match="runs no iteration, so the shape of its scan output 'accs'"):
            from_onnx(loop_model(), values=values)


def while_model():
    """``while s < limit: s = s * 2`` (no trip count), the condition computed in the body."""
    body = helper.make_graph(
        [N("Mul", ["s", "two"], ["s2"]), N("Less", ["s2", "limit"], ["go"])],
        "body", [V("i", I64, []), V("c", B, []), V("s", F, [2])], [V("go", B, []), V("s2", F, [2])],
        initializer=[numpy_helper.from_array(np.float32(2), "two")])
    return model([N("ReduceMax", ["s0"], ["mx"], keepdims=0), N("Less", ["mx", "limit"], ["c0"]),
                  N("Loop", ["", "c0", "s0"], ["s"], body=body)],
                 [V("s0", F, [2]), V("limit", F, [])], [V("s", F, [2])], opset=17)


def test_while_loop_unrolls_while_its_condition_folds():
    m = while_model()
    s0, limit = np.float32([1.5, 3]), np.array(40, np.float32)
    graph = check(m, {}, {"s0": s0, "limit": limit})
    assert graph.nodes == [] and graph.outputs[0].const.tolist() == [48.0, 96.0]


def test_while_loop_whose_condition_starts_false_passes_its_inputs_through():
    check(while_model(), {}, {"s0": np.float32([50, 3]), "limit": np.array(40, np.float32)})


def test_while_loop_on_data_is_refused():
    body_bound_limit = {"limit": np.array(40, np.float32)}
    with pytest.raises(UnsupportedOpError, match=r"\(Loop\): the condition 'c0' depends on data"):
        from_onnx(while_model(), values=body_bound_limit)


def scan_model(opset: int, reverse: int = 0):
    """A running sum over the rows of ``x`` (state ``s``), emitting ``s * 2`` per step."""
    body = helper.make_graph([N("Add", ["s", "row"], ["s_out"]), N("Mul", ["s_out", "two"], ["y"])], "body",
                             [V("s", F, [4]), V("row", F, [4])], [V("s_out", F, [4]), V("y", F, [4])],
                             initializer=[numpy_helper.from_array(np.float32(2), "two")])
    if opset >= 9:
        node = N("Scan", ["s0", "x"], ["s", "ys"], body=body, num_scan_inputs=1,
                 scan_input_directions=[reverse], scan_output_directions=[reverse], scan_output_axes=[1])
        return model([node], [V("s0", F, [4]), V("x", F, [3, 4])], [V("s", F, [4]), V("ys", F, None)], opset=opset)
    node = N("Scan", ["", "s0", "x"], ["s", "ys"], body=body, num_scan_inputs=1, directions=[reverse])
    return model([node], [V("s0", F, [2, 4]), V("x", F, [2, 3, 4])], [V("s", F, [2, 4]), V("ys", F, None)],
                 opset=8)


@pytest.mark.parametrize("reverse", [0, 1])
def test_scan_is_unrolled_over_its_static_length(reverse):
    check(scan_model(11, reverse), {"s0": np.float32([0, 1, 2, 3]), "x": X}, {})


def test_scan8_batched_is_unrolled_per_row_against_numpy():
    """ONNX Runtime dropped opset 8's Scan; the reference is NumPy."""
    rng = np.random.default_rng(1)
    s0, x = rng.standard_normal((2, 4)).astype(np.float32), rng.standard_normal((2, 3, 4)).astype(np.float32)
    graph = from_onnx(scan_model(8))
    verify(graph)
    got = run(graph, {"s0": s0, "x": x})
    sums = s0[:, None, :] + np.cumsum(x, axis=1)
    np.testing.assert_allclose(got["s"], sums[:, -1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["ys"], 2 * sums, rtol=1e-5, atol=1e-6)
