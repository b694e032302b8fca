"""The ``.cfx`` file: an :class:`~corefold.backend.executable.Executable` on disk.

docs/executable.md specifies the format byte by byte; in short: a 32-byte header (magic,
version, section count, CRC-32 of the section table), a section table (tag, offset,
length, CRC-32 per section), then the sections: ``TRGT`` (target fingerprint), ``OPST``
(op table), ``BUFS`` (SRAM buffers), ``REGS`` (DRAM regions), ``IOTS`` (I/O descriptors),
``PROG`` (per-core programs, binary), ``WIDX`` (weight index), ``WBLB`` (weight blob),
``META`` (statistics). JSON sections are UTF-8 JSON; integers are little-endian.

:func:`save` writes atomically; :func:`load` refuses a file that is not a ``.cfx``, has
another version, is truncated, fails a checksum, or was built for another target, in one
line (:class:`CfxError`). Both are O(file size).
"""

from __future__ import annotations

import base64
import json
import os
import struct
import zlib
from typing import Any

import numpy as np

from corefold.backend.executable import (
    DIRECTION_STEP,
    DIRECTIONS,
    READABLE_VERSIONS,
    Buffer,
    Compute,
    Copy,
    CoreProgram,
    DmaCopy,
    DmaLoad,
    DmaStore,
    DramRegion,
    Executable,
    Op,
    QuantOp,
    QuantTensor,
    Recv,
    Send,
    Signal,
    TargetFingerprint,
    TensorIO,
    View,
    Wait,
    Weight,
    target_fingerprint,
)
from corefold.errors import CorefoldError
from corefold.passes.quantize.integer import ACTIVATIONS

MAGIC = b"\x89CFX\r\n\x1a\n"
HEADER = struct.Struct("<8sHHII12s")  # magic, version, reserved, sections, table crc, reserved
ENTRY = struct.Struct("<4sQQI")  # tag, offset, length, crc32
SECTIONS = ("TRGT", "OPST", "BUFS", "REGS", "IOTS", "PROG", "WIDX", "WBLB", "META")
OPCODES = {Compute: 1, DmaLoad: 2, DmaStore: 3, Copy: 4, Send: 5, Recv: 6, Signal: 7, Wait: 8, DmaCopy: 9}
#: The format version that introduced each opcode; a file is written with the lowest
#: version that holds all of its instructions (docs/executable.md).
OPCODE_VERSION = {9: 2}
#: The format version that introduced interleaved DRAM regions (a ninth REGS field) and the
#: float activations of integer ops beyond Relu.
INTERLEAVE_VERSION = 3
#: The format version that introduced fused activations of float ops (``Op.activation``) and
#: the vector work of fused activations (``Op.activation_work``).
FLOAT_ACTIVATION_VERSION = 4
#: The format version that introduced the integer Sum of partial accumulators.
INTEGER_SUM_VERSION = 5
UNIT_CODES = {"dma": 0, "matrix": 1, "vector": 2}
NO_ENGINE = 0xFF
BLOB_ALIGN = 64


class CfxError(CorefoldError):
    """A ``.cfx`` file cannot be read: not one, corrupt, truncated, or for another target."""


