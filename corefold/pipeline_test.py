"""The pass contract: verify after every pass, executor checks in debug, equivalences, and
every settings class of the tree documented and settable from text."""

from __future__ import annotations

import dataclasses
import importlib

import numpy as np
import pytest

from corefold.errors import InternalError
from corefold.ir import parse
from corefold.pipeline import CompileContext, Equivalence, PassResult, Pipeline
from corefold.settings import (
    SettingsError,
    describe,
    field_docs,
    override,
    preset,
    undocumented_fields,
)

NET = """\
graph g
input x: float32[2, 3]
node a = Relu(x) -> (r: float32[2, 3])
node b = Neg(r) -> (y: float32[2, 3])
output y
"""


@dataclasses.dataclass(frozen=True)
class _Settings:
    """Test settings.

    Attributes:
        scale: what the pass multiplies by.
        flag: unused.
    """

    scale: float = 1.0
    flag: bool = False
    PRESETS = {"strong": {"scale": 2.0}}


class _Scale:
    """Multiplies the output by ``scale`` through a new Mul node (exact when scale is 1)."""

    name = "scale"
    settings_class = _Settings
    equivalence = Equivalence("exact")

    def run(self, graph, ctx):
        s = ctx.settings_for(self).scale
        if s == 1.0:
            return PassResult(graph, False)
        y = graph.outputs[0]
        k = graph.add_constant("k", np.float32(s))
        node = graph.make_node("Mul", [y, k], name="scaled")
        from corefold.ir.shapes import infer_node

        infer_node(node)
        graph.outputs = [node.outputs[0]]
        return PassResult(graph, True, {"scale": s})


class _Breaks:
    """Leaves a value with a wrong stored shape: verify must name the pass."""

    name = "breaks"
    settings_class = _Settings
    equivalence = Equivalence("exact")

    def run(self, graph, ctx):
        graph.value("r").shape = (9, 9)
        return PassResult(graph, True)


def test_pipeline_runs_passes_in_order_and_reports():
    ctx = CompileContext(settings={"scale": _Settings(scale=1.0)})
    res = Pipeline([_Scale()]).run(parse(NET), ctx)
    assert [name for name, *_ in res.steps] == ["scale"] and not res.modified
    assert ctx.reports == [("scale", {})]


def test_verify_after_each_pass_names_the_pass():
    with pytest.raises(InternalError, match="pass 'breaks' left a broken graph.*'r'"):
        Pipeline([_Breaks()]).run(parse(NET))


def test_debug_mode_catches_a_pass_that_changes_outputs():
    ctx = CompileContext(settings={"scale": _Settings(scale=2.0)}, debug=True)
    with pytest.raises(InternalError, match="pass 'scale' changed output"):
        Pipeline([_Scale()]).run(parse(NET), ctx)


def test_debug_mode_accepts_within_the_pass_equivalence():
    class _Loose(_Scale):
        equivalence = Equivalence("close", rtol=0.6)

    ctx = CompileContext(settings={"scale": _Settings(scale=1.5)}, debug=True)
    res = Pipeline([_Loose()]).run(parse(NET), ctx)
    assert res.modified


@pytest.mark.parametrize("eq,want,got,ok", [
    (Equivalence("exact"), [1.0, np.nan], [1.0, np.nan], True),
    (Equivalence("exact"), [1.0, 2.0], [1.0, 2.0000002], False),
    (Equivalence("close", rtol=1e-5), [1.0, 100.0], [1.0005, 100.0], True),
    (Equivalence("close", rtol=1e-5), [1.0, 100.0], [1.01, 100.0], False),
    (Equivalence("sqnr", min_sqnr_db=30.0), [1.0, 2.0, 3.0], [1.001, 2.0, 3.0], True),
    (Equivalence("sqnr", min_sqnr_db=30.0), [1.0, 2.0, 3.0], [1.5, 2.0, 3.0], False),
])
def test_equivalences(eq, want, got, ok):
    assert (eq.mismatch(np.array(want), np.array(got)) is None) == ok


def test_looser_keeps_the_weaker_guarantee():
    assert Equivalence("exact").looser(Equivalence("close", rtol=1e-5)).kind == "close"
    assert Equivalence("close", rtol=1e-5).looser(Equivalence("sqnr", min_sqnr_db=20)).kind == "sqnr"
    both = Equivalence("close", rtol=1e-5).looser(Equivalence("close", rtol=1e-3, atol=1e-6))
    assert (both.rtol, both.atol) == (1e-3, 1e-6)


def test_settings_presets_overrides_and_description():
    assert preset(_Settings, "strong").scale == 2.0
    assert override(preset(_Settings), ["scale=3", "flag=true"]) == _Settings(3.0, True)
    with pytest.raises(SettingsError, match="no such setting"):
        override(_Settings(), ["nope=1"])
    with pytest.raises(SettingsError, match="not a finite number"):
        override(_Settings(), ["scale=nan"])
    with pytest.raises(SettingsError, match="unknown preset"):
        preset(_Settings, "bogus")
    text = describe(_Settings)
    assert "scale (float) = 1.0" in text and "what the pass multiplies by" in text and "strong: scale=2.0" in text
    assert field_docs(_Settings) == {"scale": "what the pass multiplies by.", "flag": "unused."}


SETTINGS_CLASSES = [
    "corefold.passes.order.settings:OrderSettings",
    "corefold.passes.split.split:SplitSettings",
    "corefold.passes.serial.partition:SerialSettings",
    "corefold.mapping.settings:MapSettings",
    "corefold.passes.quantize.settings:QuantizeSettings",
]


@pytest.mark.parametrize("path", SETTINGS_CLASSES)
def test_every_settings_class_documents_every_field_and_parses_its_defaults(path):
    """``--help-settings`` explains every field, and every default written as text reads back."""
    module, _, name = path.partition(":")
    cls = getattr(importlib.import_module(module), name)
    assert undocumented_fields(cls) == []
    default = preset(cls)
    for f in dataclasses.fields(cls):
        value = getattr(default, f.name)
        if value is None or isinstance(value, (list, dict)):
            continue
        text = ",".join(map(str, value)) if isinstance(value, tuple) else str(value)
        if isinstance(value, tuple) and not value:
            continue
        assert getattr(override(default, [f"{f.name}={text}"]), f.name) == value, f.name
