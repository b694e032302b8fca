import numpy as np
import pytest

from corefold.ops.ort_oracle_test import check_node, randn

SHAPES = [((2, 3, 4, 5), (2, 3, 4, 5)), ((2, 3, 4, 5), (3, 1, 1)), ((1, 3, 1, 5), (2, 1, 4, 1)), ((4, 5), ())]


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("shapes", SHAPES)
def test_binary(op, shapes):
    rng = np.random.default_rng(0)
    a, b = randn(rng, *shapes[0]), randn(rng, *shapes[1])
    if op == "Div":
        b = b + np.float32(3) * np.sign(b)
    check_node(op, [a, b])


def test_integer_arithmetic():
    a = np.array([7, -7, 6, -6, 0], dtype=np.int64)
    b = np.array([2, 2, -4, -4, 3], dtype=np.int64)
    for op in ["Add", "Sub", "Mul", "Div"]:
        check_node(op, [a, b])
    check_node("Mod", [a, b], {})
    check_node("Mod", [a, b], {"fmod": 1})


def test_pow():
    rng = np.random.default_rng(1)
    x = np.abs(randn(rng, 3, 4)) + np.float32(0.1)
    check_node("Pow", [x, randn(rng, 4)])
    check_node("Pow", [x, np.array(2.0, dtype=np.float32)])
    check_node("Pow", [x, np.array(3, dtype=np.int64)])


@pytest.mark.parametrize("op", ["Sum", "Max", "Min", "Mean"])
def test_variadic(op):
    rng = np.random.default_rng(2)
    xs = [randn(rng, 2, 3, 4), randn(rng, 3, 1), randn(rng, 4), randn(rng, 1, 1, 4)]
    check_node(op, xs[:1])
    check_node(op, xs[:2])
    check_node(op, xs)


@pytest.mark.parametrize("op", ["Sqrt", "Neg", "Exp", "Log", "Abs", "Reciprocal", "Floor", "Ceil", "Round", "Sign"])
def test_unary(op):
    rng = np.random.default_rng(3)
    x = randn(rng, 3, 5) * np.float32(2)
    if op in ("Sqrt", "Log"):
        x = np.abs(x) + np.float32(0.01)
    if op == "Round":
        x = np.concatenate([x, np.array([[0.5, 1.5, 2.5, -0.5, -1.5]], dtype=np.float32)])
    check_node(op, [x])


@pytest.mark.parametrize("op", ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"])
def test_compare(op):
    a = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.float32)
    b = np.array([2, 2, 7], dtype=np.float32)
    check_node(op, [a, b])


def test_logic_and_where():
    a = np.array([True, False, True, False])
    b = np.array([True, True, False, False])
    for op in ["And", "Or", "Xor"]:
        check_node(op, [a, b])
    check_node("Not", [a])
    rng = np.random.default_rng(4)
    check_node("Where", [a.reshape(4, 1), randn(rng, 4, 3), randn(rng, 3)])


def test_inputs_untouched_and_outputs_fresh():
    from corefold.ops.defs.elementwise import sum_
    x = np.ones((2, 2), dtype=np.float32)
    y = sum_({}, [x])[0]
    assert y is not x and np.shares_memory(x, y) is False
