"""The out-of-core topology archive of SPEC M4 §1 (seed 003 §24-25, §63-65).

A zip archive (deflate) holding one file per vertex, ``v/<id>``: the number of edges, then
per edge four varints: flag, the other vertex's id, the other vertex's neuron size, weight.
``vertices`` holds each vertex's own neuron size and synapse count; ``manifest.json`` the
counts, the format version and how weights are encoded. The byte layout is specified in
docs/topology-archive.md so that other programs can read and write it.

Reading and writing stream: rows go through in chunks of bounded size; vertex files are
coded by fused Numba kernels (:mod:`~corefold.mapping.topology.records`; the NumPy
reference for the integers is :mod:`~corefold.mapping.topology.varint`) and the zip is
written and read in bulk (:mod:`~corefold.mapping.topology.zipstore`); the only
per-vertex Python work is one ``zlib`` call and one header. Memory is O(n) for the
per-vertex arrays plus O(chunk) for the edges in flight.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from corefold.mapping.topology.model import Topology, TopologyError, index_dtype
from corefold.mapping.topology.records import STATUS_TEXT, decode_rows, encode_rows
from corefold.mapping.topology.varint import VarintError, decode_varints, encode_varints
from corefold.mapping.topology.zipstore import ZipFormatError, ZipStoreReader, ZipStoreWriter

FORMAT = "corefold-topology-archive"
VERSION = 1
MANIFEST = "manifest.json"
VERTICES = "vertices"
#: Flag bit 0: the edge is the matching edge of its two ends (coarsening mark, seed 003 §27).
FLAG_MATCHED = 1
#: Flag bits 1 and 2 (archives whose manifest says ``"directions": true``): this file's
#: vertex has a synapse to the other one (2), the other one has a synapse to it (4); the
#: topology's ``sends`` shifted left by one.
FLAG_SENDS = 2
FLAG_RECEIVES = 4
#: Deflate level: 1 is nearly as small as 6 on these short files and markedly faster.
DEFAULT_LEVEL = 1
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
        level: deflate level 1-9; 0 stores the members uncompressed (zip method 0: about 2.5x
            the size, no deflate time; corefold's out-of-core levels are written so).
        directions: the flags carry :data:`FLAG_SENDS` and :data:`FLAG_RECEIVES` (the
            manifest says so).
    """

    def __init__(self, path: str | Path, neuron_sizes: np.ndarray, synapses: np.ndarray, *,
                 weight_encoding: str = "integer", weights_dtype: str | np.dtype = "int64",
                 level: int = DEFAULT_LEVEL, directions: bool = False):
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
        self.directions = directions
        self.next_vertex = 0
        self.entries = 0
        self._zip = ZipStoreWriter(self.path, level)

    @property
    def num_vertices(self) -> int:
        return int(self.neuron_sizes.shape[0])

    def _member(self, name: str, data: bytes) -> None:
        self._zip.add(name, data)

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
        """Write the next ``len(indptr) - 1`` vertices.

        Args:
            indptr: int[k + 1], the rows' offsets into ``indices``, ``weights`` and ``flags``
                (a slice of a global CSR ``indptr`` works as is; it need not start at 0).
            indices, weights: the neighbours and weights (rows sorted, as in :class:`Topology`).
            flags: optional uint8 per entry (:data:`FLAG_MATCHED`); default 0.

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
        fl = np.zeros(e, np.uint64) if flags is None else np.asarray(flags)[indptr[0]:indptr[0] + e].astype(np.uint64)
        blob, bounds = encode_rows(local, fl, other.astype(np.uint64), self.neuron_sizes[other].astype(np.uint64),
                                   self._weight_codes(w))
        self._zip.add_numbered("v/", self.next_vertex, blob, bounds)
        self.next_vertex += k
        self.entries += e

    def close(self) -> None:
        """Write ``vertices`` and ``manifest.json`` and finish the zip.

        Raises:
            TopologyError: fewer rows were written than there are vertices.
        """
        if self.next_vertex != self.num_vertices:
            self._zip.abort()
            raise TopologyError(f"{self.path}: {self.next_vertex} of {self.num_vertices} vertices written")
        own = np.empty(2 * self.num_vertices, dtype=np.int64)
        own[0::2], own[1::2] = self.neuron_sizes, self.synapses
        self._member(VERTICES, encode_varints(own).tobytes())
        manifest = {
            "format": FORMAT, "version": VERSION, "vertices": self.num_vertices, "entries": self.entries,
            "weight_encoding": self.weight_encoding, "weights_dtype": self.weights_dtype.name,
            "flag_bits": ({"1": "matched", "2": "sends to other", "4": "receives from other"} if self.directions
                          else {"1": "matched"}),
        }
        if self.directions:
            manifest["directions"] = True
        self._member(MANIFEST, (json.dumps(manifest, indent=1) + "\n").encode())
        self._zip.close()

    def __enter__(self) -> "ArchiveWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self._zip.abort()


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
    :func:`read_archive` gives back equal arrays; the synapses' directions (``sends``) go
    into the flags. O(m) time, O(n + chunk) extra memory.

    Raises:
        TopologyError: negative weights or sizes, ids out of range.
    """
    from tqdm import tqdm

    n = topo.num_vertices
    if topo.sends is not None:
        dflags = topo.sends.astype(np.uint8) << 1
        flags = dflags if flags is None else (dflags | np.asarray(flags, np.uint8))
    with ArchiveWriter(path, topo.neuron_sizes, topo.synapses,
                       weight_encoding=weight_encoding_for(topo.weights),
                       weights_dtype=topo.weights.dtype, level=level, directions=topo.sends is not None) as writer, \
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

