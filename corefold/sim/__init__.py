"""The simulator: runs an executable (``.cfx``) as the chip would, functional and timed.

Stages, in the order a run passes through them:

* ``engine``     -- event-driven timing: FIFO resources, in-order queues, cut-through stages;
* ``machine``    -- the chip's units, NoC links, DRAM channels and host link as resources;
* ``timed``      -- every instruction of every core as a task (weights loaded, inputs
  written, programs, outputs read back);
* ``memory``     -- buffer lifetimes from those times: SRAM peak, capacity and overlap checks;
* ``functional`` -- bytes in SRAM and DRAM, instruction by instruction;
* ``report``, ``trace``, ``plot`` -- the JSON report and roofline, Chrome trace, link heatmap;
* ``critical``, ``profile`` -- the chain of tasks that sets the latency, and each operator's
  pieces, cores, span, engine time and time on that chain.

:func:`simulate` runs them in that order; :func:`simulate_chain` runs several executables
one after another (M1's serial subgraphs).
"""

from corefold.sim.chain import ChainSimulation, simulate_chain
from corefold.sim.profile import OperatorTime, operator_profile
from corefold.sim.report import Roofline, SimReport, combine, roofline
from corefold.sim.simulate import (
           Simulation,
           random_inputs,
           resolve_target,
           run_simulation,
           simulate,
)

__all__ = ["ChainSimulation", "simulate_chain", "OperatorTime", "operator_profile", "Roofline", "SimReport", "Simulation", "combine", "random_inputs", "resolve_target", "roofline",
           "run_simulation", "simulate"]