# -- small encoders ----------------------------------------------------------------------------
def _json_value(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        a = np.ascontiguousarray(x).reshape(x.shape)  # ascontiguousarray makes a 0-d array 1-d
        return {"ndarray": a.dtype.name, "shape": list(a.shape), "data": base64.b64encode(a.tobytes()).decode()}
    if isinstance(x, np.generic):
        return _json_value(np.asarray(x))
    if isinstance(x, bytes):
        return {"bytes": base64.b64encode(x).decode()}
    if isinstance(x, (list, tuple)):
        return [_json_value(v) for v in x]
    if isinstance(x, dict):
        return {"dict": [[str(k), _json_value(v)] for k, v in x.items()]}
    if isinstance(x, np.dtype):
        return {"dtype": x.name}
    return x


def _from_json(x: Any) -> Any:
    if isinstance(x, list):
        return [_from_json(v) for v in x]
    if isinstance(x, dict):
        if "ndarray" in x:
            return np.frombuffer(base64.b64decode(x["data"]), np.dtype(x["ndarray"])).reshape(x["shape"]).copy()
        if "bytes" in x:
            return base64.b64decode(x["bytes"])
        if "dtype" in x:
            return np.dtype(x["dtype"])
        if "dict" in x:
            return {k: _from_json(v) for k, v in x["dict"]}
    return x


def _qt(q: QuantTensor | None) -> Any:
    if q is None:
        return None
    return {"scale": _json_value(np.asarray(q.scale)), "zero_point": _json_value(np.asarray(q.zero_point)),
            "axis": q.axis, "dtype": q.dtype}


def _qt_back(d: Any) -> QuantTensor | None:
    if d is None:
        return None
    return QuantTensor(_from_json(d["scale"]), _from_json(d["zero_point"]), d["axis"], d["dtype"])


def _op(op: Op) -> dict:
    return {"name": op.name, "op_type": op.op_type, "attrs": _json_value(op.attrs),
            "input_shapes": [list(s) if s is not None else None for s in op.input_shapes],
            "input_dtypes": list(op.input_dtypes), "output_shapes": [list(s) for s in op.output_shapes],
            "output_dtypes": list(op.output_dtypes), "unit_kind": op.unit_kind, "work": op.work,
            "quant": None if op.quant is None else {"inputs": [_qt(q) for q in op.quant.inputs],
                                                   "output": _qt(op.quant.output),
                                                   "activation": op.quant.activation},
            **({"activation": op.activation} if op.activation else {}),
            **({"activation_work": op.activation_work} if op.activation_work else {})}


def _op_back(d: dict) -> Op:
    q = d["quant"]
    quant = None if q is None else QuantOp(tuple(_qt_back(x) for x in q["inputs"]), _qt_back(q["output"]),
                                           q["activation"])
    attrs = _from_json(d["attrs"])
    return Op(d["name"], d["op_type"], attrs,
              tuple(tuple(s) if s is not None else None for s in d["input_shapes"]), tuple(d["input_dtypes"]),
              tuple(tuple(s) for s in d["output_shapes"]), tuple(d["output_dtypes"]), d["unit_kind"],
              float(d["work"]), quant, d.get("activation"), float(d.get("activation_work", 0.0)))


# -- programs (binary) -------------------------------------------------------------------------
def _engine_code(unit: str | None) -> int:
    if unit is None:
        return NO_ENGINE
    kind = unit.rstrip("0123456789")
    return UNIT_CODES[kind] << 4 | int(unit[len(kind):])


def _engine_name(code: int) -> str | None:
    if code == NO_ENGINE:
        return None
    kinds = {v: k for k, v in UNIT_CODES.items()}
    return f"{kinds[code >> 4]}{code & 0xF}"


def _view(v: View) -> bytes:
    r = len(v.shape)
    return struct.pack(f"<IB{3 * r}I", v.ref, r, *v.shape, *v.start, *v.extent)


def _route(route) -> bytes:
    return struct.pack(f"<H{len(route)}B", len(route), *[DIRECTIONS.index(h[2]) for h in route])


def encode_instruction(ins) -> bytes:
    """One instruction's bytes (docs/executable.md, *Programs*)."""
    head = struct.pack(f"<BBH{len(ins.deps)}I", OPCODES[type(ins)], _engine_code(getattr(ins, "unit", None)),
                       len(ins.deps), *ins.deps)
    if isinstance(ins, Compute):
        body = struct.pack("<IB", ins.op, len(ins.inputs))
        for v in ins.inputs:
            body += b"\x00" if v is None else b"\x01" + _view(v)
        body += struct.pack("<B", len(ins.outputs)) + b"".join(_view(v) for v in ins.outputs)
    elif isinstance(ins, (DmaLoad, DmaCopy)):
        start = ins.route[0][:2] if ins.route else (0xFFFF, 0xFFFF)
        body = _view(ins.src) + _view(ins.dst) + struct.pack("<HH", *start) + _route(ins.route)
    elif isinstance(ins, DmaStore):
        body = _view(ins.src) + _view(ins.dst) + _route(ins.route)
    elif isinstance(ins, Copy):
        body = _view(ins.src) + _view(ins.dst)
    elif isinstance(ins, Send):
        body = struct.pack("<IHH", ins.tag, *ins.dst_core) + _view(ins.src) + _view(ins.dst) + _route(ins.route)
    elif isinstance(ins, Recv):
        body = struct.pack("<IHH", ins.tag, *ins.src_core) + _view(ins.dst)
    elif isinstance(ins, Signal):
        body = struct.pack("<IHH", ins.tag, *ins.dst_core) + _route(ins.route)
    else:
        body = struct.pack("<IHH", ins.tag, *ins.src_core)
    return head + body


def _view_size(v: View) -> int:
    return 5 + 12 * len(v.shape)


def instruction_size(ins) -> int:
    """``len(encode_instruction(ins))``, from the record layout alone (nothing packed). O(1)."""
    size = 4 + 4 * len(ins.deps)
    if isinstance(ins, Compute):
        return (size + 6 + sum(1 if v is None else 1 + _view_size(v) for v in ins.inputs)
                + sum(_view_size(v) for v in ins.outputs))
    if isinstance(ins, (DmaLoad, DmaCopy)):
        return size + _view_size(ins.src) + _view_size(ins.dst) + 6 + len(ins.route)
    if isinstance(ins, DmaStore):
        return size + _view_size(ins.src) + _view_size(ins.dst) + 2 + len(ins.route)
    if isinstance(ins, Copy):
        return size + _view_size(ins.src) + _view_size(ins.dst)
    if isinstance(ins, Send):
        return size + 8 + _view_size(ins.src) + _view_size(ins.dst) + 2 + len(ins.route)
    if isinstance(ins, Recv):
        return size + 8 + _view_size(ins.dst)
    if isinstance(ins, Signal):
        return size + 8 + 2 + len(ins.route)
    return size + 8


def program_bytes(program: CoreProgram) -> int:
    """Bytes of a core's encoded program: what must fit its instruction memory. O(instructions)."""
    return 12 + sum(instruction_size(i) for i in program.instructions)


class _Reader:
    def __init__(self, data: bytes, what: str):
        self.data = data
        self.at = 0
        self.what = what

    def take(self, fmt: str) -> tuple:
        size = struct.calcsize(fmt)
        if self.at + size > len(self.data):
            raise CfxError(f"{self.what}: section ends inside a record (truncated or corrupt)")
        out = struct.unpack_from(fmt, self.data, self.at)
        self.at += size
        return out

    def view(self) -> View:
        ref, r = self.take("<IB")
        vals = self.take(f"<{3 * r}I")
        return View(ref, tuple(vals[:r]), tuple(vals[r:2 * r]), tuple(vals[2 * r:]))

    def route(self, start) -> tuple:
        (n,) = self.take("<H")
        dirs = self.take(f"<{n}B")
        x, y = start
        hops = []
        for d in dirs:
            if d >= len(DIRECTIONS):
                raise CfxError(f"{self.what}: bad route direction {d}")
            name = DIRECTIONS[d]
            hops.append((x, y, name))
            x, y = x + DIRECTION_STEP[name][0], y + DIRECTION_STEP[name][1]
        return tuple(hops)


def _decode_program(r: _Reader, core, count: int, version: int) -> list:
    out = []
    for _ in range(count):
        opcode, eng, nd = r.take("<BBH")
        if OPCODE_VERSION.get(opcode, 1) > version:
            raise CfxError(f"{r.what}: opcode {opcode} in a format version {version} file")
        deps = r.take(f"<{nd}I")
        unit = _engine_name(eng)
        if opcode == 1:
            op, nin = r.take("<IB")
            ins = tuple(r.view() if r.take("<B")[0] else None for _ in range(nin))
            (nout,) = r.take("<B")
            out.append(Compute(op, unit, ins, tuple(r.view() for _ in range(nout)), deps))
        elif opcode == 2:
            src, dst = r.view(), r.view()
            x, y = r.take("<HH")
            out.append(DmaLoad(unit, src, dst, r.route((x, y)), deps))
        elif opcode == 3:
            src, dst = r.view(), r.view()
            out.append(DmaStore(unit, src, dst, r.route(core), deps))
        elif opcode == 4:
            out.append(Copy(unit, r.view(), r.view(), deps))
        elif opcode == 5:
            tag, x, y = r.take("<IHH")
            src, dst = r.view(), r.view()
            out.append(Send(tag, src, (x, y), dst, r.route(core), deps))
        elif opcode == 6:
            tag, x, y = r.take("<IHH")
            out.append(Recv(tag, (x, y), r.view(), deps))
        elif opcode == 7:
            tag, x, y = r.take("<IHH")
            out.append(Signal(tag, (x, y), r.route(core), deps))
        elif opcode == 8:
            tag, x, y = r.take("<IHH")
            out.append(Wait(tag, (x, y), deps))
        elif opcode == 9:
            src, dst = r.view(), r.view()
            x, y = r.take("<HH")
            out.append(DmaCopy(unit, src, dst, r.route((x, y)), deps))
        else:
            raise CfxError(f"{r.what}: unknown opcode {opcode}")
    return out


# -- whole file --------------------------------------------------------------------------------
def to_bytes(exe: Executable) -> bytes:
    """The ``.cfx`` bytes of ``exe``."""
    def js(obj) -> bytes:
        return json.dumps(obj, separators=(",", ":"), sort_keys=False).encode()

    prog = struct.pack("<I", len(exe.programs))
    version = max((OPCODE_VERSION.get(OPCODES[type(i)], 1) for _, _, i in exe.instructions()), default=1)
    if any(r.interleave != 1 for r in exe.regions) or any(
            o.quant is not None and o.quant.activation not in (None, "Relu") for o in exe.ops):
        version = max(version, INTERLEAVE_VERSION)
    if any(o.activation is not None or o.activation_work for o in exe.ops):
        version = max(version, FLOAT_ACTIVATION_VERSION)
    if any(o.quant is not None and o.op_type == "Sum" for o in exe.ops):
        version = max(version, INTEGER_SUM_VERSION)
    for p in exe.programs:
        body = b"".join(encode_instruction(i) for i in p.instructions)
        prog += struct.pack("<HHII", p.core[0], p.core[1], len(p.instructions), len(body)) + body
    blob = bytearray()
    index = []
    seen: dict[int, tuple[int, int]] = {}
    for b, w in sorted(exe.weights.items()):
        data = np.ascontiguousarray(w.data, exe.buffers[b].dtype)
        key = id(w.data)
        if key not in seen:
            pad = -len(blob) % BLOB_ALIGN
            blob += b"\x00" * pad
            seen[key] = (len(blob), data.nbytes)
            blob += data.tobytes()
        off, n = seen[key]
        index.append({"buffer": b, "offset": off, "nbytes": n, "quant": _qt(w.quant)})
    sections = {
        "TRGT": js({"name": exe.target.name, "digest": exe.target.digest, "width": exe.target.width,
                    "height": exe.target.height}),
        "OPST": js([_op(o) for o in exe.ops]),
        "BUFS": js([[b.id, list(b.core), b.offset, b.nbytes, list(b.shape), b.dtype, b.kind, b.name]
                    for b in exe.buffers]),
        "REGS": js([[r.id, r.channel, r.offset, r.nbytes, list(r.shape), r.dtype, r.kind, r.name]
                    + ([r.interleave] if r.interleave != 1 else [])
                    for r in exe.regions]),
        "IOTS": js({"inputs": [[t.name, list(t.shape), t.dtype, t.region, t.location] for t in exe.inputs],
                    "outputs": [[t.name, list(t.shape), t.dtype, t.region, t.location] for t in exe.outputs]}),
        "PROG": prog,
        "WIDX": js(index),
        "WBLB": bytes(blob),
        "META": js(_json_value(exe.meta)),
    }
    table = b""
    offset = HEADER.size + ENTRY.size * len(sections)
    payload = b""
    for tag in SECTIONS:
        data = sections[tag]
        pad = -offset % 8
        payload += b"\x00" * pad
        offset += pad
        table += ENTRY.pack(tag.encode(), offset, len(data), zlib.crc32(data))
        payload += data
        offset += len(data)
    header = HEADER.pack(MAGIC, version, 0, len(sections), zlib.crc32(table), b"\x00" * 12)
    return header + table + payload


def save(exe: Executable, path: str | os.PathLike) -> None:
    """Write ``exe`` to ``path`` atomically (a temporary file renamed when complete).

    Raises:
        OutputPathError: the path is a folder or its folder is missing or read-only.
    """
    from corefold.io import atomic_output

    data = to_bytes(exe)
    with atomic_output(path) as tmp:
        tmp.write_bytes(data)


def from_bytes(data: bytes, what: str = "<bytes>", target=None) -> Executable:
    """Parse ``.cfx`` bytes (see :func:`load`)."""
    if len(data) < HEADER.size or data[:8] != MAGIC:
        raise CfxError(f"{what}: not a corefold executable (.cfx): bad magic")
    magic, version, _, count, table_crc, _ = HEADER.unpack_from(data)
    if version not in READABLE_VERSIONS:
        raise CfxError(f"{what}: format version {version}, this corefold reads versions "
                       f"{', '.join(map(str, READABLE_VERSIONS))}")
    table = data[HEADER.size:HEADER.size + ENTRY.size * count]
    if len(table) < ENTRY.size * count:
        raise CfxError(f"{what}: truncated in the section table")
    if zlib.crc32(table) != table_crc:
        raise CfxError(f"{what}: section table checksum mismatch (corrupt)")
    sec: dict[str, bytes] = {}
    for i in range(count):
        tag, off, length, crc = ENTRY.unpack_from(table, i * ENTRY.size)
        name = tag.decode("ascii", "replace")
        if off + length > len(data):
            raise CfxError(f"{what}: truncated: section {name} needs bytes up to {off + length}, "
                           f"the file has {len(data)}")
        body = data[off:off + length]
        if zlib.crc32(body) != crc:
            raise CfxError(f"{what}: section {name} checksum mismatch (corrupt)")
        sec[name] = body
    missing = [s for s in SECTIONS if s not in sec]
    if missing:
        raise CfxError(f"{what}: missing section(s) {', '.join(missing)}")
    try:
        return _assemble(sec, what, target, version)
    except (ValueError, KeyError, TypeError, IndexError, struct.error) as exc:
        raise CfxError(f"{what}: malformed content: {exc}") from None


def _assemble(sec: dict[str, bytes], what: str, target, version: int) -> Executable:
    t = json.loads(sec["TRGT"])
    fp = TargetFingerprint(t["name"], t["digest"], t["width"], t["height"])
    if target is not None:
        want = target_fingerprint(target)
        if want.digest != fp.digest:
            raise CfxError(f"{what}: built for target '{fp.name}' ({fp.digest[:12]}), not for '{want.name}' "
                           f"({want.digest[:12]})")
    ops = [_op_back(d) for d in json.loads(sec["OPST"])]
    for o in ops:
        act = o.quant.activation if o.quant is not None else None
        if act not in (None, "Relu") and (version < INTERLEAVE_VERSION or act not in ACTIVATIONS):
            raise CfxError(f"{what}: op '{o.name}' has activation {act!r}, unknown to format version {version}")
        if (o.activation is not None or o.activation_work) and version < FLOAT_ACTIVATION_VERSION:
            raise CfxError(f"{what}: op '{o.name}' has a fused activation's work, unknown to format version {version}")
        if o.quant is not None and o.op_type == "Sum" and version < INTEGER_SUM_VERSION:
            raise CfxError(f"{what}: integer Sum '{o.name}', unknown to format version {version}")
        if o.activation is not None and o.activation not in ACTIVATIONS:
            raise CfxError(f"{what}: float op '{o.name}' has activation {o.activation!r}, unknown to format "
                           f"version {version}")
    buffers = [Buffer(i, tuple(c), o, n, tuple(s), dt, k, nm) for i, c, o, n, s, dt, k, nm in json.loads(sec["BUFS"])]
    regions = []
    for entry in json.loads(sec["REGS"]):
        if len(entry) == 9 and version < INTERLEAVE_VERSION:
            raise CfxError(f"{what}: an interleaved DRAM region in a format version {version} file")
        i, ch, o, n, s, dt, k, nm, *rest = entry
        if rest and (type(rest[0]) is not int or rest[0] < 1):
            raise CfxError(f"{what}: DRAM region {i} is interleaved over {rest[0]!r} channels")
        regions.append(DramRegion(i, ch, o, n, tuple(s), dt, k, nm, *rest))
    io = json.loads(sec["IOTS"])
    inputs = [TensorIO(n, tuple(s), dt, r, loc) for n, s, dt, r, loc in io["inputs"]]
    outputs = [TensorIO(n, tuple(s), dt, r, loc) for n, s, dt, r, loc in io["outputs"]]
    r = _Reader(sec["PROG"], f"{what} section PROG")
    (ncores,) = r.take("<I")
    programs = []
    for _ in range(ncores):
        x, y, count, _length = r.take("<HHII")
        programs.append(CoreProgram((x, y), _decode_program(r, (x, y), count, version)))
    blob = sec["WBLB"]
    weights = {}
    for e in json.loads(sec["WIDX"]):
        b = buffers[e["buffer"]]
        if e["offset"] + e["nbytes"] > len(blob):
            raise CfxError(f"{what}: weight of buffer {b.id} lies outside the weight blob")
        data = np.frombuffer(blob, np.dtype(b.dtype), count=e["nbytes"] // np.dtype(b.dtype).itemsize,
                             offset=e["offset"]).reshape(b.shape)
        weights[b.id] = Weight(b.id, data, _qt_back(e["quant"]))
    meta = _from_json(json.loads(sec["META"]))
    return Executable(fp, programs, buffers, weights, regions, inputs, outputs, ops, meta)


def load(path: str | os.PathLike, target=None) -> Executable:
    """Read a ``.cfx`` file. With ``target``, refuse a file built for another target.

    Raises:
        CfxError: not a ``.cfx`` file, another version, truncated, a checksum mismatch, or
            another target (one line naming the file and the reason).
    """
    try:
        data = open(path, "rb").read()
    except OSError as exc:
        raise CfxError(f"{path}: cannot read: {exc.strerror}") from None
    return from_bytes(data, str(path), target)


def estimate_program_bytes(lg, cl) -> dict[int, int]:
    """Estimated encoded program bytes per group, before placement: per task one compute
    and one transfer per input piece not already local, per output piece read elsewhere one
    send (the typical sizes of docs/executable.md's records). O(V + pieces)."""
    size: dict[int, int] = {}
    group = cl.group

    def view_bytes(rank: int) -> int:
        return 5 + 12 * rank

    for t in lg.tasks:
        g = int(group[t.id])
        total = 0
        if t.op is not None:
            total += 4 + 4 * 4 + 6 + sum(1 + view_bytes(len(s)) for s in t.op.input_shapes if s is not None) \
                + sum(view_bytes(len(s)) for s in t.op.output_shapes)
        for o in t.inputs:
            if o is None:
                continue
            for p in o.pieces:
                ph = lg.phys[p.phys]
                if ph.kind == "op" and int(group[ph.task]) == g and len(o.pieces) == 1:
                    continue
                rank = len(p.extent)
                total += 4 + 4 * 2 + 8 + view_bytes(rank)
                if ph.kind == "op" and int(group[ph.task]) != g:
                    src = int(group[ph.task])
                    size[src] = size.get(src, 12) + 4 + 4 * 2 + 8 + 2 * view_bytes(rank) + 2 + 16
        size[g] = size.get(g, 12) + total
    return size