def _open(path: str | Path) -> ZipStoreReader:
    try:
        return ZipStoreReader(path, prefix="v/")
    except FileNotFoundError:
        raise TopologyError(f"topology archive '{path}' does not exist") from None
    except (ZipFormatError, OSError) as exc:
        raise TopologyError(f"'{path}' is not a readable zip archive: {exc}") from None


def _member_bytes(zf: ZipStoreReader, path: str | Path, name: str) -> bytes:
    try:
        return zf.read(name)
    except KeyError:
        raise TopologyError(f"topology archive '{path}' has no member '{name}'") from None
    except (ZipFormatError, OSError) as exc:
        raise TopologyError(f"topology archive '{path}': {exc}") from None


def _vertex_files(zf: ZipStoreReader, path: str | Path, first: int, count: int) -> list[bytes]:
    try:
        return zf.read_ids(first, count)
    except KeyError as exc:
        raise TopologyError(f"topology archive '{path}' has no member '{exc.args[0]}'") from None
    except (ZipFormatError, OSError) as exc:
        raise TopologyError(f"topology archive '{path}': {exc}") from None


def _manifest(zf: ZipStoreReader, path: str | Path) -> dict:
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


class ArchiveReader:
    """An open archive: its manifest, and its vertices streamed as CSR chunks.

    Raises:
        TopologyError: (on opening) not a zip, or no valid manifest.
    """

    def __init__(self, path: str | Path):
        self.path = path
        self._zf = _open(path)
        try:
            self.manifest = _manifest(self._zf, path)
        except BaseException:
            self._zf.close()
            raise

    @property
    def num_vertices(self) -> int:
        return int(self.manifest["vertices"])

    def _own(self) -> tuple[np.ndarray, np.ndarray]:
        """(neuron_sizes, synapses) of every vertex, from ``vertices`` (read once)."""
        if getattr(self, "_own_cache", None) is None:
            path, zf, n = self.path, self._zf, self.num_vertices
            own = _decode(path, VERTICES, _member_bytes(zf, path, VERTICES))
            if own.shape[0] != 2 * n:
                raise TopologyError(f"topology archive '{path}': '{VERTICES}' holds {own.shape[0]} values, "
                                    f"expected 2 per vertex ({2 * n})")
            if n and own.max() >= 2**63:
                raise TopologyError(f"topology archive '{path}': '{VERTICES}' has a value beyond int64")
            own = own.astype(np.int64)
            self._own_cache = (own[0::2].copy(), own[1::2].copy())
        return self._own_cache

    def vertex_loads(self) -> tuple[np.ndarray, np.ndarray]:
        """int64 (neuron_sizes, synapses) of every vertex. O(n).

        Raises:
            TopologyError: ``vertices`` is missing or corrupt.
        """
        return self._own()

    def chunk_starts(self, chunk_bytes: int = _CHUNK_BYTES) -> np.ndarray:
        """int64 vertex ids that cut the archive into chunks of about ``chunk_bytes`` of
        vertex files (first 0, last n), for :meth:`read_chunk` in any order. O(n)."""
        n = self.num_vertices
        cum = self._zf.cumulative_sizes(n)
        starts = [0]
        v = 0
        while v < n:
            end = int(np.searchsorted(cum, cum[v] + chunk_bytes, side="right")) - 1
            v = min(max(end, v + 1), n)
            starts.append(v)
        return np.array(starts, np.int64)

    def read_chunk(self, first: int, end: int) -> ArchiveChunk:
        """Vertices ``first .. end - 1`` as one chunk (random access).

        Raises:
            TopologyError: naming the member that is missing, truncated or corrupt.
        """
        sizes, synapses = self._own()
        m = self.manifest
        datas = _vertex_files(self._zf, self.path, first, end - first)
        return _decode_chunk(self.path, first, datas, self.num_vertices, sizes, synapses,
                             index_dtype(self.num_vertices), np.dtype(m.get("weights_dtype", "int64")),
                             m["weight_encoding"], bool(m.get("directions", False)))

    def chunks(self, *, chunk_bytes: int = _CHUNK_BYTES, progress: bool = False) -> Iterator[ArchiveChunk]:
        """Vertices in id order as CSR chunks of about ``chunk_bytes`` of vertex files.

        No Python object per edge; peak memory O(n) + about 12 x ``chunk_bytes``.

        Raises:
            TopologyError: naming the archive and member that is missing, truncated or corrupt.
        """
        from tqdm import tqdm

        path, zf, m = self.path, self._zf, self.manifest
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
            cum = zf.cumulative_sizes(n)
            while v < n:
                # as many vertices as fit in chunk_bytes (at least one)
                end = int(np.searchsorted(cum, cum[v] + chunk_bytes, side="right")) - 1
                end = min(max(end, v + 1), n)
                datas = _vertex_files(zf, path, v, end - v)
                yield _decode_chunk(path, v, datas, n, sizes, synapses, idx_dtype, wdtype, encoding,
                                    bool(m.get("directions", False)))
                bar.update(len(datas))
                v += len(datas)

    def close(self) -> None:
        self._zf.close()

    def __enter__(self) -> "ArchiveReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def iter_archive(path: str | Path, *, chunk_bytes: int = _CHUNK_BYTES, progress: bool = False) -> Iterator[ArchiveChunk]:
    """Yield the archive's vertices in id order as CSR chunks (see :meth:`ArchiveReader.chunks`)."""
    with ArchiveReader(path) as reader:
        yield from reader.chunks(chunk_bytes=chunk_bytes, progress=progress)


