"""boxes: the array-indexed sub_pieces equals the plain one, and intersect's edge cases."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corefold.backend.boxes import Piece, intersect, piece_boxes, sub_pieces


def test_intersect():
    assert intersect((0, 2), (4, 4), (3, 0), (5, 3)) == ((3, 2), (1, 1))
    assert intersect((0, 0), (4, 4), (4, 0), (1, 4)) is None  # touching only
    assert intersect((), (), (), ()) == ((), ())  # a scalar's one box
    with pytest.raises(ValueError, match="ranks 2, 2, 1, 1"):
        intersect((0, 0), (1, 1), (0,), (1,))


@st.composite
def _grids(draw):
    """An operand cut into a grid of pieces (shuffled), and a box inside it."""
    rank = draw(st.integers(1, 4))
    cuts, shape = [], []
    for _ in range(rank):
        n = draw(st.integers(1, 9))
        parts = draw(st.lists(st.integers(1, 4), min_size=n, max_size=n))
        cuts.append(np.concatenate(([0], np.cumsum(parts))).tolist())
        shape.append(int(sum(parts)))
    pieces = []
    for k, cell in enumerate(itertools.product(*[range(len(c) - 1) for c in cuts])):
        lo = tuple(cuts[d][i] for d, i in enumerate(cell))
        ext = tuple(cuts[d][i + 1] - cuts[d][i] for d, i in enumerate(cell))
        pieces.append(Piece(lo, ext, k, ext, (0,) * rank))
    order = draw(st.permutations(range(len(pieces))))
    start = tuple(draw(st.integers(0, s - 1)) for s in shape)
    extent = tuple(draw(st.integers(1, s - b)) for s, b in zip(shape, start, strict=True))
    return tuple(pieces[i] for i in order), start, extent


@settings(max_examples=200, deadline=None)
@given(_grids())
def test_sub_pieces_with_the_pieces_boxes_is_the_plain_loop(grid):
    pieces, start, extent = grid
    plain = sub_pieces(pieces, start, extent)
    assert sub_pieces(pieces, start, extent, piece_boxes(pieces)) == plain
    # the pieces cover the box exactly once
    assert sum(int(np.prod(p.extent)) for p in plain) == int(np.prod(extent))
