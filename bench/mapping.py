"""Mapping benchmark: METIS + row-major placement, Scotch graphMap, corefold (SPEC M4).

Scotch balances one vertex load (the neurons); on graphs with a synapse capacity it also
runs as ``scotch-syn``, balancing the synapse memory instead. Neither keeps both.

One run per graph, each method in its own subprocess (peak RSS measured there), the same
graph and mesh for all three. Prints cut, capacity violations (cores over neurons /
synapses), hop-weighted traffic, max link load (XY routing), wall time and peak memory,
each also as a ratio to Scotch.

    PYTHONPATH=$PWD python bench/mapping.py                # the bench table
    PYTHONPATH=$PWD python bench/mapping.py --scale        # 10^8-synapse graph, corefold only
    PYTHONPATH=$PWD python bench/mapping.py --capacity-sweep   # cost of the hard synapse capacity

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


def bench_graphs():
    """(name, topology, mesh (w, h), neurons per core, synapses per core or None).

    CNN stacks are expanded to neurons by the topology package's generator
    (:mod:`corefold.mapping.topology.generate_cnn`); cifar-cnn is the issue's network.
    """
    from corefold.mapping.topology.generate_cnn import stack_topology

    yield ("cifar-cnn", stack_topology("cifar-cnn"), (9, 9), 1024, None)
    yield ("vgg-small", stack_topology("vgg-small"), (12, 12), 1024, None)
    yield ("mobilenet-tiny", stack_topology("mobilenet-tiny"), (11, 11), 1024, None)
    lenet = stack_topology("lenet")
    yield ("lenet", lenet, (6, 6), 256, None)
    yield ("small-world", small_world_topology(40000, 20, 0.05, 7), (8, 8), 1024, None)
    # both capacities binding: synapse memory 10% above the mean need per core
    yield ("lenet-tight", lenet, (6, 6), 256, int(np.ceil(lenet.synapses.sum() / 36 * 1.1)))


# ---------------------------------------------------------------- methods
def _vm_hwm_mib() -> float:
    """This process's peak resident memory (VmHWM; ru_maxrss would include the parent's)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _worker(method, graph_path, mesh, caps, seed, out_path):
    z = np.load(graph_path)
    topo = Topology(z["indptr"], z["indices"], z["weights"], z["neuron_sizes"], z["synapses"])
    width, height = mesh
    if method == "corefold":
        from dataclasses import replace

        from corefold.mapping.mapper import map_topology
        from corefold.target import load_target

        target = replace(load_target("neuromorphic").with_mesh(width, height), neurons_per_core=caps[0],
                         synapses_per_core=caps[1])
        tiny = small_world_topology(3000, 6, 0.1, 0)
        map_topology(tiny, replace(target, neurons_per_core=1024), seed=seed, progress=False)  # numba warm-up
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
    else:
        mapping = map_topology(topo, target, seed=seed, progress=False)
        core_xy = mapping.core_xy
    seconds = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    peak = _vm_hwm_mib()
    np.save(out_path, core_xy)
    with open(out_path + ".json", "w") as f:
        json.dump({"seconds": seconds, "cpu_seconds": cpu, "peak_rss_mib": peak, "rss_before_mib": rss0}, f)


def run_method(method, graph_path, mesh, caps, seed, tmpdir):
    out = os.path.join(tmpdir, f"{method}.npy")
    ctx = mp.get_context("spawn")
    p = ctx.Process(target=_worker, args=(method, graph_path, mesh, caps, seed, out))
    p.start()
    p.join()
    if p.exitcode != 0:
        raise RuntimeError(f"{method} failed with exit code {p.exitcode}")
    with open(out + ".json") as f:
        info = json.load(f)
    return np.load(out), info


