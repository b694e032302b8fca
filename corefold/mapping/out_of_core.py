r"""Out-of-core mapping of a topology archive (SPEC M4 §1-2, §5): the edges stay on disk.

The archive is never read whole. Coarsening streams it: a matching pass reads its chunks
in random order (vertices in random order within a chunk) and pairs each vertex with the
neighbour of its heaviest edge, as the seed does (:func:`~.partition.stream.match_rows`);
a contraction pass reads the chunks in order and writes the coarse level as an archive of
the same format, and the level itself again with :data:`FLAG_MATCHED` on each matched
edge (:func:`~.partition.stream.contract_rows`). Levels are built until one has at most
``stream_coarsest_entries`` edge entries, shrinks by less than ``min_shrink``, or
``max_levels`` is reached; that coarsest level is read into memory and mapped by
:func:`~.mapper.map_topology` (the in-memory default: dual recursive bisection, placement,
refinement). Uncoarsening streams each flagged level: a vertex's coarse vertex is found
from the flags alone (a leader is a vertex whose matched neighbour, if any, has a larger
id; coarse ids rank the leaders), and move refinement passes (the seed's rule with D = hop
distances, capacities hard) run chunk by chunk.

In RAM: per-vertex arrays of the current level (mate, coarse ids, parts, loads: about 40
bytes per vertex), one or two chunks of edges, and the coarsest level. On disk: the
coarse levels, in a temporary folder beside the output (or ``workdir``).

Complexity: per level O(entries) reads for the matching, the contraction and each
refinement pass, and O(entries) writes for the coarse level and the flagged copy.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np

from corefold.errors import CapacityError
from corefold.mapping import objectives
from corefold.mapping.mapper import Mapping, core_capacities, map_topology
from corefold.mapping.partition.stream import (
    coarse_ids,
    contract_rows,
    match_rows,
    quotient_rows,
    refine_rows,
)
from corefold.mapping.settings import MapSettings
from corefold.mapping.topology.archive import (
    FLAG_MATCHED,
    ArchiveReader,
    ArchiveWriter,
    read_archive,
)

#: Bytes of vertex files per chunk read (a module constant so tests can make chunks small).
CHUNK_BYTES = 1 << 23
#: Measured peak memory of the in-memory mapper per edge entry (10^8 entries: 5.65 GiB on
#: 2026-11-22, 6.12 GiB on 2026-11-23 onto 3x2 chips: 61 to 66 bytes).
IN_MEMORY_BYTES_PER_ENTRY = 60


def in_memory_estimate(entries: int) -> float:
    """Bytes the in-memory mapper needs for a topology of ``entries`` CSR entries."""
    return float(entries) * IN_MEMORY_BYTES_PER_ENTRY


def wants_out_of_core(path: str | os.PathLike, settings: MapSettings) -> bool:
    """``settings.out_of_core``: ``always``; ``never``; ``auto``: when ``path`` is an archive
    whose in-memory mapping would pass ``memory_budget_gib``."""
    if settings.out_of_core == "never" or Path(path).suffix.lower() != ".zip":
        return False
    if settings.out_of_core == "always":
        return True
    with ArchiveReader(path) as reader:
        return in_memory_estimate(reader.manifest["entries"]) > settings.memory_budget_gib * 2**30


def _bar(show: bool, desc: str, total: int):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="chunk", file=sys.stderr, leave=False, disable=not show)


def _chunks(reader: ArchiveReader, starts: np.ndarray, order=None):
    """Yield ``(first, end, chunk)`` for the chunks in ``order`` (default: in id order),
    the next chunk read and inflated by a worker thread while the caller works on this one
    (zlib and the Numba kernels release the GIL: on two cores, reading overlaps compute)."""
    order = range(starts.size - 1) if order is None else order
    spans = [(int(starts[c]), int(starts[c + 1])) for c in order]
    if not spans:
        return
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(reader.read_chunk, *spans[0])
        for i, (first, end) in enumerate(spans):
            chunk = pending.result()
            if i + 1 < len(spans):
                pending = pool.submit(reader.read_chunk, *spans[i + 1])
            yield first, end, chunk


def _rows(chunk):
    return chunk.indptr, chunk.indices.astype(np.int64, copy=False), chunk.weights.astype(np.float64, copy=False)


def _match_level(reader: ArchiveReader, loads: np.ndarray, limit: np.ndarray, rng: np.random.Generator,
                 starts: np.ndarray, show: bool) -> np.ndarray:
    """One matching pass over the level, chunks in random order. O(entries)."""
    n = reader.num_vertices
    mate = np.full(n, -1, np.int64)
    with _bar(show, "match", starts.size - 1) as bar:
        for first, end, ch in _chunks(reader, starts, rng.permutation(starts.size - 1)):
            ptr, idx, w = _rows(ch)
            match_rows(first, ptr, idx, w, loads, limit, mate, rng.permutation(end - first).astype(np.int64))
            bar.update(1)
    return mate


def _far_rows(reader: ArchiveReader, ids: np.ndarray):
    """Rows of the given (sorted) vertex ids, read one by one, as a small CSR."""
    ptr = [0]
    idx, w = [], []
    for v in ids:
        ch = reader.read_chunk(int(v), int(v) + 1)
        _, i, ww = _rows(ch)
        idx.append(i)
        w.append(ww)
        ptr.append(ptr[-1] + i.shape[0])
    if not idx:
        return np.zeros(0, np.int64), np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0)
    return ids.astype(np.int64), np.array(ptr, np.int64), np.concatenate(idx), np.concatenate(w)


def _contract_level(reader: ArchiveReader, mate: np.ndarray, coarse_of: np.ndarray, nc: int, coarse_path: Path,
                    flagged_path: Path, starts: np.ndarray, level: int, show: bool, deflate_level: int) -> int:
    """Write the coarse level and the flagged copy of this one, chunks in order, each
    with the next chunk as a window for partners. Returns the coarse level's entries."""
    sizes, synapses = reader.vertex_loads()
    csizes = np.bincount(coarse_of, weights=sizes, minlength=nc).astype(np.int64)
    csyn = np.bincount(coarse_of, weights=synapses, minlength=nc).astype(np.int64)
    m = reader.manifest
    integer = m["weight_encoding"] == "integer"
    directions = bool(m.get("directions", False))
    with ArchiveWriter(coarse_path, csizes, csyn, weight_encoding="integer" if integer else "float64-bits",
                       weights_dtype="int64" if integer else "float64", level=deflate_level) as coarse, \
            ArchiveWriter(flagged_path, sizes, synapses, weight_encoding=m["weight_encoding"],
                          weights_dtype=m.get("weights_dtype", "int64"), directions=directions,
                          level=deflate_level) as flagged, \
            _bar(show, f"contract level {level}", starts.size - 1) as bar:
        stream = _chunks(reader, starts)
        nxt = next(stream, None)
        with ThreadPoolExecutor(1) as out:  # the writer thread encodes and deflates the rows
            written = []
            while nxt is not None:
                first, end, cur = nxt
                nxt = next(stream, None)
                wend = nxt[1] if nxt is not None else end
                parts = [cur] if nxt is None else [cur, nxt[2]]
                wptr = np.concatenate([[0]] + [p.indptr[1:] + off for p, off in
                                               zip(parts, np.cumsum([0] + [p.indptr[-1] for p in parts[:-1]]),
                                                   strict=True)]).astype(np.int64)
                widx = np.concatenate([p.indices.astype(np.int64, copy=False) for p in parts])
                ww = np.concatenate([p.weights.astype(np.float64, copy=False) for p in parts])
                vs = np.arange(first, end)
                partners = mate[vs]
                far = np.unique(partners[(partners > vs) & (partners >= wend)])
                xids, xptr, xidx, xw = _far_rows(reader, far)
                cptr, cidx, cw, flags = contract_rows(first, end, first, wptr, widx, ww, xids, xptr, xidx, xw,
                                                      mate, coarse_of, nc)
                del wptr, widx, ww
                while len(written) > 2:  # at most one chunk waiting (bounded memory); a writer's error raises here
                    written.pop(0).result()
                written.append(out.submit(coarse.write_rows, cptr, cidx,
                                          cw if not integer else np.rint(cw).astype(np.int64)))
                written.append(out.submit(flagged.write_rows, cur.indptr, cur.indices, cur.weights,
                                          cur.flags | flags))
                bar.update(1)
            for f in written:
                f.result()
        entries = coarse.entries
    return entries


