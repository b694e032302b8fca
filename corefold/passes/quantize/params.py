"""Stage 4: quantization parameters, the seed's mode, integer range and scale rules (SPEC M5 §2-5).

A tensor quantized with ``bits`` = n is stored as integers ``q = clip(round(x * k))``:

* mode ``unsigned`` (the tensor's minimum is >= 0): q in [0, 2^n - 1];
* mode ``symmetric`` (otherwise): q in [-2^(n-1), 2^(n-1) - 1];
* ``k = qmax / m`` with ``m = max(|min|, |max|)`` (or a clipped ``m`` from calibration) and
  ``qmax`` the range's largest integer. Example: [0, 6] at 8 bits -> k = 255/6;
  [-5, 3] at 8 bits -> k = 127/5.

ONNX's ``QuantizeLinear`` scale is the inverse, ``x = scale * q``, so ``onnx_scale = 1 / k``.
There is never a zero point (it is 0 of the integer type).

The magnitude ``m`` of an activation comes from its calibration statistics
(:func:`clip_magnitude`): the observed ``max|x|`` (minmax), a percentile of ``|x|``, or the
``m`` minimising the expected squared quantization error (mse) over the |x| histogram:

    E(m) = sum_{|x| <= m} n(x) * Delta(m)^2 / 12 + sum_{|x| > m} n(x) * (|x| - m)^2,
    Delta(m) = m / qmax,

evaluated for 512 candidate edges in O(bins) with suffix sums. :class:`Planner` turns the
selection, the static ranges and the statistics into every tensor's parameters for a given
assignment of widths (mixed precision asks for several). O(tensors * bins) per plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from corefold.errors import CorefoldError

if TYPE_CHECKING:
    from corefold.ir import Graph, Value
    from corefold.passes.quantize.calibrate import RunningHistogram, Statistics, TensorStats
    from corefold.passes.quantize.ranges import Interval
    from corefold.passes.quantize.select import Selection
    from corefold.passes.quantize.settings import QuantizeSettings

UNSIGNED = "unsigned"
SYMMETRIC = "symmetric"
#: bit widths with an ONNX integer type for both modes
SUPPORTED_BITS = (4, 8, 16)


class QuantizeError(CorefoldError):
    """A quantization request that cannot be honoured (bits out of range, nothing to quantize)."""


def check_bits(bits: int, what: str = "bits") -> int:
    """Return ``bits`` if it is a supported width.

    Raises:
        QuantizeError: ``bits`` is not 4, 8 or 16.
    """
    if int(bits) not in SUPPORTED_BITS:
        raise QuantizeError(f"{what} = {bits} is out of range: supported widths are "
                            f"{', '.join(map(str, SUPPORTED_BITS))}")
    return int(bits)


def integer_range(mode: str, bits: int) -> tuple[int, int]:
    """The integer range ``(qmin, qmax)`` of ``mode`` at ``bits`` (SPEC M5 §3)."""
    if mode == UNSIGNED:
        return 0, (1 << bits) - 1
    if mode == SYMMETRIC:
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    raise ValueError(f"unknown quantization mode {mode!r}")


def choose_mode(minimum: float, allow_unsigned: bool = True) -> str:
    """Unsigned iff the minimum is >= 0 (and the unsigned rule is on), else symmetric."""
    return UNSIGNED if allow_unsigned and minimum >= 0 else SYMMETRIC


def scale_factor(magnitude: np.ndarray | float, mode: str, bits: int) -> np.ndarray:
    """``k = qmax / m`` elementwise; a zero magnitude (an all-zero tensor) gives k = qmax."""
    m = np.asarray(magnitude, dtype=np.float64)
    qmax = integer_range(mode, bits)[1]
    return np.where(m > 0, qmax / np.where(m > 0, m, 1.0), float(qmax))


def onnx_int_dtype(mode: str, bits: int) -> np.dtype:
    """The NumPy dtype of the integers (ml_dtypes' int4/uint4 at 4 bits)."""
    if bits == 4:
        import ml_dtypes

        return np.dtype(ml_dtypes.uint4 if mode == UNSIGNED else ml_dtypes.int4)
    return np.dtype(f"{'u' if mode == UNSIGNED else ''}int{bits}")


@dataclass(frozen=True)
class QuantParams:
    """How one tensor is quantized.

    ``k`` holds one scale factor per tensor (shape ()) or one per slice along ``axis``
    (per-channel weights). ``minimum``/``maximum`` are the observed or known range.
    ``range_bits`` narrows the integers to the range of that many bits while they are
    stored in ``bits`` (weights with ``weight_range``); None: the full range.
    """

    mode: str
    bits: int
    k: np.ndarray
    axis: int | None = None
    minimum: float = 0.0
    maximum: float = 0.0
    source: str = field(default="calibration", compare=False)
    #: for a weight: its integers when chosen by something better than nearest rounding
    integers: np.ndarray | None = field(default=None, compare=False, repr=False)
    range_bits: int | None = None

    @property
    def qmin(self) -> int:
        return integer_range(self.mode, self.range_bits or self.bits)[0]

    @property
    def qmax(self) -> int:
        return integer_range(self.mode, self.range_bits or self.bits)[1]

    @property
    def onnx_scale(self) -> np.ndarray:
        """ONNX's ``y_scale`` (float32): ``1 / k``."""
        return (1.0 / np.asarray(self.k, dtype=np.float64)).astype(np.float32)

    @property
    def dtype(self) -> np.dtype:
        return onnx_int_dtype(self.mode, self.bits)

    def _broadcast(self, a: np.ndarray, ndim: int) -> np.ndarray:
        if self.axis is None or a.ndim == 0:
            return a
        shape = [1] * ndim
        shape[self.axis] = -1
        return a.reshape(shape)

    def quantize(self, x: np.ndarray) -> np.ndarray:
        """Integers ``clip(round_half_even(x / onnx_scale))`` as int64, as ONNX computes them."""
        s = self._broadcast(self.onnx_scale, np.ndim(x))
        q = np.rint(np.asarray(x, dtype=np.float32) / s)
        return np.clip(q, self.qmin, self.qmax).astype(np.int64)

    def dequantize(self, q: np.ndarray) -> np.ndarray:
        return (np.asarray(q, dtype=np.float32) * self._broadcast(self.onnx_scale, np.ndim(q))).astype(np.float32)

    def fake_quantize(self, x: np.ndarray) -> np.ndarray:
        return self.dequantize(self.quantize(x))

    def weight_integers(self, w: np.ndarray) -> np.ndarray:
        """The stored integers of constant ``w``: :attr:`integers` if set, else rounded."""
        return self.integers if self.integers is not None else self.quantize(w)

    def to_json(self) -> dict:
        k = np.asarray(self.k, dtype=np.float64)
        return {
            "mode": self.mode, "bits": self.bits, "axis": self.axis,
            "k": k.tolist(), "onnx_scale": self.onnx_scale.astype(np.float64).tolist(),
            "integer_range": [self.qmin, self.qmax],
            "min": float(self.minimum), "max": float(self.maximum), "source": self.source,
            **({"rounding": "gptq"} if self.integers is not None else {}),
        }


def params_for_range(minimum: float, maximum: float, bits: int, *, magnitude: float | None = None,
                     allow_unsigned: bool = True, source: str = "calibration") -> QuantParams:
    """Per-tensor parameters from a range (the seed's rule); ``magnitude`` overrides
    ``m = max(|min|, |max|)`` with a clipped value."""
    mode = choose_mode(minimum, allow_unsigned)
    m = max(abs(minimum), abs(maximum)) if magnitude is None else magnitude
    return QuantParams(mode, bits, scale_factor(m, mode, bits), None, float(minimum), float(maximum), source)


def weight_params(w: np.ndarray, bits: int, *, axis: int | None = None, allow_unsigned: bool = True,
                  range_bits: int | None = None) -> QuantParams:
    """Parameters for a constant: the same rule, with per-slice scales along ``axis``.

    The mode is per tensor (one ONNX integer type), the magnitude per slice; ``range_bits``
    narrows the integers (see :class:`QuantParams`).
    """
    w = np.asarray(w, dtype=np.float32)
    lo, hi = float(w.min(initial=0.0)), float(w.max(initial=0.0))
    mode = choose_mode(lo, allow_unsigned)
    if axis is None:
        m = np.abs(w).max(initial=0.0)
    else:
        axis = axis % w.ndim
        m = np.abs(np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)).max(axis=1, initial=0.0)
    narrow = range_bits if range_bits is not None and range_bits < bits else None
    return QuantParams(mode, bits, scale_factor(m, mode, narrow or bits), axis, lo, hi, "weights", None, narrow)


