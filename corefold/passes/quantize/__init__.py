"""Range-aware post-training quantization (SPEC M5, seed 004) as a pass.

The stages, in the order data passes through them (``quantizer.py`` runs them once each):
``select`` -> ``ranges`` -> ``calibrate`` -> ``params`` -> ``rounding`` -> ``mixed`` ->
``qdq``; ``integer`` runs a QDQ graph on integers and ``check`` runs it in ONNX Runtime.
Settings and presets (``fast``, ``default``, ``strong``, ``seed``) are in ``settings.py``.
"""

from __future__ import annotations

from corefold.passes.quantize.calibrate import CalibrationSet, load_calibration
from corefold.passes.quantize.params import QuantizeError
from corefold.passes.quantize.quantizer import QuantizePass, QuantizeResult, quantize_graph
from corefold.passes.quantize.settings import QuantizeSettings

__all__ = ["QuantizeSettings", "QuantizePass", "QuantizeResult", "quantize_graph", "load_calibration",
           "CalibrationSet", "QuantizeError"]
