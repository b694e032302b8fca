"""The reference executor: one interpreter over the operator table's NumPy kernels.

``run(graph, feeds)`` executes nodes in the graph's stable topological order and frees
each intermediate after its last use. The kernels live in the operator table
(``corefold/ops/defs/``); :class:`Interpreter` is the one run loop, with hooks that
calibration, mixed precision and the integer runner override.
"""

from corefold.executor.interpreter import Interpreter, check_feeds
from corefold.executor.run import random_inputs, run

__all__ = ["Interpreter", "run", "random_inputs", "check_feeds"]
