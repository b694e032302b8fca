"""corefold: a compiler for many-core AI chips.

Data flows through the packages in this order (see docs/architecture.md):
``frontend.onnx`` -> ``ir`` -> ``passes`` -> ``mapping`` -> ``executor``/``sim``,
with ``target`` and ``cost`` describing the chip every stage compiles for.
"""

__version__ = "0.1.0"
