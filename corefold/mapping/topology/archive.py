"""The out-of-core topology archive of SPEC M4 §1 (seed 003 §24-25, §63-65).

A zip archive (deflate) holding one file per vertex, ``v/<id>``: the number of edges, then
per edge four varints: flag, the other vertex's id, the other vertex's neuron size, weight.
``vertices`` holds each vertex's own neuron size and synapse count; ``manifest.json`` the
counts, the format version and how weights are encoded. The byte layout is specified in
docs/topology-archive.md so that other programs can read and write it.

Reading and writing stream: rows go through in chunks of bounded size, varints are encoded
and decoded with vectorised NumPy (:mod:`~corefold.mapping.topology.varint`); the only
per-vertex Python work is the zip member itself. Memory is O(n) for the per-vertex arrays
plus O(chunk) for the edges in flight.
"""

from __future__ import annotations

import json
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from corefold.mapping.topology.model import Topology, TopologyError, index_dtype
from corefold.mapping.topology.varint import VarintError, decode_varints, encode_varints

FORMAT = "corefold-topology-archive"
VERSION = 1
MANIFEST = "manifest.json"
VERTICES = "vertices"
#: Flag bit 0: the edge is the matching edge of its two ends (coarsening mark, seed 003 §27).
FLAG_MATCHED = 1
#: Deflate level: 1 is nearly as small as 6 on these short files and markedly faster.
DEFAULT_LEVEL = 1
#: A zip member's fixed timestamp (the zip epoch) so equal topologies give equal archives.
_EPOCH = (1980, 1, 1, 0, 0, 0)
_CHUNK_BYTES = 1 << 23
_CHUNK_ENTRIES = 1 << 21
_WEIGHT_ENCODINGS = {"integer", "float32-bits", "float64-bits"}


def vertex_member(v: int) -> str:
    """The zip member holding vertex ``v``'s edges."""
    return f"v/{v}"


@dataclass
class ArchiveChunk:
    """Consecutive vertices ``first .. first + k - 1`` of an archive, as local CSR.

    Attributes:
        first: id of the chunk's first vertex.
        indptr: int64[k + 1], local offsets starting at 0.
        indices, weights, flags: per edge entry (flags uint8).
        neuron_sizes, synapses: int64[k], the chunk vertices' own values.
    """

    first: int
    indptr: np.ndarray
    indices: np.ndarray
    weights: np.ndarray
    flags: np.ndarray
    neuron_sizes: np.ndarray
    synapses: np.ndarray

    @property
    def num_vertices(self) -> int:
        return int(self.indptr.shape[0] - 1)


# -- writing -----------------------------------------------------------------------------

