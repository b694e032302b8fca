"""Tasks onto cores by SRAM alone: the clustering :func:`~corefold.backend.lower.lower`
falls back to when list scheduling (:func:`corefold.backend.place.cluster`) runs out of
cores (``LowerSettings.pack_cores``); ``cluster(packed=...)`` then times the tasks on
the cores chosen here.
"""

from __future__ import annotations

from corefold.backend.lgraph import LoweredGraph
from corefold.target import Target


def pack(lg: LoweredGraph, target: Target) -> list[int] | None:
    """A core for every task by SRAM alone, or None if they need more cores than the
    target has: what :func:`~corefold.backend.lower.lower` falls back to when list
    scheduling runs out of cores (``LowerSettings.pack_cores``).

    The tasks that read the same weights are one item (its weights once, its largest
    working set), a task without weights an item of its own; best fit decreasing, by
    weights then working set: each item to the open core it leaves the least room on,
    where a core holds its items' weights plus their largest working set (at 99% of its
    SRAM, weights 64-byte aligned, as :func:`cluster` counts). The float ResNet-18 (46.7 MB
    of weights, 70% of the ``npu`` preset's SRAM), which list scheduling leaves 12 MB short,
    packs into 63 cores at the tile step's second threshold. Then :func:`_spread` gives
    the items with the most work more cores where room is left. O(items x cores)."""
    cap = int(0.99 * target.sram_bytes)
    items: dict[tuple, list] = {}
    for t in lg.tasks:
        consts = tuple(sorted(lg.consts_of(t)))
        key = consts if consts else ("task", t.id)
        item = items.setdefault(key, [sum(-(-lg.phys[c].nbytes // 64) * 64 for c in consts), 0, []])
        item[1] = max(item[1], lg.working_bytes(t))
        item[2].append(t.id)
    cores: list[list[int]] = []  # [weights, largest working set]
    where = [-1] * len(lg.tasks)
    for w, m, tasks in sorted(items.values(), key=lambda it: (-it[0], -it[1], it[2][0])):
        best = None
        for i, (cw, cm) in enumerate(cores):
            left = cap - cw - w - max(cm, m)
            if left >= 0 and (best is None or left < best[0]):
                best = (left, i)
        if best is None:
            if len(cores) == len(target.usable_cores) or w + m > cap:
                return None
            cores.append([0, 0])
            best = (0, len(cores) - 1)
        core = cores[best[1]]
        core[0], core[1] = core[0] + w, max(core[1], m)
        for t in tasks:
            where[t] = best[1]
    _spread(lg, target, cap, list(items.values()), cores, where)
    return where


def _spread(lg: LoweredGraph, target: Target, cap: int, items: list[list], cores: list[list[int]],
            where: list[int]) -> None:
    """Spread the packed items' tasks: the items with the most work first, each copy of an
    item's weights put where a core has the most room for it (a fresh core while the target
    has one), taking half of the item's tasks from the core that has the most of its work,
    until every core of the item has one task or no core has room. In place. The float
    ResNet-18's convolutions ran their row bands one after another on the core that held
    their weights: 1872.0 -> 1428.1 us. O(copies x cores)."""
    sec = {t.id: t.seconds for t in lg.tasks}
    for w, m, tasks in sorted(items, key=lambda it: -sum(sec[t] for t in it[2])):
        if len(tasks) < 2 or w == 0:
            continue
        while True:
            on: dict[int, list[int]] = {}
            for t in tasks:
                on.setdefault(where[t], []).append(t)
            src, mine = max(on.items(), key=lambda kv: (sum(sec[t] for t in kv[1]), -kv[0]))
            if len(mine) < 2:
                break
            best = None
            for i, (cw, cm) in enumerate(cores):
                if i in on:
                    continue
                left = cap - cw - w - max(cm, m)
                if left >= 0 and (best is None or left > best[0]):
                    best = (left, i)
            if best is None and len(cores) < len(target.usable_cores):
                cores.append([0, 0])
                best = (cap - w - m, len(cores) - 1)
            if best is None:
                break
            core = cores[best[1]]
            core[0], core[1] = core[0] + w, max(core[1], m)
            for t in mine[len(mine) // 2:]:
                where[t] = best[1]
