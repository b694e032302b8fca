"""Checks of an executable against its own rules, and a reference run of its programs.

:func:`check_executable` verifies, without running anything, what the executable's
docstring promises: every buffer inside its core's SRAM, views within their buffers,
operands of the right extent, one Send per Recv with equal boxes, routes that arrive, and
(the liveness rule) that every instruction accessing a buffer *happens after* every
instruction that accessed an earlier buffer of the same core sharing addresses with it,
through ``deps`` and in-order engines; so no two live buffers of a core ever overlap,
whatever the timing; and, within one buffer, that two accesses of shared elements, one a
write, happen in program order. Happens-before is a transitive closure over bitsets: O(I^2 / 64)
per core of I instructions.

:func:`run_executable` runs the programs functionally (each instruction atomically, in
an order the rules allow: deps, in-order engines, rendezvous) on NumPy memories and
returns the graph outputs; the simulator's functional mode must agree with it.
"""

from __future__ import annotations

import numpy as np

from corefold.backend.executable import (
    Compute,
    Copy,
    DmaCopy,
    DmaLoad,
    DmaStore,
    Executable,
    Recv,
    Send,
    Signal,
    View,
    Wait,
    engine,
    route_end,
)
from corefold.errors import InternalError


class ExecutableError(InternalError):
    """The lowering produced an executable that breaks its own rules (a corefold bug)."""


