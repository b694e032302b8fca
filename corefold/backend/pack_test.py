import importlib
from dataclasses import replace

import numpy as np
import pytest

from corefold.backend import check_executable, lower, run_executable
from corefold.backend.lgraph import LoweredGraph, operator_name
from corefold.backend.lower_test import _conv_chain
from corefold.backend.pack import FILL, _fill, _fit_streams, _items, _spread, pack
from corefold.backend.testing import max_relative_error, small_target
from corefold.errors import CompileError
from corefold.executor import random_inputs, run
from corefold.ir import Graph
from corefold.target import load_target

lower_mod = importlib.import_module("corefold.backend.lower")


def _list_scheduling_fails(monkeypatch, cores: int):
    """Make every clustering but a packed one fail with a core count error, as when list
    scheduling runs out of cores; returns the real ``cluster``."""
    real = lower_mod.cluster

    def list_fails(lg, target, *args):
        if len(args) < 7 or args[6] is None:
            raise CompileError("core count", "target 'x'", cores + 1, cores, "made to fail")
        return real(lg, target, *args)

    monkeypatch.setattr(lower_mod, "cluster", list_fails)
    return real


def _lowered(g: Graph, t) -> LoweredGraph:
    lg, _ = lower_mod._prepare(g, t, lower_mod.DEFAULT)
    return lg


def _senders(lg: LoweredGraph, where: list[int]) -> dict[int, set[int]]:
    """Per core, the other cores its tasks read from."""
    got: dict[int, set[int]] = {}
    for task in lg.tasks:
        for o in task.inputs:
            for pc in () if o is None else o.pieces:
                ph = lg.phys[pc.phys]
                if ph.kind == "op" and where[ph.task] != where[task.id]:
                    got.setdefault(where[task.id], set()).add(where[ph.task])
    return got


