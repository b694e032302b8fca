"""boxes: the array-indexed sub_pieces equals the plain one, intersect's edge cases, and
reshaped pieces that assemble into the reshaped tensor."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corefold.backend.boxes import (
    Piece,
    intersect,
    kept_suffix,
    piece_boxes,
    reshape_pieces,
    shift,
    sub_pieces,
)


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


def _assemble(pieces, shape, phys: dict[int, np.ndarray]) -> np.ndarray:
    """The operand of ``shape`` the pieces describe: each piece's box of its physical
    tensor (seen as ``src_shape``) written at its place; NaN where no piece writes."""
    out = np.full(shape, np.nan)
    for p in pieces:
        src = phys[p.phys].reshape(p.src_shape)
        out[tuple(slice(d, d + e) for d, e in zip(p.dst_start, p.extent, strict=True))] = \
            src[tuple(slice(s, s + e) for s, e in zip(p.src_start, p.extent, strict=True))]
    return out


def _bands(shape, axis: int, k: int):
    """A tensor of ``shape`` cut into ``k`` bands along ``axis``: its pieces and their
    physical tensors (each band its own array)."""
    full = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
    edges = np.linspace(0, shape[axis], k + 1).astype(int)
    pieces, phys = [], {}
    for i, (a, b) in enumerate(zip(edges[:-1], edges[1:], strict=True)):
        start = tuple(a if d == axis else 0 for d in range(len(shape)))
        ext = tuple(b - a if d == axis else n for d, n in enumerate(shape))
        phys[i] = full[tuple(slice(s, s + e) for s, e in zip(start, ext, strict=True))].copy()
        pieces.append(Piece(start, ext, i, ext, (0,) * len(shape)))
    return full, tuple(pieces), phys


def test_kept_suffix_finds_the_regrouped_leading_axes():
    assert kept_suffix((1, 112, 56, 56), (1, 4, 28, 56, 56)) == (2, 3)  # a channel shuffle's split
    assert kept_suffix((1, 28, 4, 56, 56), (1, 112, 56, 56)) == (3, 2)  # ... and its merge
    assert kept_suffix((2, 3, 4), (2, 3, 4)) == (0, 0)  # nothing regrouped
    assert kept_suffix((1, 512, 1, 1), (1, 512)) is None  # a Flatten keeps no trailing axis
    assert kept_suffix((6, 4), (4, 6)) is None


@pytest.mark.parametrize("old,new,axis", [
    ((1, 12, 6, 5), (1, 3, 4, 6, 5), 2),   # row bands through a channel shuffle's first reshape
    ((1, 4, 3, 6, 5), (1, 12, 6, 5), 3),   # ... and through its second
    ((2, 6, 4), (12, 4), 2),               # a band of the last axis through merged leading axes
])
def test_row_bands_stay_boxes_through_a_reshape_of_the_leading_axes(old, new, axis):
    """A band of rows over every channel is no contiguous range of the flat tensor, so the
    flat rule cannot map it; with the leading axes regrouped and the rows kept, it is still
    a box, read from the band's own tensor."""
    full, pieces, phys = _bands(old, axis, 3)
    out = reshape_pieces(pieces, old, new, {i: a.size for i, a in phys.items()})
    assert out is not None and len(out) == 3
    assert {p.phys for p in out} == {0, 1, 2}
    np.testing.assert_array_equal(_assemble(out, new, phys), full.reshape(new))


