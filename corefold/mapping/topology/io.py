"""Load, save and convert topologies; the format follows the file extension.

``.zip`` the out-of-core archive (:mod:`~corefold.mapping.topology.archive`), ``.npz`` a
CSR ``.npz`` (:mod:`~corefold.mapping.topology.csr_npz`), ``.txt``/``.edges``/``.el`` an edge
list (:mod:`~corefold.mapping.topology.edge_list`).
"""

from __future__ import annotations

from pathlib import Path

from corefold.mapping.topology.model import Topology, TopologyError

FORMATS = {".zip": "archive", ".npz": "npz", ".txt": "edges", ".edges": "edges", ".el": "edges"}


def topology_format(path: str | Path) -> str:
    """"archive", "npz" or "edges" from the extension.

    Raises:
        TopologyError: an unknown extension.
    """
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise TopologyError(f"'{path}': unknown topology extension '{suffix}' "
                            f"(expected one of {', '.join(sorted(FORMATS))})")
    return FORMATS[suffix]


def load_topology(path: str | Path, *, validate: bool = True, progress: bool = False) -> Topology:
    """Read a topology in any of the three formats.

    Raises:
        TopologyError: unknown extension, or a missing, malformed or corrupt file (named).
    """
    fmt = topology_format(path)
    if fmt == "archive":
        from corefold.mapping.topology.archive import read_archive

        return read_archive(path, validate=validate, progress=progress)
    if fmt == "npz":
        from corefold.mapping.topology.csr_npz import read_npz

        return read_npz(path, validate=validate)
    from corefold.mapping.topology.edge_list import read_edge_list

    return read_edge_list(path, validate=validate)


def save_topology(topo: Topology, path: str | Path, *, level: int | None = None, progress: bool = False) -> None:
    """Write ``topo`` in the format of ``path``'s extension, atomically (temp file, rename).

    Args:
        level: deflate level for archives (default :data:`archive.DEFAULT_LEVEL`).

    Raises:
        TopologyError: unknown extension, or arrays the format cannot hold.
        CorefoldError: the output directory does not exist.
    """
    from corefold.io import atomic_output

    fmt = topology_format(path)
    with atomic_output(path) as tmp:
        if fmt == "archive":
            from corefold.mapping.topology.archive import DEFAULT_LEVEL, write_archive

            write_archive(topo, tmp, level=DEFAULT_LEVEL if level is None else level, progress=progress)
        elif fmt == "npz":
            from corefold.mapping.topology.csr_npz import write_npz

            write_npz(topo, tmp)
        else:
            from corefold.mapping.topology.edge_list import write_edge_list

            write_edge_list(topo, tmp)


def convert_topology(src: str | Path, dst: str | Path, *, level: int | None = None, progress: bool = False) -> Topology:
    """Read ``src`` and write it as ``dst`` (formats from the extensions); returns the topology."""
    topo = load_topology(src, progress=progress)
    save_topology(topo, dst, level=level, progress=progress)
    return topo
