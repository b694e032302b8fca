"""Build corefold's bundled example model, corefold/examples/tiny_cnn.onnx.

A small Inception-style CNN (two parallel branches joined by Concat, a residual Add,
BatchNorm, pooling, a classifier head) with seeded weights. Run from the repository root:
``python tools/make_example.py``. The output is deterministic.
"""

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(2026)
inits = []


def w(name, *shape, scale=None):
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
    arr = (rng.standard_normal(shape) * (scale or np.sqrt(2.0 / fan_in))).astype(np.float32)
    inits.append(numpy_helper.from_array(arr, name))
    return name


def conv(x, y, cin, cout, k, stride=1, pad=None):
    pad = k // 2 if pad is None else pad
    return helper.make_node("Conv", [x, w(f"{y}_w", cout, cin, k, k), w(f"{y}_b", cout, scale=0.05)], [y],
                            name=y, kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4)


def bn(x, y, c):
    inits.extend([
        numpy_helper.from_array((1 + 0.1 * rng.standard_normal(c)).astype(np.float32), f"{y}_scale"),
        numpy_helper.from_array((0.1 * rng.standard_normal(c)).astype(np.float32), f"{y}_bias"),
        numpy_helper.from_array((0.1 * rng.standard_normal(c)).astype(np.float32), f"{y}_mean"),
        numpy_helper.from_array((1 + 0.2 * rng.random(c)).astype(np.float32), f"{y}_var"),
    ])
    return helper.make_node("BatchNormalization", [x, f"{y}_scale", f"{y}_bias", f"{y}_mean", f"{y}_var"], [y],
                            name=y, epsilon=1e-5)


nodes = [
    conv("image", "stem", 3, 16, 3, stride=2),
    bn("stem", "stem_bn", 16),
    helper.make_node("Relu", ["stem_bn"], ["stem_relu"], name="stem_relu"),
    helper.make_node("MaxPool", ["stem_relu"], ["pool1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
    # branch a: 1x1 then 3x3; branch b: 3x3 then 3x3
    conv("pool1", "a1", 16, 16, 1),
    helper.make_node("Relu", ["a1"], ["a1_relu"], name="a1_relu"),
    conv("a1_relu", "a2", 16, 24, 3),
    helper.make_node("Relu", ["a2"], ["a2_relu"], name="a2_relu"),
    conv("pool1", "b1", 16, 8, 3),
    helper.make_node("Relu", ["b1"], ["b1_relu"], name="b1_relu"),
    conv("b1_relu", "b2", 8, 8, 3),
    helper.make_node("Relu", ["b2"], ["b2_relu"], name="b2_relu"),
    helper.make_node("Concat", ["a2_relu", "b2_relu"], ["cat"], name="cat", axis=1),
    conv("cat", "proj", 32, 16, 1),
    helper.make_node("Add", ["proj", "pool1"], ["res"], name="res"),
    helper.make_node("Relu", ["res"], ["res_relu"], name="res_relu"),
    conv("res_relu", "c3", 16, 32, 3, stride=2),
    helper.make_node("Relu", ["c3"], ["c3_relu"], name="c3_relu"),
    helper.make_node("GlobalAveragePool", ["c3_relu"], ["gap"], name="gap"),
    helper.make_node("Flatten", ["gap"], ["flat"], name="flat", axis=1),
    helper.make_node("Gemm", ["flat", w("fc_w", 10, 32), w("fc_b", 10, scale=0.05)], ["logits"], name="fc",
                     transB=1),
    helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=1),
]
graph = helper.make_graph(
    nodes, "tiny_cnn",
    [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 64, 64])],
    [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 10])],
    initializer=inits,
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="corefold-example")
model.ir_version = 8
onnx.checker.check_model(model, full_check=True)
out = Path(__file__).resolve().parent.parent / "corefold" / "examples" / "tiny_cnn.onnx"
onnx.save(model, out)
print(f"wrote {out} ({out.stat().st_size} bytes)")
