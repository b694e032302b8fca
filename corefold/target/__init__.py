"""Chip descriptions: a 2D mesh of cores, each with SRAM and units, next to a DRAM and a host.

A target is read from TOML (``load_target("npu")`` for a preset, or a path). The schema,
with every key, is documented in ``presets/npu.toml`` (``presets/gpu.toml`` for a
GPU next to a host, kind "gpu"); ``presets/neuromorphic.toml`` shows
the neuron and synapse capacities of a neuromorphic core array.
"""

from corefold.target.load import PRESETS, load_target, parse_target, target_source
from corefold.target.model import UNIT_KINDS, Device, Target, Unit

__all__ = ["Target", "Unit", "Device", "UNIT_KINDS", "PRESETS", "load_target", "parse_target", "target_source"]
