"""``corefold map``: place a neuron-level topology on the cores of a target (SPEC M4)."""

from __future__ import annotations

import argparse
import sys
import time

from corefold.cli.common import add_target_argument, non_negative_int

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


class _HelpSettings(argparse.Action):
    """``--help-settings``: print every mapper setting with its default and meaning, and exit."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        from corefold.mapping.settings import MapSettings
        from corefold.settings import describe

        print(describe(MapSettings))
        parser.exit(0)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("topology", metavar="TOPOLOGY",
                        help="topology file: archive .zip, CSR .npz or edge list")
    parser.add_argument("-o", "--output", required=True, metavar="mapping.npz",
                        help="write core_xy (neurons x 2) and the summary here")
    add_target_argument(parser)
    parser.set_defaults(target="neuromorphic")
    parser.add_argument("--mesh", type=_mesh, metavar="WxH", help="override: one chip of W x H cores")
    parser.add_argument("--neurons-per-core", type=_positive, metavar="N", help="override the neuron capacity")
    parser.add_argument("--synapses-per-core", type=_positive, metavar="S", help="override the synapse capacity")
    parser.add_argument("--seed", type=non_negative_int, default=0, metavar="S", help="random seed (default 0)")
    parser.add_argument("--preset", default="default", choices=["default", "fast", "strong", "seed"],
                        help="mapper settings preset (default: default; seed = the seed's order of phases)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", dest="settings",
                        help="set one mapper setting (repeatable), after the preset; see --help-settings")
    parser.add_argument("--help-settings", action=_HelpSettings,
                        help="list every mapper setting (the spec's parameters among them) and exit")
    parser.add_argument("--threads", type=_positive, metavar="N",
                        help="worker threads (default: one per CPU; the mapping does not depend on it)")
    parser.add_argument("--heatmap", metavar="links.png", help="draw the NoC link-load heatmap (needs matplotlib)")
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


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    import numpy as np

    from corefold.io import atomic_outputs, check_outputs
    from corefold.mapping import objectives
    from corefold.mapping.mapper import core_capacities, map_topology
    from corefold.mapping.settings import MapSettings
    from corefold.settings import override
    from corefold.target import load_target

    check_outputs([("-o", args.output), ("--heatmap", args.heatmap)], inputs=[args.topology])
    if args.heatmap:
        _pyplot()  # fail before the work when matplotlib is missing
    t0 = time.perf_counter()
    settings = override(MapSettings.preset(args.preset), args.settings)
    if args.threads:
        settings = replace(settings, threads=args.threads)
    target = load_target(args.target)
    if args.mesh:
        target = target.with_mesh(*args.mesh)
    if args.neurons_per_core:
        target = replace(target, neurons_per_core=args.neurons_per_core)
    if args.synapses_per_core:
        target = replace(target, synapses_per_core=args.synapses_per_core)
    caps = core_capacities(target)
    topo = load_any_topology(args.topology)
    progress = None if not args.no_progress else False
    mapping = map_topology(topo, target, settings, seed=args.seed, progress=progress)
    ev = objectives.evaluate(topo, mapping.core_xy, target.width, target.height, target.mesh_width,
                             target.mesh_height, target.interchip_hop_cost,
                             (target.neurons_per_core, target.synapses_per_core))
    elapsed = time.perf_counter() - t0
    fill = ev["fill"]
    # the mapping and the heatmap appear together or not at all
    with atomic_outputs([args.output] + ([args.heatmap] if args.heatmap else [])) as tmps:
        with open(tmps[0], "wb") as f:
            np.savez(f, core_xy=mapping.core_xy.astype(np.int64), cut=ev["cut"], traffic=ev["traffic"],
                     lower_bound=ev["lower_bound"], max_link_load=ev["max_link_load"],
                     link_loads=ev["link_loads"], core_fill=fill, capacities=caps,
                     violations=ev["violations"], seconds=elapsed)
        if args.heatmap:
            draw_heatmap(ev["link_loads"], tmps[1])
    lb = ev["lower_bound"]
    print(f"mapped {topo.num_vertices} vertices ({int(topo.neuron_sizes.sum())} neurons, "
          f"{topo.num_edges} edges) onto {ev['cores_used']} cores of {target.name} "
          f"({target.width}x{target.height})")
    print(f"cut                  {ev['cut']:.6g}")
    print(f"hop-weighted traffic {ev['traffic']:.6g}")
    print(f"lower bound          {lb:.6g}  (traffic / bound = {ev['traffic'] / lb if lb > 0 else 1.0:.3f})")
    print(f"max link load        {ev['max_link_load']:.6g}")
    for d, name in enumerate(("neurons", "synapses")):
        print(f"fill {name:<9}       min {fill[:, d].min()} mean {fill[:, d].mean():.1f} max {fill[:, d].max()} "
              f"/ {caps[d] if d == 0 or target.synapses_per_core else 'unbounded'}")
    print(f"time                 {elapsed:.2f} s")
    return 0
