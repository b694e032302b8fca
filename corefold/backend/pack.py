"""Tasks onto cores by SRAM alone: the clustering :func:`~corefold.backend.lower.lower`
falls back to when list scheduling (:func:`corefold.backend.place.cluster`) runs out of
cores (``LowerSettings.pack_cores``); ``cluster(packed=...)`` then times the tasks on
the cores chosen here.

Four steps, each in place on ``where`` (a core index per task) and ``cores`` (per core:
its weights and its largest working set, at 99% of its SRAM, weights 64-byte aligned, as
:func:`~corefold.backend.place.cluster` counts):

1. :func:`_fill`: the tasks reading the same weights are one item; best fit decreasing by
   weights, an operator's items apart while it is on fewer than ``apart`` cores;
2. the tasks without weights, in topological order, beside their producer (:func:`_fill`);
3. :func:`_spread`: the items with the most work get copies of their weights where room
   is left;
4. :func:`_fit_streams`: tasks move so that no core receives from more cores than its
   NoC buffers take.
"""

from __future__ import annotations

from collections import Counter

from corefold.backend.lgraph import LoweredGraph, Task, operator_name
from corefold.target import Target

#: Share of a core's SRAM an item may fill (as :func:`~corefold.backend.place.cluster` counts).
FILL = 0.99


def pack(lg: LoweredGraph, target: Target, apart: int = 0) -> list[int] | None:
    """A core for every task by SRAM alone, or None if they need more cores than the
    target has: what :func:`~corefold.backend.lower.lower` falls back to when list
    scheduling runs out of cores (``LowerSettings.pack_cores``, whose ``pack_apart`` gives
    ``apart``). The module docstring gives the steps. The float ResNet-18 (46.7 MB of
    weights, 70% of the ``npu`` preset's SRAM), which list scheduling leaves 12 MB short,
    packs into 63-64 cores. O(items x cores + moves x tasks)."""
    cap = int(FILL * target.sram_bytes)
    items = _items(lg)
    where = [-1] * len(lg.tasks)
    cores = _fill(lg, target, cap, items, apart, where)
    if cores is None:
        return None
    _spread(lg, target, cap, list(items.values()), cores, where)
    _fit_streams(lg, target, cap, items, cores, where)
    return where


