"""A binary min-heap of (key, vertex) in two flat arrays, for the Numba kernels.

Growing (:mod:`.initial`), Fiduccia-Mattheyses (:mod:`.fm`) and the heap rebalancing
(:mod:`.multiconstraint`) keep vertex priorities this way with lazy deletion: a changed
priority is pushed again and a popped entry whose key is stale is skipped by the caller.
Push and pop are O(log size); the caller sizes the arrays.
"""

from __future__ import annotations

from numba import njit


@njit(cache=True, nogil=True)
def heap_push(hk, hv, size, key, v):
    """Push ``(key, v)`` onto the heap of ``size`` entries; returns the new size. O(log size)."""
    i = size
    hk[i] = key
    hv[i] = v
    while i > 0:
        parent = (i - 1) >> 1
        if hk[parent] <= hk[i]:
            break
        hk[parent], hk[i] = hk[i], hk[parent]
        hv[parent], hv[i] = hv[i], hv[parent]
        i = parent
    return size + 1


@njit(cache=True, nogil=True)
def heap_pop(hk, hv, size):
    """Pop the entry of least key; returns ``(key, v, new size)``. O(log size)."""
    key = hk[0]
    v = hv[0]
    size -= 1
    hk[0] = hk[size]
    hv[0] = hv[size]
    i = 0
    while True:
        left = 2 * i + 1
        if left >= size:
            break
        c = left
        if left + 1 < size and hk[left + 1] < hk[left]:
            c = left + 1
        if hk[i] <= hk[c]:
            break
        hk[c], hk[i] = hk[i], hk[c]
        hv[c], hv[i] = hv[i], hv[c]
        i = c
    return key, v, size
