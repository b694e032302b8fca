import numpy as np
import pytest

from corefold.mapping.topology.generate import random_topology, small_world
from corefold.mapping.topology.model import TopologyError


def test_small_world_without_rewiring_is_the_ring_lattice():
    t = small_world(10, 4, p=0.0, seed=3)
    t.validate()
    for v in range(10):
        row = t.indices[t.indptr[v]:t.indptr[v + 1]].tolist()
        assert row == sorted({(v + d) % 10 for d in (-2, -1, 1, 2)})
    assert (t.weights == 2).all() and t.synapses.tolist() == [4] * 10


def test_small_world_is_seeded_and_keeps_every_synapse():
    a, b, c = small_world(2000, 10, 0.3, seed=1), small_world(2000, 10, 0.3, seed=1), small_world(2000, 10, 0.3, seed=2)
    a.validate()
    assert np.array_equal(a.indices, b.indices) and np.array_equal(a.weights, b.weights)
    assert not np.array_equal(a.indices, c.indices)
    assert a.synapses.sum() == 2000 * 10 and a.weights.sum() == 2 * 2000 * 10  # merged rewires keep weight
    assert a.indices.dtype == np.int32 and a.weights.dtype == np.int32
    lattice = np.abs(np.repeat(np.arange(2000), a.degree()) - a.indices)
    far = np.minimum(lattice, 2000 - lattice) > 5
    assert 0.2 < far.mean() < 0.4  # about p of the links are rewired far away


def test_small_world_parameters_are_checked():
    for n, k, p in [(10, 3, 0.1), (10, 10, 0.1), (10, 2, 1.5)]:
        with pytest.raises(TopologyError):
            small_world(n, k, p)


def test_random_topology_is_seeded_and_canonical():
    a = random_topology(200, 1000, 4, max_weight=7, max_neuron_size=3, isolated=0.25)
    a.validate()
    assert np.array_equal(a.indices, random_topology(200, 1000, 4, max_weight=7, max_neuron_size=3, isolated=0.25).indices)
    assert a.synapses.sum() == 1000 and 1 <= a.neuron_sizes.min() and a.neuron_sizes.max() <= 3
    assert (a.degree() == 0).sum() >= 30
