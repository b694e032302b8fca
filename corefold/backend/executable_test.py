import pickle
from dataclasses import replace

import numpy as np
import pytest

from corefold.backend.executable import View, route_end, target_fingerprint, whole, xy_route
from corefold.errors import CompileError
from corefold.target import load_target


def test_xy_route_goes_x_then_y_and_arrives():
    r = xy_route((1, 4), (3, 2))
    assert r == ((1, 4, "E"), (2, 4, "E"), (3, 4, "N"), (3, 3, "N"))
    assert route_end((1, 4), r) == (3, 2)
    assert xy_route((2, 2), (2, 2)) == ()
    assert xy_route((3, 0), (0, 1)) == ((3, 0, "W"), (2, 0, "W"), (1, 0, "W"), (0, 0, "S"))
    with pytest.raises(ValueError):
        route_end((0, 0), ((1, 0, "E"),))


def test_view_index_and_whole():
    v = View(0, (2, 3, 4), (0, 1, 0), (2, 2, 4))
    a = np.arange(24).reshape(2, 3, 4)
    assert a[v.index()].shape == (2, 2, 4) and v.elements == 16 and not v.is_whole
    assert whole(3, (2, 3)).is_whole


def test_fingerprint_changes_with_any_field():
    t = load_target("npu")
    a = target_fingerprint(t)
    assert a == target_fingerprint(load_target("npu"))
    assert a.digest != target_fingerprint(replace(t, sram_bytes=t.sram_bytes + 1)).digest
    assert (a.width, a.height) == (8, 8)


def test_compile_error_is_one_line_and_pickles():
    e = CompileError("SRAM", "core (3,5)", 1.4 * 2**20, 2**20)
    assert str(e) == "SRAM of core (3,5): 1.4 MiB needed, 1.0 MiB available"
    e2 = pickle.loads(pickle.dumps(e))
    assert (e2.resource, e2.where, e2.need, e2.limit) == ("SRAM", "core (3,5)", 1.4 * 2**20, 2**20)
    assert str(CompileError("core count", "target 'x'", 70, 64)) == "core count of target 'x': 70 needed, 64 available"
