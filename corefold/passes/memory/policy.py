"""A memory plan of a PyTorch training step as an activation-offload policy for
``torch.autograd.graph.saved_tensors_hooks`` (``corefold swap --torch ... --export-policy``).

PyTorch's pack hook sees each tensor autograd saves in the forward pass; the unpack hook
sees it again when the backward pass needs it. The policy names the saved tensors to move
to host memory by *storage*: its size in bytes, its dtype and its rank among the saved
storages of that size and dtype in forward order (views share their base's storage, as in
the IR's storages, :mod:`~corefold.passes.memory.program`). A saved storage is one produced
by the forward phase (``meta["phase"]`` of the torch importer) and read by the backward
phase. Each offloaded storage is prefetched back right after the unpack of the saved
storage whose first backward read is the latest at or before its restore's trigger (the
prefetch edge of SPEC M2 §5); otherwise it is copied back when first unpacked.

Only swaps are exported: compressed tensors are left to PyTorch. The written module needs
only torch. O(V + E).
"""

from __future__ import annotations

import json
import os
from typing import Any

from corefold.ir.domains import MEMORY_DOMAIN
from corefold.passes.memory.program import COMPUTE, build_program


def offload_entries(graph) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(offloaded entries, every saved storage) of a transformed torch graph.

    An entry is ``{"bytes", "dtype", "rank", "name", "after"}`` with ``after`` the key
    ``[bytes, dtype, rank]`` of the saved storage after whose unpack to prefetch, or None.
    """
    program = build_program(graph)
    restores: dict[str, list] = {}
    swapped: set[str] = set()
    for node in program.order:
        if node.domain == MEMORY_DOMAIN and node.op_type == "SwapIn":
            restores.setdefault(node.meta.get("of"), []).append(node)
        if node.domain == MEMORY_DOMAIN and node.op_type == "SwapOut":
            swapped.add(node.meta.get("of"))

    def readers(values) -> list:
        out, stack, seen = [], list(values), set()
        while stack:  # through memory nodes and views to the real readers
            v = stack.pop()
            for u in v.uses():
                n = u.node
                if n in seen:
                    continue
                seen.add(n)
                if n.domain == MEMORY_DOMAIN or n.meta.get("view"):
                    stack.extend(n.outputs)
                out.append(n)
        return out

    saved = []
    for s in program.storages.values():
        prod = s.root.producer
        if s.resident or s.host or prod is None or prod.meta.get("phase") != "forward":
            continue
        back = [n for n in readers(s.members) if n.meta.get("phase") == "backward" and program.stream.get(n) == COMPUTE]
        if back:
            saved.append((program.step[prod], s, min(program.step[n] for n in back)))
    saved.sort(key=lambda t: t[0])
    rank: dict[tuple, int] = {}
    keys = {}
    for _, s, _ in saved:
        cls = (s.nbytes, s.root.dtype.name)
        keys[s.root.name] = [s.nbytes, s.root.dtype.name, rank.get(cls, 0)]
        rank[cls] = rank.get(cls, 0) + 1
    by_first_read = sorted((first, s.root.name) for _, s, first in saved)
    entries = []
    for _, s, _ in saved:
        name = s.root.name
        if name not in swapped:
            continue
        after = None
        if name in restores:
            triggers = [max((program.step[p] for p in b.control_preds if p in program.step), default=-1)
                        for b in restores[name]]
            q = min(triggers)
            before = [nm for first, nm in by_first_read if first <= q]
            after = keys[before[-1]] if before else None
        b, d, r = keys[name]
        entries.append({"bytes": b, "dtype": d, "rank": r, "name": name, "after": after})
    return entries, [dict(zip(("bytes", "dtype", "rank"), keys[s.root.name], strict=True), name=s.root.name)
                     for _, s, _ in saved]


_TEMPLATE = '''"""Activation offload policy for {model}, written by `corefold swap`.

Plan: {summary}.
It moves {count} saved tensors ({mib:.1f} MiB) to host memory in the forward pass and
brings each back in the backward pass, prefetched after the unpack named in its "after"
field. A saved tensor is named by its storage: bytes, dtype, and rank among saved
storages of that size and dtype in the order the forward pass saves them.

Use:
    import policy
    with policy.offload() as hooks:
        loss = step(batch)
    loss.backward()
    print(hooks.offloaded, hooks.offloaded_bytes)