def _within_sram(lg: LoweredGraph, where: list[int], cap: int) -> bool:
    for core in set(where):
        mine = [task for task in lg.tasks if where[task.id] == core]
        weights = {c for task in mine for c in lg.consts_of(task)}
        used = sum(-(-lg.phys[c].nbytes // 64) * 64 for c in weights) + max(lg.working_bytes(x) for x in mine)
        if used > cap:
            return False
    return True


def test_pack_puts_each_task_on_one_core_within_its_sram_and_spreads_the_busiest_weights():
    """:func:`pack`: every task on one core, each core's weights (once) plus its largest
    working set within 99% of its SRAM, no more cores than the target has; the tasks that
    read the same weights packed together, then spread over copies of them where cores
    have room (here every convolution's bands over several cores); None when they do not
    fit."""
    g = _conv_chain(64, 16, 3, cols=64, in_ch=16)
    t = small_target(4, 4, sram_kib=256, reserved_kib=4)
    lg = _lowered(g, t)
    where = pack(lg, t)
    assert where is not None and len(where) == len(lg.tasks) and min(where) == 0
    assert max(where) < len(t.usable_cores)
    assert _within_sram(lg, where, int(0.99 * t.sram_bytes))
    by_weights: dict[tuple, set[int]] = {}
    for task in lg.tasks:
        if lg.consts_of(task):
            by_weights.setdefault(tuple(sorted(lg.consts_of(task))), set()).add(where[task.id])
    assert all(len(cores) > 1 for cores in by_weights.values())
    total = sum(lg.phys[c].nbytes for c in {c for task in lg.tasks for c in lg.consts_of(task)})
    few = small_target(1, 1, sram_kib=256, reserved_kib=4, dram_attach="[[0, 0]]")
    assert total > few.sram_bytes and pack(lg, few) is None  # the weights alone exceed the one core


def test_fill_puts_an_operators_weight_items_apart_up_to_apart_cores():
    """Best fit alone puts two of a convolution's three channel parts on one core (they fit
    beside each other); with ``apart`` 3 each part of an operator is on its own core, and
    each core still holds its weights and largest working set."""
    g = _conv_chain(64, 16, 3, cols=64, in_ch=16)
    t = small_target(4, 4, sram_kib=256, reserved_kib=4)
    lg = _lowered(g, t)
    cap = int(FILL * t.sram_bytes)

    def cores_per_operator(apart: int) -> dict[str, tuple[int, int]]:
        items, where = _items(lg), [-1] * len(lg.tasks)
        assert _fill(lg, t, cap, items, apart, where) is not None
        assert min(where) >= 0 and _within_sram(lg, where, cap)
        parts: dict[str, dict[tuple, set[int]]] = {}
        for task in lg.tasks:
            if lg.consts_of(task):
                parts.setdefault(operator_name(task.name), {}).setdefault(
                    tuple(sorted(lg.consts_of(task))), set()).add(where[task.id])
        return {op: (len(p), len(set().union(*p.values()))) for op, p in parts.items()}

    best_fit, apart = cores_per_operator(0), cores_per_operator(3)
    assert best_fit["conv1"] == (3, 2) and best_fit["conv2"] == (3, 2)
    assert apart["conv1"] == (3, 3) and apart["conv2"] == (3, 3)


def test_fill_puts_a_task_without_weights_beside_the_producer_it_reads_most_from():
    """The convolutions' weights take two cores; best fit alone would put the max pool's
    eight bands (no weights) on the fuller core, away from the convolution they read; they
    go onto that convolution's core instead, where it has room."""
    rng = np.random.default_rng(3)
    g = Graph("pool")
    x = g.add_input("x", (1, 16, 16, 16), "float32")
    w0 = g.add_constant("w0", (rng.standard_normal((32, 16, 3, 3)) / 8).astype(np.float32))
    w1 = g.add_constant("w1", (rng.standard_normal((64, 32, 3, 3)) / 8).astype(np.float32))
    c0 = g.make_node("Conv", [x, w0], {"pads": [1, 1, 1, 1]}, name="c0").outputs[0]
    p = g.make_node("MaxPool", [c0], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, name="pool").outputs[0]
    c1 = g.make_node("Conv", [p, w1], {"pads": [1, 1, 1, 1]}, name="c1").outputs[0]
    for v, c in ((c0, 32), (p, 32), (c1, 64)):
        v.shape, v.dtype = (1, c, 16, 16), np.dtype("float32")
    g.outputs = [c1]
    t = small_target(4, 4, sram_kib=96, reserved_kib=4)
    lg = _lowered(g, t)
    items, where = _items(lg), [-1] * len(lg.tasks)
    assert _fill(lg, t, int(FILL * t.sram_bytes), items, 0, where) is not None
    assert len(set(where)) == 2
    pool = [task for task in lg.tasks if operator_name(task.name) == "pool"]
    assert len(pool) == 8 and not any(lg.consts_of(task) for task in pool)
    for task in pool:
        producers = {where[lg.phys[pc.phys].task] for o in task.inputs if o is not None for pc in o.pieces
                     if lg.phys[pc.phys].kind == "op"}
        assert producers and where[task.id] in producers, task.name


def test_fit_streams_moves_tasks_until_no_core_receives_from_more_cores_than_its_noc_buffers_take(monkeypatch):
    """With NoC buffers for 10 senders per core, the spread packing has a core receiving from
    13 (11 senders too many over the cores); :func:`_fit_streams` moves tasks until none
    exceeds 10, every task still on one core within SRAM. A lowering packed onto that target
    (list scheduling made to fail) passes the executable check, which counts the senders,
    and computes the executor's outputs."""
    g = _conv_chain(64, 16, 3, cols=64, in_ch=16)
    roomy = small_target(4, 4, sram_kib=256, reserved_kib=4)
    t = small_target(4, 4, sram_kib=256, reserved_kib=4, noc_buffer_kib=5)
    assert t.noc_streams_per_core == 10
    lg = _lowered(g, roomy)
    cap = int(FILL * t.sram_bytes)
    items, where = _items(lg), [-1] * len(lg.tasks)
    cores = _fill(lg, t, cap, items, 3, where)
    _spread(lg, t, cap, list(items.values()), cores, where)
    excess = sum(max(0, len(s) - 10) for s in _senders(lg, where).values())
    assert excess == 11
    _fit_streams(lg, t, cap, items, cores, where)
    assert max(len(s) for s in _senders(lg, where).values()) <= 10
    assert min(where) >= 0 and _within_sram(lg, where, cap)

    _list_scheduling_fails(monkeypatch, 16)
    exe = lower(g, t, replace(lower_mod.DEFAULT, trial_pieces=()))
    assert exe.meta["order"]["packed"] is True
    check_executable(exe, t)
    feeds = random_inputs(g, 0)
    assert max_relative_error(run(g, feeds), run_executable(exe, feeds)) <= 1e-5


def test_a_packed_lowering_cuts_heavy_bands_into_weight_slices_and_computes_the_executors_outputs(monkeypatch):
    """Packed (list scheduling made to fail), the tile step cuts the row bands of a matrix
    operator with more than ``SLICE_BYTES`` of weights into ``pack_slices`` channel pieces
    (here 16 KiB, so that the convolutions' 49 KiB parts are cut): the executable holds
    those slices and computes the executor's outputs; ``pack_slices`` 0 cuts none."""
    import corefold.backend.parallel as parallel

    monkeypatch.setattr(parallel, "SLICE_BYTES", 16 * 1024)
    g = _conv_chain(64, 16, 3, cols=64, in_ch=16)
    t = small_target(4, 4, sram_kib=256, reserved_kib=4)
    _list_scheduling_fails(monkeypatch, 16)
    settings = replace(lower_mod.DEFAULT, trial_pieces=(), order_budget_seconds=0.0)
    names = {}
    for slices in (2, 0):
        exe = lower(g, t, replace(settings, pack_slices=slices))
        assert exe.meta["order"]["packed"] is True
        check_executable(exe, t)
        feeds = random_inputs(g, 1)
        assert max_relative_error(run(g, feeds), run_executable(exe, feeds)) <= 1e-5
        names[slices] = {op.name for op in exe.ops if op.name.startswith("conv1")}
    assert any(n.count("_part") == 2 for n in names[2])  # conv1_part0_rows0_part1: a band's slice
    assert not any(n.count("_part") == 2 for n in names[0])


def test_when_list_scheduling_runs_out_of_cores_lower_packs_the_tasks_by_sram(monkeypatch):
    """Every try of ``lower`` running out of cores (list scheduling made to fail here), it
    tries the tasks packed onto cores by SRAM (``pack_cores``): the executable then computes
    the executor's outputs. When packing fails too, the unpacked tries' own error is raised."""
    g = _conv_chain(16, 16, 3)
    t = load_target("npu-2x2")
    real = _list_scheduling_fails(monkeypatch, 4)
    settings = replace(lower_mod.DEFAULT, trial_pieces=())
    exe = lower(g, t, settings)
    check_executable(exe, t)
    feeds = random_inputs(g, 0)
    assert max_relative_error(run(g, feeds), run_executable(exe, feeds)) <= 1e-5
    assert exe.meta["order"]["packed"] is True
    assert lower(g, t, FAST_ONE := replace(settings, order_budget_seconds=0.0)).meta["order"]["packed"] is True
    monkeypatch.setattr(lower_mod, "cluster", real)
    assert lower(g, t, FAST_ONE).meta["order"]["packed"] is False
    _list_scheduling_fails(monkeypatch, 4)
    monkeypatch.setattr(lower_mod, "pack", lambda lg, target, apart=0: None)
    with pytest.raises(CompileError, match="made to fail"):
        lower(g, t, settings)
