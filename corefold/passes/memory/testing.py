"""Graphs for the memory pass's tests and benchmarks, built from ONNX operators only.

``training_mlp`` is a forward and backward pass (a training step) written out by hand: the
forward activations wait for the backward, as in a real training graph. ``random_dag`` is a
seeded random DAG with long-range uses for the property tests.
"""

from __future__ import annotations

import numpy as np

from corefold.ir import Graph, parse


def training_mlp(layers: int = 6, batch: int = 64, width: int = 256, seed: int = 0) -> Graph:
    """A training step of an MLP ``h_{k+1} = relu(h_k W_k)`` with loss ``sum((h_L - t)^2)``.

    Outputs: the loss and every weight gradient. Backward (ONNX operators only)::

        g_L = 2 (h_L - t);  r_k = g_{k+1} * (a_k > 0);  dW_k = h_k^T r_k;  g_k = r_k W_k^T
    """
    rng = np.random.default_rng(seed)
    f = f"float32[{batch}, {width}]"
    lines = [f"graph mlp_train{layers}", f"input x: {f}", f"input t: {f}",
             "const two: float32[] = [2.0]", "const zero: float32[] = [0.0]"]
    for k in range(layers):
        lines.append(f"const w{k}: float32[{width}, {width}] = fill(0.0)")
    h = "x"
    for k in range(layers):
        lines.append(f"node fc{k} = MatMul({h}, w{k}) -> (a{k}: {f})")
        lines.append(f"node relu{k} = Relu(a{k}) -> (h{k + 1}: {f})")
        h = f"h{k + 1}"
    lines += [f"node diff = Sub({h}, t) -> (d: {f})", f"node sq = Mul(d, d) -> (d2: {f})",
              "node sum = ReduceSum(d2) attrs {\"keepdims\": 0} -> (loss: float32[])",
              f"node gl = Mul(d, two) -> (g{layers}: {f})"]
    for k in reversed(range(layers)):
        lines += [
            f"node pos{k} = Greater(a{k}, zero) -> (m{k}: bool[{batch}, {width}])",
            f"node mask{k} = Where(m{k}, g{k + 1}, zero) -> (r{k}: {f})",
            f"node ht{k} = Transpose({'x' if k == 0 else f'h{k}'}) attrs {{\"perm\": [1, 0]}} "
            f"-> (hT{k}: float32[{width}, {batch}])",
            f"node dw{k} = MatMul(hT{k}, r{k}) -> (dW{k}: float32[{width}, {width}])",
        ]
        if k > 0:
            lines += [f"node wt{k} = Transpose(w{k}) attrs {{\"perm\": [1, 0]}} -> (wT{k}: float32[{width}, {width}])",
                      f"node back{k} = MatMul(r{k}, wT{k}) -> (g{k}: {f})"]
    lines.append("output loss")
    lines += [f"output dW{k}" for k in range(layers)]
    g = parse("\n".join(lines) + "\n")
    for k in range(layers):
        g.constants[f"w{k}"].set_const((rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32))
    return g


def random_dag(seed: int, nodes: int = 30, batch: int = 256, widths: tuple[int, ...] = (64, 128, 256)) -> Graph:
    """A random DAG of element-wise and MatMul nodes on ``[batch, w]`` tensors.

    Each node reads one or two earlier values (half the time a recent one, else any), so
    values have long gaps between uses; values nobody reads are summed (ReduceSum) at the
    end into scalar graph outputs, besides the last value.
    """
    rng = np.random.default_rng(seed)
    g = Graph(f"dag{seed}")
    w0 = int(rng.choice(widths))
    values = [g.add_input("x", (batch, w0))]
    for i in range(nodes):
        def pick():
            if rng.random() < 0.5:
                return values[-1 - int(rng.integers(0, min(3, len(values))))]
            return values[int(rng.integers(0, len(values)))]
        a = pick()
        kind = rng.random()
        if kind < 0.25:
            w = int(rng.choice(widths))
            weight = g.add_constant(f"w{i}", (rng.standard_normal((a.shape[1], w)) / 8).astype(np.float32))
            node = g.make_node("MatMul", [a, weight], name=f"n{i}")
            node.outputs[0].shape = (batch, w)
        elif kind < 0.7:
            same = [v for v in values if v.shape == a.shape and v is not a]
            b = same[int(rng.integers(0, len(same)))] if same else a
            node = g.make_node(str(rng.choice(["Add", "Mul", "Sub", "Max"])), [a, b], name=f"n{i}")
            node.outputs[0].shape = a.shape
        else:
            node = g.make_node(str(rng.choice(["Relu", "Neg", "Tanh", "Abs"])), [a], name=f"n{i}")
            node.outputs[0].shape = a.shape
        node.outputs[0].dtype = np.dtype("float32")
        values.append(node.outputs[0])
    outputs = [values[-1]]
    for v in values[1:-1]:
        if not v.uses():
            node = g.make_node("ReduceSum", [v], {"keepdims": 0}, name=f"sum_{v.name}")
            node.outputs[0].shape, node.outputs[0].dtype = (), np.dtype("float32")
            outputs.append(node.outputs[0])
    g.outputs = outputs
    return g
