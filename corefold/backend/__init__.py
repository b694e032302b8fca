"""The backend: a graph lowered onto the core mesh of a target, as an :class:`Executable`.

``lower(graph, target)`` runs tile (:mod:`.tile`), place (:mod:`.lgraph`, :mod:`.place`),
order (:mod:`.order`), plan SRAM (:mod:`.plan`), route, emit and pack (:mod:`.emit`);
``fits`` is its fast feasibility check; ``save`` and ``load`` write and read ``.cfx``
files (:mod:`.cfx`, docs/executable.md); :mod:`.executable` is the model the simulator
reads, :mod:`.kernels` the numerics of one op, :mod:`.check` the executable's own checks
and a reference run.
"""

from corefold.backend.cfx import CfxError, load, save
from corefold.backend.check import ExecutableError, check_executable, run_executable
from corefold.backend.executable import (
    DIRECTIONS,
    FORMAT_VERSION,
    Buffer,
    Compute,
    Copy,
    CoreProgram,
    DmaCopy,
    DmaLoad,
    DmaStore,
    DramRegion,
    Executable,
    Op,
    QuantOp,
    QuantTensor,
    Recv,
    Send,
    Signal,
    TargetFingerprint,
    TensorIO,
    View,
    Wait,
    Weight,
    target_fingerprint,
    xy_route,
)
from corefold.backend.lower import DEFAULT, FAST, PRESETS, STRONG, LowerSettings, fits, lower
from corefold.errors import CompileError

__all__ = ["DIRECTIONS", "FORMAT_VERSION", "Buffer", "Compute", "Copy", "CoreProgram", "DmaCopy", "DmaLoad", "DmaStore",
           "DramRegion", "Executable", "Op", "QuantOp", "QuantTensor", "Recv", "Send", "Signal", "Wait",
           "TargetFingerprint", "TensorIO", "View", "Weight", "target_fingerprint", "xy_route", "CompileError",
           "lower", "fits", "LowerSettings", "FAST", "DEFAULT", "STRONG", "PRESETS", "save", "load", "CfxError",
           "check_executable", "run_executable", "ExecutableError"]