class ArchiveWriter:
    """Stream rows (vertex edge lists, in id order) into an archive.

    Use as a context manager; on an exception the half-written file is left for the caller
    to discard (``save_topology`` writes through a temporary file).

    Args:
        path: the archive to create (overwritten).
        neuron_sizes, synapses: int[n] for all vertices (the per-edge size field needs the
            neighbour's size).
        weight_encoding: "integer" (weights are non-negative integers, stored as they are),
            "float32-bits" or "float64-bits" (the IEEE-754 bit pattern as an unsigned integer).
        weights_dtype: the dtype readers give the weights back in.
        level: deflate level 0-9.
    """

    def __init__(self, path: str | Path, neuron_sizes: np.ndarray, synapses: np.ndarray, *,
                 weight_encoding: str = "integer", weights_dtype: str | np.dtype = "int64",
                 level: int = DEFAULT_LEVEL):
        if weight_encoding not in _WEIGHT_ENCODINGS:
            raise ValueError(f"unknown weight encoding {weight_encoding!r}")
        self.path = Path(path)
        self.neuron_sizes = np.asarray(neuron_sizes, dtype=np.int64)
        self.synapses = np.asarray(synapses, dtype=np.int64)
        if self.neuron_sizes.shape != self.synapses.shape:
            raise TopologyError(f"{self.path}: neuron_sizes and synapses differ in length")
        if self.neuron_sizes.size and (self.neuron_sizes.min() < 0 or self.synapses.min() < 0):
            raise TopologyError(f"{self.path}: neuron sizes and synapse counts must be >= 0")
        self.weight_encoding = weight_encoding
        self.weights_dtype = np.dtype(weights_dtype)
        self.level = level
        self.next_vertex = 0
        self.entries = 0
        self._zip = zipfile.ZipFile(self.path, "w", zipfile.ZIP_DEFLATED, compresslevel=level, allowZip64=True)

    @property
    def num_vertices(self) -> int:
        return int(self.neuron_sizes.shape[0])

    def _member(self, name: str, data: bytes) -> None:
        info = zipfile.ZipInfo(name, date_time=_EPOCH)
        info.compress_type = zipfile.ZIP_DEFLATED
        info.external_attr = 0o644 << 16
        self._zip.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=self.level)

    def _weight_codes(self, weights: np.ndarray) -> np.ndarray:
        w = np.asarray(weights)
        if w.size == 0:
            return np.zeros(0, np.uint64)
        if self.weight_encoding == "integer":
            if w.dtype.kind == "f":
                if not (np.all(np.isfinite(w)) and np.all(w == np.floor(w))):
                    raise TopologyError(f"{self.path}: weights must be integral for the integer encoding")
            if w.min() < 0:
                raise TopologyError(f"{self.path}: weights must be >= 0")
            return w.astype(np.uint64)
        if w.dtype.kind == "f" and (not np.all(np.isfinite(w)) or w.min() < 0):
            raise TopologyError(f"{self.path}: weights must be finite and >= 0")
        if self.weight_encoding == "float32-bits":
            return w.astype(np.float32).view(np.uint32).astype(np.uint64)
        return w.astype(np.float64).view(np.uint64)

    def write_rows(self, indptr: np.ndarray, indices: np.ndarray, weights: np.ndarray,
                   flags: np.ndarray | None = None) -> None:
        """Write the next ``len(indptr) - 1`` vertices. ``indptr`` is local (starts at 0).

        Raises:
            TopologyError: more rows than vertices, an id out of range, a negative weight.
        """
        indptr = np.asarray(indptr, dtype=np.int64)
        local = indptr - indptr[0]
        k = local.shape[0] - 1
        e = int(local[-1])
        if self.next_vertex + k > self.num_vertices:
            raise TopologyError(f"{self.path}: more rows than the {self.num_vertices} vertices")
        other = np.asarray(indices)[indptr[0]:indptr[0] + e]
        if e and (other.min() < 0 or other.max() >= self.num_vertices):
            raise TopologyError(f"{self.path}: a neighbour id is outside [0, {self.num_vertices})")
        w = np.asarray(weights)[indptr[0]:indptr[0] + e]
        counts = np.diff(local)
        # NOTE: value stream of the chunk: per vertex [count, (flag, other, size, weight) * count].
        header = local[:-1] * 4 + np.arange(k)
        vals = np.empty(k + 4 * e, dtype=np.uint64)
        vals[header] = counts
        pos = 4 * np.arange(e, dtype=np.int64) + np.repeat(np.arange(k, dtype=np.int64), counts) + 1
        vals[pos] = 0 if flags is None else np.asarray(flags)[indptr[0]:indptr[0] + e]
        vals[pos + 1] = other
        vals[pos + 2] = self.neuron_sizes[other]
        vals[pos + 3] = self._weight_codes(w)
        del pos
        code = encode_varints(vals)
        term = np.flatnonzero(code < 0x80)  # last byte of each value
        bounds = np.empty(k + 1, dtype=np.int64)
        bounds[:k] = np.concatenate(([0], term + 1))[header]
        bounds[k] = code.shape[0]
        blob = code.tobytes()
        v0 = self.next_vertex
        for i in range(k):
            self._member(vertex_member(v0 + i), blob[bounds[i]:bounds[i + 1]])
        self.next_vertex += k
        self.entries += e

    def close(self) -> None:
        """Write ``vertices`` and ``manifest.json`` and finish the zip.

        Raises:
            TopologyError: fewer rows were written than there are vertices.
        """
        if self.next_vertex != self.num_vertices:
            self._zip.close()
            raise TopologyError(f"{self.path}: {self.next_vertex} of {self.num_vertices} vertices written")
        own = np.empty(2 * self.num_vertices, dtype=np.int64)
        own[0::2], own[1::2] = self.neuron_sizes, self.synapses
        self._member(VERTICES, encode_varints(own).tobytes())
        manifest = {
            "format": FORMAT, "version": VERSION, "vertices": self.num_vertices, "entries": self.entries,
            "weight_encoding": self.weight_encoding, "weights_dtype": self.weights_dtype.name,
            "flag_bits": {"1": "matched"},
        }
        self._member(MANIFEST, (json.dumps(manifest, indent=1) + "\n").encode())
        self._zip.close()

    def __enter__(self) -> "ArchiveWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self._zip.close()


