"""``corefold quantize MODEL --calib DATA -o OUT.onnx``: range-aware post-training quantization."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from corefold.cli.common import (
    add_shape_argument,
    atomic_output,
    check_outputs,
    shape_bindings,
    value_bindings,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="float ONNX model")
    p.add_argument("--calib", required=True, metavar="DATA",
                   help=".npz keyed by input name, samples stacked on the batch axis, or a folder of them")
    p.add_argument("-o", "--output", required=True, metavar="OUT.onnx",
                   help="QDQ ONNX model to write (OUT.json beside it lists every quantized tensor)")
    add_shape_argument(p)
    p.add_argument("--bits", type=int, default=8, help="activation bits: 4, 8 or 16 (default 8)")
    p.add_argument("--weight-bits", type=int, default=None, metavar="N", help="weight bits (default: --bits)")
    p.add_argument("--per-channel", action="store_true", help="one weight scale per output channel")
    p.add_argument("--calibration", choices=["minmax", "percentile", "mse"], default="mse",
                   help="how the range is clipped (default mse)")
    p.add_argument("--percentile", type=float, default=99.99, help="percentile for --calibration percentile")
    p.add_argument("--target-sqnr", type=float, default=None, metavar="DB",
                   help="raise the bits of the most sensitive tensors until this output SQNR")
    p.add_argument("--float-outputs", action="store_true",
                   help="leave the graph outputs float: the last ops' accumulators dequantized, not rounded")
    p.add_argument("--weight-rounding", choices=["gptq", "nearest"], default="gptq",
                   help="weight integers: error-compensating GPTQ on calibration data (default) or nearest")
    p.add_argument("--symmetric-only", action="store_true", help="switch the unsigned rule off (ablation)")
    p.add_argument("--engine", choices=["corefold", "onnxruntime"], default="corefold",
                   help="what runs the float model during calibration (default corefold)")
    p.add_argument("--max-batches", type=int, default=None, metavar="N", help="calibrate on at most N batches")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from corefold.frontend.onnx import load_model, save_model
    from corefold.passes.quantize import QuantizeSettings, load_calibration, quantize_graph

    check_outputs([("-o", args.output), ("-o (its .json)", str(Path(args.output).with_suffix(".json")))],
                  inputs=[args.model, args.calib])
    settings = QuantizeSettings(bits=args.bits, weight_bits=args.weight_bits, per_channel=args.per_channel,
                                calibration=args.calibration, percentile=args.percentile,
                                unsigned_rule=not args.symmetric_only, target_sqnr_db=args.target_sqnr,
                                engine=args.engine, max_batches=args.max_batches,
                                quantize_outputs=not args.float_outputs,
                                weight_rounding=args.weight_rounding).checked()
    graph = load_model(args.model, shape_bindings(args), values=value_bindings(args))
    data = load_calibration(args.calib, graph)
    result = quantize_graph(graph, data, settings, progress=not args.quiet)
    out = str(args.output)
    report_path = (out[:-5] if out.endswith(".onnx") else out) + ".json"
    result.report["model"] = str(args.model)
    result.report["calibration_samples"] = data.num_samples
    with atomic_output(out) as tmp:
        save_model(result.graph, tmp)
        with atomic_output(report_path) as tmp_json:
            tmp_json.write_text(json.dumps(result.report, indent=1, allow_nan=True) + "\n")
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
