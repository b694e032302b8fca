"""The quantized model in ONNX Runtime, before it is written: refused models never leave.

:func:`check_in_onnxruntime` runs the exported QDQ model in ONNX Runtime (default graph
optimisations, as a user runs it) on one calibration batch:

* ONNX Runtime refuses it as written (at load or run time, also at graph optimisation level
  BASIC) or an output is NaN or infinite:
  :class:`~corefold.passes.quantize.params.QuantizeError` naming the cause (the CLI exits 2
  and writes nothing);
* ONNX Runtime runs it only at level BASIC (its extended rewrites fail on the model, as
  they do on 4-bit models: DQ -> MaxPool -> Q in ONNX Runtime 1.31, ClipQuantFusion on a
  uint4 zero point in 1.32): a one-line warning. 8-bit models load at the default level
  (the rank >= 3 Linear bias that ONNX Runtime 1.32 refused there is written as ``[1, N]``:
  :func:`~corefold.passes.quantize.qdq.bias_rows`);
* an output differs from corefold's exact integer execution
  (:class:`~corefold.passes.quantize.integer.IntegerRunner`) by more than one quantization
  step beyond the distance of the model run as written (level BASIC, the float QDQ
  semantics, whose float32 rounding drifts from the exact integers with depth: 5 steps at
  the logits of an int8 EfficientNet-B0, where the warning blamed ONNX Runtime's kernels
  until stop 35): a one-line warning. ONNX Runtime fuses DequantizeLinear -> Conv/MatMul ->
  QuantizeLinear into integer kernels; on x86 CPUs without AVX-VNNI those sum pairs of
  u8 x s8 products in int16 (``vpmaddubsw``), which saturates when both use their full
  8-bit range. Weights in 7 bits (``weight_range=7``, ONNX Runtime's own reduce_range)
  cannot saturate. ``ort_session(..., qdq_exact=True)`` gives the exact result on any CPU.

Cost: one ONNX Runtime session and run, and one integer run, of one batch.
"""

from __future__ import annotations

import numpy as np

from corefold.errors import CorefoldError
from corefold.ir import Graph
from corefold.passes.quantize.params import QuantizeError


def cpu_has_vnni() -> bool | None:
    """Whether the CPU has AVX-VNNI or AVX512-VNNI (None: unknown, e.g. not Linux/x86)."""
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:
        return None
    if "flags" not in text:
        return None
    return "avx_vnni" in text or "avx512_vnni" in text


def output_steps(graph: Graph) -> dict[str, float | None]:
    """Each graph output's quantization step (its DequantizeLinear scale), None if float."""
    steps: dict[str, float | None] = {}
    for v in graph.outputs:
        dq = v.producer
        if dq is not None and dq.op_type == "DequantizeLinear" and dq.inputs[1].const is not None:
            steps[v.name] = float(np.max(np.abs(dq.inputs[1].const)))
        else:
            steps[v.name] = None
    return steps


def check_in_onnxruntime(model: bytes, graph: Graph, feeds: dict[str, np.ndarray]) -> str | None:
    """Run the serialized QDQ ``model`` (exported from ``graph``) in ONNX Runtime on ``feeds``.

    Returns:
        None, or a one-line warning when ONNX Runtime's optimised run differs from the exact
        integer result by more than one step (module docstring).

    Raises:
        QuantizeError: ONNX Runtime refuses the model, or an output is not finite.
    """
    from corefold.frontend.onnx.check import ort_session

    def run(exact: bool) -> dict[str, np.ndarray]:
        sess = ort_session(model, qdq_exact=exact)
        names = [o.name for o in sess.get_outputs()]
        return dict(zip(names, sess.run(names, feeds), strict=True))

    try:
        got = run(False)
    except Exception as exc:  # noqa: BLE001 - whatever ORT raises, the model is not fit to write
        text = " ".join(str(exc).split())[:300]
        try:
            got = run(True)
        except Exception:  # noqa: BLE001 - refused as written, too
            raise QuantizeError(f"ONNX Runtime refuses the quantized model, so it was not written: {text}") from None
        # the model as written runs; only ONNX Runtime's own graph rewrites fail on it
        _check_finite(got)
        return (f"ONNX Runtime runs the quantized model only at graph optimisation level BASIC; its extended "
                f"optimisations fail on it ({text})")
    _check_finite(got)
    from corefold.passes.quantize.integer import IntegerRunner

    try:
        exact = IntegerRunner(graph).run(feeds)
    except CorefoldError:
        return None  # a pattern the integer runner does not cover: nothing to compare with
    worst, where = _steps_from(got, exact, graph)
    if worst <= 1.0 + 1e-6:
        return None
    # NOTE: the float QDQ semantics (level BASIC) drift from the exact integers too, by
    # rounding that grows with depth (int8 EfficientNet-B0: 5 steps at its logits, every
    # operator within one): only a distance beyond theirs is ONNX Runtime's kernels' doing
    try:
        written, _ = _steps_from(run(True), exact, graph)
    except Exception:  # noqa: BLE001 - it ran optimised; no reference to compare with
        written = 0.0
    if worst <= written + 1.0 + 1e-6:
        return None
    if cpu_has_vnni() is False:
        return (f"ONNX Runtime's fused int8 kernels on this CPU (no AVX-VNNI: u8 x s8 pair sums saturate in int16) "
                f"put output '{where}' {worst:.0f} quantization steps from the exact integer result; quantize with "
                f"--weight-range 7 (ONNX Runtime's reduce_range) to avoid it, or run the model at graph optimisation "
                f"level BASIC")
    return (f"ONNX Runtime's optimised kernels put output '{where}' {worst:.0f} quantization steps from the exact "
            f"integer result; run the model at graph optimisation level BASIC for the exact QDQ semantics")


