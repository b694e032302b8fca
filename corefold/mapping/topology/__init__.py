"""Neuron-level topologies: the in-memory CSR model and the on-disk formats."""

from corefold.mapping.topology.model import Topology

__all__ = ["Topology"]
