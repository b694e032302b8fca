"""``polish``: each kept executable lowered again with the M3 order search."""

from __future__ import annotations

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
    of each; when the searched lowering runs out of a resource, the candidate stays."""
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

    def out_of_sram(*args, **kwargs):
        raise CompileError("SRAM", "core (0,0)", 2, 1, "made to fail")

    monkeypatch.setattr(lower_mod, "lower", out_of_sram)
    ticks = _Ticks()
    out, replaced = polish(candidates, subs, t, 0.1, ticks)
    assert replaced == 0 and ticks.n == 2 and all(a is b for a, b in zip(out, candidates, strict=True))
    with pytest.raises(ValueError):  # one executable per subgraph
        polish(candidates, subs[:1], t, 0.1)
