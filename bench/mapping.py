"""Mapping benchmark: METIS + row-major placement, Scotch graphMap, corefold (SPEC M4).

Scotch balances one vertex load (the neurons); on graphs with a synapse capacity it also
runs as ``scotch-syn``, balancing the synapse memory instead. Neither keeps both.

One run per graph, each method in its own subprocess (peak RSS measured there), the same
graph and mesh for all three. Prints cut, capacity violations (cores over neurons /
synapses), hop-weighted traffic, max link load (XY routing), wall time and peak memory,
each also as a ratio to Scotch; per graph, a lower bound on the traffic of every mapping
that keeps both capacities (:mod:`corefold.mapping.bound`) and each such mapping's traffic
over it.

    PYTHONPATH=$PWD python bench/mapping.py                # the bench table
    PYTHONPATH=$PWD python bench/mapping.py --scale        # 10^8-synapse archive, corefold map only
    PYTHONPATH=$PWD python bench/mapping.py --scale --scale-synapses 1e9   # 10^7 neurons
    PYTHONPATH=$PWD python bench/mapping.py --capacity-sweep   # cost of the hard synapse capacity
    PYTHONPATH=$PWD python bench/mapping.py --objective multicast --graphs lenet,mobilenet-tiny,cifar-cnn
        # spikes counted once per link of their XY multicast tree: Mt-KaHyPar (km1 + row-major
        # placement; Steiner-tree mapping where k <= 64), corefold's synapse mapping, corefold

corefold runs on one thread per CPU (``MapSettings.threads``; the mapping does not depend
on it), METIS and Scotch on one: the table gives wall time and CPU time (all threads) both.
Wall time excludes loading the graph and (for corefold) Numba compilation, which is cached
on disk (``cache=True``) and warmed up on a tiny graph first.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import sys
import tempfile
import time

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from corefold.mapping import objectives  # noqa: E402
from corefold.mapping.bound import traffic_bound  # noqa: E402
from corefold.mapping.topology.model import Topology  # noqa: E402


# ---------------------------------------------------------------- graphs
def small_world_topology(n, k, p, seed) -> Topology:
    try:
        from corefold.mapping.topology.generate import small_world

        return small_world(n, k, p, seed)
    except ImportError:
        pass
    rng = np.random.default_rng(seed)
    half = k // 2
    u = np.repeat(np.arange(n, dtype=np.int64), half)
    v = (u + np.tile(np.arange(1, half + 1), n)) % n
    rew = rng.random(u.size) < p
    v[rew] = rng.integers(0, n, rew.sum())
    keep = u != v
    u, v = u[keep], v[keep]
    a = sp.csr_matrix((np.full(u.size, 2, np.int32), (u, v)), shape=(n, n))
    a = (a + a.T).tocsr()
    a.sum_duplicates()
    a.sort_indices()
    syn = (np.asarray(a.sum(axis=1)).ravel() // 2).astype(np.int64)
    return Topology(a.indptr.astype(np.int64), a.indices.astype(np.int32), a.data.astype(np.int32),
                    np.ones(n, np.int64), syn)


@__import__("numba").njit(cache=True)
def _banded(n, half, indptr, indices):
    for v in range(n):
        p = indptr[v]
        for d in range(-half, half + 1):
            u = v + d * 97 if abs(d) > half // 2 else v + d
            if d == 0 or u < 0 or u >= n:
                continue
            indices[p] = u
            p += 1
        indptr[v + 1] = p


def banded_topology(n: int, degree: int) -> Topology:
    """A conv-like banded graph: v links to v +- 1..d/4 and v +- 97 * (d/4+1 .. d/2). O(n d)."""
    half = degree // 2
    indptr = np.zeros(n + 1, np.int64)
    indices = np.empty(n * degree, np.int32)
    _banded(n, half, indptr, indices)
    m = int(indptr[-1])
    indices = indices[:m]
    # both directions exist by construction (offset sets are symmetric); sort each row
    weights = np.ones(m, np.float32)
    deg = np.diff(indptr)
    return Topology(indptr, indices, weights, np.ones(n, np.int64), deg.astype(np.int64))


def bench_graphs(only=None):
    """(name, topology, mesh (w, h), neurons per core, synapses per core or None), for the
    names in ``only`` (all when None; a graph is built only when it is wanted).

    CNN stacks are expanded to neurons by the topology package's generator
    (:mod:`corefold.mapping.topology.generate_cnn`), with their synapses' directions (the
    multicast objective needs them); cifar-cnn is the issue's network.
    """
    from corefold.mapping.topology.generate_cnn import stack_topology

    def lenet_tight():
        lenet = stack_topology("lenet")
        # both capacities binding: synapse memory 10% above the mean need per core
        return lenet, int(np.ceil(lenet.synapses.sum() / 36 * 1.1))

    specs = [
        ("cifar-cnn", lambda: (stack_topology("cifar-cnn"), None), (9, 9), 1024),
        ("vgg-small", lambda: (stack_topology("vgg-small"), None), (12, 12), 1024),
        ("mobilenet-tiny", lambda: (stack_topology("mobilenet-tiny"), None), (11, 11), 1024),
        ("lenet", lambda: (stack_topology("lenet"), None), (6, 6), 256),
        ("small-world", lambda: (small_world_topology(40000, 20, 0.05, 7), None), (8, 8), 1024),
        ("lenet-tight", lenet_tight, (6, 6), 256),
    ]
    for name, build, mesh, ncap in specs:
        if only and name not in only:
            continue
        topo, scap = build()
        yield name, topo, mesh, ncap, scap


# ---------------------------------------------------------------- methods
def _vm_hwm_mib() -> float:
    """This process's peak resident memory (VmHWM; ru_maxrss would include the parent's)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


