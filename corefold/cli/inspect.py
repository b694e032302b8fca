"""``corefold inspect MODEL``: ops, parameters, MACs, activation memory and time per unit.

``corefold inspect model.cfx`` (an executable from ``corefold lower``, recognised by its
magic bytes or its suffix) prints the file instead: format version and sections, target
fingerprint, per-core instructions by kind, buffers and SRAM, weights, I/O descriptors
and the op table (:func:`inspect_executable`)."""

from __future__ import annotations

import argparse

from corefold.cli.common import (
    add_shape_argument,
    add_target_argument,
    shape_bindings,
    value_bindings,
)


def _channels(region) -> str:
    if region.interleave == 1:
        return f"channel {region.channel}"
    return f"channels {region.channel}-{region.channel + region.interleave - 1} interleaved"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="ONNX model file, or an executable (.cfx) written by corefold lower")
    add_shape_argument(p)
    add_target_argument(p)


def _si(x: float, unit: str = "") -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.2f} {prefix}{unit}"
    return f"{x:.0f} {unit}".rstrip()


def _bytes(n: float) -> str:
    for scale, prefix in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if n >= scale:
            return f"{n / scale:.2f} {prefix}"
    return f"{n:.0f} B"


def _time(s: float) -> str:
    if s >= 1:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3f} ms"
    return f"{s * 1e6:.2f} us"


def run(args: argparse.Namespace) -> int:
    if is_executable(args.model):
        from corefold.errors import CorefoldError

        if args.shape or args.value:
            raise CorefoldError(f"{args.model}: --shape and --value apply to ONNX models, not to an executable")
        inspect_executable(args.model)
        return 0
    from corefold.cost import graph_cost
    from corefold.frontend.onnx import load_model
    from corefold.target import load_target

    target = load_target(args.target)
    graph = load_model(args.model, shape_bindings(args), values=value_bindings(args))
    gc = graph_cost(graph, target)
    params_by_op: dict[str, int] = {}
    act_by_op: dict[str, int] = {}
    unit_by_op: dict[str, str] = {}
    for n, c in gc.ops.items():
        params_by_op[n.op_type] = params_by_op.get(n.op_type, 0) + sum(v.size for v in n.inputs if v is not None and v.is_constant)
        act_by_op[n.op_type] = act_by_op.get(n.op_type, 0) + c.output_bytes
        unit_by_op[n.op_type] = c.unit

    print(f"model   {args.model}")
    print(f"target  {target.name} ({target.width}x{target.height} cores, {target.clock_hz / 1e6:.0f} MHz, "
          f"{_bytes(target.sram_bytes)} SRAM per core)")
    print("inputs  " + ", ".join(f"{v.name}: {v.dtype.name}{list(v.shape)}" for v in graph.inputs))
    print("outputs " + ", ".join(f"{v.name}: {v.dtype.name}{list(v.shape)}" for v in graph.outputs))
    print()
    header = f"{'op':<22}{'count':>7}{'params':>12}{'MACs':>12}{'act. out':>12}  {'unit':<7}{'time':>12}"
    print(header)
    print("-" * len(header))
    for op in sorted(gc.count_by_op, key=lambda o: (-gc.seconds_by_op[o], o)):
        print(f"{op:<22}{gc.count_by_op[op]:>7}{_si(params_by_op[op]):>12}{_si(gc.macs_by_op[op]):>12}"
              f"{_bytes(act_by_op[op]):>12}  {unit_by_op[op]:<7}{_time(gc.seconds_by_op[op]):>12}")
    print("-" * len(header))
    print(f"{'total':<22}{len(graph):>7}{_si(gc.parameters):>12}{_si(gc.macs):>12}{_bytes(gc.activation_bytes):>12}")
    print()
    print(f"parameters          {gc.parameters:,} ({_bytes(gc.parameter_bytes)})")
    print(f"MACs                {gc.macs:,}")
    print(f"activation memory   {_bytes(gc.activation_bytes)} in all, {_bytes(gc.peak_live_bytes)} peak live (file order)")
    print("time per unit kind  " + ", ".join(
        f"{k}: {_time(s)} ({target.units[k].count} unit{'s' if target.units[k].count > 1 else ''})"
        for k, s in gc.seconds_by_unit.items()))
    bound_unit = max(gc.seconds_by_unit, key=lambda k: gc.seconds_by_unit[k] / target.units[k].count)
    print(f"busiest unit kind   {bound_unit}: {_time(gc.seconds_by_unit[bound_unit] / target.units[bound_unit].count)} "
          "with its units sharing the work (one core)")
    return 0


