"""The functional run of an executable: bytes in SRAM and DRAM, changed instruction by instruction.

Memories are byte arrays as on the chip: one of ``target.sram_bytes`` per used core, one
per DRAM channel (as long as its regions reach). An operand is the view
``memory[offset : offset + nbytes].view(dtype).reshape(shape)[box]`` of its buffer or
region (``corefold.backend.executable``), so two buffers that share addresses really share
bytes: a lowering that reused an address too early would corrupt the result here, not only
fail the lifetime check of :mod:`corefold.sim.memory`.

Weights are written at load time, host inputs into their regions, then every instruction
takes effect in the order the timed run started them (ties in task order), as one atomic
step (the executable's rule: an instruction reads its sources when it starts and nothing
else touches its bytes until it completes):

* Compute: the op's kernel on the input arrays, outputs written into the output views;
  ONNX ops run the operator table's blocking-free kernel (``corefold.ops``; float32
  products accumulated in float64, so that an op's pieces round as the whole op would: the
  chip's result does not depend on how the host's BLAS blocks each piece) in the wider of
  its operands' and its outputs' float types (``kernels.run_float``), integer ops
  (``Op.quant``) ``corefold.backend.kernels.run_op``;
* DmaLoad, DmaStore, DmaCopy, Copy, Send: the source box copied into the destination box;
* Recv, Signal, Wait: nothing (the Send moved the data).

Outputs are read from their regions at the end. O(I + bytes moved + kernel work).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from corefold import ops
from corefold.backend.executable import (
    Buffer,
    Compute,
    Copy,
    DmaCopy,
    DmaLoad,
    DmaStore,
    DramRegion,
    Executable,
    Op,
    Send,
    View,
)
from corefold.errors import DataError, InternalError
from corefold.sim.timed import TimedRun
from corefold.target import Target


class KernelError(InternalError):
    """An op's kernel produced arrays that do not match the op's declared outputs."""


def _array(memory: np.ndarray, holder: Buffer | DramRegion, view: View) -> np.ndarray:
    raw = memory[holder.offset:holder.offset + holder.nbytes].view(holder.dtype)
    return raw.reshape(view.shape)[view.index()]


def op_runner() -> Callable[[Op, list], list[np.ndarray]]:
    """``run(op, arrays) -> outputs``: the operator table's blocking-free kernel of an ONNX
    op, or the backend's kernel of a quantized one or of one with
    a fused activation."""
    from corefold.backend.kernels import run_float

    kernels: dict[str, Callable] = {}

    def run(op: Op, arrays: list) -> list[np.ndarray]:
        if op.quant is not None or op.activation is not None:
            from corefold.backend.kernels import run_op

            return list(run_op(op, arrays))
        fn = kernels.get(op.op_type)
        if fn is None:
            entry = ops.lookup(op.op_type)
            if entry is None or not callable(entry.kernel):
                raise KernelError(f"op '{op.name}': no kernel for {op.op_type}")
            fn = kernels[op.op_type] = entry.blocking_free_kernel
        return run_float(op, fn, arrays)

    return run


def run_functional(exe: Executable, target: Target, run: TimedRun, inputs: dict[str, np.ndarray],
                   probe: Callable[[Op, list], None] | None = None) -> dict[str, np.ndarray]:
    """Execute the program's effects in the timed run's start order; return the outputs.

    ``probe(op, arrays)``, when given, sees every Compute's op and input arrays (copies)
    before it runs: how a check reads what the chip computed inside the graph, e.g. the
    logits of a Softmax, whose outputs hide them.

    Raises:
        DataError: an input is missing, unknown, of the wrong shape or dtype, or not finite.
        KernelError: a kernel's output does not match its op's shape or dtype.
    """
    _check_inputs(exe, inputs)
    sram = {p.core: np.zeros(target.sram_bytes, np.uint8) for p in exe.programs}
    for b in exe.buffers:
        sram.setdefault(b.core, np.zeros(target.sram_bytes, np.uint8))
    size: dict[int, int] = {}
    for r in exe.regions:
        size[r.channel] = max(size.get(r.channel, 0), r.offset + r.nbytes)
    dram = {c: np.zeros(n, np.uint8) for c, n in size.items()}
    for w in exe.weights.values():
        b = exe.buffers[w.buffer]
        dst = sram[b.core][b.offset:b.end].view(b.dtype).reshape(b.shape)
        dst[...] = np.asarray(w.data, dtype=b.dtype).reshape(b.shape)
    for io in exe.inputs:
        r = exe.regions[io.region]
        dram[r.channel][r.offset:r.offset + r.nbytes].view(r.dtype)[...] = np.asarray(inputs[io.name]).reshape(-1)

    run_op = op_runner()
    starts = []
    for c, p in enumerate(exe.programs):
        for j, ins in enumerate(p.instructions):
            if isinstance(ins, (Compute, DmaLoad, DmaStore, DmaCopy, Copy, Send)):
                t = run.task[c][j]
                starts.append((float(run.timeline.start[t]), t, c, j))
    starts.sort()
    buffers, regions = exe.buffers, exe.regions
    for _s, _t, c, j in starts:
        p = exe.programs[c]
        ins = p.instructions[j]
        mem = sram[p.core]
        if isinstance(ins, Compute):
            op = exe.ops[ins.op]
            args = [None if v is None else _array(mem, buffers[v.ref], v) for v in ins.inputs]
            if probe is not None:
                probe(op, [None if a is None else a.copy() for a in args])
            results = run_op(op, args)
            if len(results) < len(ins.outputs):
                raise KernelError(f"op '{op.name}' ({op.op_type}): {len(results)} outputs, {len(ins.outputs)} expected")
            for v, res in zip(ins.outputs, results, strict=False):
                dst = _array(mem, buffers[v.ref], v)
                res = np.asarray(res)
                if res.shape != dst.shape or res.dtype != dst.dtype:
                    raise KernelError(f"op '{op.name}' ({op.op_type}) computed {res.dtype}{list(res.shape)} for an "
                                      f"output of {dst.dtype}{list(dst.shape)}")
                dst[...] = res
        elif isinstance(ins, DmaLoad):
            _array(mem, buffers[ins.dst.ref], ins.dst)[...] = _array(dram[regions[ins.src.ref].channel],
                                                                     regions[ins.src.ref], ins.src)
        elif isinstance(ins, DmaStore):
            _array(dram[regions[ins.dst.ref].channel], regions[ins.dst.ref], ins.dst)[...] = \
                _array(mem, buffers[ins.src.ref], ins.src)
        elif isinstance(ins, DmaCopy):
            _array(dram[regions[ins.dst.ref].channel], regions[ins.dst.ref], ins.dst)[...] = \
                _array(dram[regions[ins.src.ref].channel], regions[ins.src.ref], ins.src)
        elif isinstance(ins, Copy):
            _array(mem, buffers[ins.dst.ref], ins.dst)[...] = _array(mem, buffers[ins.src.ref], ins.src)
        else:  # Send
            _array(sram[ins.dst_core], buffers[ins.dst.ref], ins.dst)[...] = _array(mem, buffers[ins.src.ref], ins.src)
    outputs = {}
    for io in exe.outputs:
        r = exe.regions[io.region]
        outputs[io.name] = dram[r.channel][r.offset:r.offset + r.nbytes].view(r.dtype).reshape(io.shape).copy()
    return outputs


def _check_inputs(exe: Executable, inputs: dict[str, np.ndarray]) -> None:
    known = {io.name for io in exe.inputs}
    for name in inputs:
        if name not in known:
            raise DataError(f"input '{name}' is not an input of the executable (inputs: {', '.join(sorted(known))})")
    for io in exe.inputs:
        if io.name not in inputs:
            raise DataError(f"missing input '{io.name}'")
        x = np.asarray(inputs[io.name])
        if tuple(x.shape) != tuple(io.shape):
            raise DataError(f"input '{io.name}' has shape {list(x.shape)}, the executable expects {list(io.shape)}")
        if x.dtype != np.dtype(io.dtype):
            raise DataError(f"input '{io.name}' has dtype {x.dtype}, the executable expects {io.dtype}")
        if x.dtype.kind == "f" and not np.all(np.isfinite(x)):
            raise DataError(f"input '{io.name}' holds {int(np.size(x) - np.isfinite(x).sum())} NaN or infinite values")
