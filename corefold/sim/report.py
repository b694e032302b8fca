"""The simulation report (``corefold sim --report r.json``) and the chip's roofline bound.

Keys (issue 11), exactly:

=====================  ======================================================================
``latency_s``          simulated time from the first instruction to the last output stored
``roofline_s``         ``max(M / (P m), V / (P v), D / B)`` (below)
``load_s``             time to load the resident weights (host link, then NoC), apart
``sram_peak_bytes``    per core, row-major ``y * W + x``: the most SRAM in use at any time
``sram_capacity_bytes`` one number: every core's SRAM
``noc_bytes``          sum over NoC transfers of bytes x hops
``link_bytes``         ``[H][W][4]``: bytes that left core (x, y) towards N, E, S, W
``dram_bytes``         bytes read from and written to DRAM
``host_bytes``         bytes over the host link during the run (weight loading apart)
``instructions``       instructions executed over all cores
``utilisation``        unit kind -> busy time / (units x latency), averaged over the cores
=====================  ======================================================================

``corefold sim --report`` on one executable appends ``critical_path``
(:meth:`corefold.sim.critical.CriticalPath.to_json`: the latency split by category along the
chain of tasks that set it), and on a build ``executables``.

Directions are the executable's (``corefold.backend.executable``): y grows southwards, N
is ``(x, y - 1)``, E ``(x + 1, y)``, S ``(x, y + 1)``, W ``(x - 1, y)``. The roofline: with ``P`` usable cores, ``m`` a core's matrix MAC/s (all its
matrix units), ``v`` its vector element-ops/s, ``M`` the executable's MACs, ``V`` its vector
element-operations, ``B`` the DRAM bandwidth (every channel of every chip) and ``D`` the compulsory DRAM bytes (graph
inputs and outputs plus weights that are not resident), no schedule can beat
``max(M / (P m), V / (P v), D / B)``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from corefold.backend.executable import DIRECTIONS
from corefold.io import atomic_output
from corefold.target import Target

#: Direction index of each direction name in ``link_bytes[y][x]``.
DIRECTION_INDEX = {d: i for i, d in enumerate(DIRECTIONS)}


@dataclass(frozen=True)
class Roofline:
    """The roofline bound and its three terms, in seconds."""

    matrix_s: float
    vector_s: float
    dram_s: float

    @property
    def seconds(self) -> float:
        return max(self.matrix_s, self.vector_s, self.dram_s)

    @property
    def binding(self) -> str:
        """The term that sets the bound: ``matrix``, ``vector`` or ``dram``."""
        terms = {"matrix": self.matrix_s, "vector": self.vector_s, "dram": self.dram_s}
        return max(terms, key=terms.__getitem__)


def roofline(macs: float, vector_ops: float, compulsory_dram_bytes: float, target: Target) -> Roofline:
    """The chip's roofline bound (module docstring). O(1)."""
    cores = len(target.usable_cores)
    mat, vec = target.units["matrix"], target.units["vector"]
    per_core_macs = mat.throughput * mat.count * target.clock_hz
    per_core_ops = vec.throughput * vec.count * target.clock_hz
    dram = target.dram_channel_bytes_per_s * len(target.dram_channels)
    return Roofline(macs / (cores * per_core_macs), vector_ops / (cores * per_core_ops),
                    compulsory_dram_bytes / dram)


@dataclass
class SimReport:
    """What one simulated run measured (module docstring names every field)."""

    latency_s: float
    roofline_s: float
    load_s: float
    sram_peak_bytes: list[int]
    sram_capacity_bytes: int
    noc_bytes: int
    link_bytes: list[list[list[int]]]
    dram_bytes: int
    host_bytes: int
    instructions: int
    utilisation: dict[str, float]

    def to_json(self) -> dict:
        """The report as plain JSON types, keys in the documented order."""
        return asdict(self)

    def write(self, path: str | Path, extra: dict | None = None) -> None:
        """Write the JSON report atomically (``extra`` keys appended, e.g. a chain's
        ``executables``).

        Raises:
            OutputPathError: the folder is missing or ``path`` is a folder.
        """
        doc = self.to_json()
        if extra:
            doc.update(extra)
        with atomic_output(path, suffix=".json") as tmp:
            tmp.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")


def link_bytes_array(report: SimReport) -> np.ndarray:
    """``link_bytes`` as an int64 array (H, W, 4)."""
    return np.asarray(report.link_bytes, dtype=np.int64)


def combine(reports: Sequence[SimReport]) -> SimReport:
    """The report of executables run one after another on the same chip.

    Times, bytes and instructions add up; the SRAM peak is the per-core maximum (each
    executable has the chip to itself while it runs); utilisation is weighted by latency.
    O(n H W).

    Raises:
        ValueError: no reports, or reports of different meshes.
    """
    if not reports:
        raise ValueError("no reports to combine")
    shapes = {link_bytes_array(r).shape for r in reports}
    if len(shapes) != 1:
        raise ValueError(f"reports of different meshes: {sorted(shapes)}")
    latency = sum(r.latency_s for r in reports)
    kinds = list(dict.fromkeys(k for r in reports for k in r.utilisation))
    util = {k: (sum(r.utilisation.get(k, 0.0) * r.latency_s for r in reports) / latency if latency > 0 else 0.0)
            for k in kinds}
    return SimReport(
        latency_s=latency,
        roofline_s=sum(r.roofline_s for r in reports),
        load_s=sum(r.load_s for r in reports),
        sram_peak_bytes=np.max([r.sram_peak_bytes for r in reports], axis=0).astype(int).tolist(),
        sram_capacity_bytes=max(r.sram_capacity_bytes for r in reports),
        noc_bytes=sum(r.noc_bytes for r in reports),
        link_bytes=np.sum([link_bytes_array(r) for r in reports], axis=0).tolist(),
        dram_bytes=sum(r.dram_bytes for r in reports),
        host_bytes=sum(r.host_bytes for r in reports),
        instructions=sum(r.instructions for r in reports),
        utilisation=util,
    )
