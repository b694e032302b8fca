"""The quantizer's settings: one frozen dataclass with presets (:mod:`corefold.settings`).

The command line and Python share these defaults: ``corefold quantize`` starts from
:func:`corefold.settings.preset` (``--preset``), applies its shortcut flags (``--bits``,
``--per-channel``, ...) and then every ``--set NAME=VALUE``; ``--help-settings`` prints
:func:`corefold.settings.describe` of this class.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal

from corefold.passes.quantize.params import QuantizeError, check_bits

CALIBRATION_METHODS = ("minmax", "percentile", "mse")


@dataclass(frozen=True)
class QuantizeSettings:
    """Every knob of the quantize pass (SPEC M5 and what corefold adds beyond the seed).

    Attributes:
        bits: activation width n (4, 8 or 16): unsigned [0, 2^n - 1] or symmetric
            [-2^(n-1), 2^(n-1) - 1] integers (SPEC M5 §3).
        weight_bits: weight width (None: ``bits``).
        weight_range: the weights' integer range in bits when narrower than their width
            (7: 8-bit weights in [-64, 63], as ONNX Runtime's reduce_range). x86 CPUs without
            AVX-VNNI sum pairs of u8 x s8 products in int16 in ONNX Runtime's fused integer
            kernels, which saturates with full 8-bit weights; 7 bits never does. None: the
            full range of ``weight_bits``.
        per_channel: one weight scale per output channel (the mode stays per tensor).
        calibration: how an activation's magnitude m is chosen from the calibration
            statistics: ``minmax`` (max |x|, the seed's rule), ``percentile`` or ``mse``
            (the m minimising the expected squared quantization error).
        percentile: the percentile of |x| for ``calibration=percentile``.
        unsigned_rule: the seed's rule, unsigned iff min >= 0 (False: symmetric only, an
            ablation).
        fuse_activations: beyond the seed's fused conv + ReLU / Clip(min >= 0): any chain of
            elementwise operators after a conv, matmul, gemm, add or normalisation that only
            it feeds and that one tensor leaves (SiLU, GELU, HardSwish, bias + activation) is
            fused, so only that tensor is stored. False: the seed's rule alone.
        softmax_margin: a tensor read only by Softmax is clipped at most this far below its
            maximum (softmax is shift-invariant: masked scores need no levels); None: off.
        target_sqnr_db: raise the widths of the most sensitive tensors (4 -> 8 -> 16) until
            the simulated output SQNR reaches this many dB; None: no mixed precision.
        engine: what runs the float model during calibration: ``corefold`` (the reference
            executor) or ``onnxruntime``.
        max_batches: calibrate on at most this many batches (None: all of them).
        mixed_batches: the batches mixed precision measures its SQNR on.
        quantize_outputs: graph outputs are rounded to n bits like every other tensor
            (False: the last ops' accumulators are dequantized to float).
        weight_rounding: ``gptq`` (error-compensating rounding on the calibration data,
            kept only where it beats nearest) or ``nearest``.
        output_grid: with ``calibration=mse``, a graph output that no node reads takes the
            magnitude within 3% of its MSE one that minimises the simulated output error on
            the calibration batches (:mod:`outgrid`); kept only where that error drops by at
            least 2%.
        gptq_rows_per_column: GPTQ rounds a weight only when its Hessian sums more than this
            many calibration rows (patches, tokens) per input column; at or below, ``H`` is
            singular or nearly and GPTQ fits the calibration samples rather than the layer
            (GPT-2 with 4 samples of 16 tokens: 64 rows for 64 columns, 0.15 dB lower output
            SQNR than nearest rounding on held-out samples).
        fold: before calibrating, fold into each float convolution the
            BatchNormalization and per-channel Mul, Add, Sub or Div after it
            (:func:`corefold.passes.fold.fold_batchnorm`, as ONNX Runtime's quantization
            pre-processing does): one quantized convolution instead of a convolution whose
            output is rounded, then a normalisation rounded again; and make each Sum of two
            inputs an Add (:func:`~corefold.passes.fold.sums_as_adds`), which the integer
            runner computes from inputs of two scales. The onnx package's Inception v2 (69
            such convolutions, 207 nodes folded) lowers on the 8x8 ``npu`` in 230.6 us
            instead of 367.0; DenseNet-121 (its normalisations of concatenated features also
            take the Mul and Add after them) in 723.0 instead of 1328.5; ResNet-50 (53
            normalisations, 16 residual Sums) in 742.2 instead of 6167.5. Then each
            normalisation left (no convolution before it) becomes a depthwise 1 x 1
            convolution (:func:`~corefold.passes.fold.normalisations_as_convs`), computed
            from the integers: DenseNet-121's 62, 723.0 -> 360.0 us.
    """

    bits: int = 8
    weight_bits: int | None = None
    weight_range: int | None = None
    per_channel: bool = True
    calibration: Literal["minmax", "percentile", "mse"] = "mse"
    percentile: float = 99.99
    unsigned_rule: bool = True
    fuse_activations: bool = True
    softmax_margin: float | None = 20.0
    target_sqnr_db: float | None = None
    engine: Literal["corefold", "onnxruntime"] = "corefold"
    max_batches: int | None = None
    mixed_batches: int = 4
    quantize_outputs: bool = True
    weight_rounding: Literal["gptq", "nearest"] = "gptq"
    output_grid: bool = True
    gptq_rows_per_column: float = 1.0
    fold: bool = True

    #: fast: min/max on at most 32 batches, nearest rounding; strong: default plus 16-bit
    #: raising to 40 dB; seed: the seed's literal rule (SPEC M5): min/max calibration,
    #: per-tensor scales, unsigned iff min >= 0 else symmetric, conv + ReLU/Clip fusion only,
    #: no GPTQ, no MSE clipping, no softmax clipping, no mixed precision, no folding
    PRESETS: ClassVar[dict[str, dict]] = {
        "fast": {"calibration": "minmax", "max_batches": 32, "weight_rounding": "nearest"},
        "default": {},
        "strong": {"target_sqnr_db": 40.0},
        "seed": {"calibration": "minmax", "per_channel": False, "weight_rounding": "nearest",
                 "fuse_activations": False, "softmax_margin": None, "target_sqnr_db": None,
                 "fold": False},
    }

    @property
    def weight_width(self) -> int:
        return self.weight_bits or self.bits

    def checked(self) -> "QuantizeSettings":
        """Return self after validation.

        Raises:
            QuantizeError: a width out of range, an unknown method or engine, a percentile
                outside (0, 100], a batch count below 1, or a non-finite target.
        """
        check_bits(self.bits, "bits")
        if self.weight_bits is not None:
            check_bits(self.weight_bits, "weight_bits")
        if self.weight_range is not None and not 2 <= self.weight_range <= self.weight_width:
            raise QuantizeError(f"weight_range = {self.weight_range} is out of range: between 2 and the "
                                f"weight width {self.weight_width}")
        if self.calibration not in CALIBRATION_METHODS:
            raise QuantizeError(f"calibration method '{self.calibration}' is unknown "
                                f"(choose from {', '.join(CALIBRATION_METHODS)})")
        if self.engine not in ("corefold", "onnxruntime"):
            raise QuantizeError(f"calibration engine '{self.engine}' is unknown (corefold or onnxruntime)")
        if self.weight_rounding not in ("gptq", "nearest"):
            raise QuantizeError(f"weight rounding '{self.weight_rounding}' is unknown (gptq or nearest)")
        if not (math.isfinite(self.percentile) and 0 < self.percentile <= 100):
            raise QuantizeError(f"percentile {self.percentile} is not in (0, 100]")
        if self.max_batches is not None and self.max_batches < 1:
            raise QuantizeError(f"max_batches = {self.max_batches}: calibrate on at least one batch")
        if not (math.isfinite(self.gptq_rows_per_column) and self.gptq_rows_per_column >= 0):
            raise QuantizeError(f"gptq_rows_per_column = {self.gptq_rows_per_column} is not a number >= 0")
        if self.mixed_batches < 1:
            raise QuantizeError(f"mixed_batches = {self.mixed_batches}: measure on at least one batch")
        if self.target_sqnr_db is not None and not math.isfinite(self.target_sqnr_db):
            raise QuantizeError(f"target SQNR {self.target_sqnr_db} dB is not a finite number")
        if self.softmax_margin is not None and not (math.isfinite(self.softmax_margin) and self.softmax_margin > 0):
            raise QuantizeError(f"softmax_margin = {self.softmax_margin} is not a positive number")
        return self