def _steps_from(got: dict[str, np.ndarray], exact: dict[str, np.ndarray], graph: Graph) -> tuple[float, str]:
    """The largest distance, in quantization steps, of a quantized output of ``got`` from
    ``exact``, and that output's name."""
    worst, where = 0.0, ""
    for name, step in output_steps(graph).items():
        if not step or name not in got:
            continue
        d = float(np.max(np.abs(np.asarray(got[name], np.float64) - np.asarray(exact[name], np.float64)))) / step
        if d > worst:
            worst, where = d, name
    return worst, where


def _check_finite(outputs: dict[str, np.ndarray]) -> None:
    for name, y in outputs.items():
        y = np.asarray(y)
        if np.issubdtype(y.dtype, np.floating) and not np.isfinite(y).all():
            raise QuantizeError(f"the quantized model's output '{name}' is not finite (NaN or infinity) in ONNX "
                                f"Runtime on the first calibration sample, so it was not written")


def operator_steps(model, graph: Graph, feeds: dict[str, np.ndarray]) -> tuple[dict[int, int], str | None]:
    """How far each quantized tensor of ``graph`` (a QuantizeLinear output) is from ONNX
    Runtime's when corefold's integer runner computes it from ONNX Runtime's values of its
    inputs: ``{steps: tensors}`` and the name of the worst QuantizeLinear (None if all
    agree). Each operator continues from ONNX Runtime's values, so a difference of one
    step does not propagate: this is the claim that holds for a quantized graph of any
    depth (each integer operator within one step of the float QDQ semantics), where the
    outputs of a deep one may drift further apart (int8 EfficientNet-B0 with random weights:
    logits 3 to 6 steps from ONNX Runtime, every operator within one). ``model`` is the
    ONNX file (path or bytes) ``graph`` was loaded from; ONNX Runtime runs it as written
    (``qdq_exact``). O(one ONNX Runtime run and one integer run).

    Raises:
        whatever ONNX Runtime raises on the model or the feeds; CorefoldError from the
        integer runner.
    """
    from collections import Counter

    from corefold.frontend.onnx.check import ort_tensors
    from corefold.passes.quantize.integer import IntegerRunner

    ref = ort_tensors(model, feeds, "QuantizeLinear")
    counts: Counter[int] = Counter()
    worst: list = [0, None]

    class _Local(IntegerRunner):
        def run_node(self, index, node):
            out = super().run_node(index, node)
            if node.op_type == "QuantizeLinear" and node.outputs[0].name in ref:
                want = np.asarray(ref[node.outputs[0].name])
                d = int(np.max(np.abs(np.asarray(out[0]).astype(np.int64) - want.astype(np.int64)), initial=0))
                counts[d] += 1
                if d > worst[0]:
                    worst[:] = [d, node.name]
                out = [want.astype(np.asarray(out[0]).dtype)] + list(out[1:])
            return out

    _Local(graph).run(feeds)
    return dict(counts), worst[1]
