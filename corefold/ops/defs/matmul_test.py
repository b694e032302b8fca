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


def _pieces(kernel, attrs, a, b, c=None):
    """The product computed whole, by single rows (BLAS's matrix-vector path) and by
    column blocks of 100 (BLAS blocks the columns differently from the whole)."""
    def run(x, w, bias):
        return kernel(attrs, [x, w] + ([] if bias is None else [bias]))[0]

    whole = run(a, b, c)
    rows = np.concatenate([run(a[i:i + 1], b, c) for i in range(a.shape[0])])
    cols = np.concatenate([run(a, b[:, j:j + 100], None if c is None else c[j:j + 100])
                           for j in range(0, b.shape[1], 100)], axis=1)
    return whole, rows, cols


@pytest.mark.parametrize("op_type", ["MatMul", "Gemm"])
def test_the_blocking_free_kernel_gives_pieces_that_equal_the_whole_bit_for_bit(op_type):
    """What the chip simulator and the integer runner rely on: a float32 product cut into
    row or column pieces equals the whole exactly. The plain float32 BLAS kernel is shown
    not to, so the test can fail: single rows differ in ~58k of the 65,536 elements under
    every OpenBLAS kernel tried (OPENBLAS_CORETYPE Haswell, SkylakeX, Sandybridge, Prescott,
    Zen), column blocks in 0 (Sandybridge) to 8,310 (Haswell)."""
    from corefold import ops

    rng = np.random.default_rng(3)
    a, b, c = randn(rng, 64, 256), randn(rng, 256, 1024), (randn(rng, 1024) if op_type == "Gemm" else None)
    entry = ops.get(op_type)
    whole, rows, cols = _pieces(entry.blocking_free_kernel, {}, a, b, c)
    assert whole.dtype == np.float32
    np.testing.assert_array_equal(rows, whole)
    np.testing.assert_array_equal(cols, whole)
    exact = a.astype(np.float64) @ b.astype(np.float64) + (0 if c is None else c.astype(np.float64))
    np.testing.assert_array_equal(whole, exact.astype(np.float32))  # one rounding of the float64 product
    plain = _pieces(entry.kernel, {}, a, b, c)
    assert any(not np.array_equal(p, plain[0]) for p in plain[1:]), "float32 BLAS pieces equal the whole here"
    np.testing.assert_allclose(plain[0], whole, rtol=1e-4, atol=1e-4)


def test_the_blocking_free_kernel_leaves_other_dtypes_to_the_plain_kernel():
    from corefold import ops

    a, b = np.arange(12, dtype=np.int32).reshape(3, 4), np.arange(8, dtype=np.int32).reshape(4, 2)
    got = ops.get("MatMul").blocking_free_kernel({}, [a, b])[0]
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, a @ b)
    x = np.arange(12, dtype=np.float64).reshape(3, 4) / 7
    np.testing.assert_array_equal(ops.get("MatMul").blocking_free_kernel({}, [x, x.T])[0], x @ x.T)
    assert ops.get("Relu").blocking_free_kernel is ops.get("Relu").kernel
