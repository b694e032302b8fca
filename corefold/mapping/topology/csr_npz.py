"""CSR ``.npz`` topologies: arrays ``indptr``, ``indices``, ``weights`` (a symmetric
adjacency in canonical form) and optionally ``neuron_sizes``, ``synapses`` and ``sends``
(uint8 per entry: which way the synapses run, see :mod:`~corefold.mapping.topology.model`).

Missing ``neuron_sizes`` default to 1 per vertex; missing ``synapses`` default to each
vertex's number of neighbours (a symmetric adjacency does not say which way synapses run).
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from corefold.io import open_npz
from corefold.mapping.topology.model import Topology, TopologyError

REQUIRED = ("indptr", "indices", "weights")
OPTIONAL = ("neuron_sizes", "synapses", "sends")


def read_npz(path: str | Path, *, validate: bool = True) -> Topology:
    """Load a CSR ``.npz``. O(m).

    Raises:
        TopologyError: the file is missing, not an npz, lacks an array, or (``validate``)
            is not a canonical symmetric graph; the message names the file and array.
    """
    try:
        with open_npz(path, "topology", TopologyError) as z:
            missing = [k for k in REQUIRED if k not in z.files]
            if missing:
                raise TopologyError(f"topology '{path}' lacks array(s) {', '.join(missing)} "
                                    f"(a CSR .npz needs {', '.join(REQUIRED)})")
            arrays = {k: z[k] for k in REQUIRED + OPTIONAL if k in z.files}
    except FileNotFoundError:
        raise TopologyError(f"topology '{path}' does not exist") from None
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise TopologyError(f"topology '{path}' is not a readable .npz: {exc}") from None
    indptr = arrays["indptr"]
    if indptr.ndim != 1 or indptr.dtype.kind not in "iu" or indptr.shape[0] < 1:
        raise TopologyError(f"topology '{path}': indptr must be a 1-D integer array")
    n = indptr.shape[0] - 1
    indptr = indptr.astype(np.int64, copy=False)
    sizes = arrays.get("neuron_sizes")
    synapses = arrays.get("synapses")
    topo = Topology(indptr, arrays["indices"], arrays["weights"],
                    np.ones(n, np.int64) if sizes is None else sizes.astype(np.int64, copy=False),
                    np.diff(indptr) if synapses is None else synapses.astype(np.int64, copy=False),
                    arrays.get("sends"))
    if validate:
        topo.validate(name=f"topology '{path}'")
    return topo


def write_npz(topo: Topology, path: str | Path) -> None:
    """Write the arrays (``sends`` when known), uncompressed (fast to load; the archive is
    the compact form)."""
    extra = {} if topo.sends is None else {"sends": topo.sends}
    with open(path, "wb") as f:
        np.savez(f, indptr=topo.indptr, indices=topo.indices, weights=topo.weights,
                 neuron_sizes=topo.neuron_sizes, synapses=topo.synapses, **extra)