def _project(reader: ArchiveReader, part_coarse: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The finer level's parts, its coarse ids read from the matched flags. O(entries)."""
    n = reader.num_vertices
    part = np.empty(n, np.int64)
    mate = np.arange(n, dtype=np.int64)
    for first, _, ch in _chunks(reader, starts):
        hit = np.flatnonzero(ch.flags & FLAG_MATCHED)
        if hit.size:
            rows = np.searchsorted(ch.indptr, hit, side="right") - 1
            mate[first + rows] = ch.indices[hit]
    coarse_of, nc = coarse_ids(mate)
    if nc != part_coarse.shape[0]:
        raise CapacityError(f"topology archive '{reader.path}': its matched flags give {nc} coarse vertices, "
                            f"the coarser level has {part_coarse.shape[0]}")
    part[:] = part_coarse[coarse_of]
    return part


def _refine_level(reader: ArchiveReader, part: np.ndarray, fill: np.ndarray, caps: np.ndarray, dist: np.ndarray,
                  loads: np.ndarray, starts: np.ndarray, rng: np.random.Generator, passes: int, min_gain: float,
                  traffic: float, show: bool, level: int) -> list[float]:
    """Move-refinement passes, chunk by chunk in order; stops when a pass gains less than
    ``min_gain`` of the traffic. Returns each pass's gain."""
    gains: list[float] = []
    for p in range(passes):
        gain = 0.0
        with _bar(show, f"refine level {level} pass {p + 1}", starts.size - 1) as bar:
            for first, end, ch in _chunks(reader, starts):
                ptr, idx, w = _rows(ch)
                g, _ = refine_rows(first, ptr, idx, w, loads, part, fill, caps, dist,
                                   rng.permutation(end - first).astype(np.int64))
                gain += g
                bar.update(1)
        gains.append(gain)
        if gain <= min_gain * max(traffic - sum(gains), 1e-300):
            break
    return gains


def map_archive(path: str | os.PathLike, target, settings: MapSettings | None = None, seed: int = 0,
                progress: bool | None = None, workdir: str | os.PathLike | None = None) -> Mapping:
    """Map every vertex of the archive at ``path`` to a core of ``target``, out of core.

    Args:
        path: a topology archive (docs/topology-archive.md).
        target, settings, seed, progress: as :func:`~.mapper.map_topology`.
        workdir: folder for the coarse levels (default: a temporary folder beside ``path``).

    Returns:
        a :class:`~.mapper.Mapping`; every core within its capacities.

    Raises:
        CapacityError: the topology cannot fit, or refinement left a core over capacity.
        TargetError: the target has no neuron capacity.
        TopologyError: a missing, truncated or corrupt member of an archive (named).
    """
    settings = settings or MapSettings()
    show = sys.stderr.isatty() if progress is None else progress
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    caps1 = core_capacities(target)
    limit = np.maximum(np.floor(caps1 * settings.matching_limit), 1).astype(np.int64)
    times: dict[str, float] = {}
    tmp = Path(tempfile.mkdtemp(prefix=".corefold-levels-", dir=workdir or Path(path).resolve().parent))
    try:
        flagged: list[Path] = []
        cur = Path(path)
        reader = ArchiveReader(cur)
        level = 0
        per_level: list[dict] = []  # vertices, entries, seconds of each streamed level
        t = time.perf_counter()
        while True:
            n = reader.num_vertices
            entries = reader.manifest["entries"]
            if entries <= settings.stream_coarsest_entries or level >= settings.max_levels or n < 2:
                break
            tl = time.perf_counter()
            sizes, synapses = reader.vertex_loads()
            loads = np.stack([sizes, synapses], axis=1)
            starts = reader.chunk_starts(CHUNK_BYTES)
            best = None
            for _ in range(max(1, settings.stream_matching_repeats)):
                mate = _match_level(reader, loads, limit, rng, starts, show)
                pairs = int(np.count_nonzero(mate > np.arange(n)))
                if best is None or pairs > best[0]:
                    best = (pairs, mate)
            pairs, mate = best
            if pairs < settings.min_shrink * n:
                break
            tm = time.perf_counter() - tl
            coarse_of, nc = coarse_ids(mate)
            del loads
            nxt = tmp / f"level{level + 1}.zip"
            mark = tmp / f"level{level}-matched.zip"
            _contract_level(reader, mate, coarse_of, nc, nxt, mark, starts, level, show,
                            settings.stream_deflate_level)
            del mate, coarse_of
            reader.close()
            if cur.parent == tmp:
                cur.unlink()  # the unflagged copy of a coarse level; the flagged one stays
            flagged.append(mark)
            cur = nxt
            reader = ArchiveReader(cur)
            per_level.append({"vertices": n, "entries": int(entries), "match": tm,
                              "contract": time.perf_counter() - tl - tm})
            level += 1
        times["coarsen"] = time.perf_counter() - t
        reader.close()

        t = time.perf_counter()
        coarse = read_archive(cur, validate=False, progress=False)
        coarsest_vertices, coarsest_entries = coarse.num_vertices, int(coarse.indices.shape[0])
        # NOTE: the coarsest level (at most stream_coarsest_entries) is where the quality is
        # decided and the finest-level bisection is affordable there; auto would send a level
        # over finest_max_entries through a second global hierarchy
        inner_settings = replace(settings, bisection_level="finest") if settings.bisection_level == "auto" \
            else settings
        inner = map_topology(coarse, target, inner_settings, seed=int(rng.integers(2**31)), progress=show)
        cores, part = np.unique(inner.core_xy, axis=0, return_inverse=True)
        part = part.reshape(-1).astype(np.int64)
        k = cores.shape[0]
        caps = np.repeat(caps1[None, :], k, axis=0)
        dist = objectives.hop_distance_matrix(cores, target.mesh_width, target.mesh_height, target.interchip_hop_cost)
        loads = objectives.loads_of(coarse)
        fill = objectives.part_fill(loads, part, k)
        traffic = float(objectives.edge_costs(coarse.indptr, coarse.indices, coarse.weights.astype(np.float64), part,
                                              dist)[1])
        del coarse
        times["coarsest"] = time.perf_counter() - t

        t = time.perf_counter()
        for li in range(len(flagged) - 1, -1, -1):
            tl = time.perf_counter()
            with ArchiveReader(flagged[li]) as fine:
                starts = fine.chunk_starts(CHUNK_BYTES)
                part = _project(fine, part, starts)
                sizes, synapses = fine.vertex_loads()
                loads = np.stack([sizes, synapses], axis=1)
                passes = settings.stream_refine_passes if li or settings.stream_finest_refine_passes is None \
                    else settings.stream_finest_refine_passes
                gains = _refine_level(fine, part, fill, caps, dist, loads, starts, rng, passes,
                                      settings.vertex_swap_min_gain, traffic, show, li)
                traffic -= sum(gains)
            os.unlink(flagged[li])
            per_level[li]["uncoarsen"] = time.perf_counter() - tl
            per_level[li]["refine_gains"] = gains
        times["uncoarsen"] = time.perf_counter() - t
        if (fill > caps).any():
            raise CapacityError(f"out-of-core refinement left {int((fill > caps).any(axis=1).sum())} cores "
                                "over capacity")
        return Mapping(cores[part].astype(np.int64), {
            "cores_used": k, "levels": len(flagged) + 1, "coarsest_vertices": coarsest_vertices,
            "coarsest_entries": coarsest_entries, "streamed_levels": per_level, "time": times,
            "coarsest_time": inner.summary.get("time", {}), "traffic_estimate": traffic, "out_of_core": True,
            "seconds": time.perf_counter() - t0,
        })
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def evaluate_archive(path: str | os.PathLike, core_xy: np.ndarray, target) -> dict:
    """:func:`~.objectives.evaluate`'s synapse objectives of a mapping, streaming the archive:
    the group graph is summed chunk by chunk, everything else follows from it. O(entries)
    time, O(n + k^2) memory."""
    core_xy = np.asarray(core_xy, np.int64)
    width = target.width
    core_id = core_xy[:, 1] * width + core_xy[:, 0]
    used, part = np.unique(core_id, return_inverse=True)
    part = part.reshape(-1).astype(np.int64)
    k = used.shape[0]
    used_xy = np.stack([used % width, used // width], axis=1)
    q = np.zeros((k, k))
    with ArchiveReader(path) as reader:
        starts = reader.chunk_starts(CHUNK_BYTES)
        for first, _, ch in _chunks(reader, starts):
            ptr, idx, w = _rows(ch)
            quotient_rows(first, ptr, idx, w, part, q)
        sizes, synapses = reader.vertex_loads()
    dist = objectives.hop_distance_matrix(used_xy, target.mesh_width, target.mesh_height, target.interchip_hop_cost)
    import scipy.sparse as sp

    qs = sp.csr_matrix(q)
    loads = np.stack([sizes, synapses], axis=1)
    fill = objectives.part_fill(loads, part, k)
    caps = (target.neurons_per_core, target.synapses_per_core)
    cap_arr = np.array([caps[0], caps[1] if caps[1] is not None else np.iinfo(np.int64).max], np.int64)
    links = objectives.link_loads(qs, used_xy, width, target.height)
    return {
        "objective": "synapse",
        "cut": float(q.sum() / 2),
        "traffic": objectives.hop_weighted_traffic_quotient(qs, dist),
        "lower_bound": objectives.traffic_lower_bound(qs),
        "max_link_load": float(links.max()) if links.size else 0.0,
        "link_loads": links,
        "cores_used": k,
        "fill": fill,
        "violations": objectives.capacity_violations(fill, cap_arr),
    }
