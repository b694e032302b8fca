"""Read and validate target TOML files. Every error names the file and the key."""

from __future__ import annotations

import math
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

from corefold.errors import TargetError
from corefold.target.device import DEVICE_KEYS, gpu_target
from corefold.target.model import UNIT_KINDS, UNIT_THROUGHPUT_NAME, Target, Unit

#: Preset names accepted wherever a target is expected.
PRESETS = ("npu", "neuromorphic", "npu-array", "npu-2x2", "gpu", "gpu-nvlink")

_SECTIONS = {
    "target": {"name", "kind", "clock_mhz"},
    "mesh": {"width", "height", "chips_x", "chips_y", "unusable"},
    "core": {"sram_kib", "sram_reserved_kib", "neurons", "synapses", "units", "instruction_kib"},
    "noc": {"link_bytes_per_cycle", "hop_latency_cycles", "interchip_hop_cost", "routing", "buffer_kib",
            "stream_buffer_bytes", "interchip_link_bytes_per_cycle", "interchip_hop_latency_cycles"},
    "memory": {"dram_gbps", "host_link_gbps", "dram_attach", "host_attach"},
    "device": set(DEVICE_KEYS),
}


def load_target(name_or_path: str | Path = "npu") -> Target:
    """Load a preset by name (see :data:`PRESETS`) or a TOML file by path.

    Raises:
        TargetError: the file is missing, not TOML, or a key is missing or invalid.
    """
    return parse_target(*target_source(name_or_path))


def target_source(name_or_path: str | Path = "npu") -> tuple[str, str]:
    """The TOML text of a preset or file, and how to name it in messages.

    Raises:
        TargetError: no such file or preset.
    """
    text: str
    origin = str(name_or_path)
    if str(name_or_path) in PRESETS:
        text = resources.files("corefold.target").joinpath(f"presets/{name_or_path}.toml").read_text()
        origin = f"preset '{name_or_path}'"
    else:
        path = Path(name_or_path)
        if not path.is_file():
            raise TargetError(f"target '{name_or_path}': no such file or preset (presets: {', '.join(PRESETS)})")
        text = path.read_text(encoding="utf-8", errors="replace")
    return text, origin