def _check_striped(region, route, target, where: str) -> None:
    """An interleaved region's channels exist on one chip and its transfers carry no route."""
    per_chip = len(target.dram_attach)
    if (region.interleave < 1 or region.channel < 0 or region.channel + region.interleave > len(target.dram_channels)
            or region.channel // per_chip != (region.channel + region.interleave - 1) // per_chip):
        raise ExecutableError(f"{where}: region {region.id} is interleaved over channels "
                              f"{region.channel}..{region.channel + region.interleave - 1}, not channels of one chip")
    if route:
        raise ExecutableError(f"{where}: a transfer of interleaved region {region.id} has a route (XY routes per channel)")


def _accessed(ins) -> list[int]:
    """SRAM buffer ids an instruction accesses on its own core."""
    if isinstance(ins, Compute):
        return [v.ref for v in ins.inputs if v is not None] + [v.ref for v in ins.outputs]
    if isinstance(ins, (Copy,)):
        return [ins.src.ref, ins.dst.ref]
    if isinstance(ins, DmaLoad):
        return [ins.dst.ref]
    if isinstance(ins, (DmaStore, Send)):
        return [ins.src.ref]
    if isinstance(ins, Recv):
        return [ins.dst.ref]
    return []


def check_executable(exe: Executable, target) -> None:
    """Raise :class:`ExecutableError` naming the first broken rule (module docstring)."""
    cap = target.sram_bytes
    for b in exe.buffers:
        if b.offset < 0 or b.end > cap:
            raise ExecutableError(f"buffer {b.id} '{b.name}' of core {b.core} spans [{b.offset}, {b.end}) "
                                  f"beyond the SRAM of {cap} bytes")
        if b.kind == "weight" and b.id not in exe.weights:
            raise ExecutableError(f"weight buffer {b.id} has no content")

    def check_view(v: View, size_of, where: str):
        if int(np.prod(v.shape, dtype=np.int64)) != size_of(v.ref):
            raise ExecutableError(f"{where}: view shape {v.shape} does not match its buffer {v.ref}")
        if any(s < 0 or s + e > d for s, e, d in zip(v.start, v.extent, v.shape, strict=True)):
            raise ExecutableError(f"{where}: box {v.start}+{v.extent} outside {v.shape}")

    def buf_elems(i):
        b = exe.buffers[i]
        return int(np.prod(b.shape, dtype=np.int64))

    def reg_elems(i):
        return int(np.prod(exe.regions[i].shape, dtype=np.int64))

    sends, recvs, signals, waits = {}, {}, {}, {}
    for core, i, ins in exe.instructions():
        where = f"core {core} instruction {i}"
        if any(d >= i or d < 0 for d in ins.deps):
            raise ExecutableError(f"{where}: a dependence does not point at an earlier instruction")
        for r in _accessed(ins):
            if exe.buffers[r].core != core:
                raise ExecutableError(f"{where}: buffer {r} belongs to core {exe.buffers[r].core}")
        if isinstance(ins, Compute):
            op = exe.ops[ins.op]
            for v, shape in zip(ins.inputs, op.input_shapes, strict=True):
                if (v is None) != (shape is None) or (v is not None and tuple(v.extent) != tuple(shape)):
                    raise ExecutableError(f"{where}: input view {v} does not match op '{op.name}' {shape}")
                if v is not None:
                    check_view(v, buf_elems, where)
            for v, shape in zip(ins.outputs, op.output_shapes, strict=True):
                check_view(v, buf_elems, where)
                if tuple(v.extent) != tuple(shape):
                    raise ExecutableError(f"{where}: output view {v} does not match op '{op.name}' {shape}")
        elif isinstance(ins, (DmaLoad, DmaStore)):
            src_ok = (check_view(ins.src, reg_elems if isinstance(ins, DmaLoad) else buf_elems, where),
                      check_view(ins.dst, buf_elems if isinstance(ins, DmaLoad) else reg_elems, where))
            del src_ok
            region = exe.regions[ins.src.ref if isinstance(ins, DmaLoad) else ins.dst.ref]
            if region.interleave > 1:
                _check_striped(region, ins.route, target, where)
            else:
                router = target.dram_channels[region.channel]
                start, end = (router, core) if isinstance(ins, DmaLoad) else (core, router)
                if route_end(start, ins.route) != end:
                    raise ExecutableError(f"{where}: route does not reach {end}")
        elif isinstance(ins, DmaCopy):
            check_view(ins.src, reg_elems, where)
            check_view(ins.dst, reg_elems, where)
            if ins.src.ref == ins.dst.ref:
                raise ExecutableError(f"{where}: a DMA copy within one region")
            src, dst = (exe.regions[v.ref] for v in (ins.src, ins.dst))
            if src.interleave > 1 or dst.interleave > 1:
                for region in (src, dst):
                    _check_striped(region, ins.route, target, where)
            else:
                start, end = (target.dram_channels[r.channel] for r in (src, dst))
                if route_end(start, ins.route) != end:
                    raise ExecutableError(f"{where}: route does not reach {end}")
        elif isinstance(ins, Copy):
            check_view(ins.src, buf_elems, where)
            check_view(ins.dst, buf_elems, where)
        elif isinstance(ins, Send):
            check_view(ins.src, buf_elems, where)
            sends[ins.tag] = (core, ins)
            if route_end(core, ins.route) != ins.dst_core:
                raise ExecutableError(f"{where}: route does not reach {ins.dst_core}")
        elif isinstance(ins, Recv):
            check_view(ins.dst, buf_elems, where)
            recvs[ins.tag] = (core, ins)
        elif isinstance(ins, Signal):
            signals[ins.tag] = (core, ins)
        elif isinstance(ins, Wait):
            waits[ins.tag] = (core, ins)
        if isinstance(ins, (DmaLoad, DmaStore, DmaCopy, Copy, Send)) and tuple(ins.src.extent) != tuple(ins.dst.extent):
            raise ExecutableError(f"{where}: source and destination extents differ")
    if sends.keys() != recvs.keys() or signals.keys() != waits.keys():
        raise ExecutableError("a Send or Signal has no matching Recv or Wait (or the reverse)")
    for tag, (core, s) in sends.items():
        rcore, r = recvs[tag]
        if s.dst_core != rcore or r.src_core != core or s.dst != r.dst:
            raise ExecutableError(f"send/recv tag {tag}: cores or boxes do not match")
    for p in exe.programs:
        _check_liveness(exe, p)


def _check_liveness(exe: Executable, program) -> None:
    """Every accessor of a buffer happens after every accessor of each earlier buffer
    sharing addresses with it (module docstring)."""
    ins = program.instructions
    n = len(ins)
    anc = [0] * n
    last_on: dict[str, int] = {}
    for i, x in enumerate(ins):
        a = 0
        preds = list(x.deps)
        e = engine(x)
        if e is not None and e in last_on:
            preds.append(last_on[e])
        for d in preds:
            a |= anc[d] | (1 << d)
        anc[i] = a
        if e is not None:
            last_on[e] = i
    users: dict[int, list[int]] = {}
    for i, x in enumerate(ins):
        for b in _accessed(x):
            if exe.buffers[b].kind == "activation":
                users.setdefault(b, []).append(i)
    for b, idx in users.items():
        _check_within(exe, program, b, idx, anc)
    bufs = sorted(users, key=lambda b: users[b][0])
    for j, b in enumerate(bufs):
        bb = exe.buffers[b]
        for a in bufs[:j]:
            ab = exe.buffers[a]
            if not (ab.offset < bb.end and bb.offset < ab.end):
                continue
            for i in users[b]:
                for k in users[a]:
                    if not anc[i] >> k & 1:
                        raise ExecutableError(
                            f"core {program.core}: instruction {i} (buffer {b} '{bb.name}') may run before "
                            f"instruction {k} (buffer {a} '{ab.name}') finishes, and they share SRAM addresses")


def _views_of(ins, b: int) -> tuple[list[View], list[View]]:
    """The views of buffer ``b`` that instruction ``ins`` reads and writes."""
    if isinstance(ins, Compute):
        return [v for v in ins.inputs if v is not None and v.ref == b], [v for v in ins.outputs if v.ref == b]
    reads = [ins.src] if isinstance(ins, (Copy, DmaStore, Send)) and ins.src.ref == b else []
    writes = [ins.dst] if isinstance(ins, (Copy, DmaLoad, Recv)) and ins.dst.ref == b else []
    return reads, writes


def _overlap(v: View, w: View) -> bool:
    """Whether two views of one buffer may share elements (views of different shapes, a
    reshape's, are taken to)."""
    if tuple(v.shape) != tuple(w.shape):
        return True
    return all(a < c + f and c < a + e for a, e, c, f in zip(v.start, v.extent, w.start, w.extent, strict=True))


def _check_within(exe: Executable, program, b: int, idx: list[int], anc: list[int]) -> None:
    """Within one buffer, two accesses of shared elements, one of them a write, happen in
    program order: a reload of a spilled buffer and a later receive into part of it, left
    unordered, let the reload overwrite what was received. O(k^2) for k accesses."""
    ins = program.instructions
    acc = [(i, *_views_of(ins[i], b)) for i in dict.fromkeys(idx)]
    for j, (k, rk, wk) in enumerate(acc):
        for i, ri, wi in acc[:j]:
            if anc[k] >> i & 1:
                continue
            if any(_overlap(v, w) for v in wk for w in wi + ri) or any(_overlap(v, w) for v in rk for w in wi):
                raise ExecutableError(
                    f"core {program.core}: instruction {k} may run before instruction {i} finishes, and both access "
                    f"the same elements of buffer {b} '{exe.buffers[b].name}', one of them writing")


def _at_head(ins, c, i, queues, head) -> bool:
    e = engine(ins)
    return e is None or queues[(c, e)][head[(c, e)]] == i


def run_executable(exe: Executable, feeds: dict[str, np.ndarray], trace=None) -> dict[str, np.ndarray]:
    """Run the programs functionally and return the graph outputs (module docstring).

    ``trace(core, index, sram)``, if given, is called after every instruction completes,
    with the cores' SRAM contents (a dict of byte arrays).

    Raises:
        ExecutableError: the programs deadlock.
    """
    from corefold.backend.kernels import run_op

    cap = max((b.end for b in exe.buffers), default=0)
    sram = {c: np.zeros(max(cap, 1), np.uint8) for c in exe.cores}
    dram = {r.id: np.zeros(r.nbytes, np.uint8) for r in exe.regions}
    for b, w in exe.weights.items():
        buf = exe.buffers[b]
        sram[buf.core][buf.offset:buf.end] = np.frombuffer(np.ascontiguousarray(w.data, buf.dtype).tobytes(), np.uint8)
    for io in exe.inputs:
        x = np.ascontiguousarray(feeds[io.name], io.dtype)
        dram[io.region][:x.nbytes] = np.frombuffer(x.tobytes(), np.uint8)

    def arr(mem: np.ndarray, offset: int, nbytes: int, dtype: str, v: View) -> np.ndarray:
        return mem[offset:offset + nbytes].view(dtype).reshape(v.shape)[v.index()]

    def sram_arr(v: View) -> np.ndarray:
        b = exe.buffers[v.ref]
        return arr(sram[b.core], b.offset, b.nbytes, b.dtype, v)

    def dram_arr(v: View) -> np.ndarray:
        r = exe.regions[v.ref]
        return arr(dram[r.id], 0, r.nbytes, r.dtype, v)

    progs = {p.core: p.instructions for p in exe.programs}
    waiting = {c: [len(ins.deps) for ins in p] for c, p in progs.items()}
    dependents: dict[tuple, list[int]] = {}
    queues: dict[tuple, list[int]] = {}
    for c, p in progs.items():
        for i, ins in enumerate(p):
            for d in ins.deps:
                dependents.setdefault((c, d), []).append(i)
            e = engine(ins)
            if e is not None:
                queues.setdefault((c, e), []).append(i)
    head = {k: 0 for k in queues}
    posted: set[int] = set()
    arrived: set[int] = set()
    sends: dict[int, tuple] = {}
    ready: list[tuple] = []
    for c, p in progs.items():
        for i, ins in enumerate(p):
            if not ins.deps and _at_head(ins, c, i, queues, head):
                ready.append((c, i))
    finished = 0
    total = sum(len(p) for p in progs.values())

    def complete(c, i):
        nonlocal finished
        finished += 1
        if trace is not None:
            trace(c, i, sram)
        ins = progs[c][i]
        e = engine(ins)
        if e is not None:
            q = queues[(c, e)]
            head[(c, e)] += 1
            if head[(c, e)] < len(q):
                j = q[head[(c, e)]]
                if waiting[c][j] == 0:
                    ready.append((c, j))
        for j in dependents.get((c, i), ()):
            waiting[c][j] -= 1
            if waiting[c][j] == 0 and _at_head(progs[c][j], c, j, queues, head):
                ready.append((c, j))

    parked: dict[int, tuple] = {}
    while ready:
        c, i = ready.pop()
        ins = progs[c][i]
        if isinstance(ins, Recv):
            posted.add(ins.tag)
            if ins.tag in sends:
                sc, si = sends.pop(ins.tag)
                ready.append((sc, si))
            parked[ins.tag] = (c, i)
            continue
        if isinstance(ins, Wait):
            if ins.tag in arrived:
                complete(c, i)
            else:
                parked[ins.tag] = (c, i)
            continue
        if isinstance(ins, Send):
            if ins.tag not in posted:
                sends[ins.tag] = (c, i)
                continue
            rc, ri = parked.pop(ins.tag)
            b = exe.buffers[ins.dst.ref]
            arr(sram[rc], b.offset, b.nbytes, b.dtype, ins.dst)[...] = sram_arr(ins.src)
            complete(c, i)
            complete(rc, ri)
            continue
        if isinstance(ins, Signal):
            arrived.add(ins.tag)
            if ins.tag in parked:
                complete(*parked.pop(ins.tag))
        elif isinstance(ins, Compute):
            op = exe.ops[ins.op]
            xs = [sram_arr(v).copy() if v is not None else None for v in ins.inputs]
            for v, y in zip(ins.outputs, run_op(op, xs), strict=True):
                sram_arr(v)[...] = np.asarray(y).astype(exe.buffers[v.ref].dtype, copy=False)
        elif isinstance(ins, Copy):
            sram_arr(ins.dst)[...] = sram_arr(ins.src)
        elif isinstance(ins, DmaLoad):
            sram_arr(ins.dst)[...] = dram_arr(ins.src)
        elif isinstance(ins, DmaStore):
            dram_arr(ins.dst)[...] = sram_arr(ins.src)
        elif isinstance(ins, DmaCopy):
            dram_arr(ins.dst)[...] = dram_arr(ins.src)
        complete(c, i)
    if finished != total:
        stuck = [(c, i) for c, p in progs.items() for i in range(len(p))
                 if waiting[c][i] == 0][:3]
        raise ExecutableError(f"the programs deadlock: {total - finished} instructions never run; e.g. {stuck}")
    out = {}
    for io in exe.outputs:
        r = exe.regions[io.region]
        out[io.name] = dram[r.id].view(r.dtype).reshape(r.shape).copy()
    return out