def test_a_band_of_channels_through_a_regrouping_of_the_channels_is_no_box():
    """Channels [0, 6) of 12 regrouped as (3, 4): rows 0-1 of group 1 hold channels 4-5, no box
    of the new shape: the operand must be gathered (None)."""
    full, pieces, phys = _bands((1, 12, 6, 5), 1, 2)
    assert reshape_pieces(pieces, (1, 12, 6, 5), (1, 3, 4, 6, 5), {i: a.size for i, a in phys.items()}) is None


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_reshaped_pieces_assemble_into_the_reshaped_tensor(data):
    """Any operand cut into bands along one axis, reshaped by regrouping some leading axes:
    whatever pieces ``reshape_pieces`` gives make exactly ``reshape(operand)``."""
    rank = data.draw(st.integers(2, 4))
    old = tuple(data.draw(st.lists(st.sampled_from([1, 2, 3, 4, 6]), min_size=rank, max_size=rank)))
    a = data.draw(st.integers(1, rank - 1))
    lead = int(np.prod(old[:a]))
    divisors = [d for d in range(1, lead + 1) if lead % d == 0]
    d = data.draw(st.sampled_from(divisors))
    new = (d, lead // d) + old[a:]
    axis = data.draw(st.integers(0, rank - 1))
    k = data.draw(st.integers(1, old[axis]))
    full, pieces, phys = _bands(old, axis, k)
    out = reshape_pieces(pieces, old, new, {i: x.size for i, x in phys.items()})
    if out is not None:
        np.testing.assert_array_equal(_assemble(out, new, phys), full.reshape(new))


@pytest.mark.parametrize("k1,k2", [(3, 2), (1, 4)])
def test_a_concat_of_row_bands_stays_boxes_through_a_channel_shuffle(k1, k2):
    """torchvision's ShuffleNetV2 shuffles ``Concat(x1, branch(x2))`` on channels: pieces of
    two tensors (each in its own row bands), whose leading axes are not the operand's. Each
    piece's channels are a contiguous range of its own tensor, so it is still a box of the
    reshaped operand, read through a view of its tensor's leading axes (until stop 54 the
    operand was gathered onto one core)."""
    # x1: the channels [4, 8) of a tensor of 8 in row bands, so its pieces start at channel 4
    # of their band tensors
    a_whole, a_pieces, a_phys = _bands((1, 8, 6, 5), 2, k1)
    a_full = a_whole[:, 4:]
    a_pieces = sub_pieces(a_pieces, (0, 4, 0, 0), (1, 4, 6, 5))
    b_full, b_pieces, b_phys = _bands((1, 4, 6, 5), 2, k2)
    b_pieces = tuple(Piece(p.dst_start, p.extent, p.phys + 10, p.src_shape, p.src_start) for p in b_pieces)
    phys = {**a_phys, **{i + 10: x for i, x in b_phys.items()}}
    pieces = a_pieces + shift(b_pieces, 1, 4)
    full = np.concatenate([a_full, b_full], axis=1)
    out = reshape_pieces(pieces, (1, 8, 6, 5), (1, 2, 4, 6, 5), {i: x.size for i, x in phys.items()})
    assert out is not None and len(out) == k1 + k2
    np.testing.assert_array_equal(_assemble(out, (1, 2, 4, 6, 5), phys), full.reshape(1, 2, 4, 6, 5))


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_reshaped_pieces_of_a_concat_assemble_into_the_reshaped_tensor(data):
    """Two tensors, each cut into bands along its own axis, concatenated along a leading
    axis, reshaped by regrouping the leading axes: whatever pieces ``reshape_pieces`` gives
    make exactly ``reshape(concat)``."""
    rank = data.draw(st.integers(2, 4))
    shape = list(data.draw(st.lists(st.sampled_from([1, 2, 3, 4]), min_size=rank, max_size=rank)))
    a = data.draw(st.integers(1, rank - 1))
    cat = data.draw(st.integers(0, a - 1))
    shapes = [tuple(shape), tuple(shape[:cat] + [data.draw(st.integers(1, 4))] + shape[cat + 1:])]
    pieces, phys, fulls, offset = [], {}, [], 0
    for t, sh in enumerate(shapes):
        axis = data.draw(st.integers(0, rank - 1))
        # each part a slice [lo, lo + n) along the concat axis of a tensor with more
        lo = data.draw(st.integers(0, 2))
        big = sh[:cat] + (sh[cat] + lo + data.draw(st.integers(0, 2)),) + sh[cat + 1:]
        whole, ps, ph = _bands(big, axis, data.draw(st.integers(1, big[axis])))
        start = tuple(lo if d == cat else 0 for d in range(rank))
        full = whole[tuple(slice(s, s + e) for s, e in zip(start, sh, strict=True))]
        ps = sub_pieces(ps, start, sh)
        ps = tuple(Piece(p.dst_start, p.extent, p.phys + 100 * t, p.src_shape, p.src_start) for p in ps)
        pieces += list(shift(ps, cat, offset))
        phys.update({i + 100 * t: x for i, x in ph.items()})
        fulls.append(full)
        offset += sh[cat]
    full = np.concatenate(fulls, axis=cat)
    old = full.shape
    lead = int(np.prod(old[:a]))
    d = data.draw(st.sampled_from([k for k in range(1, lead + 1) if lead % k == 0]))
    new = (d, lead // d) + old[a:]
    out = reshape_pieces(tuple(pieces), old, new, {i: x.size for i, x in phys.items()})
    if out is not None:
        np.testing.assert_array_equal(_assemble(out, new, phys), full.reshape(new))