def parse_target(text: str, origin: str = "<string>") -> Target:
    """Parse target TOML text; ``origin`` names it in error messages."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TargetError(f"target {origin}: not valid TOML: {exc}") from None
    r = _Reader(doc, origin)
    for section, keys in _SECTIONS.items():
        table = doc.get(section, {})
        if not isinstance(table, dict):
            raise TargetError(f"target {origin}: '{section}' must be a table")
        for key in table:
            if key not in keys:
                raise TargetError(f"target {origin}: unknown key '{section}.{key}'")
    for section in doc:
        if section not in _SECTIONS:
            raise TargetError(f"target {origin}: unknown section '{section}'")

    kind = r.get("target.kind", str, "npu")
    if kind not in ("npu", "neuromorphic", "gpu"):
        raise TargetError(f"target {origin}: key 'target.kind' must be 'npu', 'neuromorphic' or 'gpu', got {kind!r}")
    if kind == "gpu" or "device" in doc:
        return gpu_target(doc, r.get, origin)
    units: dict[str, Unit] = {}
    unit_table = doc.get("core", {}).get("units", {})
    if not isinstance(unit_table, dict):
        raise TargetError(f"target {origin}: 'core.units' must be a table")
    for ukind in unit_table:
        if ukind not in UNIT_KINDS:
            raise TargetError(f"target {origin}: unknown unit kind 'core.units.{ukind}' (known: {', '.join(UNIT_KINDS)})")
    for ukind in UNIT_KINDS:
        tp = UNIT_THROUGHPUT_NAME[ukind]
        if ukind not in unit_table:
            raise TargetError(f"target {origin}: missing key 'core.units.{ukind}'")
        for key in unit_table[ukind]:
            if key not in ("count", tp):
                raise TargetError(f"target {origin}: unknown key 'core.units.{ukind}.{key}'")
        units[ukind] = Unit(ukind, r.get(f"core.units.{ukind}.count", int, 1, minimum=1),
                            r.get(f"core.units.{ukind}.{tp}", float, None, positive=True))

    width = r.get("mesh.width", int, None, minimum=1)
    height = r.get("mesh.height", int, None, minimum=1)
    chips_x = r.get("mesh.chips_x", int, 1, minimum=1)
    chips_y = r.get("mesh.chips_y", int, 1, minimum=1)
    unusable_raw = r.get("mesh.unusable", list, [])
    unusable = set()
    for item in unusable_raw:
        if (not isinstance(item, list) or len(item) != 2 or not all(isinstance(v, int) for v in item)
                or not (0 <= item[0] < width * chips_x and 0 <= item[1] < height * chips_y)):
            raise TargetError(f"target {origin}: key 'mesh.unusable' has {item!r}, not an [x, y] core on the "
                              f"{width * chips_x}x{height * chips_y} board")
        unusable.add((item[0], item[1]))
    if len(unusable) >= width * chips_x * height * chips_y:
        raise TargetError(f"target {origin}: key 'mesh.unusable' marks every core unusable")

    sram = r.get("core.sram_kib", float, None, positive=True)
    reserved = r.get("core.sram_reserved_kib", float, 0.0, minimum=0)
    if reserved >= sram:
        raise TargetError(f"target {origin}: key 'core.sram_reserved_kib' ({reserved}) must be below core.sram_kib ({sram})")
    neurons = r.get("core.neurons", int, None, minimum=1, required=False)
    synapses = r.get("core.synapses", int, None, minimum=1, required=False)
    if kind == "neuromorphic" and neurons is None:
        raise TargetError(f"target {origin}: missing key 'core.neurons' (required for kind 'neuromorphic')")
    lowering = _lowering_keys(r, origin, width, height, chips_x, chips_y)
    return Target(
        name=r.get("target.name", str, "custom"),
        kind=kind,
        clock_hz=r.get("target.clock_mhz", float, None, positive=True) * 1e6,
        mesh_width=width,
        mesh_height=height,
        chips_x=chips_x,
        chips_y=chips_y,
        sram_bytes=int(sram * 1024),
        sram_reserved_bytes=int(reserved * 1024),
        units=units,
        noc_link_bytes_per_cycle=r.get("noc.link_bytes_per_cycle", float, None, positive=True),
        noc_hop_latency_cycles=r.get("noc.hop_latency_cycles", float, 1.0, minimum=0),
        interchip_hop_cost=r.get("noc.interchip_hop_cost", float, 1.0, minimum=1),
        dram_bytes_per_s=r.get("memory.dram_gbps", float, None, positive=True) * 1e9,
        host_link_bytes_per_s=r.get("memory.host_link_gbps", float, None, positive=True) * 1e9,
        neurons_per_core=neurons,
        synapses_per_core=synapses,
        unusable_cores=frozenset(unusable),
        **lowering,
    )


def _lowering_keys(r: "_Reader", origin: str, width: int, height: int, chips_x: int, chips_y: int) -> dict[str, Any]:
    """The keys only lowering (corefold.backend) and the simulator read; all optional."""
    routing = r.get("noc.routing", str, "xy")
    if routing != "xy":
        raise TargetError(f"target {origin}: key 'noc.routing' must be 'xy', got {routing!r}")
    instr = r.get("core.instruction_kib", float, 256.0, positive=True)
    noc_buf = r.get("noc.buffer_kib", float, 16.0, positive=True)
    stream = r.get("noc.stream_buffer_bytes", int, 512, minimum=1)
    if stream > noc_buf * 1024:
        raise TargetError(f"target {origin}: key 'noc.stream_buffer_bytes' ({stream}) exceeds noc.buffer_kib")
    attach = r.get("memory.dram_attach", list, [[0, 0]])
    if not attach:
        raise TargetError(f"target {origin}: key 'memory.dram_attach' needs at least one channel")
    for item in attach:
        if (not isinstance(item, list) or len(item) != 2 or not all(isinstance(v, int) for v in item)
                or not (0 <= item[0] < width and 0 <= item[1] < height)):
            raise TargetError(f"target {origin}: key 'memory.dram_attach' has {item!r}, not an [x, y] router of "
                              f"one {width}x{height} chip")
    host = r.get("memory.host_attach", list, [0, 0])
    if (len(host) != 2 or not all(isinstance(v, int) for v in host)
            or not (0 <= host[0] < width * chips_x and 0 <= host[1] < height * chips_y)):
        raise TargetError(f"target {origin}: key 'memory.host_attach' has {host!r}, not an [x, y] router of the "
                          f"{width * chips_x}x{height * chips_y} board")
    return {
        "instruction_bytes": int(instr * 1024),
        "noc_buffer_bytes": int(noc_buf * 1024),
        "noc_stream_buffer_bytes": stream,
        "interchip_link_bytes_per_cycle": r.get("noc.interchip_link_bytes_per_cycle", float, None, positive=True,
                                                required=False),
        "interchip_hop_latency_cycles": r.get("noc.interchip_hop_latency_cycles", float, None, minimum=0,
                                              required=False),
        "dram_attach": tuple((int(a), int(b)) for a, b in attach),
        "host_attach": (int(host[0]), int(host[1])),
    }


class _Reader:
    def __init__(self, doc: dict[str, Any], origin: str):
        self.doc = doc
        self.origin = origin

    def get(self, dotted: str, typ: type, default: Any, *, minimum: float | None = None,
            positive: bool = False, required: bool = True) -> Any:
        node: Any = self.doc
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                node = None
                break
            node = node[part]
        if node is None:
            if default is None and required:
                raise TargetError(f"target {self.origin}: missing key '{dotted}'")
            return default
        if typ is float and isinstance(node, int) and not isinstance(node, bool):
            node = float(node)
        if not isinstance(node, typ) or isinstance(node, bool):
            raise TargetError(f"target {self.origin}: key '{dotted}' must be {typ.__name__}, got {node!r}")
        if typ is float and not math.isfinite(node):
            raise TargetError(f"target {self.origin}: key '{dotted}' must be a finite number, got {node!r}")
        if positive and not node > 0:
            raise TargetError(f"target {self.origin}: key '{dotted}' must be positive, got {node!r}")
        if minimum is not None and node < minimum:
            raise TargetError(f"target {self.origin}: key '{dotted}' must be >= {minimum}, got {node!r}")
        return node
