"""``corefold map``: place a neuron-level topology on the cores of a target (SPEC M4)."""

from __future__ import annotations

import argparse
import sys
import time

from corefold.cli.common import add_target_argument, non_negative_int
from corefold.cli.settings_args import add_settings_arguments

#: the largest mesh ``--mesh`` accepts (a million cores; real chips have thousands)
MAX_MESH_CORES = 1 << 20


def _mesh(text: str) -> tuple[int, int]:
    w, sep, h = text.lower().partition("x")
    try:
        dims = (int(w), int(h))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--mesh {text!r}: expected WxH, e.g. 9x9") from None
    if not sep or min(dims) < 1:
        raise argparse.ArgumentTypeError(f"--mesh {text!r}: expected WxH with positive sizes")
    if dims[0] * dims[1] > MAX_MESH_CORES:
        raise argparse.ArgumentTypeError(f"--mesh {text!r}: {dims[0] * dims[1]:,} cores; at most "
                                         f"{MAX_MESH_CORES:,} are supported")
    return dims


def _positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return v



def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("topology", metavar="TOPOLOGY",
                        help="topology file: archive .zip, CSR .npz or edge list")
    parser.add_argument("-o", "--output", required=True, metavar="mapping.npz",
                        help="write core_xy (neurons x 2) and the summary here")
    add_target_argument(parser)
    parser.set_defaults(target="neuromorphic")
    parser.add_argument("--mesh", type=_mesh, metavar="WxH", help="override: one chip of W x H cores")
    parser.add_argument("--chips", type=_mesh, metavar="CxR",
                        help="override: a board of C x R chips (of the target's or --mesh's chip)")
    parser.add_argument("--neurons-per-core", type=_positive, metavar="N", help="override the neuron capacity")
    parser.add_argument("--synapses-per-core", type=_positive, metavar="S", help="override the synapse capacity")
    parser.add_argument("--seed", type=non_negative_int, default=0, metavar="S", help="random seed (default 0)")
    parser.add_argument("--preset", default="default", choices=["default", "fast", "strong", "seed"],
                        help="mapper settings preset (default: default; seed = the seed's order of phases)")
    add_settings_arguments(parser, "corefold.mapping.settings:MapSettings", dest="settings")
    parser.add_argument("--objective", choices=["synapse", "multicast"],
                        help="traffic counted per synapse (default) or per spike along its XY multicast tree "
                             "(needs the synapses' directions; same as --set objective=...)")
    parser.add_argument("--threads", type=_positive, metavar="N",
                        help="worker threads (default: one per CPU; the mapping does not depend on it)")
    parser.add_argument("--heatmap", metavar="links.png", help="draw the NoC link-load heatmap (needs matplotlib)")
    parser.add_argument("--bound", action="store_true",
                        help="also bound the traffic of every mapping that keeps the capacities from below "
                             "(per-vertex bounds charged by an LP; synapse objective, topology in memory)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def load_any_topology(path: str):
    """Load a topology by extension (the topology package's loader when present)."""
    try:
        from corefold.mapping.topology.io import load_topology
    except ImportError:  # NOTE: before the topology formats land, read CSR .npz directly
        load_topology = None
    if load_topology is not None:
        return load_topology(path, progress=sys.stderr.isatty())
    import numpy as np

    from corefold.errors import CorefoldError
    from corefold.mapping.topology.model import Topology

    try:
        with np.load(path, allow_pickle=False) as z:
            indptr = z["indptr"].astype(np.int64)
            n = indptr.shape[0] - 1
            return Topology(indptr, z["indices"], z["weights"],
                            z["neuron_sizes"] if "neuron_sizes" in z.files else np.ones(n, np.int64),
                            z["synapses"] if "synapses" in z.files else np.diff(indptr))
    except (OSError, KeyError, ValueError) as exc:
        raise CorefoldError(f"topology '{path}': cannot read as CSR .npz ({exc})") from None


def _pyplot():
    """matplotlib's pyplot on the Agg backend.

    Raises:
        CorefoldError: matplotlib is not installed.
    """
    from corefold.errors import CorefoldError

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise CorefoldError("--heatmap needs matplotlib: pip install 'corefold[plot]'") from None
    return plt


def draw_heatmap(links, path: str) -> None:
    """Max of the four directed link loads at each core, written as a PNG to ``path``.

    Raises:
        CorefoldError: matplotlib is not installed.
    """
    plt = _pyplot()

    fig, ax = plt.subplots(figsize=(6, 5))
    im = ax.imshow(links.max(axis=2), origin="lower", cmap="inferno")
    ax.set_xlabel("x (core)")
    ax.set_ylabel("y (core)")
    ax.set_title("max outgoing link load per core (XY routing)")
    fig.colorbar(im, ax=ax, label="traffic")
    fig.savefig(path, format="png", dpi=120)
    plt.close(fig)


def phase_lines(summary: dict) -> list[str]:
    """The per-phase times of a mapping summary, one line per phase (out of core: one per
    streamed level too)."""
    lines = ["phases               " + ", ".join(f"{k} {v:.1f} s" for k, v in summary.get("time", {}).items()
                                                 if isinstance(v, float))]
    for i, lv in enumerate(summary.get("streamed_levels", [])):
        lines.append(f"  level {i}: {lv['vertices']} vertices, {lv['entries']} entries: match {lv['match']:.1f} s, "
                     f"contract {lv['contract']:.1f} s, uncoarsen {lv.get('uncoarsen', 0.0):.1f} s"
                     + (f" (refine gains {', '.join(f'{g:.3g}' for g in lv['refine_gains'])})"
                        if lv.get("refine_gains") else ""))
    if "coarsest_entries" in summary:
        inner = ", ".join(f"{k} {v:.1f} s" for k, v in summary.get("coarsest_time", {}).items() if isinstance(v, float))
        lines.append(f"  coarsest: {summary['coarsest_vertices']} vertices, {summary['coarsest_entries']} entries "
                     f"mapped in memory: {inner}")
    return lines


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    import numpy as np

    from corefold.io import atomic_outputs, check_outputs
    from corefold.mapping import objectives
    from corefold.mapping.mapper import core_capacities, map_topology
    from corefold.mapping.out_of_core import evaluate_archive, map_archive, wants_out_of_core
    from corefold.mapping.settings import MapSettings
    from corefold.mapping.topology.archive import ArchiveReader
    from corefold.settings import SettingsError, override
    from corefold.target import load_target

    check_outputs([("-o", args.output), ("--heatmap", args.heatmap)], inputs=[args.topology])
    if args.heatmap:
        _pyplot()  # fail before the work when matplotlib is missing
    t0 = time.perf_counter()
    settings = override(MapSettings.preset(args.preset), args.settings)
    if args.threads:
        settings = replace(settings, threads=args.threads)
    if args.objective:
        settings = replace(settings, objective=args.objective)
    target = load_target(args.target)
    if args.mesh:
        target = target.with_mesh(*args.mesh)
    if args.chips:
        target = replace(target, chips_x=args.chips[0], chips_y=args.chips[1], unusable_cores=frozenset())
    if args.neurons_per_core:
        target = replace(target, neurons_per_core=args.neurons_per_core)
    if args.synapses_per_core:
        target = replace(target, synapses_per_core=args.synapses_per_core)
    caps = core_capacities(target)
    progress = None if not args.no_progress else False
    if args.bound and settings.objective != "synapse":
        raise SettingsError("--bound: bounds the synapse objective's traffic only")
    bound = None
    if wants_out_of_core(args.topology, settings):
        if args.bound:
            raise SettingsError("--bound needs the topology in memory: --set out_of_core=never "
                                "(or a larger --set memory_budget_gib)")
        if settings.objective == "multicast":
            raise SettingsError("the multicast objective needs the topology in memory: --set out_of_core=never "
                                "(or a larger --set memory_budget_gib)")
        mapping = map_archive(args.topology, target, settings, seed=args.seed, progress=progress)
        t_eval = time.perf_counter()
        ev = evaluate_archive(args.topology, mapping.core_xy, target)
        mapping.summary["time"]["evaluate"] = time.perf_counter() - t_eval
        with ArchiveReader(args.topology) as reader:
            sizes = reader.vertex_loads()[0]
            counts = (reader.num_vertices, int(sizes.sum()), reader.manifest["entries"] // 2)
        ev["synapse_traffic"], ev["multicast_traffic"], ev["connectivity"] = ev["traffic"], np.nan, np.nan
    else:
        topo = load_any_topology(args.topology)
        mapping = map_topology(topo, target, settings, seed=args.seed, progress=progress)
        ev = objectives.evaluate(topo, mapping.core_xy, target.width, target.height, target.mesh_width,
                                 target.mesh_height, target.interchip_hop_cost,
                                 (target.neurons_per_core, target.synapses_per_core), objective=settings.objective)
        counts = (topo.num_vertices, int(topo.neuron_sizes.sum()), topo.num_edges)
        if args.bound:
            from corefold.mapping.bound import traffic_bound

            bound = traffic_bound(topo, np.array(target.usable_cores), target.mesh_width, target.mesh_height,
                                  target.interchip_hop_cost, (target.neurons_per_core, target.synapses_per_core))
        del topo
    elapsed = time.perf_counter() - t0
    fill = ev["fill"]
    # the mapping and the heatmap appear together or not at all
    with atomic_outputs([args.output] + ([args.heatmap] if args.heatmap else [])) as tmps:
        with open(tmps[0], "wb") as f:
            np.savez(f, core_xy=mapping.core_xy.astype(np.int64), cut=ev["cut"], traffic=ev["traffic"],
                     lower_bound=ev["lower_bound"], max_link_load=ev["max_link_load"],
                     link_loads=ev["link_loads"], core_fill=fill, capacities=caps,
                     violations=ev["violations"], seconds=elapsed, objective=settings.objective,
                     synapse_traffic=ev["synapse_traffic"], multicast_traffic=ev["multicast_traffic"],
                     connectivity=ev["connectivity"],
                     **({"any_mapping_bound": bound.value} if bound is not None else {}))
        if args.heatmap:
            draw_heatmap(ev["link_loads"], tmps[1])
    lb = ev["lower_bound"]
    print(f"mapped {counts[0]} vertices ({counts[1]} neurons, {counts[2]} edges) onto {ev['cores_used']} cores of "
          f"{target.name} ({target.width}x{target.height})" + (" out of core" if mapping.summary.get("out_of_core")
                                                                else ""))
    print(f"cut                  {ev['cut']:.6g}")
    other = "multicast" if settings.objective == "synapse" else "synapse"
    print(f"hop-weighted traffic {ev['traffic']:.6g}  ({settings.objective}; {other}: {ev[other + '_traffic']:.6g})")
    print(f"lower bound          {lb:.6g}  (traffic / bound = {ev['traffic'] / lb if lb > 0 else 1.0:.3f})")
    if bound is not None:
        ratio = ev["traffic"] / bound.value if bound.value > 0 else float("inf") if ev["traffic"] > 0 else 1.0
        print(f"any mapping >=       {bound.value:.6g}  (every mapping that keeps the capacities; traffic / it = "
              f"{ratio:.3f}, at most that far above the optimum)")
    print(f"max link load        {ev['max_link_load']:.6g}")
    for d, name in enumerate(("neurons", "synapses")):
        print(f"fill {name:<9}       min {fill[:, d].min()} mean {fill[:, d].mean():.1f} max {fill[:, d].max()} "
              f"/ {caps[d] if d == 0 or target.synapses_per_core else 'unbounded'}")
    print(f"time                 {elapsed:.2f} s")
    for line in phase_lines(mapping.summary):
        print(line)
    return 0
