"""Boxes of tensors: the algebra behind free Concat, Slice, Split and reshapes.

A *box* of a tensor of shape ``S`` is ``(start, extent)``, the dense sub-array
``[start[d], start[d] + extent[d])`` on every axis. Lowering represents a tensor that no
operator computes (a Concat, a Slice, a Split or a reshape of others) as *pieces*: boxes
of it, each equal to a box of a physical tensor seen as some shape (:class:`Piece`).
Every function here is O(rank) per box (O(rank * pieces) per operand).
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import add, sub

import numpy as np

from corefold.ops.facets import prod

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Piece:
    """Box ``[dst_start, dst_start + extent)`` of an operand equals the box ``[src_start,
    src_start + extent)`` of physical tensor ``phys`` seen as a C-order array of
    ``src_shape`` (``prod(src_shape)`` = the tensor's element count)."""

    dst_start: Shape
    extent: Shape
    phys: int
    src_shape: Shape
    src_start: Shape

    @property
    def elements(self) -> int:
        return prod(self.extent)


def intersect(a_start: Shape, a_extent: Shape, b_start: Shape, b_extent: Shape) -> tuple[Shape, Shape] | None:
    """The intersection of two boxes, or None when it is empty. O(rank)."""
    if not len(a_start) == len(a_extent) == len(b_start) == len(b_extent):
        raise ValueError(f"intersect: boxes of ranks {len(a_start)}, {len(a_extent)}, {len(b_start)}, "
                         f"{len(b_extent)}")
    start = tuple(map(max, a_start, b_start))
    extent = tuple(map(sub, map(min, map(add, a_start, a_extent), map(add, b_start, b_extent)), start))
    if extent and min(extent) <= 0:
        return None
    return start, extent


def piece_boxes(pieces: tuple[Piece, ...]) -> tuple[np.ndarray, np.ndarray]:
    """``(lo, hi)``: each piece's box in its operand as rows (P x rank), for
    :func:`sub_pieces` over many boxes of one operand. O(P rank)."""
    rank = len(pieces[0].dst_start) if pieces else 0
    lo = np.array([p.dst_start for p in pieces], np.int64).reshape(len(pieces), rank)
    return lo, lo + np.array([p.extent for p in pieces], np.int64).reshape(len(pieces), rank)


def sub_pieces(pieces: tuple[Piece, ...], start: Shape, extent: Shape,
               boxes: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[Piece, ...]:
    """The pieces of box ``(start, extent)`` of an operand made of ``pieces``, in the box's
    own coordinates. O(P rank); with ``boxes`` (:func:`piece_boxes` of ``pieces``) the
    overlap test is one NumPy pass and only the pieces it finds are cut (slicing an
    operand of P pieces into P boxes: O(P^2) array work instead of O(P^2) Python)."""
    out = []
    if boxes is not None and len(pieces):
        lo, hi = boxes
        box_lo = np.asarray(start, np.int64)
        box_hi = box_lo + np.asarray(extent, np.int64)
        candidates = [pieces[i] for i in np.flatnonzero(((lo < box_hi) & (hi > box_lo)).all(axis=1)).tolist()]
    else:
        candidates = pieces
    for p in candidates:
        hit = intersect(p.dst_start, p.extent, start, extent)
        if hit is None:
            continue
        s, e = hit
        src = tuple(ps + (si - pd) for ps, si, pd in zip(p.src_start, s, p.dst_start, strict=True))
        out.append(Piece(tuple(si - b for si, b in zip(s, start, strict=True)), e, p.phys, p.src_shape, src))
    return tuple(out)


def shift(pieces: tuple[Piece, ...], axis: int, offset: int) -> tuple[Piece, ...]:
    """The pieces moved by ``offset`` along ``axis`` (a Concat input)."""
    return tuple(Piece(tuple(s + offset if d == axis else s for d, s in enumerate(p.dst_start)), p.extent,
                       p.phys, p.src_shape, p.src_start) for p in pieces)


def box_range(shape: Shape, start: Shape, extent: Shape) -> tuple[int, int] | None:
    """The flat C-order range ``[lo, hi)`` of a box, if the box is contiguous in memory
    (every axis before some ``j`` of extent 1, every axis after ``j`` whole)."""
    r = len(shape)
    j = 0
    while j < r and extent[j] == 1:
        j += 1
    if any(extent[d] != shape[d] for d in range(j + 1, r)):
        return None
    lo = int(np.ravel_multi_index(start, shape)) if r else 0
    return lo, lo + prod(extent)


def range_box(shape: Shape, lo: int, hi: int) -> tuple[Shape, Shape] | None:
    """The box of ``shape`` whose flat range is ``[lo, hi)``, if there is one."""
    r = len(shape)
    if r == 0:
        return ((), ()) if (lo, hi) == (0, 1) else None
    for j in range(r):
        inner = prod(shape[j + 1:])
        if lo % inner or (hi - lo) % inner:
            continue
        first = lo // inner
        count = (hi - lo) // inner
        if first % shape[j] + count > shape[j]:
            continue
        start = tuple(int(i) for i in np.unravel_index(lo, shape))
        extent = tuple([1] * j + [count] + list(shape[j + 1:]))
        return start, extent
    return None


def flat_view(elements: int, lo: int, extent: Shape) -> tuple[Shape, Shape] | None:
    """A shape of rank ``len(extent)`` to see a tensor of ``elements`` elements as, and the
    start of the box of ``extent`` covering its flat range ``[lo, lo + prod(extent))``; None
    when no such shape exists."""
    r = len(extent)
    if r == 0:
        return ((), ()) if elements == 1 and lo == 0 else None
    j = 0
    while j < r - 1 and extent[j] == 1:
        j += 1
    inner = prod(extent[j + 1:])
    if elements % inner or lo % inner:
        return None
    shape = (1,) * j + (elements // inner,) + tuple(extent[j + 1:])
    start = (0,) * j + (lo // inner,) + (0,) * (r - j - 1)
    return shape, start


def reshape_pieces(pieces: tuple[Piece, ...], old: Shape, new: Shape,
                   phys_elements: dict[int, int]) -> tuple[Piece, ...] | None:
    """The pieces of ``reshape(operand, new)`` for an operand of shape ``old``, or None when
    some piece is not a box of the new shape (the operand must then be materialised).

    ``phys_elements[p]`` is the element count of physical tensor ``p``.
    """
    squeezed_old = tuple(d for d in old if d != 1)
    if squeezed_old == tuple(d for d in new if d != 1):
        # only unit axes change: drop and insert them in every box
        keep = [d for d in range(len(old)) if old[d] != 1]
        out = []
        for p in pieces:
            nd = _unit_axes(new, [p.dst_start[d] for d in keep], 0)
            ne = _unit_axes(new, [p.extent[d] for d in keep], 1)
            if len(p.src_shape) == len(old) and all(p.src_shape[d] == 1 for d in range(len(old)) if old[d] == 1):
                src = (_unit_axes(new, [p.src_shape[d] for d in keep], 1),
                       _unit_axes(new, [p.src_start[d] for d in keep], 0))
            else:
                src = _src_view(p, ne, phys_elements)
            if src is None:
                return None
            out.append(Piece(nd, ne, p.phys, src[0], src[1]))
        return tuple(out)
    out = []
    for p in pieces:
        rng = box_range(old, p.dst_start, p.extent)
        box = None if rng is None else range_box(new, *rng)
        src = None if box is None else _src_view(p, box[1], phys_elements)
        if src is None:
            return _reshape_prefix(pieces, old, new)
        out.append(Piece(box[0], box[1], p.phys, src[0], src[1]))
    return tuple(out)


def kept_suffix(old: Shape, new: Shape) -> tuple[int, int] | None:
    """``(a, b)`` when ``reshape(old, new)`` only regroups the leading axes: ``old[a:] ==
    new[b:]``, with ``a`` and ``b`` the shortest prefixes of equal size that leave a suffix
    of at least one axis (a channel shuffle's ``(1, 112, 56, 56) -> (1, 4, 28, 56, 56)``:
    ``(2, 3)``); else None. O(rank)."""
    for k in range(min(len(old), len(new)), 0, -1):
        a, b = len(old) - k, len(new) - k
        if tuple(old[a:]) == tuple(new[b:]) and prod(old[:a]) == prod(new[:b]):
            return a, b
    return None


def _reshape_prefix(pieces: tuple[Piece, ...], old: Shape, new: Shape) -> tuple[Piece, ...] | None:
    """:func:`reshape_pieces` for a reshape that regroups only the leading axes
    (:func:`kept_suffix`) and pieces whose leading part is a contiguous box of both
    groupings and is seen in the source as in the operand: a band of rows of all channels
    (a row cut) stays a box when the channels are split into groups, where its flat range
    is not contiguous. None when some piece is not such a box. O(rank) per piece."""
    kept = kept_suffix(old, new)
    if kept is None or kept[0] == 0:
        return None
    a, b = kept
    out = []
    for p in pieces:
        rng = box_range(old[:a], p.dst_start[:a], p.extent[:a])
        box = None if rng is None else range_box(new[:b], *rng)
        if box is None or len(p.src_shape) != len(old):
            return None
        if tuple(p.src_shape[:a]) == tuple(old[:a]) and tuple(p.src_start[:a]) == tuple(p.dst_start[:a]):
            view = (tuple(new[:b]), box[0])  # the source's leading axes are the operand's
        else:
            # (a Concat's piece from another tensor: its leading axes are its own) any
            # grouping of the source's leading axes keeps the rest; the one flat_view picks
            # holds the piece's leading box, when that is a contiguous range of the source's
            srng = box_range(tuple(p.src_shape[:a]), tuple(p.src_start[:a]), tuple(p.extent[:a]))
            view = None if srng is None else flat_view(prod(p.src_shape[:a]), srng[0], box[1])
            if view is None:
                return None
        out.append(Piece(box[0] + tuple(p.dst_start[a:]), box[1] + tuple(p.extent[a:]), p.phys,
                         tuple(view[0]) + tuple(p.src_shape[a:]), tuple(view[1]) + tuple(p.src_start[a:])))
    return tuple(out)


def _unit_axes(shape: Shape, values: list[int], unit: int) -> Shape:
    """``values`` on the non-unit axes of ``shape``, ``unit`` on its unit axes."""
    it = iter(values)
    return tuple(unit if d == 1 else next(it) for d in shape)


def _src_view(p: Piece, extent: Shape, phys_elements: dict[int, int]) -> tuple[Shape, Shape] | None:
    """The piece's source box, seen with ``extent`` (same elements, contiguous)."""
    if tuple(extent) == tuple(p.extent):
        return p.src_shape, p.src_start
    rng = box_range(p.src_shape, p.src_start, p.extent)
    if rng is None:
        return None
    return flat_view(phys_elements[p.phys], rng[0], extent)


def covers(pieces: tuple[Piece, ...], shape: Shape) -> bool:
    """Whether the pieces tile the whole of ``shape`` (their element counts add up; pieces
    built here never overlap)."""
    return sum(p.elements for p in pieces) == prod(shape)


def coalesce(pieces: tuple[Piece, ...]) -> tuple[Piece, ...]:
    """Merge pieces of the same tensor that are adjacent along one axis in both the operand
    and the source (a Concat of consecutive Slices of one tensor is that tensor's box).
    Pieces are grouped by tensor and merged in sorted order until nothing changes:
    O(p log p) per pass."""
    groups: dict[tuple, list[Piece]] = {}
    for p in pieces:
        groups.setdefault((p.phys, p.src_shape), []).append(p)
    out: list[Piece] = []
    for ps in groups.values():
        changed = len(ps) > 1
        while changed:
            changed = False
            ps = sorted(ps, key=lambda p: p.dst_start)
            merged = [ps[0]]
            for p in ps[1:]:
                m = _adjacent(merged[-1], p)
                if m is None:
                    merged.append(p)
                else:
                    merged[-1] = m
                    changed = True
            ps = merged
        out.extend(ps)
    return tuple(sorted(out, key=lambda p: p.dst_start))


def _adjacent(a: Piece, b: Piece) -> Piece | None:
    """``a`` followed by ``b`` along one axis, as one piece, or None."""
    if a.phys != b.phys or a.src_shape != b.src_shape or len(a.extent) != len(b.extent):
        return None
    for d in range(len(a.extent)):
        same = all(a.extent[k] == b.extent[k] and a.dst_start[k] == b.dst_start[k] and a.src_start[k] == b.src_start[k]
                   for k in range(len(a.extent)) if k != d)
        if same and a.dst_start[d] + a.extent[d] == b.dst_start[d] and a.src_start[d] + a.extent[d] == b.src_start[d]:
            ext = tuple(a.extent[k] + b.extent[k] if k == d else a.extent[k] for k in range(len(a.extent)))
            return Piece(a.dst_start, ext, a.phys, a.src_shape, a.src_start)
    return None