def weight_encoding_for(weights: np.ndarray) -> str:
    """"integer" when every weight is integral (any dtype), else the float bit encoding."""
    w = np.asarray(weights)
    if w.dtype.kind in "iub":
        return "integer"
    for s in range(0, w.shape[0], _CHUNK_ENTRIES):
        part = w[s:s + _CHUNK_ENTRIES]
        if not (np.all(np.isfinite(part)) and np.all(part == np.floor(part)) and part.max(initial=0) < 2.0**63):
            return "float64-bits" if w.dtype == np.float64 else "float32-bits"
    return "integer"


def write_archive(topo: Topology, path: str | Path, *, level: int = DEFAULT_LEVEL,
                  flags: np.ndarray | None = None, progress: bool = False) -> None:
    """Write ``topo`` as an archive, streaming ~2M edge entries at a time.

    Integral weights (also float ones) are stored as integers, others as IEEE-754 bits, so
    :func:`read_archive` gives back equal arrays. O(m) time, O(n + chunk) extra memory.

    Raises:
        TopologyError: negative weights or sizes, ids out of range.
    """
    from tqdm import tqdm

    n = topo.num_vertices
    with ArchiveWriter(path, topo.neuron_sizes, topo.synapses,
                       weight_encoding=weight_encoding_for(topo.weights),
                       weights_dtype=topo.weights.dtype, level=level) as writer, \
            tqdm(total=n, unit="vertex", desc="write archive", disable=not progress, leave=False) as bar:
        v = 0
        while v < n:
            # as many rows as fit in a chunk of edge entries (at least one)
            end = int(np.searchsorted(topo.indptr, topo.indptr[v] + _CHUNK_ENTRIES, side="right")) - 1
            end = min(max(end, v + 1), n, v + (1 << 16))
            writer.write_rows(topo.indptr[v:end + 1], topo.indices, topo.weights, flags)
            bar.update(end - v)
            v = end


# -- reading -----------------------------------------------------------------------------

def _open(path: str | Path) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(path)
    except FileNotFoundError:
        raise TopologyError(f"topology archive '{path}' does not exist") from None
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        raise TopologyError(f"'{path}' is not a readable zip archive (truncated or corrupt?): {exc}") from None


def _member_bytes(zf: zipfile.ZipFile, path: str | Path, name: str) -> bytes:
    try:
        return zf.read(name)
    except KeyError:
        raise TopologyError(f"topology archive '{path}' has no member '{name}'") from None
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, NotImplementedError) as exc:
        raise TopologyError(f"topology archive '{path}': member '{name}' is corrupt: {exc}") from None


