"""Property tests: random DAGs lowered onto random small meshes, simulated, compared.

For every lowering that compiles, the simulator's outputs agree with the reference
executor within 1e-5 of each output's scale (float) or exactly with the integer runner
(int8 QDQ models), and no core's live buffers exceed its SRAM at any simulated time (the
simulator raises otherwise; the report's peaks are checked too). SRAM sizes are small so
that operators are tiled over several cores and activations spill to DRAM.
"""

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from corefold.backend.lower import FAST, lower
from corefold.errors import CompileError
from corefold.executor import run
from corefold.ir import Graph, verify
from corefold.sim import run_simulation
from corefold.target import parse_target

TARGET = """
[target]
name = "random-{w}x{h}-{sram}k"
clock_mhz = 1000
[mesh]
width = {w}
height = {h}
[core]
sram_kib = {sram}
sram_reserved_kib = 1
[core.units.dma]
count = 1
bytes_per_cycle = 32
[core.units.matrix]
count = 1
macs_per_cycle = 256
[core.units.vector]
count = 2
elements_per_cycle = 32
[noc]
link_bytes_per_cycle = 16
hop_latency_cycles = 2
[memory]
dram_gbps = 16
host_link_gbps = 4
dram_attach = [[0, 0], [{xmax}, {ymax}]]
host_attach = [0, 0]
"""


def small_target(w: int, h: int, sram_kib: int):
    return parse_target(TARGET.format(w=w, h=h, sram=sram_kib, xmax=w - 1, ymax=h - 1), "random target")


@st.composite
def dag_specs(draw):
    """A recipe: input channels and size, then ops reading earlier values of the same size."""
    c0 = draw(st.integers(1, 12))
    size = draw(st.sampled_from([4, 6, 8, 10]))
    ops = []
    for i in range(draw(st.integers(2, 7))):
        kind = draw(st.sampled_from(["conv3", "conv1", "relu", "add", "concat", "pool", "sigmoid"]))
        a = draw(st.integers(0, i))  # value index: 0 is the input, k the output of op k - 1
        b = draw(st.integers(0, i))
        ops.append((kind, a, b, draw(st.integers(1, 16))))
    extra_output = draw(st.booleans())
    head = draw(st.booleans())
    return c0, size, ops, extra_output, head


