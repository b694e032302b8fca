"""Stage 3: stream the calibration data through the float model once, keeping statistics.

For every selected activation the calibrator keeps its running minimum and maximum and a
histogram of ``|x|`` (:class:`RunningHistogram`); for every weight GPTQ may round, the
Gram matrix ``H = sum x x^T`` of the op's input patches (:class:`HessianObserver`). Both
are updated batch by batch, so memory is one batch's activations plus O(bins) per tensor
and O(K^2) per weight, whatever the number of samples. :func:`calibrate` is the one loop;
what to do with the statistics (clipping, scales) is ``params``'s.

Cost: one float run per batch, plus O(size) per observed tensor and O(P K^2) per Hessian
(P patch rows of K inputs).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from corefold.errors import DataError
from corefold.executor import Interpreter
from corefold.io import open_npz
from corefold.ir import Graph, Node


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


class NaNError(ValueError):
    """A tensor took NaN (:meth:`TensorStats.add`)."""


@dataclass
class TensorStats:
    """Running statistics of one tensor.

    ``minimum``, ``maximum``, ``count`` and the histogram cover its finite values only;
    ``infinite`` records that it also took +-inf (a causal mask's ``Where(m, x, -inf)``):
    no scale holds such a tensor, so it is left float (``quantize_graph``). NaN is refused.
    """

    minimum: float = float("inf")
    maximum: float = float("-inf")
    count: int = 0
    histogram: RunningHistogram = field(default_factory=RunningHistogram)
    infinite: bool = False

    def add(self, x: np.ndarray) -> None:
        """Update with one batch's values.

        Raises:
            NaNError: ``x`` holds NaN.
        """
        x = np.asarray(x)
        if x.size == 0:
            return
        lo, hi = float(x.min()), float(x.max())
        if not (np.isfinite(lo) and np.isfinite(hi)):
            if np.isnan(lo) or np.isnan(hi):  # min and max propagate NaN
                raise NaNError("NaN")
            self.infinite = True
            x = x[np.isfinite(x)]
            if x.size == 0:
                return
            lo, hi = float(x.min()), float(x.max())
        self.minimum = min(self.minimum, lo)
        self.maximum = max(self.maximum, hi)
        self.count += x.size
        self.histogram.add(np.abs(x))


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
        DataError: no such file, no .npz in the folder, a missing input, an array that is not
            an input, an array of the wrong dtype or shape, NaN or infinity in it, a row count
            that is not a multiple of the input's leading dimension, or inputs that disagree on
            the number of batches.
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
        with open_npz(f, "calibration file", DataError) as data:
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
                if np.issubdtype(x.dtype, np.floating) and not np.isfinite(x).all():
                    raise DataError(f"calibration array '{name}' in '{f}' holds NaN or infinity")
                k = x.shape[0] // batch
                if n is not None and k != n[0]:
                    raise DataError(f"calibration arrays in '{f}' disagree on the number of batches: "
                                    f"{n[0]} for '{n[1]}', {k} for '{name}' ({x.shape[0]} rows of {batch})")
                n = (k, name)
            extra = sorted(set(data.files) - set(inputs))
            if extra:
                raise DataError(f"calibration file '{f}' has array(s) {', '.join(extra)} that are not inputs of the "
                                f"model (inputs: {', '.join(inputs)})")
            counts.append(int(n[0]) if n else 0)
    return CalibrationSet(inputs, files, counts)




# -- GPTQ's Hessians -------------------------------------------------------------------------
def patches(node: Node, x: np.ndarray) -> np.ndarray | None:
    """Rows = one input vector of the op's dot products (samples x K), or None if unsupported.

    MatMul / Gemm: the rows of input 0; Conv (group 1): the im2col patches, ordered
    ``(c, k...)`` as ``w.reshape(M, -1)`` is.
    """
    if node.op_type in ("MatMul", "Gemm"):
        if node.op_type == "Gemm" and node.attrs.get("transA", 0):
            x = np.swapaxes(x, -1, -2)
        return x.reshape(-1, x.shape[-1])
    if node.op_type == "Conv" and int(node.attrs.get("group", 1)) == 1:
        if node.attrs.get("auto_pad", "NOTSET") not in ("NOTSET", b"NOTSET", "VALID", b"VALID"):
            return None
        from numpy.lib.stride_tricks import sliding_window_view

        w = node.inputs[1].const
        nd = x.ndim - 2
        k = [int(d) for d in w.shape[2:]]
        strides = list(node.attrs.get("strides", [1] * nd))
        dil = list(node.attrs.get("dilations", [1] * nd))
        pads = list(node.attrs.get("pads", [0] * 2 * nd))
        if all(s == kk for s, kk in zip(strides, k, strict=True)) and all(d == 1 for d in dil) and not any(pads):
            # non-overlapping patches (ViT's patch embedding): a reshape, no window copy
            n, c = x.shape[:2]
            out = [x.shape[2 + i] // k[i] for i in range(nd)]
            x = x[(slice(None), slice(None)) + tuple(slice(0, out[i] * k[i]) for i in range(nd))]
            shape = [n, c] + [d for i in range(nd) for d in (out[i], k[i])]
            v = x.reshape(shape)
            perm = [0] + [2 + 2 * i for i in range(nd)] + [1] + [3 + 2 * i for i in range(nd)]
            return v.transpose(perm).reshape(-1, c * int(np.prod(k)))
        xp = np.pad(x, [(0, 0), (0, 0)] + [(pads[i], pads[i + nd]) for i in range(nd)])
        span = [dil[i] * (k[i] - 1) + 1 for i in range(nd)]
        win = sliding_window_view(xp, span, axis=tuple(range(2, 2 + nd)))
        win = win[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides)
                  + tuple(slice(None, None, d) for d in dil)]
        # n c o... k... -> (n o...) x (c k...)
        perm = [0] + list(range(2, 2 + nd)) + [1] + list(range(2 + nd, 2 + 2 * nd))
        return win.transpose(perm).reshape(-1, x.shape[1] * int(np.prod(k)))
    return None


def gptq_weights(graph: Graph, weights: dict[str, int | None], batches: int | None = None,
                 max_columns: int = 2048, rows_per_column: float = 1.0) -> dict[str, Node]:
    """The weights GPTQ can round: weight name -> the Conv (group 1) / MatMul / Gemm reading
    it, when it is that op's only reader and has at most ``max_columns`` inputs per output.

    With ``batches`` (the calibration batches to come), a weight whose Hessian would sum
    ``rows_per_column`` patch rows per column or fewer is left out: ``H`` is then singular or
    nearly (and a LayerNorm's outputs span one dimension less than their width), so GPTQ fits
    the calibration samples rather than the layer (measured on the zoo at 64 px with 4
    samples, and on GPT-2's 64 tokens for 64 columns: lower SQNR than nearest rounding on
    held-out samples), and it saves the work."""
    out: dict[str, Node] = {}
    for node in graph.nodes:
        if node.op_type not in ("Conv", "MatMul", "Gemm") or len(node.inputs) < 2:
            continue
        x, w = node.inputs[0], node.inputs[1]
        if w is None or w.name not in weights or x is None or x.const is not None or w.name in out:
            continue
        if w.const.ndim != (4 if node.op_type == "Conv" else 2) or len(w.consumers()) != 1:
            continue
        if node.op_type == "Conv" and int(node.attrs.get("group", 1)) != 1:
            continue
        if node.op_type == "Conv":
            k = int(np.prod(w.const.shape[1:]))
        elif node.op_type == "Gemm" and node.attrs.get("transB", 0):
            k = int(w.const.shape[1])
        else:
            k = int(w.const.shape[0])
        if k > max_columns:
            continue
        if batches is not None and _patch_rows(node) * batches <= rows_per_column * k:
            continue
        out[w.name] = node
    return out


def _patch_rows(node: Node) -> int:
    """Rows of :func:`patches` per batch: output positions of a Conv, rows of a MatMul / Gemm."""
    if node.op_type == "Conv":
        out = node.outputs[0].shape
        return int(out[0]) * int(np.prod(out[2:], dtype=np.int64))
    x = node.inputs[0].shape
    if node.op_type == "Gemm" and node.attrs.get("transA", 0):
        return int(x[-1])
    return int(np.prod(x[:-1], dtype=np.int64))


class HessianObserver:
    """Streaming ``H = sum x x^T`` over the input patches of each weight in ``nodes``
    (weight name -> reading node). Weights whose nodes read the same tensor the same way
    (MatMul/Gemm rows of one activation) share one product per batch."""

    def __init__(self, nodes: dict[str, Node]):
        self.nodes = nodes
        self.inputs = {w: n.inputs[0].name for w, n in nodes.items()}
        self.h: dict[str, np.ndarray] = {}

    @property
    def tensor_names(self) -> set[str]:
        return set(self.inputs.values())

    def add(self, values: dict[str, np.ndarray]) -> None:
        """Update every H from one batch's input tensors (by name)."""
        done: dict[tuple, np.ndarray | None] = {}
        for w, node in self.nodes.items():
            x = values.get(self.inputs[w])
            if x is None:
                continue
            key = (self.inputs[w], bool(node.attrs.get("transA", 0))) if node.op_type != "Conv" else (w,)
            if key not in done:
                p = patches(node, np.asarray(x))
                done[key] = None if p is None else _gram(p)
            if done[key] is not None:
                self.h[w] = self.h[w] + done[key] if w in self.h else done[key].copy()


def _gram(p: np.ndarray) -> np.ndarray:
    """``p^T p`` as float64, from float32 BLAS products over blocks of 4096 rows (each block's
    sums have at most 4096 terms, so their relative error stays near 1e-5; GPTQ's damping is
    1e-2). O(rows K^2)."""
    p = np.asarray(p, dtype=np.float32)
    h = np.zeros((p.shape[1], p.shape[1]), np.float64)
    for i in range(0, p.shape[0], 4096):
        blk = np.ascontiguousarray(p[i:i + 4096])
        h += blk.T @ blk
    return h


# -- the one loop ------------------------------------------------------------------------------
@dataclass
class Statistics:
    """What calibration hands to ``params`` and ``rounding``.

    ``tensors``: activation name -> running min/max and |x| histogram; ``hessians``: weight
    name -> ``H`` of its op's input patches; ``batches``: how many batches were seen;
    ``outputs``: per batch, the float graph outputs in the graph's order, as the reference
    executor computes them (engine ``corefold`` only; empty otherwise), so that later
    stages need not run the float model again.
    """

    tensors: dict[str, TensorStats]
    hessians: dict[str, np.ndarray]
    batches: int
    outputs: list[list[np.ndarray]] = field(default_factory=list)


class _Observer(Interpreter):
    """The one interpreter, updating the statistics of the watched values as they are
    produced and keeping the ``keep`` values (GPTQ's inputs) of the current batch."""

    def __init__(self, graph: Graph, stats: dict[str, TensorStats], keep: set[str]):
        super().__init__(graph)
        self.stats = stats
        self.keep = keep
        self.seen: dict[str, np.ndarray] = {}
        self.outputs: dict[str, np.ndarray] = {}

    def on_value(self, value, array: np.ndarray) -> np.ndarray:
        s = self.stats.get(value.name)
        if s is not None:
            _observe(s, value.name, array)
        if value.name in self.keep:
            self.seen[value.name] = array
        return array

    def observe(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The ``keep`` values of this batch; the graph outputs are left in ``outputs``."""
        self.seen = {}
        self.outputs = self.run(feeds)
        return self.seen


def _observe(stats: TensorStats, name: str, array: np.ndarray) -> None:
    try:
        stats.add(array)
    except NaNError:
        raise DataError(f"tensor '{name}' takes NaN on the calibration data: the float model computes an "
                        f"undefined value there (0/0, inf - inf, ...)") from None


def _check_feeds(feeds: dict[str, np.ndarray], batch: int) -> None:
    """The user's data must be finite (``load_calibration`` checks files; this covers a
    :class:`CalibrationSet` built otherwise): infinity is tolerated only where the model
    itself makes it.

    Raises:
        DataError: a float input holds NaN or infinity.
    """
    for name, x in feeds.items():
        x = np.asarray(x)
        if np.issubdtype(x.dtype, np.floating) and not np.isfinite(x).all():
            raise DataError(f"calibration input '{name}' holds NaN or infinity (batch {batch})")


def calibrate(graph: Graph, data: CalibrationSet, names: list[str], *, hessians: dict[str, Node] | None = None,
              engine: str = "corefold", limit: int | None = None, progress: bool = True) -> Statistics:
    """Run every calibration batch (at most ``limit``) through ``graph`` once, keeping the
    statistics of the tensors ``names`` and the Hessians of the weights in ``hessians``.

    ``engine`` ``corefold`` runs the reference executor, observing each value as it is
    produced (only the live set is held); ``onnxruntime`` exports the graph with the
    wanted tensors as extra outputs (faster on big models).

    Raises:
        DataError: a batch does not fit the model or holds NaN or infinity, or a tensor takes NaN.
            A tensor the model itself fills with +-inf (masks) is only flagged
            (:attr:`TensorStats.infinite`).
    """
    from tqdm import tqdm

    stats = {n: TensorStats() for n in names}
    observer = HessianObserver(hessians) if hessians else None
    keep = observer.tensor_names if observer is not None else set()
    total = data.num_batches if limit is None else min(limit, data.num_batches)
    batches = tqdm(data.batches(limit), total=total, desc="calibrating", unit="batch", disable=not progress,
                   leave=False)
    count = 0
    outputs: list[list[np.ndarray]] = []
    if engine == "corefold":
        watcher = _Observer(graph, stats, keep)
        for feeds in batches:
            _check_feeds(feeds, count)
            seen = watcher.observe(feeds)
            outputs.append([watcher.outputs[v.name] for v in graph.outputs])
            if observer is not None:
                observer.add(seen)
            count += 1
    else:
        runner = make_runner(graph, list(names) + sorted(keep - set(names)), engine)
        for feeds in batches:
            _check_feeds(feeds, count)
            values = runner(feeds)
            for name in names:
                _observe(stats[name], name, values[name])
            if observer is not None:
                observer.add(values)
            count += 1
    return Statistics(stats, observer.h if observer is not None else {}, count, outputs)


def make_runner(graph: Graph, names: list[str], engine: str):
    """A function ``feeds -> {name: array}`` computing the float values ``names``.

    Raises:
        ValueError: an unknown engine.
    """
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
