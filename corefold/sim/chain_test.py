"""Two hand-built executables in a chain: data passes by name, reports add up."""

import numpy as np
import pytest

from corefold.backend.executable import Compute, DmaLoad, DmaStore, xy_route
from corefold.errors import DataError
from corefold.sim.chain import simulate_chain
from corefold.sim.simulate import run_simulation
from corefold.sim.testing import ExeBuilder, small_target


def _unary(op_type: str, src: str, dst: str, src_location: str, dst_location: str):
    t = small_target()
    b = ExeBuilder(t)
    x = b.graph_input(src, (4,), location=src_location)
    y = b.graph_output(dst, (4,), location=dst_location)
    bx = b.buffer((0, 0), (4,), offset=0)
    by = b.buffer((0, 0), (4,), offset=64)
    op = b.op(op_type, [(4,)], [(4,)], "vector", 4)
    c = (0, 0)
    b.add(c, DmaLoad("dma0", b.view(x, True), b.view(bx), xy_route((1, 0), c)))
    b.add(c, Compute(op, "vector0", (b.view(bx),), (b.view(by),), deps=(0,)))
    b.add(c, DmaStore("dma0", b.view(by), b.view(y, True), xy_route(c, (1, 0)), deps=(1,)))
    return b.build(), t


def test_a_chain_passes_tensors_by_name_and_sums_its_reports():
    first, t = _unary("Relu", "x", "h", "host", "dram")
    second, _ = _unary("Neg", "h", "y", "dram", "host")
    x = np.array([1, -2, 3, -4], np.float32)
    chain = simulate_chain([first, second], {"x": x}, t)
    np.testing.assert_array_equal(chain.tensors["y"], -np.maximum(x, 0))
    a = run_simulation(first, {"x": x}, t).report
    b = run_simulation(second, {"h": np.maximum(x, 0)}, t).report
    r = chain.report
    assert r.latency_s == pytest.approx(a.latency_s + b.latency_s)
    assert r.instructions == 6 and r.dram_bytes == a.dram_bytes + b.dram_bytes
    # x goes in over the host link, y comes back; h stays in DRAM between the two
    assert a.host_bytes == 16 and b.host_bytes == 16 and r.host_bytes == 32
    doc = chain.report_json()
    assert [e["instructions"] for e in doc["executables"]] == [3, 3]


def test_a_chain_names_what_is_missing():
    second, t = _unary("Neg", "h", "y", "dram", "host")
    with pytest.raises(DataError, match="executable 0 .* needs 'h'"):
        simulate_chain([second], {"x": np.zeros(4, np.float32)}, t)
    with pytest.raises(DataError, match="no executables"):
        simulate_chain([], {}, t)
