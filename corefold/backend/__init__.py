"""The backend: a graph lowered onto the core mesh of a target, as an :class:`Executable`.

``executable`` is the in-memory model of a compiled graph (what the simulator reads).
"""

from corefold.backend.executable import (
    DIRECTIONS,
    FORMAT_VERSION,
    Buffer,
    Compute,
    Copy,
    CoreProgram,
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
from corefold.errors import CompileError

__all__ = ["DIRECTIONS", "FORMAT_VERSION", "Buffer", "Compute", "Copy", "CoreProgram", "DmaLoad", "DmaStore",
           "DramRegion", "Executable", "Op", "QuantOp", "QuantTensor", "Recv", "Send", "Signal", "Wait", "TargetFingerprint",
           "TensorIO", "View", "Weight", "target_fingerprint", "xy_route", "CompileError"]