#: corefold variants: (preset, objective).
COREFOLD = {"corefold": ("default", None), "corefold-fast": ("fast", None),
            "corefold-synapse": ("default", "synapse"), "corefold-multicast": ("default", "multicast")}


def _mtkahypar_hypergraph(mtk, init, ctx, topo):
    from corefold.mapping.nets import fanout_of, hypergraph_of

    hyper = hypergraph_of(fanout_of(topo))
    nets = [e.tolist() for e in np.split(hyper.pins, hyper.ptr[1:-1])]
    return init.create_hypergraph(ctx, topo.num_vertices, hyper.num_nets, nets, topo.neuron_sizes.tolist(),
                                  hyper.weight.astype(np.int64).tolist())


def _worker(method, graph_path, mesh, caps, seed, out_path, objective="synapse"):
    z = np.load(graph_path)
    topo = Topology(z["indptr"], z["indices"], z["weights"], z["neuron_sizes"], z["synapses"],
                    z["sends"] if "sends" in z.files else None)
    width, height = mesh
    if method in COREFOLD:
        from dataclasses import replace

        from corefold.mapping.mapper import map_topology
        from corefold.mapping.settings import MapSettings
        from corefold.target import load_target

        preset, obj = COREFOLD[method]
        settings = replace(MapSettings.preset(preset), objective=obj or objective)
        target = replace(load_target("neuromorphic").with_mesh(width, height), neurons_per_core=caps[0],
                         synapses_per_core=caps[1])
        tiny = small_world_topology(3000, 6, 0.1, 0)
        map_topology(tiny, replace(target, neurons_per_core=1024), settings, seed=seed, progress=False)  # warm-up
    elif method.startswith("mtkahypar"):
        import mtkahypar

        init = mtkahypar.initialize(1, False)
        mtkahypar.set_seed(seed)
        ctx = init.context_from_preset(mtkahypar.PresetType.DEFAULT)
        k = width * height
        # NOTE: the neuron capacity as Mt-KaHyPar's imbalance (it keeps no synapse capacity)
        eps = caps[0] / (topo.neuron_sizes.sum() / k) - 1.0
        if method == "mtkahypar-map":
            ctx.set_mapping_parameters(k, eps)
            edges = [(y * width + x, y * width + x + 1) for y in range(height) for x in range(width - 1)]
            edges += [(y * width + x, (y + 1) * width + x) for y in range(height - 1) for x in range(width)]
            mesh_graph = init.create_target_graph(ctx, k, len(edges), edges, [1] * len(edges))
        else:
            ctx.set_partitioning_parameters(k, eps, mtkahypar.Objective.KM1)
        ctx.logging = False
        hg = _mtkahypar_hypergraph(mtkahypar, init, ctx, topo)
    rss0 = _vm_hwm_mib()
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    if method == "metis":
        import pymetis

        opts = pymetis.Options(seed=seed)
        _, part = pymetis.part_graph(width * height, xadj=topo.indptr, adjncy=topo.indices,
                                     eweights=np.asarray(topo.weights, np.int64),
                                     vweights=np.asarray(topo.neuron_sizes, np.int64), options=opts)
        part = np.asarray(part, np.int64)
        core_xy = np.stack([part % width, part // width], axis=1)
    elif method in ("scotch", "scotch-syn"):
        import scotchpy
        from scotchpy.common import random_reset, random_seed

        random_seed(seed)
        random_reset()
        g = scotchpy.Graph()
        # NOTE: Scotch balances one vertex load; "scotch-syn" gives it the synapse memory
        # (the binding capacity on lenet-tight) instead of the neurons
        velo = np.maximum(topo.synapses, 1) if method == "scotch-syn" else topo.neuron_sizes
        g.build(verttab=topo.indptr.astype(np.int64), edgetab=topo.indices.astype(np.int64),
                edlotab=np.asarray(topo.weights, np.int64), velotab=np.asarray(velo, np.int64), baseval=0)
        arch = scotchpy.Arch()
        arch.mesh2(width, height)
        strat = scotchpy.Strat()
        strat.graph_map_build(scotchpy.STRATDEFAULT, width * height, 0.01)
        mp_ = scotchpy.Mapping()
        part = np.zeros(topo.num_vertices, np.int64)
        g.map_init(mp_, arch, part)
        g.map_compute(mp_, strat)
        core_xy = np.stack([part % width, part // width], axis=1)  # mesh2 terminals are row-major
    elif method.startswith("mtkahypar"):
        phg = hg.map_onto_graph(mesh_graph, ctx) if method == "mtkahypar-map" else hg.partition(ctx)
        part = np.asarray(phg.get_partition(), np.int64)
        core_xy = np.stack([part % width, part // width], axis=1)  # blocks row-major on the mesh
    else:
        mapping = map_topology(topo, target, settings, seed=seed, progress=False)
        core_xy = mapping.core_xy
    seconds = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    peak = _vm_hwm_mib()
    np.save(out_path, core_xy)
    with open(out_path + ".json", "w") as f:
        json.dump({"seconds": seconds, "cpu_seconds": cpu, "peak_rss_mib": peak, "rss_before_mib": rss0}, f)


def run_method(method, graph_path, mesh, caps, seed, tmpdir, objective="synapse"):
    out = os.path.join(tmpdir, f"{method}.npy")
    ctx = mp.get_context("spawn")
    p = ctx.Process(target=_worker, args=(method, graph_path, mesh, caps, seed, out, objective))
    p.start()
    p.join()
    if p.exitcode != 0:
        raise RuntimeError(f"{method} failed with exit code {p.exitcode}")
    with open(out + ".json") as f:
        info = json.load(f)
    return np.load(out), info


def bench(seed: int, methods, graphs=None, objective: str = "synapse"):
    """Every method on every graph, each in its own process; scores under ``objective``."""
    rows = []
    for name, topo, mesh, ncap, scap in bench_graphs(graphs):
        with tempfile.TemporaryDirectory() as tmp:
            gpath = os.path.join(tmp, "g.npz")
            extra = {"sends": topo.sends} if topo.sends is not None else {}
            np.savez(gpath, indptr=topo.indptr, indices=topo.indices, weights=topo.weights,
                     neuron_sizes=topo.neuron_sizes, synapses=topo.synapses, **extra)
            print(f"\n{name}: {topo.num_vertices} neurons, {int(topo.synapses.sum())} synapses, "
                  f"{topo.num_edges} edges, mesh {mesh[0]}x{mesh[1]}, {ncap} neurons/core"
                  + (f", {scap} synapses/core" if scap else ""), flush=True)
            res = {}
            graph_methods = list(methods)
            if scap and "scotch" in methods:
                graph_methods.insert(graph_methods.index("scotch") + 1, "scotch-syn")
            if "mtkahypar-map" in graph_methods and mesh[0] * mesh[1] > 64:
                graph_methods.remove("mtkahypar-map")  # Mt-KaHyPar's Steiner-tree mapping: k <= 64 only
            for method in graph_methods:
                core_xy, info = run_method(method, gpath, mesh, (ncap, scap), seed, tmp, objective)
                ev = objectives.evaluate(topo, core_xy, mesh[0], mesh[1], mesh[0], mesh[1], 1.0, (ncap, scap),
                                         objective=objective)
                cut = ev["connectivity"] if objective == "multicast" else ev["cut"]
                res[method] = {"cut": cut, "traffic": ev["traffic"], "lower_bound": ev["lower_bound"],
                               "max_link": ev["max_link_load"], "over_n": int(ev["violations"][0]),
                               "over_s": int(ev["violations"][1]), "max_fill": int(ev["fill"][:, 0].max()),
                               "seconds": info["seconds"], "cpu": info["cpu_seconds"], "peak_mib": info["peak_rss_mib"],
                               "extra_mib": info["peak_rss_mib"] - info["rss_before_mib"]}
                r = res[method]
                print(f"  {method:<17} {'km1' if objective == 'multicast' else 'cut'} {r['cut']:.4g}  "
                      f"traffic {r['traffic']:.4g}  (bound {r['lower_bound']:.4g})"
                      f"  max link {r['max_link']:.4g}  cores over n/s {r['over_n']}/{r['over_s']}"
                      f" (max {r['max_fill']})  {r['seconds']:.2f} s (CPU {r['cpu']:.2f} s)  peak {r['peak_mib']:.0f} MiB"
                      f" (+{r['extra_mib']:.0f} over the loaded graph)", flush=True)
            if objective == "synapse":
                xy = np.array([(x, y) for y in range(mesh[1]) for x in range(mesh[0])])
                t0 = time.perf_counter()
                tb = traffic_bound(topo, xy, mesh[0], mesh[1], 1.0, (ncap, scap))
                over = ", ".join(f"{m} {r['traffic'] / tb.value:.2f}x" for m, r in res.items()
                                 if r["over_n"] == 0 and r["over_s"] == 0) if tb.value > 0 else ""
                print(f"  lower bound over every mapping that keeps the capacities: {tb.value:.4g} "
                      f"({tb.method}, {time.perf_counter() - t0:.1f} s; counted from both ends {tb.half:.4g})"
                      f"; traffic over it, mappings that keep them: {over or '-'}", flush=True)
            rows.append((name, res))
    if objective == "multicast":
        ref = "mtkahypar" if "mtkahypar" in methods else methods[0]
    else:
        ref = "scotch" if "scotch" in methods else methods[0]
    print(f"\nratios to {ref}, {objective} objective (lower is better; 'over' = cores over neurons/synapses "
          "capacity; time/METIS = wall time over METIS's partition alone)")
    print(f"{'graph':<14} {'method':<17} {'km1' if objective == 'multicast' else 'cut':>6} {'traffic':>8} "
          f"{'max link':>9} {'time':>6} {'CPU':>6} {'peak mem':>9} {'time/METIS':>10} {'over':>6}")
    for name, res in rows:
        for method in res:
            r, s = res[method], res[ref]
            vs_metis = f"{r['seconds'] / res['metis']['seconds']:10.3f}" if "metis" in res else f"{'-':>10}"
            print(f"{name:<14} {method:<17} {r['cut'] / s['cut']:6.3f} {r['traffic'] / s['traffic']:8.3f} "
                  f"{r['max_link'] / s['max_link']:9.3f} {r['seconds'] / s['seconds']:6.3f} {r['cpu'] / s['cpu']:6.3f} "
                  f"{r['peak_mib'] / s['peak_mib']:9.3f} {vs_metis} {r['over_n']:>3}/{r['over_s']}")


@__import__("numba").njit(cache=True)
def _banded_rows(v0, v1, n, half, indptr, indices):
    """Rows v0 .. v1 - 1 of :func:`banded_topology`'s graph (local indptr)."""
    p = 0
    for v in range(v0, v1):
        for d in range(-half, half + 1):
            u = v + d * 97 if abs(d) > half // 2 else v + d
            if d == 0 or u < 0 or u >= n:
                continue
            indices[p] = u
            p += 1
        indptr[v - v0 + 1] = p
    # each row's offsets are symmetric but not sorted (v +- 1.. before v +- 97 k): sort
    for r in range(v1 - v0):
        indices[indptr[r]:indptr[r + 1]] = np.sort(indices[indptr[r]:indptr[r + 1]])


def write_banded_archive(path: str, n: int, degree: int, chunk: int = 1 << 16) -> int:
    """:func:`banded_topology`'s graph written straight to an archive, ``chunk`` rows at a
    time (never the whole CSR in memory). Returns the entries written. O(n degree)."""
    from corefold.mapping.topology.archive import ArchiveWriter

    half = degree // 2
    sizes = np.ones(n, np.int64)
    indptr = np.zeros(chunk + 1, np.int64)
    indices = np.empty(chunk * degree, np.int64)
    # the synapse count (fan-in) of a vertex is its degree: count the rows first
    deg = np.zeros(n, np.int64)
    for v0 in range(0, n, chunk):
        v1 = min(v0 + chunk, n)
        _banded_rows(v0, v1, n, half, indptr, indices)
        deg[v0:v1] = np.diff(indptr[:v1 - v0 + 1])
    with ArchiveWriter(path, sizes, deg) as w:
        for v0 in range(0, n, chunk):
            v1 = min(v0 + chunk, n)
            _banded_rows(v0, v1, n, half, indptr, indices)
            e = int(indptr[v1 - v0])
            w.write_rows(indptr[:v1 - v0 + 1], indices[:e], np.ones(e, np.int64))
        return w.entries


def scale(seed: int, synapses: float, degree: int, workdir: str | None = None, extra_args=()):
    """A banded conv-like graph of ``synapses`` CSR entries (n = synapses / degree neurons),
    written as an archive, then ``corefold map`` on it in a child process under
    ``/usr/bin/time -v`` (peak RSS of the mapping alone): out of core whenever the
    in-memory mapping would pass the memory budget (4 GiB by default)."""
    import subprocess

    from corefold.target import load_target

    n = int(synapses) // degree
    target = load_target("neuromorphic")  # chips of 16x16 cores, 1024 neurons each
    per_chip = target.mesh_width * target.mesh_height * target.neurons_per_core
    chips = max(4, int(np.ceil(n / (per_chip * 0.9))))
    cx = int(np.ceil(np.sqrt(chips)))
    cy = int(np.ceil(chips / cx))
    syn_cap = max(target.synapses_per_core, 2 * 1024 * degree)
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        path = os.path.join(tmp, "banded.zip")
        t0 = time.perf_counter()
        entries = write_banded_archive(path, n, degree)
        gb = os.path.getsize(path) / 2**30
        print(f"banded graph: {n} neurons, {entries} CSR entries (synapses), archive {gb:.2f} GiB written in "
              f"{time.perf_counter() - t0:.1f} s", flush=True)
        out = os.path.join(tmp, "mapping.npz")
        cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "corefold", "map", path, "-o", out, "--target",
               "neuromorphic", "--chips", f"{cx}x{cy}", "--synapses-per-core", str(syn_cap), "--seed", str(seed),
               "--no-progress", *extra_args]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            print(proc.stdout, proc.stderr)
            raise RuntimeError(f"corefold map failed ({proc.returncode})")
        peak_kib = int(next(line.split()[-1] for line in proc.stderr.splitlines() if "Maximum resident" in line))
        cpu = sum(float(line.split()[-1]) for line in proc.stderr.splitlines()
                  if "User time" in line or "System time" in line)
        z = np.load(out)
        print(proc.stdout.strip())
        print(f"board {cx}x{cy} chips of 16x16; corefold map: {wall:.1f} s wall ({cpu:.1f} s CPU), "
              f"peak RSS {peak_kib / 2**20:.2f} GiB; traffic {float(z['traffic']):.4g}, cut {float(z['cut']):.4g}, "
              f"violations {z['violations'].tolist()}", flush=True)


def capacity_sweep(seed: int):
    """lenet on 6x6 cores of 256 neurons, corefold only: traffic as the synapse memory per
    core grows from lenet-tight's (the cost of the hard synapse capacity)."""
    from dataclasses import replace

    from corefold.mapping.mapper import map_topology
    from corefold.mapping.topology.generate_cnn import stack_topology
    from corefold.target import load_target

    lenet = stack_topology("lenet")
    tight = int(np.ceil(lenet.synapses.sum() / 36 * 1.1))
    print("synapses/core  x tight  traffic  cut  seconds")
    for factor in (1.0, 1.1, 1.25, 1.5, 2.0, None):
        scap = None if factor is None else int(tight * factor)
        target = replace(load_target("neuromorphic").with_mesh(6, 6), neurons_per_core=256, synapses_per_core=scap)
        t0 = time.perf_counter()
        m = map_topology(lenet, target, seed=seed, progress=False)
        ev = objectives.evaluate(lenet, m.core_xy, 6, 6, 6, 6, 1.0, (256, scap))
        assert not ev["violations"].any()
        print(f"{scap if scap else 'unbounded':>13}  {factor if factor else '-':>7}  {ev['traffic']:.4g}  "
              f"{ev['cut']:.4g}  {time.perf_counter() - t0:.2f}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--methods", default=None,
                    help="comma-separated: metis, scotch, corefold, corefold-fast, corefold-synapse, "
                         "corefold-multicast, mtkahypar (km1 + row-major), mtkahypar-map (Steiner-tree mapping, "
                         "k <= 64); default metis,scotch,corefold (synapse) or mtkahypar,mtkahypar-map,"
                         "corefold-synapse,corefold (multicast)")
    ap.add_argument("--objective", choices=["synapse", "multicast"], default="synapse",
                    help="what corefold optimises and every mapping is scored by")
    ap.add_argument("--graphs", default="", help="comma-separated subset of the bench graphs")
    ap.add_argument("--scale", action="store_true",
                    help="map a banded graph of --scale-synapses (10^8) from an archive with corefold map")
    ap.add_argument("--scale-synapses", type=float, default=1e8)
    ap.add_argument("--scale-degree", type=int, default=100)
    ap.add_argument("--scale-dir", default=None, help="folder for the archive and the coarse levels")
    ap.add_argument("--scale-set", action="append", default=[], metavar="NAME=VALUE",
                    help="passed to corefold map as --set")
    ap.add_argument("--capacity-sweep", action="store_true",
                    help="lenet with growing synapse memory per core, corefold only")
    args = ap.parse_args()
    if args.capacity_sweep:
        capacity_sweep(args.seed)
    elif args.scale:
        scale(args.seed, args.scale_synapses, args.scale_degree, args.scale_dir,
              [a for item in args.scale_set for a in ("--set", item)])
    else:
        default = ("mtkahypar,mtkahypar-map,corefold-synapse,corefold" if args.objective == "multicast"
                   else "metis,scotch,corefold")
        bench(args.seed, (args.methods or default).split(","), [g for g in args.graphs.split(",") if g],
              args.objective)


if __name__ == "__main__":
    main()
