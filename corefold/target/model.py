"""The target data model: frozen dataclasses, validated by :mod:`corefold.target.load`."""

from __future__ import annotations

from dataclasses import dataclass, field

#: Unit kinds a core can have. ``dma`` moves bytes, ``matrix`` does multiply-accumulates
#: (conv, matmul), ``vector`` does element-wise work (activations, pooling, normalisation).
UNIT_KINDS = ("dma", "matrix", "vector")

#: What one unit of each kind processes per cycle.
UNIT_THROUGHPUT_NAME = {"dma": "bytes_per_cycle", "matrix": "macs_per_cycle", "vector": "elements_per_cycle"}


@dataclass(frozen=True)
class Unit:
    """``count`` identical units of one kind in each core, each doing ``throughput`` per cycle."""

    kind: str
    count: int
    throughput: float

    def seconds(self, work: float, clock_hz: float) -> float:
        """Time for ``work`` (bytes, MACs or elements) spread over all units of this kind."""
        return work / (self.throughput * self.count * clock_hz)


@dataclass(frozen=True)
class Device:
    """A GPU-like device with its own memory next to a host (``kind = "gpu"`` targets, SPEC M2).

    Attributes:
        memory_bytes: device memory.
        fp32_flops: peak fp32 FLOP/s (an FMA is 2 FLOPs).
        tensor_flops: peak FLOP/s of matrix work on 16-bit and 8-bit inputs (tensor cores).
        memory_bytes_per_s: device memory bandwidth.
        host_link_bytes_per_s: host <-> device bandwidth in each direction (full duplex).
        launch_seconds: fixed cost of each kernel or copy.
    """

    memory_bytes: int
    fp32_flops: float
    tensor_flops: float
    memory_bytes_per_s: float
    host_link_bytes_per_s: float
    launch_seconds: float

    def host_transfer_seconds(self, nbytes: float) -> float:
        """Seconds to copy ``nbytes`` between device and host memory (either direction)."""
        return self.launch_seconds + float(nbytes) / self.host_link_bytes_per_s


