"""``corefold quantize MODEL --calib DATA -o OUT.onnx``: range-aware post-training quantization.

Settings start from ``--preset`` (the same defaults as Python's ``QuantizeSettings()``),
then the shortcut flags (``--bits``, ``--per-channel``, ...), then every ``--set NAME=VALUE``.
The quantize pass runs under the pipeline (``verify`` after it); the result is run in ONNX
Runtime on one calibration batch before anything is written (``--no-ort-check`` skips it).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import replace

from corefold.cli.common import (
    add_shape_argument,
    atomic_outputs,
    check_outputs,
    shape_bindings,
    value_bindings,
)
from corefold.cli.settings_args import add_settings_arguments


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="float ONNX model")
    p.add_argument("--calib", required=True, metavar="DATA",
                   help=".npz keyed by input name, samples stacked on the batch axis, or a folder of them")
    p.add_argument("-o", "--output", required=True, metavar="OUT.onnx",
                   help="QDQ ONNX model to write (OUT.json beside it lists every quantized tensor)")
    add_shape_argument(p)
    p.add_argument("--preset", choices=["default", "fast", "strong", "seed"], default="default",
                   help="settings preset (default: default; seed = the seed's literal rule: min/max, per-tensor, "
                        "unsigned iff min >= 0, no GPTQ/MSE/mixed)")
    add_settings_arguments(p, "corefold.passes.quantize:QuantizeSettings", dest="settings")
    p.add_argument("--bits", type=int, default=None, help="activation bits: 4, 8 or 16 (default 8)")
    p.add_argument("--weight-bits", type=int, default=None, metavar="N", help="weight bits (default: --bits)")
    p.add_argument("--weight-range", type=int, default=None, metavar="N",
                   help="weight integers in the range of N bits (7: [-64, 63] in int8, ONNX Runtime's reduce_range, "
                        "for x86 CPUs without AVX-VNNI; default: the full range)")
    p.add_argument("--per-channel", action=argparse.BooleanOptionalAction, default=None,
                   help="one weight scale per output channel (default: on, as in Python; --no-per-channel: per tensor)")
    p.add_argument("--calibration", choices=["minmax", "percentile", "mse"], default=None,
                   help="how the range is clipped (default mse)")
    p.add_argument("--percentile", type=float, default=None, help="percentile for --calibration percentile "
                   "(default 99.99)")
    p.add_argument("--target-sqnr", type=float, default=None, metavar="DB",
                   help="raise the bits of the most sensitive tensors until this output SQNR")
    p.add_argument("--float-outputs", action="store_true",
                   help="leave the graph outputs float: the last ops' accumulators dequantized, not rounded")
    p.add_argument("--weight-rounding", choices=["gptq", "nearest"], default=None,
                   help="weight integers: error-compensating GPTQ on calibration data (default) or nearest")
    p.add_argument("--symmetric-only", action="store_true", help="switch the unsigned rule off (ablation)")
    p.add_argument("--engine", choices=["corefold", "onnxruntime"], default=None,
                   help="what runs the float model during calibration (default corefold)")
    p.add_argument("--max-batches", type=int, default=None, metavar="N", help="calibrate on at most N batches")
    p.add_argument("--no-ort-check", action="store_true",
                   help="do not run the quantized model in ONNX Runtime before writing it")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def settings_from_args(args: argparse.Namespace):
    """The quantizer settings: the preset, then the shortcut flags, then ``--set``.

    Raises:
        SettingsError: an unknown or malformed ``--set``.
        QuantizeError: settings out of range.
    """
    from corefold.passes.quantize import QuantizeSettings
    from corefold.settings import override, preset

    s = preset(QuantizeSettings, args.preset)
    flags = {"bits": args.bits, "weight_bits": args.weight_bits, "weight_range": args.weight_range,
             "per_channel": args.per_channel, "calibration": args.calibration, "percentile": args.percentile,
             "target_sqnr_db": args.target_sqnr, "weight_rounding": args.weight_rounding, "engine": args.engine,
             "max_batches": args.max_batches}
    s = replace(s, **{k: v for k, v in flags.items() if v is not None})
    if args.float_outputs:
        s = replace(s, quantize_outputs=False)
    if args.symmetric_only:
        s = replace(s, unsigned_rule=False)
    return override(s, args.settings).checked()


def _strict_json(obj):
    """``obj`` with non-finite floats written as the strings "inf", "-inf", "nan" (strict JSON:
    an SQNR of identical outputs is infinite)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _strict_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_strict_json(v) for v in obj]
    return obj


def run(args: argparse.Namespace) -> int:
    from corefold.errors import ModelError
    from corefold.frontend.onnx import load_model, to_onnx
    from corefold.passes.quantize import QuantizePass, load_calibration
    from corefold.passes.quantize.check import check_in_onnxruntime
    from corefold.pipeline import CompileContext, Pipeline

    settings = settings_from_args(args)
    out = str(args.output)
    report_path = (out[:-5] if out.endswith(".onnx") else out) + ".json"
    check_outputs([("-o", out), ("-o (report)", report_path)], inputs=[args.model, args.calib])
    graph = load_model(args.model, shape_bindings(args), values=value_bindings(args))
    data = load_calibration(args.calib, graph)
    ctx = CompileContext(settings={"quantize": settings}, progress=not args.quiet, data={"calibration": data})
    graph = Pipeline([QuantizePass()]).run(graph, ctx).graph
    result = ctx.data["quantize"]
    result.report["model"] = str(args.model)
    result.report["calibration_samples"] = data.num_samples
    model = to_onnx(graph).SerializeToString()
    if len(model) >= 2**31:
        raise ModelError(f"'{out}': the quantized model exceeds 2 GB, which a single ONNX file cannot hold")
    if not args.no_ort_check:
        warning = check_in_onnxruntime(model, graph, next(iter(data.batches(1))))
        if warning:
            print(f"corefold quantize: warning: {warning}", file=sys.stderr)
    with atomic_outputs([out, report_path]) as (tmp, tmp_json):
        tmp.write_bytes(model)
        tmp_json.write_text(json.dumps(_strict_json(result.report), indent=1, allow_nan=False) + "\n")
    modes = result.report["modes"]
    print(f"quantized {len(result.plan)} tensors ({modes['unsigned']} unsigned, {modes['symmetric']} symmetric) "
          f"on {data.num_samples} calibration samples -> {out}, {report_path}")
    if result.mixed is not None:
        m = result.mixed
        print(f"mixed precision: output SQNR {m['start_sqnr_db']:.2f} -> {m['final_sqnr_db']:.2f} dB "
              f"(target {m['target_sqnr_db']} dB{'' if m['reached'] else ', NOT reached'}), "
              f"{len(m['raises'])} tensors raised, +{m['weight_bytes_added']} weight bytes, "
              f"+{m['activation_bytes_added']} activation bytes per inference")
    return 0
