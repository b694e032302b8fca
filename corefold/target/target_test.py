import pytest

from corefold.errors import TargetError
from corefold.target import load_target, parse_target
from corefold.target.load import PRESETS


def test_presets_load_with_expected_values():
    npu = load_target("npu")
    assert (npu.width, npu.height, npu.num_cores) == (8, 8, 64)
    assert npu.sram_bytes == 1024 * 1024
    assert npu.core_memory_threshold == (1024 - 64) * 1024
    assert npu.units["matrix"].throughput == 1024
    assert npu.units["vector"].count == 2
    assert npu.clock_hz == 1e9
    neuro = load_target("neuromorphic")
    assert (neuro.width, neuro.height) == (32, 32)
    assert neuro.neurons_per_core == 1024 and neuro.synapses_per_core == 65536
    assert neuro.chip_of(17, 3) == (1, 0)
    assert set(PRESETS) == {"npu", "neuromorphic"}


def _npu_text():
    from importlib import resources
    return resources.files("corefold.target").joinpath("presets/npu.toml").read_text()


@pytest.mark.parametrize("old,new,key", [
    ("width = 8 ", "width = -8 ", "mesh.width"),
    ("sram_kib = 1024", "sram_kib = 'big'", "core.sram_kib"),
    ("macs_per_cycle = 1024", "macs_per_cyc = 1024", "core.units.matrix.macs_per_cyc"),
    ("dram_gbps = 25.6", "dram_gbps = 0", "memory.dram_gbps"),
    ("unusable = []", "unusable = [[99, 0]]", "mesh.unusable"),
    ("sram_reserved_kib = 64", "sram_reserved_kib = 2048", "core.sram_reserved_kib"),
])
def test_bad_value_names_the_key(old, new, key):
    text = _npu_text()
    assert old in text
    with pytest.raises(TargetError, match=key.replace(".", r"\.")):
        parse_target(text.replace(old, new, 1), "t.toml")


def test_not_toml_and_missing_file():
    with pytest.raises(TargetError, match="not valid TOML"):
        parse_target("[mesh\nwidth=", "bad.toml")
    with pytest.raises(TargetError, match="no such file or preset"):
        load_target("/nonexistent/chip.toml")


def test_unusable_cores_are_excluded():
    t = parse_target(_npu_text().replace("unusable = []", "unusable = [[0, 0], [7, 7]]"))
    assert len(t.usable_cores) == 62 and (0, 0) not in t.usable_cores
    assert t.usable_cores[0] == (1, 0)
