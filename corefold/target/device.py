"""``kind = "gpu"`` targets: one device with its own memory next to a host (SPEC M2).

The ``[device]`` section (documented key by key in ``presets/gpu.toml``) gives the rates the
roofline cost model uses. The returned :class:`~corefold.target.model.Target` is a 1x1 mesh
whose core stands for the whole device, with units derived from those rates, so that code
written for many-core targets (``inspect``, the order search) still runs on it.
"""

from __future__ import annotations

from typing import Any, Callable

from corefold.errors import TargetError
from corefold.target.model import Device, Target, Unit

#: Keys of the ``[device]`` section.
DEVICE_KEYS = ("memory_gib", "fp32_tflops", "tensor_tflops", "memory_gbps", "host_link_gbps", "launch_us")


def gpu_target(doc: dict[str, Any], get: Callable[..., Any], origin: str) -> Target:
    """Build a GPU target from a parsed TOML document.

    Args:
        doc: the TOML document (sections already checked for unknown keys).
        get: ``get(dotted_key, type, default, minimum=..., positive=...)`` reading and
            validating one key (the loader's reader, so messages name the key).
        origin: the file or preset, for messages.

    Raises:
        TargetError: a section other than [target] and [device], or a missing or invalid key.
    """
    kind = get("target.kind", str, "npu")
    if kind != "gpu":
        raise TargetError(f"target {origin}: a [device] section needs target.kind = 'gpu', got {kind!r}")
    for section in doc:
        if section not in ("target", "device"):
            raise TargetError(f"target {origin}: section '{section}' is not used by a kind 'gpu' target "
                              "(only [target] and [device])")
    clock = get("target.clock_mhz", float, None, positive=True) * 1e6
    device = Device(
        memory_bytes=int(get("device.memory_gib", float, None, positive=True) * 2**30),
        fp32_flops=get("device.fp32_tflops", float, None, positive=True) * 1e12,
        tensor_flops=get("device.tensor_tflops", float, None, positive=True) * 1e12,
        memory_bytes_per_s=get("device.memory_gbps", float, None, positive=True) * 1e9,
        host_link_bytes_per_s=get("device.host_link_gbps", float, None, positive=True) * 1e9,
        launch_seconds=get("device.launch_us", float, 0.0, minimum=0) * 1e-6,
    )
    # the one "core" stands for the device: units at the device's rates (per cycle)
    units = {
        "dma": Unit("dma", 1, device.memory_bytes_per_s / clock),
        "matrix": Unit("matrix", 1, device.fp32_flops / 2 / clock),
        "vector": Unit("vector", 1, device.fp32_flops / 2 / clock),
    }
    return Target(
        name=get("target.name", str, "custom"), kind="gpu", clock_hz=clock,
        mesh_width=1, mesh_height=1, chips_x=1, chips_y=1,
        sram_bytes=device.memory_bytes, sram_reserved_bytes=0, units=units,
        noc_link_bytes_per_cycle=device.memory_bytes_per_s / clock, noc_hop_latency_cycles=0.0,
        interchip_hop_cost=1.0, dram_bytes_per_s=device.memory_bytes_per_s,
        host_link_bytes_per_s=device.host_link_bytes_per_s, device=device,
    )
