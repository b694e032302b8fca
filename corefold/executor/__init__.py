"""The reference executor: runs an IR graph with NumPy float32 kernels.

``run(graph, feeds)`` executes nodes in the graph's stable topological order and frees
each intermediate after its last use. Kernels live in ``kernels/`` (one module per op
family) and register themselves with :func:`corefold.executor.registry.kernel`.
"""

from corefold.executor.registry import KERNELS, kernel
from corefold.executor.run import random_inputs, run

__all__ = ["KERNELS", "kernel", "run", "random_inputs"]
