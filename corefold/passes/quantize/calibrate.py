"""Calibration: stream data through the float model and keep running statistics.

For every observed tensor the calibrator keeps its running minimum and maximum and a
histogram of ``|x|`` (:class:`RunningHistogram`), updated batch by batch, so memory is one
batch's activations plus O(bins) per tensor whatever the number of samples. From the
statistics, :func:`clip_magnitude` picks the magnitude ``m`` the scale maps to the largest
integer: the observed ``max|x|`` (minmax), a percentile of ``|x|``, or the ``m`` minimising
the expected squared quantization error (mse):

    E(m) = sum_{|x| <= m} n(x) * Delta(m)^2 / 12 + sum_{|x| > m} n(x) * (|x| - m)^2,
    Delta(m) = m / qmax,

evaluated for every histogram edge in O(bins) with suffix sums.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from corefold.errors import DataError
from corefold.executor import Interpreter
from corefold.ir import Graph

CALIBRATION_METHODS = ("minmax", "percentile", "mse")


class RunningHistogram:
    """A histogram of ``|x|`` over ``[0, top]`` with a fixed number of bins.

    When a batch exceeds ``top``, ``top`` doubles (as often as needed) and adjacent bins
    merge pairwise, so earlier counts stay exact at the coarser resolution. O(n) per batch.
    """

    def __init__(self, bins: int = 2048):
        if bins & (bins - 1):
            raise ValueError("bins must be a power of two")
        self.bins = bins
        self.counts = np.zeros(bins, dtype=np.int64)
        self.top = 0.0

    def add(self, absx: np.ndarray) -> None:
        absx = np.asarray(absx, dtype=np.float32).reshape(-1)
        if absx.size == 0:
            return
        hi = float(absx.max())
        if self.top == 0.0:
            self.top = hi if hi > 0 else 0.0
        elif hi > self.top:
            doublings = int(np.ceil(np.log2(hi / self.top)))
            while doublings > 0 and hi > self.top:
                merged = self.counts.reshape(-1, 2).sum(axis=1)
                self.counts = np.concatenate([merged, np.zeros(self.bins // 2, np.int64)])
                self.top *= 2.0
                doublings -= 1
            if hi > self.top:  # float rounding at the edge
                self.top = hi
        if self.top == 0.0:
            self.counts[0] += absx.size
            return
        idx = np.minimum((absx * (self.bins / self.top)).astype(np.int64), self.bins - 1)
        self.counts += np.bincount(idx, minlength=self.bins)

    @property
    def edges(self) -> np.ndarray:
        return np.linspace(0.0, self.top, self.bins + 1)

    def percentile(self, q: float) -> float:
        """The value below which ``q`` percent of ``|x|`` lies (upper edge of its bin)."""
        total = self.counts.sum()
        if total == 0 or self.top == 0.0:
            return 0.0
        cum = np.cumsum(self.counts)
        j = int(np.searchsorted(cum, q / 100.0 * total, side="left"))
        return float(self.edges[min(j + 1, self.bins)])

    def mse_magnitude(self, qmax: int, candidates: int = 512) -> float:
        """The clipping magnitude minimising the expected squared error (module docstring)."""
        if self.top == 0.0 or self.counts.sum() == 0:
            return 0.0
        c = self.counts.astype(np.float64)
        centers = (np.arange(self.bins) + 0.5) * (self.top / self.bins)
        # suffix sums of n, n*x, n*x^2 from bin j on
        s0 = np.cumsum(c[::-1])[::-1]
        s1 = np.cumsum((c * centers)[::-1])[::-1]
        s2 = np.cumsum((c * centers**2)[::-1])[::-1]
        # candidate m = upper edge of bin j-1 (bins >= j are clipped)
        js = np.unique(np.linspace(self.bins // candidates or 1, self.bins, candidates).astype(np.int64))
        m = js * (self.top / self.bins)
        inside = np.concatenate([[0.0], np.cumsum(c)])[js]
        tail0 = np.append(s0, 0.0)[js]
        tail1 = np.append(s1, 0.0)[js]
        tail2 = np.append(s2, 0.0)[js]
        err = inside * (m / qmax) ** 2 / 12.0 + (tail2 - 2 * m * tail1 + m**2 * tail0)
        return float(m[int(np.argmin(err))])


@dataclass
class TensorStats:
    """Running statistics of one tensor."""

    minimum: float = float("inf")
    maximum: float = float("-inf")
    count: int = 0
    histogram: RunningHistogram = field(default_factory=RunningHistogram)

    def add(self, x: np.ndarray) -> None:
        x = np.asarray(x)
        if x.size == 0:
            return
        self.minimum = min(self.minimum, float(x.min()))
        self.maximum = max(self.maximum, float(x.max()))
        self.count += x.size
        self.histogram.add(np.abs(x))


def clip_magnitude(stats: TensorStats, method: str, qmax: int, percentile: float = 99.99) -> float:
    """The magnitude ``m`` mapped to ``qmax``, by calibration ``method``.

    Raises:
        ValueError: unknown method.
    """
    full = max(abs(stats.minimum), abs(stats.maximum))
    if method == "minmax":
        return full
    if method == "percentile":
        return min(full, stats.histogram.percentile(percentile))
    if method == "mse":
        return min(full, stats.histogram.mse_magnitude(qmax))
    raise ValueError(f"unknown calibration method {method!r} (choose from {', '.join(CALIBRATION_METHODS)})")


# -- calibration data -----------------------------------------------------------------------
@dataclass
class CalibrationSet:
    """Calibration samples for a graph: arrays keyed by input name, stacked on axis 0.

    Input ``k`` of shape ``[b_k, ...]`` holds ``n * b_k`` rows in a file of ``n`` batches:
    batch ``j`` is rows ``[j * b_k, (j + 1) * b_k)`` of every input (a recurrent state of
    shape ``[2, 1, 128]`` beside audio of shape ``[1, 512]`` gives 2 rows per batch where
    the audio gives 1). Each file is opened lazily (``np.load`` memory-maps .npy members
    only when read), and :meth:`batches` yields one model batch at a time.
    """

    graph_inputs: dict[str, tuple[tuple[int, ...], np.dtype]]
    files: list[Path]
    counts: list[int]  # batches per file

    @property
    def num_samples(self) -> int:
        return self.num_batches * self._batch

    @property
    def num_batches(self) -> int:
        return sum(self.counts)

    @property
    def _batch(self) -> int:
        shape = next(iter(self.graph_inputs.values()))[0]
        return int(shape[0]) if shape else 1

    def batches(self, limit: int | None = None) -> Iterator[dict[str, np.ndarray]]:
        """Yield feeds ``{input: x[j*b:(j+1)*b]}`` with b the input's leading dimension, at
        most ``limit``."""
        done = 0
        for f, count in zip(self.files, self.counts, strict=False):
            with np.load(f) as data:
                arrays = {k: data[k] for k in self.graph_inputs}
                for j in range(count):
                    if limit is not None and done >= limit:
                        return
                    feeds = {}
                    for k, (shape, _) in self.graph_inputs.items():
                        b = int(shape[0]) if shape else 1
                        x = arrays[k][j * b:(j + 1) * b] if shape else arrays[k][j]
                        feeds[k] = np.ascontiguousarray(x)
                    yield feeds
                    done += 1


def load_calibration(path: str | os.PathLike, graph: Graph) -> CalibrationSet:
    """Check calibration data against ``graph``'s inputs and return a lazy sample set.

    ``path`` is an .npz keyed by input name with samples stacked along the batch axis, or a
    folder of such files (read in name order). An input whose leading dimension is ``b``
    gives ``b`` rows to each batch (:class:`CalibrationSet`).

    Raises:
        DataError: no such file, no .npz in the folder, a missing input, an array of the
            wrong dtype or shape, a row count that is not a multiple of the input's leading
            dimension, or inputs that disagree on the number of batches.
    """
    p = Path(path)
    if p.is_dir():
        files = sorted(p.glob("*.npz"))
        if not files:
            raise DataError(f"calibration folder '{p}' holds no .npz file")
    elif p.is_file():
        files = [p]
    else:
        raise DataError(f"calibration data '{p}' does not exist")
    inputs = {}
    for v in graph.inputs:
        if not v.has_static_shape:
            raise DataError(f"input '{v.name}' has unbound dimensions {list(v.shape or [])}; bind them with --shape")
        inputs[v.name] = (tuple(v.shape), v.dtype)
    counts = []
    for f in files:
        try:
            data = np.load(f)
        except Exception as exc:  # noqa: BLE001 - any unreadable file is the user's
            raise DataError(f"calibration file '{f}' is not a readable .npz: {exc}") from None
        with data:
            n = None
            for name, (shape, dtype) in inputs.items():
                if name not in data.files:
                    raise DataError(f"calibration file '{f}' has no array for input '{name}' "
                                    f"(it holds: {', '.join(data.files) or 'nothing'})")
                x = data[name]
                if x.dtype != dtype:
                    raise DataError(f"calibration array '{name}' in '{f}' has dtype {x.dtype}, the model expects {dtype}")
                batch = shape[0] if shape else 1
                ok = (x.ndim == len(shape) and tuple(x.shape[1:]) == tuple(shape[1:]) and x.shape[0] % batch == 0
                      and x.shape[0] > 0) if shape else (x.ndim == 1)
                if not ok:
                    raise DataError(f"calibration array '{name}' in '{f}' has shape {list(x.shape)}; the model "
                                    f"expects {list(shape)} with samples stacked on axis 0 (N x {list(shape[1:])}, "
                                    f"N a multiple of {batch})")
                k = x.shape[0] // batch
                if n is not None and k != n[0]:
                    raise DataError(f"calibration arrays in '{f}' disagree on the number of batches: "
                                    f"{n[0]} for '{n[1]}', {k} for '{name}' ({x.shape[0]} rows of {batch})")
                n = (k, name)
            counts.append(int(n[0]) if n else 0)
    return CalibrationSet(inputs, files, counts)


def collect_statistics(graph: Graph, data: CalibrationSet, names: list[str], *, engine: str = "corefold",
                       limit: int | None = None, progress: bool = True, observer=None) -> dict[str, TensorStats]:
    """Run every calibration batch through ``graph`` and update the statistics of ``names``.

    ``engine`` is ``corefold`` (the reference executor) or ``onnxruntime`` (much faster on
    big models; the graph is exported with the wanted tensors as extra outputs). Only one
    batch's activations are alive at a time. ``observer`` (an object with ``tensor_names``
    and ``add(values)``, e.g. :class:`~corefold.passes.quantize.rounding.HessianSet`) sees
    its tensors of every batch too.

    Raises:
        DataError: from the executor, if a batch does not fit the model.
    """
    from tqdm import tqdm

    stats = {n: TensorStats() for n in names}
    extra = [n for n in (observer.tensor_names if observer is not None else []) if n not in stats]
    total = data.num_batches if limit is None else min(limit, data.num_batches)
    batches = tqdm(data.batches(limit), total=total, desc="calibrating", unit="batch", disable=not progress,
                   leave=False)
    if engine == "corefold":
        # the one interpreter, observing each value as it is produced: only the live set is held
        watcher = _Observer(graph, stats, set(observer.tensor_names) if observer is not None else set())
        for feeds in batches:
            seen = watcher.observe(feeds)
            if observer is not None:
                observer.add(seen)
        return stats
    runner = make_runner(graph, list(names) + extra, engine)
    for feeds in batches:
        values = runner(feeds)
        for name in names:
            stats[name].add(values[name])
        if observer is not None:
            observer.add(values)
    return stats


class _Observer(Interpreter):
    """Updates the statistics of the watched values as the interpreter produces them, and
    keeps the ``keep`` values (for an observer such as GPTQ's Hessians) of the current batch."""

    def __init__(self, graph: Graph, stats: dict[str, TensorStats], keep: set[str]):
        super().__init__(graph)
        self.stats = stats
        self.keep = keep
        self.seen: dict[str, np.ndarray] = {}

    def on_value(self, value, array: np.ndarray) -> np.ndarray:
        s = self.stats.get(value.name)
        if s is not None:
            s.add(array)
        if value.name in self.keep:
            self.seen[value.name] = array
        return array

    def observe(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.seen = {}
        self.run(feeds)
        return self.seen


def make_runner(graph: Graph, names: list[str], engine: str):
    """A function ``feeds -> {name: array}`` computing the float values ``names``."""
    if engine == "corefold":
        from corefold.executor import run

        return lambda feeds: run(graph, feeds, outputs=names)
    if engine == "onnxruntime":
        import onnxruntime as ort

        from corefold.frontend.onnx import to_onnx

        saved = list(graph.outputs)
        try:
            by_name = {v.name: v for v in graph.values()}
            graph.outputs = [by_name[n] for n in names]
            model = to_onnx(graph)
        finally:
            graph.outputs = saved
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        opts.log_severity_level = 3
        sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        return lambda feeds: dict(zip(names, sess.run(names, feeds), strict=False))
    raise ValueError(f"unknown calibration engine {engine!r} (corefold or onnxruntime)")
