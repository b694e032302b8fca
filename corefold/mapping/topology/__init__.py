"""Neuron-level topologies: the in-memory CSR model, the on-disk formats and generators.

Modules in data-flow order: ``model`` (:class:`Topology`, validation, the synapse
convention), ``varint`` / ``records`` / ``zipstore`` / ``archive`` (the out-of-core
archive of SPEC M4 §1, docs/topology-archive.md), ``csr_npz`` and ``edge_list`` (the other
formats), ``io`` (load/save/convert by extension), ``generate`` (seeded small worlds and
random graphs), ``expand`` and ``generate_cnn`` (real networks expanded from the IR into
neurons; the only modules here that import the IR).
"""

from corefold.mapping.topology.io import convert_topology, load_topology, save_topology
from corefold.mapping.topology.model import Topology, TopologyError

__all__ = ["Topology", "TopologyError", "load_topology", "save_topology", "convert_topology"]
