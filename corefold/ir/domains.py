"""Operator domains corefold itself writes into the IR, besides ONNX's default domain.

``MEMORY_DOMAIN`` holds the swap and compress nodes of the memory pass (SPEC M2), which the
executor runs (table entries in ``corefold.ops.defs.memory``); ``ATEN_DOMAIN`` holds PyTorch aten
operators with no ONNX counterpart, imported by ``corefold.frontend.torch`` with shapes and
costs but no kernel.
"""

MEMORY_DOMAIN = "corefold.memory"
ATEN_DOMAIN = "corefold.aten"