def _items(lg: LoweredGraph) -> dict[tuple, list]:
    """The packing's items: the tasks reading the same weights (keyed by those constants),
    a task without weights alone (keyed ``("task", id)``), each ``[weights, largest working
    set, tasks]`` (weights 64-byte aligned). O(tasks)."""
    items: dict[tuple, list] = {}
    for t in lg.tasks:
        consts = tuple(sorted(lg.consts_of(t)))
        key = consts if consts else ("task", t.id)
        item = items.setdefault(key, [sum(-(-lg.phys[c].nbytes // 64) * 64 for c in consts), 0, []])
        item[1] = max(item[1], lg.working_bytes(t))
        item[2].append(t.id)
    return items


def _fill(lg: LoweredGraph, target: Target, cap: int, items: dict[tuple, list], apart: int,
          where: list[int]) -> list[list[int]] | None:
    """Steps 1 and 2: the items with weights best fit decreasing (by weights, then working
    set), each onto the open core it leaves the least room on; but while its operator
    (:func:`~corefold.backend.lgraph.operator_name`) is on fewer than ``apart`` cores, onto
    one without it, a fresh core if none has room (the float ResNet-18's 3 x 3 convolutions
    of 256 channels ran their ten parts on five cores, two after each other). Then each
    task without weights, in topological order, onto the core of the producer it reads most
    from where it fits, else best fit (1428.1 -> 1343.5 us on the float ResNet-18, whose
    residual Adds and max pool landed anywhere): the cores, or None when they run out.
    O(items x cores)."""
    cores: list[list[int]] = []  # [weights, largest working set]
    ops_on: list[set[str]] = []
    weighted = sorted((it for it in items.values() if it[0] > 0), key=lambda it: (-it[0], -it[1], it[2][0]))
    weightless = sorted((it for it in items.values() if it[0] == 0), key=lambda it: it[2][0])
    for w, m, tasks in weighted + weightless:
        best = None
        op = operator_name(lg.tasks[tasks[0]].name) if w else None
        if op is None:
            best = next((c for c in _producer_cores(lg, lg.tasks[tasks[0]], where)
                         if cap - cores[c][0] - max(cores[c][1], m) >= 0), None)
        if best is None:
            fits = [(op in ops_on[i], cap - cw - w - max(cm, m), i) for i, (cw, cm) in enumerate(cores)]
            fits = [f for f in fits if f[1] >= 0]
            best = min(fits)[2] if fits else None
            if (best is not None and op in ops_on[best] and len(cores) < len(target.usable_cores)
                    and sum(op in on for on in ops_on) < apart):
                best = None  # a fresh core rather than beside another item of the operator
        if best is None:
            if len(cores) == len(target.usable_cores) or w + m > cap:
                return None
            cores.append([0, 0])
            ops_on.append(set())
            best = len(cores) - 1
        cores[best][0] += w
        cores[best][1] = max(cores[best][1], m)
        if op is not None:
            ops_on[best].add(op)
        for t in tasks:
            where[t] = best
    return cores


def _producer_cores(lg: LoweredGraph, task: Task, where: list[int]) -> list[int]:
    """The cores of ``task``'s producers placed so far, the most elements read first.
    O(pieces read)."""
    got: Counter = Counter()
    for o in task.inputs:
        for pc in () if o is None else o.pieces:
            ph = lg.phys[pc.phys]
            if ph.kind == "op" and where[ph.task] >= 0:
                got[where[ph.task]] += pc.elements
    return sorted(got, key=lambda c: (-got[c], c))


def _spread(lg: LoweredGraph, target: Target, cap: int, items: list[list], cores: list[list[int]],
            where: list[int]) -> None:
    """Step 3: spread the packed items' tasks: the items with the most work first, each copy of an
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


def _fit_streams(lg: LoweredGraph, target: Target, cap: int, items: dict[tuple, list], cores: list[list[int]],
                 where: list[int]) -> None:
    """Step 4: while a core receives from more cores than its NoC buffers take
    (``target.noc_streams_per_core``, counted from the tasks' inputs), move the task of the
    worst core that lowers the total excess most to a core of one of its producers or
    readers where its weights are (or fit, then copied) and its working set fits; stop when
    no single move lowers it (the emitted program's check then refuses the packing). The
    float ResNet-18's packings with its operators apart had cores receiving from up to 55.
    In place. O(moves x tasks on the worst core x degree^2), at most 4 x tasks moves."""
    streams = target.noc_streams_per_core
    n = len(lg.tasks)
    prods: list[list[int]] = [[] for _ in range(n)]
    users: list[list[int]] = [[] for _ in range(n)]
    for t in lg.tasks:
        for o in t.inputs:
            for pc in () if o is None else o.pieces:
                ph = lg.phys[pc.phys]
                if ph.kind == "op" and ph.task is not None:
                    prods[t.id].append(ph.task)
                    users[ph.task].append(t.id)
    item_of = {t: key for key, (_, _, tasks) in items.items() for t in tasks}
    held = [Counter() for _ in cores]  # item -> its tasks on the core
    heard = [Counter() for _ in cores]  # sending core -> edges into the core
    for t in range(n):
        held[where[t]][item_of[t]] += 1
        for p in prods[t]:
            if where[p] != where[t]:
                heard[where[t]][where[p]] += 1

    def excess(c: int) -> int:
        return max(0, len(heard[c]) - streams)

    def drop(c: int, s: int) -> None:
        heard[c][s] -= 1
        if not heard[c][s]:
            del heard[c][s]

    def move(t: int, a: int, b: int) -> None:
        for p in prods[t]:
            if where[p] != a:
                drop(a, where[p])
            if where[p] != b:
                heard[b][where[p]] += 1
        for u in users[t]:
            if where[u] != a:
                drop(where[u], a)
            if where[u] != b:
                heard[where[u]][b] += 1
        where[t] = b

    for _ in range(4 * n):
        worst = max(range(len(cores)), key=lambda c: (excess(c), -c))
        if not excess(worst):
            return
        best = None
        for t in [t for t in range(n) if where[t] == worst]:
            w, m, _ = items[item_of[t]]
            for b in dict.fromkeys(where[x] for x in prods[t] + users[t]):
                cw, cm = cores[b]
                if b == worst or cap - cw - (0 if held[b][item_of[t]] else w) - max(cm, m) < 0:
                    continue
                touched = {worst, b} | {where[u] for u in users[t]}
                before = sum(excess(c) for c in touched)
                move(t, worst, b)
                gain = before - sum(excess(c) for c in touched)
                move(t, b, worst)
                if gain > 0 and (best is None or gain > best[0]):
                    best = (gain, t, b)
        if best is None:
            return
        _, t, b = best
        w, m, _ = items[item_of[t]]
        if not held[b][item_of[t]]:
            cores[b][0] += w
        cores[b][1] = max(cores[b][1], m)
        held[b][item_of[t]] += 1
        held[worst][item_of[t]] -= 1
        if not held[worst][item_of[t]]:
            cores[worst][0] -= w
        move(t, worst, b)