def is_executable(path: str) -> bool:
    """Whether ``path`` names a ``.cfx`` executable: its suffix, or its magic bytes."""
    from pathlib import Path

    from corefold.backend.cfx import MAGIC

    if Path(path).suffix.lower() == ".cfx":
        return True
    try:
        with open(path, "rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:  # missing, a folder, unreadable: the ONNX loader names the problem
        return False


def inspect_executable(path: str) -> None:
    """Print a ``.cfx`` file's contents (module docstring).

    Raises:
        CfxError: not a ``.cfx`` file, another version, truncated or corrupt.
    """
    from collections import Counter

    from corefold.backend.cfx import ENTRY, HEADER, from_bytes
    from corefold.backend.executable import INSTRUCTION_TYPES, instruction_kind
    from corefold.errors import TargetError
    from corefold.sim import resolve_target

    try:
        data = open(path, "rb").read()
    except OSError as exc:
        from corefold.backend.cfx import CfxError

        raise CfxError(f"{path}: cannot read: {exc.strerror}") from None
    exe = from_bytes(data, path)
    _, version, _, count, _, _ = HEADER.unpack_from(data)
    sections = [ENTRY.unpack_from(data, HEADER.size + i * ENTRY.size) for i in range(count)]
    fp = exe.target
    try:
        target = resolve_target(fp)
        capacity, where = target.sram_bytes, "the bundled preset of that name"
    except TargetError:
        target, capacity, where = None, None, "no bundled preset: SRAM capacity unknown"
    print(f"executable   {path}: {len(data):,} bytes, format version {version}")
    print("sections     " + ", ".join(f"{tag.decode()} {_bytes(length)}" for tag, _, length, _ in sections))
    print(f"target       {fp.name} ({fp.width}x{fp.height} cores), fingerprint {fp.digest[:16]}... ({where})")
    summary = exe.summary()
    print(f"graph        {exe.meta.get('graph', '?')}: {summary['ops']} ops on {summary['cores_used']} cores, "
          f"{summary['instructions']} instructions, {summary['buffers']} SRAM buffers, {summary['regions']} DRAM regions")
    for label, tios in (("inputs", exe.inputs), ("outputs", exe.outputs)):
        print(f"{label:<13}" + "; ".join(
            f"{t.name}: {t.dtype}{list(t.shape)} in DRAM region {t.region} ({_channels(exe.regions[t.region])}, "
            f"{t.location})" for t in tios))
    kinds = list(INSTRUCTION_TYPES)
    short = {"dma_load": "load", "dma_store": "store", "dma_copy": "dcopy"}
    head = f"{'core':<8}{'instr':>6}" + "".join(f"{short.get(k, k):>8}" for k in kinds) + f"{'buffers':>9}{'weights':>12}{'SRAM':>12}"
    print()
    print(head)
    print("-" * len(head))
    for p in exe.programs:
        by_kind = Counter(instruction_kind(i) for i in p.instructions)
        bufs = [b for b in exe.buffers if b.core == p.core]
        extent = exe.sram_extent(p.core)
        fill = f" {extent / capacity:4.0%}" if capacity else ""
        print(f"{f'({p.core[0]},{p.core[1]})':<8}{len(p.instructions):>6}" + "".join(f"{by_kind[k]:>8}" for k in kinds)
              + f"{len(bufs):>9}{_bytes(exe.weight_bytes(p.core)):>12}{_bytes(extent):>12}{fill}")
    print("-" * len(head))
    print(f"{'total':<8}{summary['instructions']:>6}" + "".join(f"{summary['instructions_by_kind'][k]:>8}" for k in kinds)
          + f"{summary['buffers']:>9}{_bytes(summary['weight_bytes']):>12}")
    if capacity:
        print(f"SRAM: the highest address a core's buffers reach, of {_bytes(capacity)} per core")
    print()
    dtypes = Counter()
    quantized = 0
    for b, w in exe.weights.items():
        dtypes[exe.buffers[b].dtype] += exe.buffers[b].nbytes
        quantized += w.quant is not None
    print(f"weights      {len(exe.weights)} resident buffers, {summary['weight_bytes']:,} bytes ("
          + ", ".join(f"{d} {_bytes(n)}" for d, n in dtypes.items()) + f"); {quantized} quantized")
    regions = Counter(r.kind for r in exe.regions)
    print(f"DRAM         {summary['dram_bytes']:,} bytes in " + ", ".join(f"{n} {k}" for k, n in regions.items()))
    ops = Counter((o.op_type + ("+" + act if (act := o.activation or (o.quant.activation if o.quant else None))
                                else ""), o.unit_kind, o.quant is not None) for o in exe.ops)
    print(f"ops          {len(exe.ops)}: " + ", ".join(
        f"{t}{' (int)' if q else ''} x{n} [{u}]" for (t, u, q), n in sorted(ops.items(), key=lambda kv: -kv[1])))
    stats = {k: exe.meta[k] for k in ("tasks", "spills", "estimated_makespan_s") if k in exe.meta}
    if stats:
        print("lowering     " + ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in stats.items()))