@dataclass(frozen=True)
class Target:
    """A many-core chip (or a board of them) as corefold compiles for it.

    Coordinates are global over the whole board: x in ``[0, width)``, y in ``[0, height)``,
    where ``width = mesh_width * chips_x``. A hop between two cores of different chips costs
    ``interchip_hop_cost`` on-chip hops. A ``kind = "gpu"`` target is one device
    (``device`` set, a 1x1 mesh whose units are derived from the device's rates).
    """

    name: str
    kind: str  # "npu", "neuromorphic" or "gpu"
    clock_hz: float
    mesh_width: int
    mesh_height: int
    chips_x: int
    chips_y: int
    sram_bytes: int
    sram_reserved_bytes: int
    units: dict[str, Unit]
    noc_link_bytes_per_cycle: float
    noc_hop_latency_cycles: float
    interchip_hop_cost: float
    dram_bytes_per_s: float
    host_link_bytes_per_s: float
    neurons_per_core: int | None = None
    synapses_per_core: int | None = None
    unusable_cores: frozenset[tuple[int, int]] = field(default_factory=frozenset)
    device: Device | None = None
    # -- what lowering onto the mesh needs (corefold.backend); defaults keep older files valid
    instruction_bytes: int = 256 * 1024
    noc_buffer_bytes: int = 16 * 1024
    noc_stream_buffer_bytes: int = 512
    interchip_link_bytes_per_cycle: float | None = None
    interchip_hop_latency_cycles: float | None = None
    dram_attach: tuple[tuple[int, int], ...] = ((0, 0),)
    host_attach: tuple[int, int] = (0, 0)

    @property
    def width(self) -> int:
        """Cores along x over the whole board."""
        return self.mesh_width * self.chips_x

    @property
    def height(self) -> int:
        """Cores along y over the whole board."""
        return self.mesh_height * self.chips_y

    @property
    def num_cores(self) -> int:
        return self.width * self.height

    @property
    def usable_cores(self) -> list[tuple[int, int]]:
        """Usable core coordinates in row-major order (y, then x)."""
        return [(x, y) for y in range(self.height) for x in range(self.width)
                if (x, y) not in self.unusable_cores]

    @property
    def core_memory_threshold(self) -> int:
        """Bytes one operator may touch on a core: SRAM minus the reserved buffer (SPEC M3 §7)."""
        return self.sram_bytes - self.sram_reserved_bytes

    def chip_of(self, x: int, y: int) -> tuple[int, int]:
        return (x // self.mesh_width, y // self.mesh_height)

    def unit(self, kind: str) -> Unit:
        return self.units[kind]

    def copy_unit(self, itemsize: int, vector: bool = True) -> str:
        """The unit kind that copies a box of ``itemsize``-byte elements between two SRAM
        buffers of one core fastest: ``"dma"`` (``bytes_per_cycle``) or, with ``vector``,
        ``"vector"`` (``elements_per_cycle``, so ``itemsize`` times as many bytes), the DMA
        engine on a tie (it is otherwise idle between loads). On the ``npu`` preset a float32
        box goes to a vector engine (256 bytes a cycle against 64), an int8 box to the DMA
        engine. O(1)."""
        dma, vec = self.units.get("dma"), self.units.get("vector")
        if vector and vec is not None and (dma is None or vec.throughput * itemsize > dma.throughput):
            return "vector"
        return "dma"

    def copy_bytes_per_s(self, unit_kind: str, itemsize: int) -> float:
        """Bytes a second one engine of ``unit_kind`` (``"dma"`` or ``"vector"``) copies within
        a core's SRAM, of ``itemsize``-byte elements. O(1)."""
        u = self.units[unit_kind]
        return (u.throughput * itemsize if unit_kind == "vector" else u.throughput) * self.clock_hz

    def copy_seconds(self, unit_kind: str, nbytes: float, itemsize: int) -> float:
        """Time one engine of ``unit_kind`` takes to copy ``nbytes`` of ``itemsize``-byte
        elements within a core's SRAM (:meth:`copy_bytes_per_s`). O(1)."""
        return nbytes / self.copy_bytes_per_s(unit_kind, itemsize)

    # -- the NoC, DRAM channels and host link (corefold.backend, corefold.sim) ------------------
    @property
    def noc_streams_per_core(self) -> int:
        """Distinct cores one core can receive NoC transfers from: each needs a receive FIFO
        of ``noc_stream_buffer_bytes`` in the core's ``noc_buffer_bytes`` of NoC buffers."""
        return self.noc_buffer_bytes // self.noc_stream_buffer_bytes

    def is_interchip(self, x: int, y: int, direction: str) -> bool:
        """Whether the link leaving router ``(x, y)`` towards ``direction`` (N, E, S, W; y grows
        southwards) joins two chips."""
        dx, dy = {"N": (0, -1), "E": (1, 0), "S": (0, 1), "W": (-1, 0)}[direction]
        return self.chip_of(x, y) != self.chip_of(x + dx, y + dy)

    def link_bytes_per_s(self, x: int, y: int, direction: str) -> float:
        """Bandwidth of one directed mesh link (each direction has its own)."""
        per_cycle = self.noc_link_bytes_per_cycle
        if self.is_interchip(x, y, direction) and self.interchip_link_bytes_per_cycle is not None:
            per_cycle = self.interchip_link_bytes_per_cycle
        return per_cycle * self.clock_hz

    def hop_latency_s(self, x: int, y: int, direction: str) -> float:
        """Latency of one hop (router plus link) of a transfer's head."""
        cycles = self.noc_hop_latency_cycles
        if self.is_interchip(x, y, direction):
            cycles = (self.interchip_hop_latency_cycles if self.interchip_hop_latency_cycles is not None
                      else cycles * self.interchip_hop_cost)
        return cycles / self.clock_hz

    @property
    def dram_channels(self) -> tuple[tuple[int, int], ...]:
        """The router (global ``(x, y)``) each DRAM channel attaches to: every chip's channels
        (``dram_attach``, chip-local), chips in row-major order."""
        out = []
        for cy in range(self.chips_y):
            for cx in range(self.chips_x):
                for lx, ly in self.dram_attach:
                    out.append((cx * self.mesh_width + min(lx, self.mesh_width - 1),
                                cy * self.mesh_height + min(ly, self.mesh_height - 1)))
        return tuple(out)

    @property
    def dram_channel_bytes_per_s(self) -> float:
        """Bandwidth of one DRAM channel: a chip's DRAM bandwidth shared by its channels."""
        return self.dram_bytes_per_s / len(self.dram_attach)

    @property
    def host_router(self) -> tuple[int, int]:
        """The router (global) the host link attaches to."""
        return (min(self.host_attach[0], self.width - 1), min(self.host_attach[1], self.height - 1))

    def with_mesh(self, width: int, height: int) -> "Target":
        """A copy with a single chip of ``width x height`` cores (used by ``--mesh``)."""
        from dataclasses import replace

        return replace(self, mesh_width=width, mesh_height=height, chips_x=1, chips_y=1,
                       unusable_cores=frozenset())
