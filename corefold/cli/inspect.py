"""``corefold inspect MODEL``: ops, parameters, MACs, activation memory and time per unit."""

from __future__ import annotations

import argparse

from corefold.cli.common import (
    add_shape_argument,
    add_target_argument,
    shape_bindings,
    value_bindings,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="ONNX model file")
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
