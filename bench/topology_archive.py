"""Time and memory of the topology formats on a seeded small world (SPEC M4 §1).

    PYTHONPATH=. python bench/topology_archive.py --n 1000000 --k 100   # 10^8 synapses

Prints, per step: wall time, the process's peak RSS so far, and file sizes. Writes the
archive (deflate level --level), reads it back (streaming, chunk by chunk) and checks the
arrays are equal, then the same through a CSR .npz for comparison. There is no external
peer for this format; the .npz (NumPy's own zip of raw arrays) is the reference point.
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time

import numpy as np

from corefold.mapping.topology.archive import read_archive, write_archive
from corefold.mapping.topology.csr_npz import read_npz, write_npz
from corefold.mapping.topology.generate import small_world


def cpu() -> float:
    return time.process_time()


def peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--p", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--level", type=int, default=1)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    args = ap.parse_args()

    t0, c0 = time.perf_counter(), cpu()
    topo = small_world(args.n, args.k, args.p, seed=args.seed)
    print(f"small_world(n={args.n}, k={args.k}, p={args.p}): {int(topo.synapses.sum())} synapses, "
          f"{topo.indices.size} CSR entries, {topo.nbytes() / 2**30:.2f} GiB arrays, "
          f"{time.perf_counter() - t0:.1f} s wall, {cpu() - c0:.1f} s CPU, peak {peak_gb():.2f} GiB", flush=True)
    path = os.path.join(args.dir, f"bench_topology_{os.getpid()}.zip")
    npz = path[:-4] + ".npz"
    try:
        t0, c0 = time.perf_counter(), cpu()
        write_archive(topo, path, level=args.level)
        tw = time.perf_counter() - t0
        print(f"archive write: {tw:.1f} s wall, {cpu() - c0:.1f} s CPU, {os.path.getsize(path) / 2**20:.1f} MiB "
              f"({os.path.getsize(path) / topo.indices.size:.2f} B/entry), peak {peak_gb():.2f} GiB", flush=True)
        t0, c0 = time.perf_counter(), cpu()
        back = read_archive(path, validate=False)
        tr, cr = time.perf_counter() - t0, cpu() - c0
        same = all(np.array_equal(getattr(topo, f), getattr(back, f))
                   for f in ("indptr", "indices", "weights", "neuron_sizes", "synapses"))
        print(f"archive read:  {tr:.1f} s wall, {cr:.1f} s CPU, equal={same}, peak {peak_gb():.2f} GiB", flush=True)
        del back
        t0 = time.perf_counter()
        write_npz(topo, npz)
        tnw = time.perf_counter() - t0
        t0 = time.perf_counter()
        read_npz(npz, validate=False)
        tnr = time.perf_counter() - t0
        print(f"npz write {tnw:.1f} s / read {tnr:.1f} s, {os.path.getsize(npz) / 2**20:.1f} MiB; "
              f"archive/npz size ratio {os.path.getsize(path) / os.path.getsize(npz):.2f}", flush=True)
        t0 = time.perf_counter()
        topo.validate()
        print(f"validate: {time.perf_counter() - t0:.1f} s", flush=True)
    finally:
        for p in (path, npz):
            if os.path.exists(p):
                os.unlink(p)


if __name__ == "__main__":
    main()
