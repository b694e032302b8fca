"""Expanding a real ONNX model (the bundled tiny CNN) into a neuron-level topology."""

import numpy as np
import pytest

load_model = pytest.importorskip("corefold.frontend.onnx").load_model

from corefold.cli import main  # noqa: E402
from corefold.examples import example_path  # noqa: E402
from corefold.mapping.topology import load_topology  # noqa: E402
from corefold.mapping.topology.expand import expand_graph  # noqa: E402

NEURON_OPS = {"Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "Gemm", "MatMul"}


def test_tiny_cnn_expands_one_neuron_per_output_element(tmp_path):
    g = load_model(example_path())
    e = expand_graph(g)
    expected = [(v.name, v.size) for v in g.inputs]
    expected += [(n.name, n.outputs[0].size) for n in g.topological_order() if n.op_type in NEURON_OPS]
    assert [(name, count) for name, _, count in e.layers] == expected
    firsts = [first for _, first, _ in e.layers]
    assert firsts == list(np.cumsum([0] + [c for _, c in expected[:-1]]))
    fc = next(n for n in g.nodes if n.op_type == "Gemm")
    first, count = next((f, c) for name, f, c in e.layers if name == fc.name)
    into_fc = (e.dst >= first) & (e.dst < first + count)
    assert into_fc.sum() == fc.inputs[0].size * count  # dense: every input to every output
    t = e.topology()
    t.validate()
    assert t.synapses.sum() == e.num_synapses

    out = tmp_path / "tiny.npz"
    assert main(["topology", "expand", str(example_path()), "-o", str(out)]) == 0
    u = load_topology(out)
    assert np.array_equal(u.indices, t.indices) and np.array_equal(u.synapses, t.synapses)
