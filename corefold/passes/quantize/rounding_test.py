import numpy as np

from corefold.ir import parse
from corefold.passes.quantize.calibrate import gptq_weights, patches
from corefold.passes.quantize.params import weight_params
from corefold.passes.quantize.rounding import gptq_integers


def test_gptq_lowers_layer_error():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((500, 24)) @ rng.standard_normal((24, 24))  # correlated inputs
    w = rng.standard_normal((8, 24))
    h = x.T @ x
    p = weight_params(w, 4, axis=0)
    s = p.onnx_scale.astype(np.float64)
    q = gptq_integers(w, h, s, p.qmin, p.qmax)
    assert q.min() >= p.qmin and q.max() <= p.qmax
    near = np.clip(np.rint(w / s[:, None]), p.qmin, p.qmax)

    def err(qq):
        return np.sum(((w - qq * s[:, None]) @ x.T) ** 2)

    assert err(q) < 0.8 * err(near)


def test_conv_patches_match_convolution():
    g = parse("""graph c opset 21
input x: float32[1, 2, 5, 5]
const w: float32[3, 2, 3, 3] = fill(1.0)
node conv = Conv(x, w) attrs {"pads": [1, 1, 1, 1], "strides": [2, 2]} -> (y: float32[1, 3, 3, 3])
output y
""")
    node = g.nodes[0]
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 2, 5, 5))
    w = rng.standard_normal((3, 2, 3, 3))
    p = patches(node, x)
    assert p.shape == (9, 18)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.array([[np.sum(xp[0, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3] * w[m]) for i in range(3) for j in range(3)]
                     for m in range(3)])
    np.testing.assert_allclose((p @ w.reshape(3, -1).T).T, want, atol=1e-9)
    assert gptq_weights(g, {"w": 0}) == {"w": node}


def test_gptq_needs_enough_rows_per_column():
    """A MatMul weight with K = 8 columns read by 4 rows per batch: its Hessian sums 4 * batches
    rows, and GPTQ rounds it only with more than ``rows_per_column * K`` of them (8 rows for 8
    columns: ``H`` is singular or nearly, left out)."""
    g = parse("""graph m opset 21
input x: float32[1, 4, 8]
const w: float32[8, 6] = fill(0.5)
node mm = MatMul(x, w) -> (y: float32[1, 4, 6])
output y
""")
    node = g.nodes[0]
    assert gptq_weights(g, {"w": 1}, batches=2) == {}  # 8 rows, 8 columns
    assert gptq_weights(g, {"w": 1}, batches=3) == {"w": node}  # 12 rows
    assert gptq_weights(g, {"w": 1}, batches=3, rows_per_column=1.5) == {}
    assert gptq_weights(g, {"w": 1}, batches=4, rows_per_column=1.5) == {"w": node}
    assert gptq_weights(g, {"w": 1}) == {"w": node}  # batches unknown: no rule
