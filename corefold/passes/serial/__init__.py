"""Serial subgraph partitioning with compile-driven split and fusion (SPEC M1, seed 000).

``cuts`` (target nodes, crossing values at every cut) -> ``chain`` (ranges of the order as
subgraphs, their attributes) -> ``compilers`` (cached, counted, parallel compiles through
the compile callable) -> ``partition`` (cut, compile, split on failure) -> ``fusion``
(strategies a to d and the optimal reference). The partitioner never imports a backend:
the compiler arrives as ``CompileContext.compile``.
"""

from corefold.passes.serial.chain import Piece, extract
from corefold.passes.serial.cuts import crossing, target_cuts, target_nodes
from corefold.passes.serial.fusion import STRATEGIES
from corefold.passes.serial.partition import (
    SerialError,
    SerialPass,
    SerialResult,
    SerialSettings,
    compare_strategies,
    serial_partition,
)

__all__ = ["Piece", "extract", "crossing", "target_cuts", "target_nodes", "STRATEGIES", "SerialError", "SerialPass",
           "SerialResult", "SerialSettings", "compare_strategies", "serial_partition"]