def slice_axis(w: np.ndarray) -> int | None:
    """The axis along which per-slice scales round constant ``w`` with the least expected
    error, or None (one scale) when no axis beats it.

    With ``m_s`` the largest ``|w|`` of slice ``s`` (``n_s`` elements), nearest rounding to
    steps ``m_s / qmax`` has expected squared error ``sum_s n_s m_s^2 / (12 qmax^2)``; the axis
    minimising ``sum_s n_s m_s^2`` wins (the width cancels). For a constant an elementwise op
    reads (an Add's position embeddings) or a Gather's table, where no operator fixes the
    channel axis. Ties keep the first axis; one scale is kept unless an axis is strictly
    better. O(ndim * size).
    """
    a = np.abs(np.asarray(w, dtype=np.float64))
    if a.ndim < 2 or a.size == 0:
        return None
    best, err = None, a.size * float(a.max()) ** 2
    for ax in range(a.ndim):
        if a.shape[ax] < 2:
            continue
        m = np.moveaxis(a, ax, 0).reshape(a.shape[ax], -1).max(axis=1)
        e = float(np.sum(m * m)) * (a.size // a.shape[ax])
        if e < err * (1.0 - 1e-9):
            best, err = ax, e
    return best


# -- activation magnitudes from the calibration statistics ---------------------------------------
def histogram_percentile(h: "RunningHistogram", q: float) -> float:
    """The value below which ``q`` percent of ``|x|`` lies (upper edge of its bin)."""
    total = h.counts.sum()
    if total == 0 or h.top == 0.0:
        return 0.0
    cum = np.cumsum(h.counts)
    j = int(np.searchsorted(cum, q / 100.0 * total, side="left"))
    return float(min(j + 1, h.bins) * (h.top / h.bins))


def mse_magnitude(h: "RunningHistogram", qmax: int, candidates: int = 512) -> float:
    """The clipping magnitude minimising the expected squared error (module docstring).

    Where a quantization step spans at least 4 histogram bins, the error inside the range is
    the rounding error of each bin's centre, ``(c - Delta round(c / Delta))^2``, plus the
    bins' own width ``w^2 / 12``, rather than the uniform ``Delta^2 / 12``: exact zeros (ReLU)
    and peaked tensors (bias-dominated outputs) then choose the step that fits their values.
    O(candidates * bins).
    """
    if h.top == 0.0 or h.counts.sum() == 0:
        return 0.0
    c = h.counts.astype(np.float64)
    width = h.top / h.bins
    centers = (np.arange(h.bins) + 0.5) * width
    # suffix sums of n, n*x, n*x^2 from bin j on
    s0 = np.cumsum(c[::-1])[::-1]
    s1 = np.cumsum((c * centers)[::-1])[::-1]
    s2 = np.cumsum((c * centers**2)[::-1])[::-1]
    # candidate m = upper edge of bin j-1 (bins >= j are clipped); up to 10% beyond the
    # largest value, where a slightly coarser step can fit peaked values better
    js = np.unique(np.linspace(h.bins // candidates or 1, h.bins * 1.1, candidates).astype(np.int64))
    m = js * width
    jc = np.minimum(js, h.bins)
    inside = np.concatenate([[0.0], np.cumsum(c)])[jc]
    tail0 = np.append(s0, 0.0)[jc]
    tail1 = np.append(s1, 0.0)[jc]
    tail2 = np.append(s2, 0.0)[jc]
    step = m / qmax
    err = inside * step**2 / 12.0 + (tail2 - 2 * m * tail1 + m**2 * tail0)
    fine = np.flatnonzero(step >= 4 * width)
    if fine.size:
        used = np.flatnonzero(c)
        cu, nu = centers[used], c[used]
        for chunk in np.array_split(fine, max(1, fine.size * used.size // 2**20)):
            d = step[chunk, None]
            r = cu[None, :] - d * np.rint(cu[None, :] / d)
            inside_bins = used[None, :] < js[chunk, None]
            exact = np.sum(np.where(inside_bins, nu * (r * r + width * width / 12.0), 0.0), axis=1)
            err[chunk] = exact + (tail2 - 2 * m * tail1 + m**2 * tail0)[chunk]
    return float(m[int(np.argmin(err))])


def clip_magnitude(stats: "TensorStats", method: str, qmax: int, percentile: float = 99.99) -> float:
    """The magnitude ``m`` mapped to ``qmax``, by calibration ``method``.

    Raises:
        ValueError: unknown method.
    """
    full = max(abs(stats.minimum), abs(stats.maximum))
    if method == "minmax":
        return full
    if method == "percentile":
        return min(full, histogram_percentile(stats.histogram, percentile))
    if method == "mse":
        return min(1.1 * full, mse_magnitude(stats.histogram, qmax))
    raise ValueError(f"unknown calibration method {method!r} (minmax, percentile or mse)")


# -- the plan ------------------------------------------------------------------------------------
class Planner:
    """Every selected tensor's parameters, for any assignment of widths.

    Built once from the selection, the static ranges and the calibration statistics;
    :meth:`plan` is called once, or once per candidate by mixed precision, and caches each
    tensor's parameters per width, so a plan that raises one unit recomputes only it.
    """

    def __init__(self, graph: "Graph", sel: "Selection", static: "dict[Value, Interval]", stats: "Statistics",
                 settings: "QuantizeSettings"):
        self.sel = sel
        self.settings = settings
        self.by_name = {v.name: v for v in graph.values()}
        self.static = static
        self.stats = stats.tensors
        self.groups = sel.members()
        self._cache: dict[tuple[str, int], QuantParams] = {}

    def _group(self, rep: str, n: int) -> QuantParams:
        key = (rep, n)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        st = self.settings
        members = self.groups[rep]
        stats = [self.stats[t] for t in members]
        lo = min(s.minimum for s in stats)
        hi = max(s.maximum for s in stats)
        known_nonneg = all(self.static.get(self.by_name[t], _UNKNOWN).non_negative for t in members)
        mode = choose_mode(0.0 if known_nonneg else lo, st.unsigned_rule)
        qmax = integer_range(mode, n)[1]
        m = max(clip_magnitude(s, st.calibration, qmax, st.percentile) for s in stats)
        margin = st.softmax_margin
        if margin is not None and all(t in self.sel.softmax_inputs for t in members) and -lo > max(hi, 0.0) + margin:
            # softmax(x) depends on x - max(x): values more than the margin below the largest
            # weigh < exp(-margin); clipping them there changes nothing (attention masks)
            m = min(m, max(hi, 0.0) + margin)
        src = "static range + calibration" if known_nonneg else "calibration"
        p = QuantParams(mode, n, scale_factor(m, mode, n), None, lo, hi, src)
        self._cache[key] = p
        return p

    def _weight(self, w: str, n: int) -> QuantParams:
        key = (w, n)
        hit = self._cache.get(key)
        if hit is None:
            st = self.settings
            hit = weight_params(self.by_name[w].const, n, axis=self.sel.weights[w], allow_unsigned=st.unsigned_rule,
                                range_bits=st.weight_range)
            self._cache[key] = hit
        return hit

    def plan(self, bits: dict[str, int] | None = None) -> dict[str, QuantParams]:
        """Parameters of every selected tensor (activations, weights, biases).

        ``bits`` overrides the width of individual tensors (a tied group takes its widest
        member's). Modes follow the seed: unsigned iff the minimum (observed or known without
        data) is >= 0 and ``unsigned_rule``; magnitudes by ``calibration``.
        """
        bits = bits or {}
        st = self.settings
        plan: dict[str, QuantParams] = {}
        for rep, members in self.groups.items():
            p = self._group(rep, max(bits.get(t, st.bits) for t in members))
            for t in members:
                plan[t] = p
        for w in self.sel.weights:
            plan[w] = self._weight(w, bits.get(w, st.weight_width))
        for b, (x, w) in self.sel.biases.items():
            const = self.by_name[b].const
            plan[w] = fit_bias(const, plan[x], plan[w])
            plan[b] = bias_params(const, plan[x], plan[w])
        return plan


#: a bias integer stays below 2^30 in magnitude, leaving the int32 accumulator headroom
BIAS_LIMIT = float(2**30)


def fit_bias(const: np.ndarray, px: QuantParams, pw: QuantParams) -> QuantParams:
    """``pw`` with its scale widened where the bias would not fit int32 at ``s_x * s_w``.

    A bias is stored as ``round(b / (s_x s_w))``; where the input's range is tiny against the
    bias (dead channels of a randomly initialised or pruned network), that integer exceeds
    int32 and would be clipped, losing the output entirely (DeepLabV3 measured 0 dB). The
    weight's scale grows to ``|b| / (s_x * BIAS_LIMIT)`` there instead (as ONNX Runtime's
    quantizer does): its integers use less of their range on those channels only.
    """
    sx = float(np.max(px.onnx_scale))
    need = np.abs(np.asarray(const, np.float64)) / (sx * BIAS_LIMIT) if sx > 0 else np.zeros(np.shape(const))
    if pw.axis is None:
        need = np.max(need, initial=0.0)
    sw = (1.0 / np.asarray(pw.k, np.float64))
    if np.all(sw >= need):
        return pw
    k = 1.0 / np.maximum(sw, need)
    return replace(pw, k=k, source=pw.source + ", widened for an int32 bias")


def bias_params(const: np.ndarray, px: QuantParams, pw: QuantParams) -> QuantParams:
    """A Conv / Gemm bias: int32 at scale ``s_x * s_w`` (per output channel with ``pw``'s axis)."""
    s = px.onnx_scale.astype(np.float64) * pw.onnx_scale.astype(np.float64)
    s = np.broadcast_to(s, const.shape) if pw.axis is not None else s
    return QuantParams(SYMMETRIC, 32, (1.0 / s), 0 if pw.axis is not None else None,
                       float(const.min(initial=0)), float(const.max(initial=0)), "bias = s_x * s_w")


class _Unknown:
    non_negative = False


_UNKNOWN = _Unknown()
