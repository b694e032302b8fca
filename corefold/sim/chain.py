"""A chain of executables run one after another on the same chip (M1's serial subgraphs).

Each executable reads its inputs by name from what the caller gave and what the earlier
executables produced, and adds its outputs to that pool; a tensor whose :class:`TensorIO`
``location`` is ``"dram"`` stays in DRAM between two executables (no host transfer), one at
``"host"`` goes over the host link (counted in ``host_bytes``). The chain's report is
:func:`corefold.sim.report.combine` of the executables' reports, and the caller can add
``executables`` (the list of per-executable reports) to the JSON. O(sum of the runs).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from corefold.backend.executable import Executable
from corefold.errors import DataError
from corefold.sim.report import SimReport, combine
from corefold.sim.simulate import Simulation, run_simulation
from corefold.target import Target


@dataclass
class ChainSimulation:
    """Every tensor the chain produced, the combined report and each run.

    Attributes:
        tensors: the caller's inputs and every executable's outputs, by name.
        report: :func:`~corefold.sim.report.combine` of the runs' reports.
        runs: one :class:`Simulation` per executable, in run order.
    """

    tensors: dict[str, np.ndarray]
    report: SimReport
    runs: list[Simulation]

    def report_json(self) -> dict:
        """The combined report plus ``executables``: each run's report, in run order."""
        doc = self.report.to_json()
        doc["executables"] = [r.report.to_json() for r in self.runs]
        return doc


def simulate_chain(executables: Sequence[Executable], inputs: dict[str, np.ndarray],
                   target: Target | str | Path | None = None, probe=None) -> ChainSimulation:
    """Run ``executables`` in order (module docstring); ``probe(op, arrays)``, when given,
    sees every Compute's op and input arrays of every executable (:func:`run_simulation`).

    Raises:
        DataError: an executable needs a tensor that neither the inputs nor an earlier
            executable provide (names both), or the chain is empty.
        TargetError, ProgramError, SramError, KernelError: as :func:`run_simulation`.
    """
    if not executables:
        raise DataError("no executables to run")
    pool = dict(inputs)
    runs = []
    for i, exe in enumerate(executables):
        missing = [io.name for io in exe.inputs if io.name not in pool]
        if missing:
            raise DataError(f"executable {i} ({exe.meta.get('graph', 'unnamed')}) needs '{missing[0]}', which "
                            f"neither the inputs nor an earlier executable provide")
        sim = run_simulation(exe, {io.name: pool[io.name] for io in exe.inputs}, target, probe=probe)
        pool.update(sim.outputs)
        runs.append(sim)
    return ChainSimulation(pool, combine([r.report for r in runs]), runs)
