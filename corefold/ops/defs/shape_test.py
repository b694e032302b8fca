"""Shape and data-movement kernels against ONNX Runtime (one opset-21 node each), plus
fill (stride-0) preservation and input immutability."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from corefold import ops
from corefold.frontend.onnx.check import ort_run
from corefold.frontend.onnx.protos import NUMPY_TO_ONNX, attribute_value
from corefold.ops.defs.shape import fill, is_fill
from corefold.ops.facet_checks_test import check_facets

rng = np.random.default_rng(0)
X = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
I64 = lambda *v: np.array(v, np.int64)  # noqa: E731

CASES = {
    "shape": ("Shape", [X], {}),
    "shape_start_end": ("Shape", [X], {"start": -3, "end": -1}),
    "gather_axis0": ("Gather", [X, I64(1, 0, 1)], {}),
    "gather_neg_2d": ("Gather", [X, np.array([[-1, 0], [2, -4]], np.int64)], {"axis": -2}),
    "gather_scalar": ("Gather", [I64(5, 6, 7), np.array(-1, np.int64)], {"axis": 0}),
    "concat": ("Concat", [X, X[:, :1], X[:, 1:]], {"axis": 1}),
    "concat_neg": ("Concat", [X, X], {"axis": -1}),
    "slice_basic": ("Slice", [X, I64(1, 0), I64(3, 2), I64(2, 3)], {}),
    "slice_neg_step": ("Slice", [X, I64(-1, 100), I64(-100, 0), I64(3, 2), I64(-2, -1)], {}),
    "slice_clamp": ("Slice", [X, I64(-10, 2), I64(10, 2 ** 62)], {}),
    "slice_empty": ("Slice", [X, I64(3), I64(1), I64(2)], {}),
    "split_sizes": ("Split", [X, I64(1, 3, 1)], {"axis": 3}),
    "split_num_outputs": ("Split", [X], {"axis": 3, "num_outputs": 3}),
    "reshape": ("Reshape", [X, I64(0, -1, 5)], {}),
    "reshape_allowzero": ("Reshape", [X, I64(6, 20)], {"allowzero": 1}),
    "flatten0": ("Flatten", [X], {"axis": 0}),
    "flatten_neg": ("Flatten", [X], {"axis": -1}),
    "transpose_default": ("Transpose", [X], {}),
    "transpose_perm": ("Transpose", [X], {"perm": [0, 2, 3, 1]}),
    "squeeze_axes": ("Squeeze", [X[:, :1, :, :1], I64(-1, 1)], {}),
    "squeeze_all": ("Squeeze", [X[:1, :, :1]], {}),
    "unsqueeze": ("Unsqueeze", [X, I64(-1, 0, 3)], {}),
    "cast_int": ("Cast", [X * 10], {"to": TensorProto.INT64}),
    "cast_bool": ("Cast", [I64(0, 3, -1)], {"to": TensorProto.BOOL}),
    "identity": ("Identity", [X], {}),
    "dropout": ("Dropout", [X, np.float32(0.3)], {}),
    "pad_constant": ("Pad", [X, I64(0, 1, 2, 0, 1, 0, 1, 3), np.float32(2.5)], {}),
    "pad_reflect": ("Pad", [X, I64(0, 0, 2, 1, 0, 0, 1, 3)], {"mode": "reflect"}),
    "pad_edge": ("Pad", [X, I64(1, 0, 0, 2, 0, 3, 1, 0)], {"mode": "edge"}),
    "pad_wrap": ("Pad", [X, I64(0, 0, 1, 2, 0, 0, 3, 1)], {"mode": "wrap"}),
    "pad_negative_axes": ("Pad", [X, I64(-1, 2, 1, -2), None, I64(1, -1)], {}),
    "constant_of_shape": ("ConstantOfShape", [I64(2, 3)], {"value": numpy_helper.from_array(np.array([7], np.int32))}),
    "constant_of_shape_default": ("ConstantOfShape", [I64(4)], {}),
    "expand": ("Expand", [X[:, :1, :1], I64(3, 1, 1, 1, 1)], {}),
    "tile": ("Tile", [X[:, :2], I64(1, 3, 2, 1)], {}),
    "range_float": ("Range", [np.float32(1), np.float32(-2), np.float32(-0.7)], {}),
    "range_int": ("Range", [np.int64(2), np.int64(11), np.int64(3)], {}),
}


def _single_node_model(op, inputs, attrs, n_out):
    names = [f"i{k}" if a is not None else "" for k, a in enumerate(inputs)]
    while names and not names[-1]:
        names.pop()
    ins = [helper.make_tensor_value_info(n, NUMPY_TO_ONNX[np.asarray(a).dtype], list(np.shape(a)))
           for n, a in zip(names, inputs, strict=False) if n]
    outs = [onnx.ValueInfoProto(name=f"o{k}") for k in range(n_out)]
    node = helper.make_node(op, names, [o.name for o in outs], **attrs)
    g = helper.make_graph([node], "k", ins, outs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], ir_version=10), node, names


@pytest.mark.parametrize("case", sorted(CASES))
def test_kernel_matches_onnxruntime(case):
    op, inputs, attrs = CASES[case]
    n_out = {"Split": 3, "Dropout": 2}.get(op, 1)
    model, node, names = _single_node_model(op, inputs, attrs, n_out)
    feeds = {n: np.asarray(a) for n, a in zip(names, inputs, strict=False) if n}
    want = ort_run(model, feeds)
    ir_attrs = {a.name: attribute_value(op, a, case) for a in node.attribute}
    frozen = [None if a is None else np.array(a) for a in inputs]
    for a in frozen:
        if a is not None:
            a.flags.writeable = False
    got = ops.get(op).kernel(ir_attrs, frozen)
    for k in range(n_out):
        w, g = want[f"o{k}"], np.asarray(got[k])
        assert g.shape == w.shape and g.dtype == w.dtype, (case, k, g.shape, w.shape, g.dtype, w.dtype)
        np.testing.assert_array_equal(g, w)
    for a, b in zip(frozen, inputs, strict=True):
        if a is not None:
            np.testing.assert_array_equal(a, b)


FILL = fill(np.float32(1.5), (64, 32, 3, 3))


@pytest.mark.parametrize("op,inputs,attrs", [
    ("Reshape", [FILL, I64(64, -1)], {}),
    ("Flatten", [FILL], {"axis": 2}),
    ("Transpose", [FILL], {"perm": [1, 0, 2, 3]}),
    ("Unsqueeze", [FILL, I64(0)], {}),
    ("Squeeze", [fill(np.float32(2), (1, 300, 1)), None], {}),
    ("Slice", [FILL, I64(1), I64(40), I64(0)], {}),
    ("Gather", [FILL, I64(3, 1)], {"axis": 1}),
    ("Concat", [FILL, FILL], {"axis": 0}),
    ("Cast", [FILL], {"to": "float16"}),
    ("Pad", [FILL, I64(0, 0, 1, 1, 0, 0, 1, 1)], {"mode": "edge"}),
    ("Expand", [FILL, I64(2, 1, 1, 1, 1)], {}),
    ("Tile", [FILL, I64(2, 1, 1, 3)], {}),
    ("ConstantOfShape", [I64(4096, 25088)], {"value": np.float32([0.25])}),
])
def test_fills_stay_fills(op, inputs, attrs):
    (out,) = ops.get(op).kernel(attrs, inputs)[:1]
    assert is_fill(out), (op, out.strides)
    assert np.unique(np.asarray(out[(0,) * out.ndim])).size == 1


def test_fill_helpers():
    f = fill(np.array([3.0]), (2, 2), np.float16)
    assert is_fill(f) and f.dtype == np.float16 and f[1, 1] == 3
    assert not is_fill(np.ones((2, 2))) and not is_fill(fill(1, (1,)))


# -- property tests: Slice and Pad against ONNX Runtime on random parameters ---------------

from hypothesis import assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from corefold.frontend.onnx.check import ort_session  # noqa: E402

_SESSIONS: dict[str, object] = {}


def _session(key, op, n_params, attrs):
    if key not in _SESSIONS:
        ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 5, 6])]
        ins += [helper.make_tensor_value_info(f"p{i}", TensorProto.INT64, [None]) for i in range(n_params)]
        node = helper.make_node(op, [i.name for i in ins], ["y"], **attrs)
        g = helper.make_graph([node], "p", ins, [onnx.ValueInfoProto(name="y")])
        _SESSIONS[key] = ort_session(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], ir_version=10))
    return _SESSIONS[key]


PX = rng.standard_normal((4, 5, 6)).astype(np.float32)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 2), st.integers(-9, 9), st.integers(-9, 9),
                          st.integers(-3, 3).filter(lambda s: s != 0)), min_size=1, max_size=3,
                unique_by=lambda t: t[0] % 3))
def test_slice_property(params):
    axes, starts, ends, steps = (np.array(v, np.int64) for v in zip(*params, strict=True))
    want = _session("slice", "Slice", 4, {}).run(None, {"x": PX, "p0": starts, "p1": ends, "p2": axes, "p3": steps})[0]
    (got,) = ops.get("Slice").kernel({}, [PX, starts, ends, axes, steps])
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["constant", "reflect", "edge", "wrap"]),
       st.lists(st.integers(-3, 3), min_size=6, max_size=6))
def test_pad_property(mode, pads):
    kept = [d + min(pads[i], 0) + min(pads[i + 3], 0) for i, d in enumerate(PX.shape)]
    assume(all(k > 0 for k in kept))
    if mode == "reflect":  # ONNX Runtime: reflect pads must be < the (cropped) size
        assume(all(max(pads[i], pads[i + 3]) < k for i, k in enumerate(kept)))
    pads = np.array(pads, np.int64)
    want = _session(f"pad_{mode}", "Pad", 1, {"mode": mode}).run(None, {"x": PX, "p0": pads})[0]
    (got,) = ops.get("Pad").kernel({"mode": mode}, [PX, pads])
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("starts, ends, axes, steps, whole", [
    (I64(0, 0), I64(10 ** 9, 4), I64(0, 2), None, {0, 1, 2, 3}),  # a no-op slice: every axis
    (I64(-10, 1), I64(2, 5), I64(0, 3), I64(1, 1), {0, 1, 2}),  # start <= -dim is 0; the last axis cut
    (I64(0, 0), I64(2, 3), I64(1, 2), I64(1, -1), {0, 3}),  # axis 1 cut, axis 2 reversed
    (I64(0,), I64(-1,), I64(3,), None, {0, 1, 2}),  # end -1 drops the last element
    (I64(-1,), I64(-100,), I64(2,), I64(-1,), {0, 1, 3}),  # axis 2 reversed whole: same size, still never cut
    (I64(0,), I64(5,), I64(-1,), I64(2,), {0, 1, 2}),  # step 2
])
def test_slice_splits_only_on_the_axes_it_leaves_whole(starts, ends, axes, steps, whole):
    args = [X, starts, ends, axes] + ([steps] if steps is not None else [])
    full = check_facets("Slice", args)  # cuts along every offered axis and compares
    ins = [(a.shape, a.dtype) for a in args]
    offered, _ = ops.get("Slice").split({}, ins, [(full[0].shape, full[0].dtype)], args)
    assert {ax.output[0] for ax in offered} == {a for a in whole if full[0].shape[a] >= 2}
    assert all(ax.inputs[1:] == (None,) * (len(args) - 1) for ax in offered)


@pytest.mark.parametrize("shape, idx, axis, offered", [
    ((30, 8), np.array([[1, 29], [0, 3]], np.int64), 0, {2}),  # embedding: the hidden axis
    ((2, 3, 4, 5), np.array([[-1, 0], [2, 1]], np.int64), -2, {0, 1, 4}),
    ((6, 4), np.array(2, np.int64), 1, {0}),  # scalar index: the axis disappears
])
def test_gather_splits_the_data_off_its_gathered_axis(shape, idx, axis, offered):
    """vit_b_16's and BERT's embedding Gathers exceeded a core with no split rule. Every
    data axis but the gathered one is offered; the indices are read whole."""
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    full = check_facets("Gather", [x, idx], {"axis": axis})  # cuts along every offered axis and compares
    ins = [(x.shape, x.dtype), (idx.shape, idx.dtype)]
    got, _ = ops.get("Gather").split({"axis": axis}, ins, [(full[0].shape, full[0].dtype)], [x, idx])
    assert {ax.output[0] for ax in got} == offered
    assert all(ax.inputs[1] is None for ax in got)