def _manifest(zf: zipfile.ZipFile, path: str | Path) -> dict:
    raw = _member_bytes(zf, path, MANIFEST)
    try:
        m = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TopologyError(f"topology archive '{path}': '{MANIFEST}' is not JSON: {exc}") from None
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise TopologyError(f"topology archive '{path}': '{MANIFEST}' does not declare format '{FORMAT}'")
    if m.get("version") != VERSION:
        raise TopologyError(f"topology archive '{path}': format version {m.get('version')!r} "
                            f"is not supported (this corefold reads version {VERSION})")
    for key in ("vertices", "entries"):
        if not isinstance(m.get(key), int) or m[key] < 0:
            raise TopologyError(f"topology archive '{path}': '{MANIFEST}' needs a non-negative integer '{key}'")
    if m.get("weight_encoding") not in _WEIGHT_ENCODINGS:
        raise TopologyError(f"topology archive '{path}': unknown weight_encoding {m.get('weight_encoding')!r}")
    try:
        np.dtype(m.get("weights_dtype", "int64"))
    except TypeError:
        raise TopologyError(f"topology archive '{path}': unknown weights_dtype {m.get('weights_dtype')!r}") from None
    return m


def read_manifest(path: str | Path) -> dict:
    """The archive's manifest (format, version, vertices, entries, weight encoding).

    Raises:
        TopologyError: not an archive of this format and version.
    """
    with _open(path) as zf:
        return _manifest(zf, path)


def _decode(path: str | Path, name: str, data: bytes | np.ndarray) -> np.ndarray:
    try:
        return decode_varints(data)
    except VarintError as exc:
        raise TopologyError(f"topology archive '{path}': member '{name}': {exc}") from None


def iter_archive(path: str | Path, *, chunk_bytes: int = _CHUNK_BYTES, progress: bool = False) -> Iterator[ArchiveChunk]:
    """Yield the archive's vertices in id order as CSR chunks of about ``chunk_bytes``.

    No Python object per edge; peak memory O(n) + about 40 x ``chunk_bytes``.

    Raises:
        TopologyError: naming the archive and member that is missing, truncated or corrupt.
    """
    from tqdm import tqdm

    with _open(path) as zf:
        m = _manifest(zf, path)
        n = m["vertices"]
        own = _decode(path, VERTICES, _member_bytes(zf, path, VERTICES))
        if own.shape[0] != 2 * n:
            raise TopologyError(f"topology archive '{path}': '{VERTICES}' holds {own.shape[0]} values, "
                                f"expected 2 per vertex ({2 * n})")
        if n and own.max() >= 2**63:
            raise TopologyError(f"topology archive '{path}': '{VERTICES}' has a value beyond int64")
        own = own.astype(np.int64)
        sizes, synapses = own[0::2].copy(), own[1::2].copy()
        del own
        idx_dtype = index_dtype(n)
        wdtype = np.dtype(m.get("weights_dtype", "int64"))
        encoding = m["weight_encoding"]
        v = 0
        with tqdm(total=n, unit="vertex", desc="read archive", disable=not progress, leave=False) as bar:
            while v < n:
                datas: list[bytes] = []
                total = 0
                while v + len(datas) < n and (total < chunk_bytes or not datas):
                    d = _member_bytes(zf, path, vertex_member(v + len(datas)))
                    datas.append(d)
                    total += len(d)
                yield _decode_chunk(path, v, datas, n, sizes, synapses, idx_dtype, wdtype, encoding)
                bar.update(len(datas))
                v += len(datas)