"""

import torch
from torch.multiprocessing.reductions import StorageWeakRef

#: Each saved storage to offload: its bytes, dtype and rank, its name in corefold's graph,
#: and the [bytes, dtype, rank] of the saved storage after whose unpack to prefetch it.
OFFLOAD = [
{entries}
]


def _is_parameter(t):
    base = t._base if t._base is not None else t
    return base.is_leaf and base.requires_grad


class Offloader(torch.autograd.graph.saved_tensors_hooks):
    """The hooks: pack moves a listed storage to the host, unpack brings it back."""

    def __init__(self, host_device="cpu"):
        self.want = {{(e["bytes"], e["dtype"], e["rank"]) for e in OFFLOAD}}
        self.prefetch = {{}}
        for e in OFFLOAD:
            if e["after"] is not None:
                self.prefetch.setdefault(tuple(e["after"]), []).append((e["bytes"], e["dtype"], e["rank"]))
        self.host_device = host_device
        self.rank = {{}}
        self.key_of = {{}}
        self.host = {{}}
        self.back = {{}}
        self.offloaded = 0
        self.offloaded_bytes = 0
        super().__init__(self.pack, self.unpack)

    def __enter__(self):
        super().__enter__()
        return self

    def _key(self, t):
        # a storage is known by its address while it lives: an offloaded one may be freed
        # and its address reused by a new storage, which then gets a rank of its own
        st = t.untyped_storage()
        ref = StorageWeakRef(st)
        known = self.key_of.get(ref.cdata)
        if known is None or known[1].expired():
            cls = (st.nbytes(), str(t.dtype).replace("torch.", ""))
            known = self.key_of[ref.cdata] = (cls + (self.rank.get(cls, 0),), ref)
            self.rank[cls] = self.rank.get(cls, 0) + 1
        return known[0]

    def pack(self, t):
        if _is_parameter(t):
            return t
        key = self._key(t)
        if key not in self.want:
            return t
        if key not in self.host:
            n = t.untyped_storage().nbytes() // t.element_size()
            flat = torch.empty(0, dtype=t.dtype, device=t.device).set_(t.untyped_storage(), 0, (n,), (1,))
            pin = t.device.type == "cuda"
            self.host[key] = flat.to(self.host_device, copy=True, non_blocking=pin)
            self.offloaded += 1
            self.offloaded_bytes += t.untyped_storage().nbytes()
        return ("corefold.offloaded", key, t.size(), t.stride(), t.storage_offset(), t.device)

    def _restore(self, key, device):
        if key not in self.back:
            self.back[key] = self.host[key].to(device, copy=True, non_blocking=device.type == "cuda")
        return self.back[key]

    def unpack(self, packed):
        if not (isinstance(packed, tuple) and packed and packed[0] == "corefold.offloaded"):
            return packed
        _, key, size, stride, offset, device = packed
        flat = self._restore(key, device)
        for other in self.prefetch.pop(key, []):
            if other in self.host:
                self._restore(other, device)
        return torch.as_strided(flat, size, stride, offset)


def offload(host_device="cpu"):
    """A ``saved_tensors_hooks`` context that applies the policy."""
    return Offloader(host_device)
'''


def policy_source(graph, model: str, summary: str) -> str:
    """The text of the policy module for a transformed torch graph."""
    return render_policy(offload_entries(graph)[0], model, summary)


def render_policy(entries: list[dict[str, Any]], model: str, summary: str) -> str:
    """The text of the policy module for ``entries`` (see :func:`offload_entries`)."""
    body = "\n".join(f"    {json.dumps(e)}," for e in entries).replace("null", "None")
    return _TEMPLATE.format(model=model, summary=summary, count=len(entries),
                            mib=sum(e["bytes"] for e in entries) / 2**20, entries=body)


def write_policy(result, path: str | os.PathLike) -> None:
    """Write the policy of a :class:`~corefold.passes.memory.MemoryResult` to ``path``."""
    r = result.report
    model = result.graph.metadata.get("corefold.torch", result.graph.name)
    summary = (f"peak {r['peak_before'] / 2**30:.3f} -> {r['peak_after'] / 2**30:.3f} GiB on {r['target']}, "
               f"simulated time {r['time_before'] * 1e3:.2f} -> {r['time_after'] * 1e3:.2f} ms")
    with open(path, "w", encoding="utf-8") as f:
        f.write(policy_source(result.graph, model, summary))
