"""``polish``: each kept executable lowered again with the M3 order search (and without
parallel pieces), the fastest kept."""

from __future__ import annotations

import dataclasses

import pytest

from corefold.backend import lower, run_executable
from corefold.backend.lower import SEARCH
from corefold.backend.lower_test import _conv_chain
from corefold.backend.testing import max_relative_error
from corefold.compile import polish
from corefold.errors import CompileError
from corefold.executor import random_inputs, run
from corefold.target import load_target


class _Ticks:
    def __init__(self) -> None:
        self.n = 0

    def update(self, n: int) -> None:
        self.n += n


def test_polish_lowers_each_subgraph_again_with_the_search_and_keeps_a_candidate_it_cannot(monkeypatch):
    """Two subgraphs compiled as M1 compiles its candidates (list orders, no search): the
    polish lowers both again with the order search (its latencies reported, the outputs
    the executor's within 1e-5 of the output scale), counts them, and tells ``progress``
    of each; given a latency, the searched executable replaces only a slower candidate,
    and a lowering without parallel pieces replaces both when it is faster still; when
    the searched lowering runs out of a resource, the candidate stays."""
    import importlib

    lower_mod = importlib.import_module("corefold.backend.lower")  # the package's ``lower`` is the function

    t = load_target("npu-2x2")
    subs = [_conv_chain(8, 16, 2, seed=s) for s in (0, 1)]
    candidates = [lower(g, t, SEARCH) for g in subs]
    assert all("searched_latency_s" not in c.meta["order"] for c in candidates)
    ticks = _Ticks()
    out, replaced = polish(candidates, subs, t, 0.1, ticks)
    assert replaced == 2 and ticks.n == 2
    for exe, g in zip(out, subs, strict=True):
        assert exe is not None and "list_latency_s" in exe.meta["order"]
        feeds = random_inputs(g, 0)
        assert max_relative_error(run(g, feeds), run_executable(exe, feeds)) <= 1e-5

    # given the simulator's latency, a searched lowering replaces a candidate only when it
    # runs faster: here the candidates are declared the faster ones, then the slower ones
    listed = set(map(id, candidates))
    for candidates_faster, expect in ((True, 0), (False, 2)):
        def latency(exe, candidates_faster=candidates_faster):
            return 1.0 if (id(exe) in listed) == candidates_faster else 2.0

        out, replaced = polish(candidates, subs, t, 0.1, latency=latency)
        assert replaced == expect
        assert all((a is b) == (expect == 0) for a, b in zip(out, candidates, strict=True))

    # a lowering without parallel pieces, when the simulator finds it the fastest, is kept
    assert all(c.meta["order"]["pieces_per_core"] > 0 for c in candidates)

    def no_pieces_fastest(exe):
        return 0.5 if exe.meta["order"]["pieces_per_core"] == 0 else (1.0 if id(exe) in listed else 2.0)

    out, replaced = polish(candidates, subs, t, 0.1, latency=no_pieces_fastest)
    assert replaced == 2 and all(e.meta["order"]["pieces_per_core"] == 0 for e in out)
    for exe, g in zip(out, subs, strict=True):
        feeds = random_inputs(g, 1)
        assert max_relative_error(run(g, feeds), run_executable(exe, feeds)) <= 1e-5

    def out_of_sram(*args, **kwargs):
        raise CompileError("SRAM", "core (0,0)", 2, 1, "made to fail")

    monkeypatch.setattr(lower_mod, "lower", out_of_sram)
    ticks = _Ticks()
    out, replaced = polish(candidates, subs, t, 0.1, ticks)
    assert replaced == 0 and ticks.n == 2 and all(a is b for a, b in zip(out, candidates, strict=True))
    with pytest.raises(ValueError):  # one executable per subgraph
        polish(candidates, subs[:1], t, 0.1)


