import numpy as np
import pytest

from corefold.ops.ort_oracle_test import check_node, randn


@pytest.mark.parametrize("attrs", [{}, {"transA": 1}, {"transB": 1}, {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0},
                                   {"beta": 0.0}])
@pytest.mark.parametrize("c_shape", [None, (), (6,), (1, 6), (4, 1), (4, 6)])
def test_gemm(attrs, c_shape):
    rng = np.random.default_rng(0)
    a = randn(rng, 5, 4) if attrs.get("transA") else randn(rng, 4, 5)
    b = randn(rng, 6, 5) if attrs.get("transB") else randn(rng, 5, 6)
    inputs = [a, b] + ([] if c_shape is None else [randn(rng, *c_shape)])
    check_node("Gemm", inputs, attrs)


@pytest.mark.parametrize("shapes", [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((2, 1, 3, 4), (3, 4, 2)),
                                    ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)), ((2, 3, 4), (2, 4, 6))])
def test_matmul(shapes):
    rng = np.random.default_rng(1)
    check_node("MatMul", [randn(rng, *shapes[0]), randn(rng, *shapes[1])])


@pytest.mark.parametrize("which", ["a", "b"])
def test_single_value_operands(which):
    from corefold.ops.defs.matmul import gemm, matmul
    rng = np.random.default_rng(2)
    a, b = randn(rng, 5, 7) * np.float32(100), randn(rng, 7, 3) * np.float32(100)
    if which == "a":
        a = np.broadcast_to(np.float32(0.25), a.shape)
    else:
        b = np.broadcast_to(np.float32(0.25), b.shape)
    c = randn(rng, 3)
    want = check_node("Gemm", [np.ascontiguousarray(a), np.ascontiguousarray(b), c], {"alpha": 0.5}, atol=1e-3)[0]
    got = gemm({"alpha": 0.5}, [a, b, c])[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
    assert got.flags.writeable and got.flags.c_contiguous
    batched_a = np.broadcast_to(a, (2, 5, 7)) if which == "a" else randn(rng, 2, 5, 7)
    got = matmul({}, [batched_a, b])[0]
    np.testing.assert_allclose(got, np.matmul(np.ascontiguousarray(batched_a), np.ascontiguousarray(b)), rtol=1e-4, atol=1e-3)


# -- Einsum ----------------------------------------------------------------------------------------------
import pytest  # noqa: E402

from corefold.ops.facet_checks_test import check_facets  # noqa: E402
from corefold.ops.onnx_cases_test import case_params, check_case, check_ort  # noqa: E402


@pytest.mark.parametrize("case", case_params("einsum"))
def test_onnx_node_case(case):
    check_case(case)


@pytest.mark.parametrize("equation,shapes", [
    ("ij,jk->ik", [(3, 4), (4, 5)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("ij->ji", [(3, 4)]),
    ("ii->i", [(4, 4)]), ("ij,ij->", [(3, 4), (3, 4)]), ("...ij,...jk", [(2, 3, 4), (2, 4, 5)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 8), (2, 3, 5, 8)]), ("i,j->ij", [(3,), (4,)]), ("ij", [(3, 4)]),
    ("abc,cd,de->abe", [(2, 3, 4), (4, 5), (5, 6)]), ("i...->...", [(3, 4, 5)]),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_einsum(equation, shapes, dtype):
    rng = np.random.default_rng(0)
    xs = [rng.integers(-4, 5, s).astype(dtype) for s in shapes]
    check_ort("Einsum", xs, {"equation": equation})
    check_facets("Einsum", xs, {"equation": equation})
