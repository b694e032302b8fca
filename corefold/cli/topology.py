"""``corefold topology``: generate, expand, convert and describe neuron-level topologies.

Subcommands::

    corefold topology generate {cifar-cnn,lenet,vgg-small,vgg11,mobilenet-tiny,small-world,random} -o OUT
    corefold topology expand MODEL.onnx -o OUT [--shape NAME=DIMS]
    corefold topology convert IN OUT
    corefold topology info FILE

The format of every file follows its extension: ``.zip`` archive, ``.npz`` CSR, ``.txt``,
``.edges`` or ``.el`` edge list.
"""

from __future__ import annotations

import argparse

from corefold.cli.common import (
    add_shape_argument,
    finite_float,
    non_negative_int,
    positive_int,
    shape_bindings,
    value_bindings,
)

NETWORKS = ("cifar-cnn", "lenet", "vgg-small", "vgg11", "mobilenet-tiny")
GENERATORS = NETWORKS + ("small-world", "random")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    g = sub.add_parser("generate", help="build a CNN's neuron-level topology or a seeded synthetic graph")
    g.add_argument("kind", choices=GENERATORS)
    g.add_argument("-o", "--output", required=True, help="output file (.zip, .npz, .txt)")
    g.add_argument("--seed", type=non_negative_int, default=0, help="random seed (small-world, random)")
    g.add_argument("--n", type=positive_int, default=100_000, help="vertices (small-world, random; default 100000)")
    g.add_argument("--k", type=positive_int, default=10, help="small-world: lattice neighbours, even (default 10)")
    g.add_argument("--p", type=_probability, default=0.1, help="small-world: rewiring probability (default 0.1)")
    g.add_argument("--synapses", type=non_negative_int, default=1_000_000,
                   help="random: directed synapses (default 1e6)")
    g.add_argument("--max-weight", type=positive_int, default=1, help="random: weights uniform in [1, W]")
    g.add_argument("--level", type=_level, default=None, help="deflate level for .zip, 1-9 (default 1); 0 stores the members uncompressed")

    e = sub.add_parser("expand", help="expand an ONNX model's conv and dense layers into neurons")
    e.add_argument("model", help="ONNX model")
    e.add_argument("-o", "--output", required=True)
    add_shape_argument(e)
    e.add_argument("--level", type=_level, default=None, help="deflate level for .zip, 1-9 (default 1); 0 stores the members uncompressed")

    c = sub.add_parser("convert", help="convert between .zip archive, .npz and edge list")
    c.add_argument("input")
    c.add_argument("output")
    c.add_argument("--level", type=_level, default=None, help="deflate level for .zip, 1-9 (default 1); 0 stores the members uncompressed")

    i = sub.add_parser("info", help="print vertices, edges, total weight and degree statistics")
    i.add_argument("file")


def _level(text: str) -> int:
    value = non_negative_int(text)
    if value > 9:
        raise argparse.ArgumentTypeError(f"{text!r}: deflate levels are 0 to 9")
    return value


def _probability(text: str) -> float:
    value = finite_float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a probability in [0, 1]")
    return value


def _stats(label: str, values) -> str:
    if values.size == 0:
        return f"{label:<16}-"
    return f"{label:<16}min {values.min()}  mean {values.mean():.2f}  max {values.max()}"


def _info(path: str) -> None:
    import numpy as np

    from corefold.mapping.topology.io import load_topology, topology_format

    if topology_format(path) == "archive":
        # NOTE: archives stream: statistics without holding the edges in memory.
        from corefold.mapping.topology.archive import ArchiveReader

        with ArchiveReader(path) as reader:
            m = reader.manifest
            n = m["vertices"]
            degree = np.zeros(n, np.int64)
            sizes = np.zeros(n, np.int64)
            synapses = np.zeros(n, np.int64)
            total = 0.0
            for ch in reader.chunks(progress=True):
                sl = slice(ch.first, ch.first + ch.num_vertices)
                degree[sl] = np.diff(ch.indptr)
                sizes[sl], synapses[sl] = ch.neuron_sizes, ch.synapses
                total += float(ch.weights.sum(dtype=np.float64))
        print(f"format          archive v{m['version']} ({m['weight_encoding']} weights, {m['weights_dtype']})")
        entries = m["entries"]
    else:
        t = load_topology(path)
        n, degree, sizes, synapses = t.num_vertices, t.degree(), t.neuron_sizes, t.synapses
        total = float(t.weights.sum(dtype=np.float64))
        entries = t.indices.shape[0]
        print(f"format          {topology_format(path)} (weights {t.weights.dtype})")
    half = total / 2
    print(f"vertices        {n}")
    print(f"edges           {entries // 2}")
    print(f"total weight    {int(half) if half == int(half) else half}")
    print(f"neurons         {int(sizes.sum())}")
    print(f"synapses        {int(synapses.sum())}")
    print(_stats("degree", degree))
    print(_stats("fan-in", synapses))
    print(f"isolated        {int((degree == 0).sum())}")


def run(args: argparse.Namespace) -> int:
    import time

    from corefold.mapping.topology.io import convert_topology, save_topology, topology_format

    if args.action == "info":
        _info(args.file)
        return 0
    from corefold.io import check_outputs

    start = time.perf_counter()
    source = args.input if args.action == "convert" else (args.model if args.action == "expand" else None)
    check_outputs([("-o" if args.action != "convert" else "OUTPUT", args.output)], inputs=[source])
    if args.action == "convert":
        topology_format(args.output)  # fail before reading a large input
        topo = convert_topology(args.input, args.output, level=args.level, progress=True)
    else:
        topology_format(args.output)
        if args.action == "expand":
            from corefold.errors import CorefoldError

            try:
                from corefold.frontend.onnx import load_model
            except ImportError:
                raise CorefoldError("the ONNX importer (corefold.frontend.onnx) is not available in this build") from None
            from corefold.mapping.topology.expand import expand_topology

            topo = expand_topology(load_model(args.model, shape_bindings(args), values=value_bindings(args)))
        elif args.kind in NETWORKS:
            from corefold.mapping.topology.generate_cnn import stack_topology

            topo = stack_topology(args.kind)
        elif args.kind == "small-world":
            from corefold.mapping.topology.generate import small_world

            topo = small_world(args.n, args.k, args.p, seed=args.seed)
        else:
            from corefold.mapping.topology.generate import random_topology

            topo = random_topology(args.n, args.synapses, seed=args.seed, max_weight=args.max_weight)
        save_topology(topo, args.output, level=args.level, progress=True)
    print(f"wrote {args.output}: {topo.num_vertices} vertices, {topo.num_edges} edges, "
          f"{int(topo.synapses.sum())} synapses in {time.perf_counter() - start:.1f} s")
    return 0