def build_graph(spec, seed: int) -> Graph:
    """The graph of a recipe; ops whose inputs do not fit (shapes) fall back to Relu."""
    c0, size, ops, extra_output, head = spec
    rng = np.random.default_rng(seed)
    g = Graph("random_dag")
    vals = [g.add_input("x", (1, c0, size, size), "float32")]

    def node(op, ins, shape, attrs=None):
        n = g.make_node(op, ins, attrs or {}, name=f"n{len(g.nodes)}_{op.lower()}")
        n.outputs[0].shape = shape
        n.outputs[0].dtype = np.dtype("float32")
        return n.outputs[0]

    for i, (kind, a, b, cout) in enumerate(ops):
        x, y = vals[a], vals[b]
        cx, hx = x.shape[1], x.shape[2]
        if kind in ("conv3", "conv1"):
            k = 3 if kind == "conv3" else 1
            w = g.add_constant(f"w{i}", (rng.standard_normal((cout, cx, k, k)) / np.sqrt(cx * k * k)).astype(np.float32))
            bias = g.add_constant(f"b{i}", (0.1 * rng.standard_normal(cout)).astype(np.float32))
            out = node("Conv", [x, w, bias], (1, cout, hx, hx), {"kernel_shape": [k, k], "pads": [k // 2] * 4})
        elif kind == "add" and x.shape == y.shape:
            out = node("Add", [x, y], x.shape)
        elif kind == "concat" and x.shape[2:] == y.shape[2:]:
            out = node("Concat", [x, y], (1, cx + y.shape[1], hx, hx), {"axis": 1})
        elif kind == "pool" and hx % 2 == 0 and hx > 2:
            out = node("MaxPool", [x], (1, cx, hx // 2, hx // 2), {"kernel_shape": [2, 2], "strides": [2, 2]})
        elif kind == "sigmoid":
            out = node("Sigmoid", [x], x.shape)
        else:
            out = node("Relu", [x], x.shape)
        vals.append(out)
    last = vals[-1]
    outputs = [last]
    if head:
        c, hw = last.shape[1], last.shape[2]
        pooled = node("GlobalAveragePool", [last], (1, c, 1, 1))
        flat = node("Flatten", [pooled], (1, c))
        w = g.add_constant("head_w", (rng.standard_normal((c, 5)) / np.sqrt(c)).astype(np.float32))
        outputs = [node("MatMul", [flat, w], (1, 5))]
        del hw
    if extra_output and len(vals) > 2 and vals[1] not in outputs:
        outputs.append(vals[1])
    g.outputs = outputs
    g.remove_unused_constants()
    verify(g)
    return g


def _lower_or_none(graph, target):
    try:
        return lower(graph, target, FAST)
    except CompileError as exc:  # the target is too small for this graph: nothing to simulate
        note(f"compile error: {exc}")
        return None


def _check_report(report, target):
    assert len(report.sram_peak_bytes) == target.width * target.height
    assert max(report.sram_peak_bytes) <= report.sram_capacity_bytes == target.sram_bytes
    assert report.latency_s >= report.roofline_s * (1 - 1e-9) > 0
    assert report.noc_bytes >= int(np.asarray(report.link_bytes).sum())


_MESH = st.tuples(st.integers(1, 4), st.integers(1, 3), st.sampled_from([8, 16, 64]))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dag_specs(), _MESH, st.integers(0, 2**16))
def test_float_lowerings_simulate_like_the_executor(spec, mesh, seed):
    graph = build_graph(spec, seed)
    target = small_target(*mesh)
    exe = _lower_or_none(graph, target)
    if exe is None:
        return
    feeds = {"x": np.random.default_rng(seed + 1).standard_normal(graph.inputs[0].shape).astype(np.float32)}
    want = run(graph, feeds)
    sim = run_simulation(exe, feeds, target)
    for name, ref in want.items():
        scale = float(np.abs(ref).max()) or 1.0
        assert np.abs(sim.outputs[name] - ref).max() <= 1e-5 * scale, name
    _check_report(sim.report, target)


def _quantized(graph: Graph, seed: int) -> Graph:
    from corefold.passes.quantize import QuantizeSettings, load_calibration, quantize_graph

    rng = np.random.default_rng(seed)
    shape = graph.inputs[0].shape
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "calib.npz"
        np.savez(path, x=rng.standard_normal((8,) + tuple(shape[1:])).astype(np.float32))
        quantize_graph(graph, load_calibration(path, graph), QuantizeSettings(calibration="minmax"), progress=False)
    return graph


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dag_specs(), _MESH, st.integers(0, 2**16))
def test_int8_lowerings_simulate_exactly_like_the_integer_runner(spec, mesh, seed):
    from corefold.passes.quantize.integer import IntegerRunner

    graph = _quantized(build_graph(spec, seed), seed)
    target = small_target(*mesh)
    exe = _lower_or_none(graph, target)
    if exe is None:
        return
    feeds = {"x": np.random.default_rng(seed + 1).standard_normal(graph.inputs[0].shape).astype(np.float32)}
    want = IntegerRunner(graph).run(feeds)
    sim = run_simulation(exe, feeds, target)
    for name, ref in want.items():
        np.testing.assert_array_equal(sim.outputs[name], ref, err_msg=name)
    _check_report(sim.report, target)


@pytest.mark.parametrize("quantize", [False, True])
def test_a_graph_tiled_over_several_cores_simulates_exactly(quantize):
    """One fixed recipe that must compile on a tight mesh (the properties above skip the
    examples that do not), spread over several cores and sending over the NoC."""
    spec = (32, 12, [("conv3", 0, 0, 32), ("relu", 1, 1, 1), ("conv3", 2, 2, 32), ("conv3", 2, 2, 32),
                     ("add", 3, 4, 1), ("conv1", 5, 5, 32), ("pool", 6, 6, 1)], True, True)
    graph = build_graph(spec, 7)
    if quantize:
        graph = _quantized(graph, 7)
    target = small_target(4, 3, 64)
    exe = lower(graph, target, FAST)
    feeds = {"x": np.random.default_rng(8).standard_normal((1, 32, 12, 12)).astype(np.float32)}
    sim = run_simulation(exe, feeds, target)
    if quantize:
        from corefold.passes.quantize.integer import IntegerRunner

        want = IntegerRunner(graph).run(feeds)
        for name, ref in want.items():
            np.testing.assert_array_equal(sim.outputs[name], ref)
    else:
        for name, ref in run(graph, feeds).items():
            assert np.abs(sim.outputs[name] - ref).max() <= 1e-5 * float(np.abs(ref).max())
    assert sum(1 for v in sim.report.sram_peak_bytes if v) >= 2
    assert sim.report.noc_bytes > 0 and any(type(i).__name__ == "Send" for _c, _j, i in exe.instructions())
    _check_report(sim.report, target)
