import numpy as np
import pytest

from corefold.mapping.topology.model import Topology, TopologyError


def test_from_edges_symmetrises_and_counts_fan_in():
    # synapses 0->1 (w 2), 1->0 (w 3), 0->1 again (w 1), 2->2 (self), 3->1
    t = Topology.from_edges(np.array([0, 1, 0, 2, 3]), np.array([1, 0, 1, 2, 1]), np.array([2, 3, 1, 5, 4]), 5)
    t.validate()
    assert t.indptr.tolist() == [0, 1, 3, 3, 4, 4]
    assert t.indices.tolist() == [1, 0, 3, 1]
    assert t.weights.tolist() == [6, 6, 4, 4]
    assert t.synapses.tolist() == [1, 3, 1, 0, 0]  # fan-in counts synapses, self ones too
    assert t.degree().tolist() == [1, 2, 0, 1, 0]
    assert t.weighted_degree().tolist() == [6, 10, 0, 4, 0]
    assert t.total_weight() == 10 and t.num_edges == 2


@pytest.mark.parametrize("mutate,match", [
    (lambda t: setattr(t, "indices", t.indices[::-1].copy()), "not strictly ascending"),
    (lambda t: t.weights.__setitem__(0, 99), "equal-weight reverse"),
    (lambda t: t.weights.__setitem__(0, -1), ">= 0"),
    (lambda t: setattr(t, "neuron_sizes", np.zeros(4, np.int64)), "neuron_sizes must be >= 1"),
    (lambda t: setattr(t, "synapses", np.zeros(3, np.int64)), "synapses must be an integer array of 4"),
    (lambda t: t.indices.__setitem__(0, 7), "outside"),
    (lambda t: setattr(t, "indptr", t.indptr.astype(np.int32)), "int64"),
])
def test_validate_names_the_violation(mutate, match):
    t = Topology.from_edges(np.array([0, 0, 1]), np.array([1, 2, 3]), None, 4)
    t.validate()
    mutate(t)
    with pytest.raises(TopologyError, match=match):
        t.validate(name="mine")


def test_from_edges_rejects_bad_input():
    with pytest.raises(TopologyError, match="outside"):
        Topology.from_edges(np.array([0]), np.array([5]), None, 3)
    with pytest.raises(TopologyError, match=">= 0"):
        Topology.from_edges(np.array([0]), np.array([1]), np.array([-1.0]), 3)
