import numpy as np
import pytest

from corefold.backend import check_executable, fits, lower, run_executable
from corefold.backend.testing import max_relative_error, small_target
from corefold.errors import CompileError
from corefold.executor import random_inputs, run
from corefold.frontend.onnx import load_model
from corefold.ir import Graph, to_text
from corefold.target import load_target

TINY_CNN = "corefold/examples/tiny_cnn.onnx"


def _matmuls(n: int, k: int = 64, m: int = 1024, parallel: bool = True, seed: int = 0) -> Graph:
    """``n`` MatMuls of x (1 x k) with k x m weights, summed (parallel) or chained."""
    rng = np.random.default_rng(seed)
    g = Graph("matmuls")
    x = g.add_input("x", (1, k), "float32")
    outs = []
    cur = x
    for i in range(n):
        w = g.add_constant(f"w{i}", (rng.standard_normal((k if parallel or i == 0 else m, m)) / 8).astype(np.float32))
        node = g.make_node("MatMul", [x if parallel else cur, w], name=f"mm{i}")
        node.outputs[0].shape, node.outputs[0].dtype = (1, m), np.dtype("float32")
        cur = node.outputs[0]
        outs.append(cur)
    if parallel:
        s = g.make_node("Sum", outs, name="sum")
        s.outputs[0].shape, s.outputs[0].dtype = (1, m), np.dtype("float32")
        cur = s.outputs[0]
    g.outputs = [cur]
    return g


def _lower_and_run(graph, target, seed=0):
    exe = lower(graph, target)
    check_executable(exe, target)
    feeds = random_inputs(graph, seed)
    return exe, run(graph, feeds), run_executable(exe, feeds)


def test_tiny_cnn_on_the_npu_matches_the_executor_and_leaves_the_graph_alone():
    g = load_model(TINY_CNN)
    before = to_text(g)
    exe, want, got = _lower_and_run(g, load_target("npu"))
    assert to_text(g) == before
    assert max_relative_error(want, got) <= 1e-5
    assert exe.meta["cores_used"] == len(exe.programs) >= 1
    assert {t.name for t in exe.inputs} == {v.name for v in g.inputs}


def test_small_sram_splits_spills_and_still_matches():
    g = load_model(TINY_CNN)
    t = small_target(sram_kib=64, reserved_kib=4)
    exe, want, got = _lower_and_run(g, t)
    assert max_relative_error(want, got) <= 1e-5
    assert exe.meta["tasks"] > len(g.nodes)  # operators were cut
    assert all(b.end <= t.sram_bytes for b in exe.buffers)


def test_parallel_pieces_spread_over_cores():
    g = _matmuls(4, k=256, m=256)
    exe, want, got = _lower_and_run(g, small_target(sram_kib=512))
    assert max_relative_error(want, got) <= 1e-5
    assert len(exe.programs) >= 2


@pytest.mark.parametrize("target,resource", [
    (lambda: small_target(sram_kib=4, reserved_kib=0.5), "SRAM"),  # weights fit, one piece does not
    (lambda: small_target(instruction_kib=0.1), "instruction memory"),
    (lambda: small_target(width=1, height=1, sram_kib=400, reserved_kib=8, dram_attach="[[0, 0]]"), "core count"),
])
def test_every_compile_error_names_its_resource_in_one_line(target, resource):
    g = _matmuls(2, k=64, m=1024, parallel=False) if resource == "core count" else load_model(TINY_CNN)
    t = target()
    with pytest.raises(CompileError) as info:
        lower(g, t)
    e = info.value
    assert e.resource == resource and e.need > e.limit
    assert "\n" not in str(e) and str(e).startswith(f"{resource} of ")
    assert "needed" in str(e) and "available" in str(e)
    found = fits(g, t)
    assert isinstance(found, CompileError) and found.resource == resource


def test_noc_buffers_error_when_a_core_must_hear_from_too_many():
    # three weights that need a core each; their sum must read two other cores
    g = _matmuls(3, k=128, m=1024)
    t = small_target(sram_kib=700, reserved_kib=8, noc_buffer_kib=0.5, stream_bytes=512)
    with pytest.raises(CompileError) as info:
        lower(g, t)
    assert info.value.resource == "NoC buffers"
    assert isinstance(fits(g, t), CompileError)
    ok = small_target(sram_kib=700, reserved_kib=8)
    assert fits(g, ok) is None
    _, want, got = _lower_and_run(g, ok)
    assert max_relative_error(want, got) <= 1e-5


def test_fits_agrees_with_lower_when_it_fits():
    g = load_model(TINY_CNN)
    assert fits(g, load_target("npu")) is None


def test_neuromorphic_target_is_refused():
    with pytest.raises(CompileError, match="core count"):
        lower(load_model(TINY_CNN), load_target("neuromorphic"))