def _decode_chunk(path, first: int, datas: list[bytes], n: int, sizes: np.ndarray, synapses: np.ndarray,
                  idx_dtype: np.dtype, wdtype: np.dtype, encoding: str) -> ArchiveChunk:
    k = len(datas)
    lens = np.fromiter(map(len, datas), dtype=np.int64, count=k)
    if np.any(lens == 0):
        raise TopologyError(f"topology archive '{path}': member '{vertex_member(first + int(np.argmax(lens == 0)))}' is empty")
    buf = np.frombuffer(b"".join(datas), dtype=np.uint8)
    del datas
    file_end = np.cumsum(lens)
    cut = buf[file_end - 1] >= 0x80
    if np.any(cut):
        name = vertex_member(first + int(np.argmax(cut)))
        raise TopologyError(f"topology archive '{path}': member '{name}': its last varint is cut off")
    vals = _decode(path, f"{vertex_member(first)} .. {vertex_member(first + k - 1)}", buf)
    value_end = np.searchsorted(np.flatnonzero(buf < 0x80), file_end - 1, side="right")
    del buf
    value_start = np.concatenate(([0], value_end[:-1]))
    counts = vals[value_start]
    bad = (value_end - value_start) != 1 + 4 * counts.astype(np.int64)
    if np.any(bad):
        i = int(np.argmax(bad))
        raise TopologyError(f"topology archive '{path}': member '{vertex_member(first + i)}' holds "
                            f"{int(value_end[i] - value_start[i])} varints, but its edge count "
                            f"{int(counts[i])} needs 1 + 4 x {int(counts[i])}")
    keep = np.ones(vals.shape[0], dtype=bool)
    keep[value_start] = False
    fields = vals[keep].reshape(-1, 4)
    del keep, vals
    indptr = np.zeros(k + 1, dtype=np.int64)
    np.cumsum(counts.astype(np.int64), out=indptr[1:])

    def fail(entry_mask: np.ndarray, what: str) -> None:
        e = int(np.argmax(entry_mask))
        row = int(np.searchsorted(indptr, e, side="right")) - 1
        raise TopologyError(f"topology archive '{path}': member '{vertex_member(first + row)}': "
                            f"edge {e - int(indptr[row])} {what}")

    flags, other, size, wcode = fields[:, 0], fields[:, 1], fields[:, 2], fields[:, 3]
    if np.any(flags > FLAG_MATCHED):
        fail(flags > FLAG_MATCHED, "has a flag with reserved bits set")
    if np.any(other >= n):
        fail(other >= n, f"names vertex id outside [0, {n})")
    other = other.astype(idx_dtype)
    if np.any(size != sizes[other]):
        fail(size != sizes[other], "gives a neighbour size that disagrees with 'vertices'")
    if encoding == "integer":
        if wdtype.kind in "iu" and wcode.size and wcode.max() > np.iinfo(wdtype).max:
            fail(wcode > np.iinfo(wdtype).max, f"has a weight too large for {wdtype.name}")
        weights = wcode.astype(wdtype)
    elif encoding == "float32-bits":
        if wcode.size and wcode.max() >= 2**32:
            fail(wcode >= 2**32, "has a weight that is not a float32 bit pattern")
        weights = wcode.astype(np.uint32).view(np.float32).astype(wdtype)
    else:
        weights = wcode.view(np.float64).astype(wdtype)
    return ArchiveChunk(first, indptr, other, weights, flags.astype(np.uint8),
                        sizes[first:first + k], synapses[first:first + k])


def read_archive(path: str | Path, *, validate: bool = True, progress: bool = False) -> Topology:
    """Read a whole archive into a :class:`Topology` (arrays preallocated from the manifest).

    Raises:
        TopologyError: a missing, truncated or corrupt member (named), counts that disagree
            with the manifest, or (with ``validate``) a non-canonical graph.
    """
    m = read_manifest(path)
    n, total = m["vertices"], m["entries"]
    indptr = np.zeros(n + 1, dtype=np.int64)
    indices = np.empty(total, dtype=index_dtype(n))
    weights = np.empty(total, dtype=np.dtype(m.get("weights_dtype", "int64")))
    sizes = np.empty(n, dtype=np.int64)
    synapses = np.empty(n, dtype=np.int64)
    at = 0
    for ch in iter_archive(path, progress=progress):
        e = int(ch.indptr[-1])
        if at + e > total:
            raise TopologyError(f"topology archive '{path}': more edge entries than the manifest's {total}")
        indices[at:at + e] = ch.indices
        weights[at:at + e] = ch.weights
        indptr[ch.first + 1:ch.first + ch.num_vertices + 1] = at + ch.indptr[1:]
        sizes[ch.first:ch.first + ch.num_vertices] = ch.neuron_sizes
        synapses[ch.first:ch.first + ch.num_vertices] = ch.synapses
        at += e
    if at != total:
        raise TopologyError(f"topology archive '{path}': {at} edge entries, the manifest says {total}")
    topo = Topology(indptr, indices, weights, sizes, synapses)
    if validate:
        topo.validate(name=f"topology archive '{path}'")
    return topo
