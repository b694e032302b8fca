"""Edge-list text topologies: one directed synapse ``src dst [weight]`` per line.

Blank lines and lines starting with ``#`` are ignored, except a header comment
``# vertices: N`` that fixes the vertex count (so trailing isolated vertices survive).
Every line has the same number of fields (2, weight 1; or 3). Ids are integers < 2^53,
weights non-negative. The synapse list is symmetrised by the synapse convention of
:mod:`~corefold.mapping.topology.model` (weights of u -> v and v -> u add; ``synapses[v]``
counts the lines ending at v). Neuron sizes are not stored (1 per vertex on reading).

Written edge lists hold each undirected edge once (``u < v``) with its weight, so reading
one back gives the same adjacency and weights; ``synapses`` then count the lines ending at
each vertex, not the original fan-in (use the archive or ``.npz`` to keep them).
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numba
import numpy as np

from corefold.mapping.topology.model import Topology, TopologyError, index_dtype

_VERTICES = re.compile(r"#\s*vertices\s*:?\s*(\d+)\s*$")


def _header_vertices(path: Path) -> int | None:
    with open(path, "r", encoding="utf-8", errors="replace") as f:
        for line in f:
            s = line.strip()
            if not s:
                continue
            if not s.startswith("#"):
                return None
            m = _VERTICES.match(s)
            if m:
                return int(m.group(1))
    return None


def _find_bad_line(path: Path) -> str:
    """Scan the file for the first malformed line (error path only)."""
    fields = None
    with open(path, "r", encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            s = line.split("#", 1)[0].strip()
            if not s:
                continue
            parts = s.split()
            if len(parts) not in (2, 3):
                return f"line {lineno}: expected 'src dst [weight]', got {len(parts)} fields: {s!r}"
            if fields is None:
                fields = len(parts)
            elif len(parts) != fields:
                return f"line {lineno}: {len(parts)} fields, but the first edge line has {fields}: {s!r}"
            for i, p in enumerate(parts):
                try:
                    x = float(p)
                except ValueError:
                    return f"line {lineno}: {'src dst weight'.split()[i]} {p!r} is not a number"
                if i < 2 and (x != int(x) if np.isfinite(x) else True):
                    return f"line {lineno}: vertex id {p!r} is not an integer"
                if i < 2 and x < 0:
                    return f"line {lineno}: vertex id {p!r} is negative"
                if i == 2 and not (np.isfinite(x) and x >= 0):
                    return f"line {lineno}: weight {p!r} must be finite and >= 0"
    return "malformed"


#: an edge list may name at most this many vertices per edge without a ``# vertices N`` header
MAX_VERTICES_PER_EDGE = 64


def read_edge_list(path: str | Path, *, validate: bool = True) -> Topology:
    """Parse an edge list (vectorised, ``np.loadtxt``). O(m log m).

    Raises:
        TopologyError: naming the file and the first malformed line.
    """
    path = Path(path)
    if not path.exists():
        raise TopologyError(f"edge list '{path}' does not exist")
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*input contained no data")
            data = np.loadtxt(path, comments="#", ndmin=2, dtype=np.float64)
    except ValueError:
        raise TopologyError(f"edge list '{path}': {_find_bad_line(path)}") from None
    except UnicodeDecodeError:
        raise TopologyError(f"edge list '{path}' is not text") from None
    if data.size and data.shape[1] not in (2, 3):
        raise TopologyError(f"edge list '{path}': {_find_bad_line(path)}")
    ids = data[:, :2] if data.size else np.zeros((0, 2))
    if ids.size and (ids.min() < 0 or np.any(ids != np.floor(ids)) or ids.max() >= 2**53):
        raise TopologyError(f"edge list '{path}': {_find_bad_line(path)}")
    n_header = _header_vertices(path)
    n = int(ids.max()) + 1 if ids.size else 0
    if n_header is not None:
        if n_header < n:
            raise TopologyError(f"edge list '{path}': header says {n_header} vertices but id {n - 1} occurs")
        n = n_header
    if n == 0:
        raise TopologyError(f"edge list '{path}' has no edges and no '# vertices N' header: nothing to map")
    if n > MAX_VERTICES_PER_EDGE * max(ids.shape[0], 1) and n_header is None:
        # vertex ids are 0..n-1: a lone id of 4e9 would allocate 4e9 empty vertices
        raise TopologyError(f"edge list '{path}': vertex id {n - 1} with only {ids.shape[0]} edges; ids must be "
                            f"numbered from 0 without large gaps (or give '# vertices N')")
    if data.size and data.shape[1] == 3:
        w = data[:, 2]
        if not (np.all(np.isfinite(w)) and w.min() >= 0):
            raise TopologyError(f"edge list '{path}': {_find_bad_line(path)}")
        w = w.astype(np.int64) if np.all(w == np.floor(w)) and w.max() < 2**62 else w
    else:
        w = np.ones(ids.shape[0], dtype=np.int64)
    idt = index_dtype(n)
    topo = Topology.from_edges(ids[:, 0].astype(idt), ids[:, 1].astype(idt), w, n)
    if validate:
        topo.validate(name=f"edge list '{path}'")
    return topo


def format_int_rows(columns: list[np.ndarray]) -> bytes:
    """Non-negative integer columns as text lines ``"a b c\\n"`` (Numba). O(rows x digits)."""
    cols = np.ascontiguousarray(np.stack([np.asarray(c, dtype=np.uint64) for c in columns], axis=1))
    return _format_rows(cols).tobytes()


@numba.njit(cache=True)
def _format_rows(cols):  # pragma: no cover - numba
    rows, k = cols.shape
    ten = np.uint64(10)
    total = 0
    for r in range(rows):
        for c in range(k):
            v = cols[r, c]
            total += 1
            while v >= ten:
                v //= ten
                total += 1
        total += k
    out = np.empty(total, np.uint8)
    pos = 0
    for r in range(rows):
        for c in range(k):
            v = cols[r, c]
            nd = 1
            t = v
            while t >= ten:
                t //= ten
                nd += 1
            for j in range(nd - 1, -1, -1):
                out[pos + j] = np.uint8(v % ten) + np.uint8(48)
                v //= ten
            pos += nd
            out[pos] = 10 if c == k - 1 else 32
            pos += 1
    return out


def write_edge_list(topo: Topology, path: str | Path, *, chunk: int = 1 << 20) -> None:
    """Write each undirected edge once (``u < v``), with a ``# vertices: N`` header. O(m)."""
    n = topo.num_vertices
    integral = topo.weights.dtype.kind in "iu"
    fmt = "%d %d %.9g"
    with open(path, "wb") as f:
        f.write(b"# corefold edge list: src dst weight (one line per undirected edge)\n")
        f.write(f"# vertices: {n}\n".encode())
        for v0 in range(0, n, max(1, chunk // 8)):
            v1 = min(n, v0 + max(1, chunk // 8))
            a, b = int(topo.indptr[v0]), int(topo.indptr[v1])
            src = np.repeat(np.arange(v0, v1, dtype=np.int64), np.diff(topo.indptr[v0:v1 + 1]))
            dst = topo.indices[a:b]
            keep = src < dst
            if keep.any():
                cols = (src[keep], dst[keep].astype(np.int64), topo.weights[a:b][keep])
                if integral:
                    f.write(format_int_rows(list(cols)))
                else:
                    np.savetxt(f, np.rec.fromarrays(cols), fmt=fmt)
