"""Small hand-built executables for the simulator's tests (no lowering involved).

:class:`ExeBuilder` adds buffers, regions, ops and instructions one call at a time and
hands back an :class:`~corefold.backend.executable.Executable`, so that a test can state
a program and the timeline it must produce. O(1) per call.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from corefold.backend.executable import (
    ALIGNMENT,
    Buffer,
    CoreProgram,
    DmaLoad,
    DmaStore,
    DramRegion,
    Executable,
    Op,
    TensorIO,
    View,
    Weight,
    target_fingerprint,
    whole,
    xy_route,
)
from corefold.target import Target, parse_target

#: A 2x2 chip with round numbers (1 GHz): DMA 16 B/cycle, matrix 8 MAC/cycle, one vector
#: unit of 4 elements/cycle, links 8 B/cycle with 2 cycles per hop, one DRAM channel of
#: 16 GB/s at router (1, 0), host link 4 GB/s at (0, 0), 4 KiB of SRAM per core.
SMALL_TARGET = """
[target]
name = "sim-test"
clock_mhz = 1000
[mesh]
width = 2
height = 2
[core]
sram_kib = 4
sram_reserved_kib = 1
[core.units.dma]
count = 1
bytes_per_cycle = 16
[core.units.matrix]
count = 1
macs_per_cycle = 8
[core.units.vector]
count = 1
elements_per_cycle = 4
[noc]
link_bytes_per_cycle = 8
hop_latency_cycles = 2
[memory]
dram_gbps = 16
host_link_gbps = 4
dram_attach = [[1, 0]]
host_attach = [0, 0]
"""


def small_target() -> Target:
    """:data:`SMALL_TARGET` parsed."""
    return parse_target(SMALL_TARGET, "sim test target")


class ExeBuilder:
    """Build an executable for ``target`` step by step."""

    def __init__(self, target: Target):
        self.target = target
        self.programs: dict[tuple[int, int], CoreProgram] = {}
        self.buffers: list[Buffer] = []
        self.weights: dict[int, Weight] = {}
        self.regions: list[DramRegion] = []
        self.inputs: list[TensorIO] = []
        self.outputs: list[TensorIO] = []
        self.ops: list[Op] = []
        self._channel_end: dict[int, int] = {}

    def buffer(self, core, shape, dtype="float32", offset=0, kind="activation", name="", data=None) -> int:
        """A buffer at ``offset`` of ``core``'s SRAM (a weight when ``data`` is given)."""
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        b = Buffer(len(self.buffers), tuple(core), offset, nbytes, tuple(shape), dtype,
                   "weight" if data is not None else kind, name or f"b{len(self.buffers)}")
        self.buffers.append(b)
        if data is not None:
            self.weights[b.id] = Weight(b.id, np.asarray(data, dtype=dtype).reshape(shape))
        return b.id

    def region(self, shape, dtype="float32", channel=0, kind="spill", name="", interleave=1) -> int:
        """A DRAM region after the last one of ``channel`` (striped over ``interleave`` channels)."""
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        off = self._channel_end.get(channel, 0)
        self._channel_end[channel] = off + -(-nbytes // ALIGNMENT) * ALIGNMENT
        r = DramRegion(len(self.regions), channel, off, nbytes, tuple(shape), dtype, kind, name or f"r{len(self.regions)}",
                       interleave)
        self.regions.append(r)
        return r.id

    def graph_input(self, name, shape, dtype="float32", channel=0, location="host", interleave=1) -> int:
        r = self.region(shape, dtype, channel, "input", name, interleave)
        self.inputs.append(TensorIO(name, tuple(shape), dtype, r, location))
        return r

    def graph_output(self, name, shape, dtype="float32", channel=0, location="host", interleave=1) -> int:
        r = self.region(shape, dtype, channel, "output", name, interleave)
        self.outputs.append(TensorIO(name, tuple(shape), dtype, r, location))
        return r

    def op(self, op_type: str, in_shapes, out_shapes, unit_kind: str, work: float, attrs: dict[str, Any] | None = None,
           dtype="float32", quant=None, in_dtypes=None, out_dtypes=None) -> int:
        self.ops.append(Op(f"{op_type.lower()}{len(self.ops)}", op_type, attrs or {},
                           tuple(tuple(s) for s in in_shapes), tuple(in_dtypes or [dtype] * len(in_shapes)),
                           tuple(tuple(s) for s in out_shapes), tuple(out_dtypes or [dtype] * len(out_shapes)),
                           unit_kind, float(work), quant))
        return len(self.ops) - 1

    def view(self, ref: int, dram: bool = False) -> View:
        """The whole of buffer (or region) ``ref``."""
        holder = self.regions[ref] if dram else self.buffers[ref]
        return whole(ref, holder.shape)

    def add(self, core, ins) -> int:
        """Append ``ins`` to ``core``'s program; its index there."""
        core = tuple(core)
        prog = self.programs.setdefault(core, CoreProgram(core))
        prog.instructions.append(ins)
        return len(prog.instructions) - 1

    def build(self) -> Executable:
        programs = [self.programs[c] for c in sorted(self.programs, key=lambda c: (c[1], c[0]))]
        return Executable(target_fingerprint(self.target), programs, self.buffers, self.weights, self.regions,
                          self.inputs, self.outputs, self.ops)


def striped_copy_exe(interleave: int) -> tuple[Executable, Target]:
    """Core (0, 0) loads a 64-byte input and stores it to the output; two DRAM channels of
    8 GB/s each, at routers (1, 0) and (0, 1); both regions striped over ``interleave``."""
    t = parse_target(SMALL_TARGET.replace("dram_attach = [[1, 0]]", "dram_attach = [[1, 0], [0, 1]]"), "2 channels")
    b = ExeBuilder(t)
    x = b.graph_input("x", (16,), interleave=interleave)
    y = b.graph_output("y", (16,), interleave=interleave)
    buf = b.buffer((0, 0), (16,), name="x")
    core = (0, 0)
    route_in = () if interleave > 1 else xy_route((1, 0), core)
    route_out = () if interleave > 1 else xy_route(core, (1, 0))
    b.add(core, DmaLoad("dma0", b.view(x, dram=True), b.view(buf), route_in))
    b.add(core, DmaStore("dma0", b.view(buf), b.view(y, dram=True), route_out, deps=(0,)))
    return b.build(), t

