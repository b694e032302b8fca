from dataclasses import fields, replace

import numpy as np
import pytest

from corefold.mapping.mapper import map_topology
from corefold.mapping.settings import MapSettings
from corefold.mapping.testing import conv_like_graph
from corefold.settings import SettingsError, describe, override, preset, undocumented_fields
from corefold.target import load_target


def test_every_field_is_documented_and_every_preset_builds():
    assert undocumented_fields(MapSettings) == []
    assert MapSettings.preset_names() == ["default", "fast", "strong", "seed"]
    for name in MapSettings.preset_names():
        s = MapSettings.preset(name)
        assert s == preset(MapSettings, name)
        for key, value in MapSettings.PRESETS.get(name, {}).items():
            assert getattr(s, key) == value
    assert MapSettings.preset("default") == MapSettings()
    with pytest.raises(SettingsError, match="unknown preset 'nope'"):
        MapSettings.preset("nope")


def test_every_spec_parameter_can_be_set_by_name():
    s = override(MapSettings(), ["matching_limit=0.05", "matching_repeats=8", "min_shrink=0.1",
                                 "bisection_restarts=8", "force_fraction=0.1", "force_iterations=7",
                                 "strategy=seed", "rebalance_tolerance=none"])
    assert (s.matching_limit, s.matching_repeats, s.min_shrink, s.bisection_restarts, s.force_fraction,
            s.force_iterations, s.strategy, s.rebalance_tolerance) == (0.05, 8, 0.1, 8, 0.1, 7, "seed", None)
    for bad, match in (("strategy=sideways", "not one of"), ("bisection_restarts=0", "at least 1"),
                       ("force_fraction=1.5", r"\(0, 1\]"), ("min_shrink=x", "not a number"), ("nope=1", "no such")):
        with pytest.raises(SettingsError, match=match):
            override(MapSettings(), [bad])


def test_help_says_which_settings_the_default_preset_ignores():
    text = describe(MapSettings)
    for f in fields(MapSettings):
        assert f"  {f.name} (" in text
    for name in ("matching_limit", "matching_repeats"):
        entry = text.split(f"  {name} (", 1)[1].split("\n  ", 2)[1]
        assert "No effect under the default preset on graphs of at most" in entry


def test_global_matching_settings_change_nothing_under_the_default_preset():
    """The default preset bisects the finest graph (each bisection coarsens on its own), so
    the global hierarchy's ``matching_limit`` and ``matching_repeats`` must not change the
    mapping, as their documentation says; under the ``seed`` preset they do."""
    topo = conv_like_graph(700, 3)
    target = replace(load_target("neuromorphic").with_mesh(3, 3), neurons_per_core=90)
    base = replace(MapSettings.preset("fast"), anneal_steps_per_group=300)
    ref = map_topology(topo, target, base, seed=2, progress=False).core_xy
    other = replace(base, matching_limit=0.5, matching_repeats=7)
    np.testing.assert_array_equal(ref, map_topology(topo, target, other, seed=2, progress=False).core_xy)
    seed = replace(MapSettings.preset("seed"), matching_limit=0.01)
    a = map_topology(topo, target, seed, seed=2, progress=False)
    b = map_topology(topo, target, replace(seed, matching_limit=0.2), seed=2, progress=False)
    assert a.summary["levels"] != b.summary["levels"]
    # above finest_max_entries the default builds the global hierarchy, and they count
    big = replace(base, finest_max_entries=topo.indices.shape[0] - 1)
    a = map_topology(topo, target, replace(big, matching_limit=0.01), seed=2, progress=False)
    b = map_topology(topo, target, replace(big, matching_limit=0.2), seed=2, progress=False)
    assert a.summary["levels"] != b.summary["levels"]
    assert ref.shape == a.core_xy.shape