def bench(seed: int, methods, graphs=None):
    rows = []
    for name, topo, mesh, ncap, scap in bench_graphs():
        if graphs and name not in graphs:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            gpath = os.path.join(tmp, "g.npz")
            np.savez(gpath, indptr=topo.indptr, indices=topo.indices, weights=topo.weights,
                     neuron_sizes=topo.neuron_sizes, synapses=topo.synapses)
            print(f"\n{name}: {topo.num_vertices} neurons, {int(topo.synapses.sum())} synapses, "
                  f"{topo.num_edges} edges, mesh {mesh[0]}x{mesh[1]}, {ncap} neurons/core"
                  + (f", {scap} synapses/core" if scap else ""), flush=True)
            res = {}
            graph_methods = list(methods)
            if scap and "scotch" in methods:
                graph_methods.insert(graph_methods.index("scotch") + 1, "scotch-syn")
            for method in graph_methods:
                core_xy, info = run_method(method, gpath, mesh, (ncap, scap), seed, tmp)
                ev = objectives.evaluate(topo, core_xy, mesh[0], mesh[1], mesh[0], mesh[1], 1.0, (ncap, scap))
                res[method] = {"cut": ev["cut"], "traffic": ev["traffic"], "lower_bound": ev["lower_bound"],
                               "max_link": ev["max_link_load"], "over_n": int(ev["violations"][0]),
                               "over_s": int(ev["violations"][1]), "max_fill": int(ev["fill"][:, 0].max()),
                               "seconds": info["seconds"], "cpu": info["cpu_seconds"], "peak_mib": info["peak_rss_mib"],
                               "extra_mib": info["peak_rss_mib"] - info["rss_before_mib"]}
                r = res[method]
                print(f"  {method:<9} cut {r['cut']:.4g}  traffic {r['traffic']:.4g}  (bound {r['lower_bound']:.4g})"
                      f"  max link {r['max_link']:.4g}  cores over n/s {r['over_n']}/{r['over_s']}"
                      f" (max {r['max_fill']})  {r['seconds']:.2f} s (CPU {r['cpu']:.2f} s)  peak {r['peak_mib']:.0f} MiB"
                      f" (+{r['extra_mib']:.0f} over the loaded graph)", flush=True)
            rows.append((name, res))
    ref = "scotch" if "scotch" in methods else methods[0]
    print(f"\nratios to {ref} (lower is better; 'over' = cores over neurons/synapses capacity)")
    print(f"{'graph':<14} {'method':<9} {'cut':>6} {'traffic':>8} {'max link':>9} {'time':>6} {'CPU':>6} {'peak mem':>9} "
          f"{'over':>6}")
    for name, res in rows:
        for method in res:
            r, s = res[method], res[ref]
            print(f"{name:<14} {method:<9} {r['cut'] / s['cut']:6.3f} {r['traffic'] / s['traffic']:8.3f} "
                  f"{r['max_link'] / s['max_link']:9.3f} {r['seconds'] / s['seconds']:6.3f} {r['cpu'] / s['cpu']:6.3f} "
                  f"{r['peak_mib'] / s['peak_mib']:9.3f} {r['over_n']:>3}/{r['over_s']}")


def scale(seed: int, n: int, degree: int):
    from dataclasses import replace

    from corefold.mapping.mapper import map_topology
    from corefold.target import load_target

    t0 = time.perf_counter()
    topo = banded_topology(n, degree)
    gen = time.perf_counter() - t0
    rss_graph = _vm_hwm_mib() / 1024
    print(f"banded graph: {n} neurons, {topo.indices.size} synapses (CSR entries), generated in {gen:.1f} s, "
          f"peak RSS so far {rss_graph:.2f} GiB", flush=True)
    target = load_target("neuromorphic")  # 4 chips of 16x16 cores, 1024 neurons / 65536 synapses
    target = replace(target, synapses_per_core=max(target.synapses_per_core, 2 * 1024 * degree))
    t0 = time.perf_counter()
    m = map_topology(topo, target, seed=seed, progress=True)
    t = time.perf_counter() - t0
    peak = _vm_hwm_mib() / 1024
    ev = objectives.evaluate(topo, m.core_xy, target.width, target.height, target.mesh_width, target.mesh_height,
                             target.interchip_hop_cost, (target.neurons_per_core, target.synapses_per_core))
    print(f"mapped in {t:.1f} s, peak RSS {peak:.2f} GiB; cores {ev['cores_used']}, cut {ev['cut']:.4g}, "
          f"traffic {ev['traffic']:.4g} (bound {ev['lower_bound']:.4g}), max link {ev['max_link_load']:.4g}, "
          f"violations {ev['violations'].tolist()}; phases {m.summary['time']}")


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
    ap.add_argument("--methods", default="metis,scotch,corefold")
    ap.add_argument("--graphs", default="", help="comma-separated subset of the bench graphs")
    ap.add_argument("--scale", action="store_true", help="map a 10^8-synapse banded graph with corefold")
    ap.add_argument("--scale-n", type=int, default=1_000_000)
    ap.add_argument("--scale-degree", type=int, default=100)
    ap.add_argument("--capacity-sweep", action="store_true",
                    help="lenet with growing synapse memory per core, corefold only")
    args = ap.parse_args()
    if args.capacity_sweep:
        capacity_sweep(args.seed)
    elif args.scale:
        scale(args.seed, args.scale_n, args.scale_degree)
    else:
        bench(args.seed, args.methods.split(","), [g for g in args.graphs.split(",") if g])


if __name__ == "__main__":
    main()