def test_a_quantized_model_is_split_for_m1_only_to_what_the_chip_holds(tmp_path):
    """A QDQ model's operators are cut ahead of M1 only where the whole chip could not hold
    them: cut to one core's budget, the split pass cut each convolution, its weights'
    DequantizeLinear and its QuantizeLinear apart, the backend found no integer pattern
    and every piece ran in float (the int8 light SqueezeNet on 128 KiB cores: 79 float
    convolution pieces in one executable). Here every convolution runs in integers, and the
    chain computes the integer runner's outputs exactly."""
    import numpy as np

    from corefold.backend.testing import small_target
    from corefold.compile import CompileSettings, compile_model, split_threshold
    from corefold.passes.quantize import load_calibration
    from corefold.passes.quantize.integer import IntegerRunner
    from corefold.sim import simulate_chain

    g = _conv_chain(16, 16, 3)
    t = small_target(sram_kib=32, reserved_kib=2)  # a 16-channel 16 x 16 layer touches 41 KiB
    assert split_threshold(g, t) == t.core_memory_threshold
    np.savez(tmp_path / "c.npz", x=np.random.default_rng(0).standard_normal((4, 3, 16, 16)).astype(np.float32))
    build = compile_model(g, t, calib=load_calibration(tmp_path / "c.npz", g),
                          settings=CompileSettings(strategies_table=False, polish=False, simulate=False))
    assert split_threshold(build.graph, t) == t.core_memory_threshold * len(t.usable_cores) * 4  # int8 in float
    convs = [op for exe in build.executables for op in exe.ops if op.op_type == "Conv"]
    assert len(convs) >= 3 and all(op.quant is not None for op in convs)
    feeds = random_inputs(build.graph, 1)
    want = IntegerRunner(build.graph).run(feeds)
    got = simulate_chain(build.executables, feeds, t).tensors
    for v in build.graph.outputs:
        np.testing.assert_array_equal(got[v.name], want[v.name])


def _touches_at_most(limit, sub):
    """A stand-in compiler that refuses any operator touching more than ``limit`` bytes (data
    movement aside: the backend turns a Concat or Slice into transfers)."""
    from corefold.passes.split.split import touched_bytes

    worst = max((touched_bytes(n) for n in sub.nodes if n.op_type not in ("Concat", "Slice")), default=0)
    if worst > limit:
        raise CompileError("SRAM", "core (0,0)", worst, limit, "one operator")
    return sub.name


def test_a_quantized_model_whose_operator_compiles_only_cut_per_core_is_split_again(tmp_path):
    """When an operator of a QDQ model split only to the chip's budget does not compile
    alone (the int8 ResNet-18 on 128 KiB cores), the model is split again from a copy, to
    one core's budget, and partitioned: the build holds the pieces, every one compiled."""
    import functools

    import numpy as np

    from corefold.backend.testing import small_target
    from corefold.compile import CompileSettings, compile_model
    from corefold.passes.quantize import load_calibration

    g = _conv_chain(16, 16, 3)
    t = small_target(sram_kib=32, reserved_kib=2)
    np.savez(tmp_path / "c.npz", x=np.random.default_rng(0).standard_normal((4, 3, 16, 16)).astype(np.float32))
    build = compile_model(g, t, calib=load_calibration(tmp_path / "c.npz", g),
                          compiler=functools.partial(_touches_at_most, t.core_memory_threshold),
                          settings=CompileSettings(strategies_table=False, polish=False, simulate=False))
    convs = [n for n in build.graph.nodes if n.op_type == "Conv"]
    assert build.graph is not g and len(convs) > 3  # cut into pieces
    assert len(build.executables) == len(build.serial.pieces) >= 1
    assert build.serial.pieces[-1].end == len(build.serial.order) == len(build.graph)


def test_a_quantized_build_passes_integers_between_its_parts_and_they_run_in_onnxruntime(tmp_path):
    """A QDQ model compiled into several executables: every tensor the parts pass between
    them is an integer tensor (each part dequantizes its own copy), the part*.onnx files run
    one after another in ONNX Runtime to the whole model's outputs (as ONNX writes them:
    ``qdq_exact``, so every CPU computes the same), and the simulated chain equals the
    integer execution."""
    import numpy as np

    from corefold.backend.testing import small_target
    from corefold.build_folder import write_build
    from corefold.compile import CompileSettings, compile_model
    from corefold.frontend.onnx.check import ort_session
    from corefold.passes.quantize import load_calibration
    from corefold.passes.quantize.integer import IntegerRunner
    from corefold.sim import simulate_chain

    g = _conv_chain(96, 8, 4)  # 4 x 81 KiB of int8 weights on 16 cores of 16 KiB
    t = small_target(sram_kib=16, reserved_kib=2)
    np.savez(tmp_path / "c.npz", x=np.random.default_rng(0).standard_normal((4, 3, 8, 8)).astype(np.float32))
    build = compile_model(g, t, calib=load_calibration(tmp_path / "c.npz", g),
                          settings=CompileSettings(strategies_table=False, polish=False, simulate=False))
    assert len(build.executables) >= 2 and not build.serial.ends_inside_patterns()
    folder = write_build(build, tmp_path / "build")
    feeds = random_inputs(build.graph, 1)
    whole = ort_session(str(folder / "model.onnx"), qdq_exact=True)
    want = dict(zip([o.name for o in whole.get_outputs()], whole.run(None, feeds), strict=True))
    env = dict(feeds)
    graph_io = {v.name for v in [*build.graph.inputs, *build.graph.outputs]}
    for i in range(len(build.executables)):
        part = ort_session(str(folder / f"part{i}.onnx"), qdq_exact=True)
        for v in [*part.get_inputs(), *part.get_outputs()]:
            assert v.name in graph_io or v.type in ("tensor(int8)", "tensor(uint8)"), (i, v.name, v.type)
        outs = part.run(None, {v.name: env[v.name] for v in part.get_inputs()})
        env.update(zip([o.name for o in part.get_outputs()], outs, strict=True))
    for k, v in want.items():
        np.testing.assert_array_equal(env[k], v)
    got = simulate_chain(build.executables, feeds, t).tensors
    for k, v in IntegerRunner(build.graph).run(feeds).items():
        np.testing.assert_array_equal(got[k], v)


