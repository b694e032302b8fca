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
    assert set(PRESETS) >= {"npu", "neuromorphic", "npu-array", "npu-2x2", "gpu", "gpu-nvlink"}


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


def test_gpu_presets_are_a_v100_behind_pcie_and_nvlink():
    gpu, nvl = load_target("gpu"), load_target("gpu-nvlink")
    for t in (gpu, nvl):
        d = t.device
        assert t.kind == "gpu" and d.memory_bytes == 16 * 2**30
        assert (d.fp32_flops, d.tensor_flops, d.memory_bytes_per_s) == (15.7e12, 125e12, 900e9)
        assert t.num_cores == 1 and t.sram_bytes == d.memory_bytes
    assert gpu.device.host_link_bytes_per_s == 16e9 and nvl.device.host_link_bytes_per_s == 75e9
    assert gpu.device.host_transfer_seconds(16e9) == pytest.approx(1.0 + gpu.device.launch_seconds)
    assert load_target("npu").device is None


def _gpu_text():
    from importlib import resources
    return resources.files("corefold.target").joinpath("presets/gpu.toml").read_text()


@pytest.mark.parametrize("old,new,key", [
    ("memory_gib = 16.0", "memory_gib = 0", "device.memory_gib"),
    ("host_link_gbps = 16.0", "host_link_gbps = 'fast'", "device.host_link_gbps"),
    ("launch_us = 2.0", "launch_us = -1", "device.launch_us"),
    ("tensor_tflops = 125.0", "tensor_flops = 125.0", "device.tensor_flops"),
    ('\nkind = "gpu"', '\nkind = "npu"', "kind"),
    ("\n[device]", "\n[mesh]\nwidth = 2\n[device]", "mesh"),
])
def test_bad_gpu_value_names_the_key(old, new, key):
    text = _gpu_text()
    assert old in text
    with pytest.raises(TargetError, match=key.replace(".", r"\.")):
        parse_target(text.replace(old, new, 1), "g.toml")
def test_lowering_keys_of_the_presets():
    npu = load_target("npu")
    assert npu.dram_channels == ((0, 3), (0, 4), (7, 3), (7, 4))
    assert npu.dram_channel_bytes_per_s == 25.6e9 / 4
    assert npu.noc_streams_per_core == 32 and npu.instruction_bytes == 256 * 1024
    assert npu.link_bytes_per_s(3, 3, "E") == 32e9 and npu.hop_latency_s(3, 3, "E") == 2e-9
    array = load_target("npu-array")
    assert (array.width, array.height, array.chips_x, array.chips_y) == (16, 16, 2, 2)
    assert len(array.dram_channels) == 16 and (15, 12) in array.dram_channels
    assert array.is_interchip(7, 2, "E") and not array.is_interchip(6, 2, "E") and array.is_interchip(3, 8, "N")
    assert array.link_bytes_per_s(7, 2, "E") == 8e9 and array.hop_latency_s(7, 2, "E") == 20e-9
    small = load_target("npu-2x2")
    assert (small.width, small.height, small.num_cores) == (2, 2, 4)
    assert small.sram_bytes == npu.sram_bytes and small.units == npu.units
    # a file without the lowering keys still loads, with the defaults
    t = parse_target("\n".join(line for line in _npu_text().splitlines()
                               if not line.startswith(("dram_attach", "host_attach", "instruction_kib", "routing"))))
    assert t.dram_channels == ((0, 0),) and t.instruction_bytes == 256 * 1024


@pytest.mark.parametrize("old,new,key", [
    ('routing = "xy"', 'routing = "yx"', "noc.routing"),
    ("dram_attach = [[0, 3]", "dram_attach = [[8, 3]", "memory.dram_attach"),
    ("host_attach = [0, 0]", "host_attach = [0, 9]", "memory.host_attach"),
    ("stream_buffer_bytes = 512", "stream_buffer_bytes = 99999", "noc.stream_buffer_bytes"),
])
def test_bad_lowering_key_names_the_key(old, new, key):
    text = _npu_text()
    assert old in text
    with pytest.raises(TargetError, match=key.replace(".", r"\.")):
        parse_target(text.replace(old, new, 1), "t.toml")


def test_a_core_copies_on_the_engine_that_moves_its_elements_fastest():
    """The npu preset: the DMA engine moves 64 bytes a cycle, each vector engine 64
    elements: float32 and int16 boxes copy faster on a vector engine, int8 ties (the DMA
    engine, otherwise idle between loads)."""
    t = load_target("npu")
    assert [t.copy_unit(s) for s in (1, 2, 4)] == ["dma", "vector", "vector"]
    assert t.copy_seconds("dma", 4096, 4) == pytest.approx(64e-9)
    assert t.copy_seconds("vector", 4096, 4) == pytest.approx(16e-9)
    assert t.copy_seconds("vector", 4096, 1) == t.copy_seconds("dma", 4096, 1) == pytest.approx(64e-9)
