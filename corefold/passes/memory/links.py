"""Reservations on one direction of the host link: disjoint busy intervals in time.

The planner books each SwapOut on the device-to-host timeline and each SwapIn on the
host-to-device one, so that copies it counts on to overlap compute do not overlap each
other. Slots are found by a walk over the sorted bookings: O(k) for k bookings.
"""

from __future__ import annotations

from bisect import bisect_left, insort


class LinkTimeline:
    """Disjoint booked intervals ``[start, end)``, each with an owner (any hashable)."""

    def __init__(self) -> None:
        self._slots: list[tuple[float, float, int]] = []
        self._owner: dict[int, object] = {}
        self._next = 0

    def __len__(self) -> int:
        return len(self._slots)

    def busy_seconds(self) -> float:
        return sum(e - s for s, e, _ in self._slots)

    def _free_gaps(self, exclude: object | None):
        """(gap start, gap end) between bookings not owned by ``exclude``, then (end, inf)."""
        t = 0.0
        for s, e, k in self._slots:
            if exclude is not None and self._owner[k] == exclude:
                continue
            if s > t:
                yield t, s
            t = max(t, e)
        yield t, float("inf")

    def earliest(self, t0: float, length: float, exclude: object | None = None) -> tuple[float, float]:
        """The earliest free ``[start, start + length)`` with ``start >= t0``."""
        for a, b in self._free_gaps(exclude):
            start = max(a, t0)
            if start + length <= b:
                return start, start + length
        raise AssertionError("unreachable: the last gap is unbounded")

    def latest(self, t_min: float, deadline: float, length: float,
               exclude: object | None = None) -> tuple[float, float] | None:
        """The latest free ``[start, start + length)`` with ``start >= t_min`` and
        ``start + length <= deadline``, or None."""
        best = None
        for a, b in self._free_gaps(exclude):
            if a > deadline:
                break
            end = min(b, deadline)
            start = end - length
            if start >= max(a, t_min):
                best = (start, end)
        return best

    def book(self, start: float, end: float, owner: object) -> int:
        """Book ``[start, end)`` for ``owner``; returns the booking's key."""
        key = self._next
        self._next += 1
        self._owner[key] = owner
        insort(self._slots, (start, end, key))
        return key

    def cancel(self, key: int) -> None:
        """Remove booking ``key``."""
        for i in range(bisect_left(self._slots, (float("-inf"),)), len(self._slots)):
            if self._slots[i][2] == key:
                del self._slots[i]
                del self._owner[key]
                return
        raise KeyError(key)