def _decode_chunk(path, first: int, datas: list[bytes], n: int, sizes: np.ndarray, synapses: np.ndarray,
                  idx_dtype: np.dtype, wdtype: np.dtype, encoding: str, directions: bool = False) -> ArchiveChunk:
    k = len(datas)
    lens = np.fromiter(map(len, datas), dtype=np.int64, count=k)
    buf = np.frombuffer(b"".join(datas), dtype=np.uint8)
    del datas
    status, bad, indptr, flags, other, size, wcode = decode_rows(buf, np.cumsum(lens))
    del buf
    if status:
        raise TopologyError(f"topology archive '{path}': member '{vertex_member(first + bad)}' {STATUS_TEXT[status]}")

    def fail(entry_mask: np.ndarray, what: str) -> None:
        e = int(np.argmax(entry_mask))
        row = int(np.searchsorted(indptr, e, side="right")) - 1
        raise TopologyError(f"topology archive '{path}': member '{vertex_member(first + row)}': "
                            f"edge {e - int(indptr[row])} {what}")

    allowed = FLAG_MATCHED | FLAG_SENDS | FLAG_RECEIVES if directions else FLAG_MATCHED
    if np.any(flags > allowed):
        fail(flags > allowed, "has a flag with reserved bits set")
    if directions and np.any((flags & (FLAG_SENDS | FLAG_RECEIVES)) == 0):
        fail((flags & (FLAG_SENDS | FLAG_RECEIVES)) == 0, "carries no synapse in either direction")
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
    with ArchiveReader(path) as reader:
        return _read_all(reader, validate, progress)


def _read_all(reader: ArchiveReader, validate: bool, progress: bool) -> Topology:
    path, m = reader.path, reader.manifest
    n, total = m["vertices"], m["entries"]
    indptr = np.zeros(n + 1, dtype=np.int64)
    indices = np.empty(total, dtype=index_dtype(n))
    weights = np.empty(total, dtype=np.dtype(m.get("weights_dtype", "int64")))
    sizes = np.empty(n, dtype=np.int64)
    synapses = np.empty(n, dtype=np.int64)
    sends = np.empty(total, dtype=np.uint8) if m.get("directions", False) else None
    at = 0
    for ch in reader.chunks(progress=progress):
        e = int(ch.indptr[-1])
        if at + e > total:
            raise TopologyError(f"topology archive '{path}': more edge entries than the manifest's {total}")
        indices[at:at + e] = ch.indices
        weights[at:at + e] = ch.weights
        if sends is not None:
            sends[at:at + e] = (ch.flags >> 1) & 3
        indptr[ch.first + 1:ch.first + ch.num_vertices + 1] = at + ch.indptr[1:]
        sizes[ch.first:ch.first + ch.num_vertices] = ch.neuron_sizes
        synapses[ch.first:ch.first + ch.num_vertices] = ch.synapses
        at += e
    if at != total:
        raise TopologyError(f"topology archive '{path}': {at} edge entries, the manifest says {total}")
    topo = Topology(indptr, indices, weights, sizes, synapses, sends)
    if validate:
        topo.validate(name=f"topology archive '{path}'")
    return topo
