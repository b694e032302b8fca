"""The chip as timing-engine resources, and the stages of every kind of transfer on it.

Resources (:class:`corefold.sim.engine.Engine`), one server each; the links, DRAM
channels, host link and DMA engines are *shared* (packets of several streams interleave on
them; :mod:`corefold.sim.engine`):

* every engine of every usable core: ``matrix0``, ``vector0``, ``vector1``, ``dma0``... (a
  core's instruction stream names the engine; each runs one instruction at a time);
* every directed mesh link ``(x, y, d)`` (d in N, E, S, W; y grows southwards) whose far
  end is on the board, at ``target.link_bytes_per_s`` with ``target.hop_latency_s`` per hop
  (inter-chip links have their own bandwidth and latency);
* every DRAM channel, at ``target.dram_channel_bytes_per_s`` (a chip's DRAM bandwidth
  shared by its channels: concurrent transfers on one channel queue, on different
  channels they overlap);
* the host link, at ``target.host_link_bytes_per_s``.

Transfers are chains of stages (cut-through, :mod:`corefold.sim.engine`): a DRAM load is
``channel -> hops of its route -> the core's DMA engine``, a store the reverse, a DRAM to
DRAM copy ``the core's DMA engine -> source channel -> hops -> destination channel``, a
send its hops, a host write ``host link -> hops -> channel`` and so on. Without contention a
transfer of ``b`` bytes takes ``b / min(rates) + sum(hop latencies)``.

Building is O(cores x engines + links); every stage list is O(hops).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from corefold.backend.executable import DIRECTION_STEP, DIRECTIONS, Core, Route
from corefold.sim.engine import Engine, Stage
from corefold.target import Target


@dataclass
class Machine:
    """The resources of ``target`` in ``engine`` (module docstring).

    Attributes:
        target: the chip.
        engine: the engine they live in.
        units: ``(core, engine name)`` -> resource, e.g. ``((3, 5), "matrix0")``.
        links: ``(x, y, d)`` -> resource.
        channels: DRAM channel index -> resource.
        host: the host link's resource.
        hop_info: ``(x, y, d)`` -> (its resource, bytes per second, latency in seconds):
            what :meth:`hops` reads for each hop, in one lookup.
        free_noc, free_dram: links (DRAM channels and DMA engines) move bytes in no time,
            for :func:`corefold.sim.timed.time_executable`'s ``what_if``.
    """

    target: Target
    engine: Engine
    units: dict[tuple[Core, str], int] = field(default_factory=dict)
    links: dict[tuple[int, int, str], int] = field(default_factory=dict)
    channels: list[int] = field(default_factory=list)
    host: int = -1
    free_noc: bool = False
    free_dram: bool = False
    hop_info: dict[tuple[int, int, str], tuple[int, float, float]] = field(default_factory=dict)

    @classmethod
    def build(cls, target: Target, engine: Engine, free_noc: bool = False, free_dram: bool = False) -> "Machine":
        """Add every resource of ``target`` to ``engine``. O(cores x engines + links)."""
        m = cls(target, engine, free_noc=free_noc, free_dram=free_dram)
        for x, y in target.usable_cores:
            for kind, unit in target.units.items():
                for i in range(unit.count):
                    name = f"{kind}{i}"
                    m.units[((x, y), name)] = engine.resource(
                        f"core ({x},{y}) {name}", process=f"core ({x},{y})", thread=name, kind=kind,
                        shared=kind == "dma")
        for y in range(target.height):
            for x in range(target.width):
                for d in DIRECTIONS:
                    dx, dy = DIRECTION_STEP[d]
                    if 0 <= x + dx < target.width and 0 <= y + dy < target.height:
                        m.links[(x, y, d)] = engine.resource(f"link ({x},{y}) {d}", process="NoC",
                                                             thread=f"({x},{y}) {d}", kind="link", shared=True)
                        m.hop_info[(x, y, d)] = (m.links[(x, y, d)], target.link_bytes_per_s(x, y, d),
                                                 target.hop_latency_s(x, y, d))
        for c, (x, y) in enumerate(target.dram_channels):
            m.channels.append(engine.resource(f"DRAM channel {c}", process="DRAM",
                                              thread=f"channel {c} at ({x},{y})", kind="dram", shared=True))
        m.host = engine.resource("host link", process="host", thread="host link", kind="host", shared=True)
        return m

    # -- stages ---------------------------------------------------------------------------------
    def hops(self, route: Route, nbytes: float) -> list[tuple[int, float, float]]:
        """One stage per hop: ``nbytes`` at the link's bandwidth, the hop's latency (plain
        ``(resource, duration, latency)`` triples, :class:`Stage`'s fields: a timed run
        makes one per hop of every transfer). O(hops).

        Raises:
            KeyError: a hop leaves the board.
        """
        info = self.hop_info
        if self.free_noc:
            return [(r, 0.0, lat) for r, _, lat in map(info.__getitem__, route)]
        return [(r, nbytes / rate, lat) for r, rate, lat in map(info.__getitem__, route)]

    def unit_stage(self, core: Core, unit: str, seconds: float) -> Stage:
        """``seconds`` on engine ``unit`` of ``core``.

        Raises:
            KeyError: the core has no such engine (or is unusable).
        """
        return Stage(self.units[(core, unit)], seconds)

    def dma_seconds(self, nbytes: float) -> float:
        """Time one DMA engine needs for ``nbytes``."""
        dma = self.target.units["dma"]
        return 0.0 if self.free_dram else nbytes / (dma.throughput * self.target.clock_hz)

    def copy_seconds(self, unit: str, nbytes: float, dtype: str) -> float:
        """Time engine ``unit`` (``"dma0"``, ``"vector1"``, ...) takes to copy ``nbytes`` of
        ``dtype`` elements within a core's SRAM (:meth:`Target.copy_seconds`); none on a DMA
        engine with ``free_dram`` (a copy is no Compute: ``what_if`` "compute" leaves it). O(1)."""
        kind = unit.rstrip("0123456789")
        if kind == "dma" and self.free_dram:
            return 0.0
        return self.target.copy_seconds(kind, nbytes, np.dtype(dtype).itemsize)

    def channel_stage(self, channel: int, nbytes: float) -> Stage:
        """``nbytes`` through DRAM channel ``channel``."""
        return Stage(self.channels[channel], 0.0 if self.free_dram else nbytes / self.target.dram_channel_bytes_per_s)

    def host_stage(self, nbytes: float) -> Stage:
        """``nbytes`` over the host link."""
        return Stage(self.host, nbytes / self.target.host_link_bytes_per_s)

    def link_resource_index(self) -> dict[int, tuple[int, int, int]]:
        """resource -> ``(x, y, direction index)`` of every link."""
        return {r: (x, y, DIRECTIONS.index(d)) for (x, y, d), r in self.links.items()}