def test_the_polish_on_two_processes_keeps_the_same_executables_as_in_one():
    """``workers=2`` lowers and times each subgraph in a pool: the same executables come
    back, byte for byte, as from the polish in this process, and the same are replaced."""
    from corefold.backend.cfx import to_bytes
    from corefold.compile import latency_for

    t = load_target("npu-2x2")
    subs = [_conv_chain(*shape, seed=0) for shape in ((8, 16, 2), (16, 32, 3), (32, 16, 6))]  # two or three replaced
    candidates = [lower(g, t, SEARCH) for g in subs]
    timed = latency_for(t)
    one, replaced_one = polish(candidates, subs, t, 0.1, latency=timed, workers=1)
    ticks = _Ticks()
    two, replaced_two = polish(candidates, subs, t, 0.1, ticks, latency=timed, workers=2)
    assert replaced_one == replaced_two and ticks.n == 3
    assert [a is c for a, c in zip(one, candidates, strict=True)] == [b is c for b, c in zip(two, candidates,
                                                                                            strict=True)]
    def without_times(e):  # meta holds each step's wall seconds
        return to_bytes(dataclasses.replace(e, meta={}))

    assert [without_times(e) for e in one] == [without_times(e) for e in two]
    assert [e.meta["order"] == f.meta["order"] for e, f in zip(one, two, strict=True)] == [True] * 3
    assert replaced_two == sum(e is not c for e, c in zip(two, candidates, strict=True)) >= 2
    assert all(timed(e) <= timed(c) for e, c in zip(two, candidates, strict=True))


def test_the_polish_reuses_the_latencies_m1_measured():
    """An executable whose latency M1's balancing cached on its compile outcome is not
    simulated again; any other is, once per call; a failed outcome is skipped."""
    from corefold.compile import _measured
    from corefold.passes.serial.chain import Piece
    from corefold.passes.serial.compilers import Outcome

    timed, other = object(), object()
    memo = {Piece(0, 3): Outcome(Piece(0, 3), timed, latency_s=2.5e-6),
            Piece(3, 9): Outcome(Piece(3, 9), None, CompileError("SRAM", "core (0,0)", 2, 1))}
    calls = []

    def simulate(exe):
        calls.append(exe)
        return 7.0e-6

    latency = _measured(memo, simulate)
    assert latency(timed) == 2.5e-6 and calls == []
    assert latency(other) == 7.0e-6 and calls == [other]


def test_a_float_model_is_folded_before_m1_and_the_chain_computes_what_it_did():
    """The bundled example has a Conv -> BatchNormalization: ``corefold compile`` folds it
    before M1 (so no cut can fall between them), and the build's chain computes the
    original model's outputs within float32 rounding (1e-5 of their scale)."""
    from importlib import resources

    from corefold.compile import CompileSettings, compile_model
    from corefold.frontend.onnx import load_model
    from corefold.sim import simulate_chain

    path = resources.files("corefold.examples").joinpath("tiny_cnn.onnx")
    original, g = load_model(path), load_model(path)
    assert any(n.op_type == "BatchNormalization" for n in original.nodes)
    target = load_target("npu-2x2")
    build = compile_model(g, target, settings=CompileSettings(strategies_table=False, simulate=False, polish=False))
    assert not any(n.op_type == "BatchNormalization" for n in build.graph.nodes)
    assert len(build.graph.nodes) < len(original.nodes)
    feeds = random_inputs(original, seed=1)
    sim = simulate_chain(build.executables, feeds, target)
    want = run(original, feeds)
    assert max_relative_error(want, {k: sim.tensors[k] for k in want}) <= 1e-5
