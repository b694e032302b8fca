"""Memory reduction by swap-out / compress and restore (SPEC M2, seed 001).

Layout, in the order a plan is made:

* ``program``: the graph as a device runs it (compute, d2h and h2d streams; storages and
  views);
* ``timing``: TAT, TRT and TTS in one linear pass, and the seed's candidate rule;
* ``memsim`` and ``timesim``: the memory simulators (per compute step, and over simulated
  time) and the three-stream time simulator;
* ``evictions``, ``links``, ``planner`` (budget mode) and ``seedrule`` (thresholds mode):
  what to reduce, how, and when;
* ``transform``: reduction and restore nodes (domain ``corefold.memory``) and the
  serialization and prefetch control edges;
* ``memory_pass``: :func:`plan_memory` and :class:`MemoryPass`; ``export`` (ONNX Runtime
  form) and ``plot`` (memory profiles).
"""

from corefold.passes.memory.memory_pass import (
    COMPRESS_SQNR_DB,
    BudgetError,
    MemoryPass,
    MemoryResult,
    measure,
    plan_memory,
)
from corefold.passes.memory.planner import PlanError
from corefold.passes.memory.settings import MemorySettings

__all__ = ["plan_memory", "MemoryPass", "MemoryResult", "MemorySettings", "BudgetError", "PlanError",
           "COMPRESS_SQNR_DB", "measure"]
