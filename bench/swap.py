"""Swap planning on real training steps: corefold's budget mode against the rules in use.

Models (PyTorch training steps traced under FakeTensorMode, corefold.frontend.torch):
ResNet-50 at batch 32, VGG-16 at batch 32, BERT-base at sequence 512 and batch 8. Targets:
``gpu`` (V100, PCIe 16 GB/s) and ``gpu-nvlink`` (75 GB/s). Methods, all simulated by the
same memory and time simulators (corefold.passes.memory.memsim, timesim):

* ``no-swap``: the graph as traced;
* ``vdnn-all``: vDNN's policy: the input of every forward convolution leaves after its
  last forward read, the next layer waits for the copy; it is prefetched when the
  previous convolution's backward starts (Rhu et al. 2016);
* ``tflms``: TFLMS's topological rule: every tensor produced in the forward phase and read
  in the backward phase is swapped out when produced (memory freed when the copy ends) and
  swapped in by the node ``lb`` topological levels before its reader (Le et al. 2018;
  default ``lb = 1``);
* ``save-on-cpu``: ``torch.autograd.graph.save_on_cpu``: every saved tensor is copied to
  the host when saved (the compute stream waits) and back when the backward needs it;
* ``corefold``: budget mode (swap only, bit-exact) and ``corefold+fp16`` (auto: swap,
  compress to fp16, or both), both cutting the neediest operators along the batch when
  the budget is below the floor (corefold.passes.memory.batchsplit);
  ``corefold-nosplit``: swap only, never cutting (as before batch splitting; not run
  unless named in ``--methods``).

Printed per target and model: peak, floor, simulated time overhead at the budget (half the
no-swap peak for corefold; the rules have no budget), the smallest budget corefold fits
without batch splitting (and its ratio to the unsplit floor), and the largest batch that fits 16 GiB with at most 20%
overhead (searched by doubling, then bisection; "none" when even the first batch tried
misses 20%: the rules swap whether or not memory is short). Traces are cached as IR text in
``--cache`` (default .bench_cache/swap). Run: ``python bench/swap.py [--models resnet50]
[--targets gpu-nvlink] [--quick]``; ``--bound-batches 768,960`` prints instead, at those
batches and 16 GiB, the host link's lower bound on any swap-only plan's stall
(:func:`stall_lower_bound`) next to corefold's overhead.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace

import numpy as np

from corefold.ir import parse, to_text
from corefold.passes.memory import BudgetError, MemorySettings, PlanError, measure, plan_memory
from corefold.passes.memory.evictions import Eviction, use_gaps
from corefold.passes.memory.memory_pass import clone_graph
from corefold.passes.memory.memsim import floor_bytes, step_profile
from corefold.passes.memory.program import build_program
from corefold.passes.memory.timesim import copy_seconds, node_seconds
from corefold.passes.memory.transform import apply_evictions
from corefold.target import load_target

GIB = 2**30
CAPACITY = 16 * GIB
MAX_OVERHEAD = 0.20
MODELS = {  # name -> (spec, batch, seq, largest batch searched)
    "resnet50": ("torchvision:resnet50", 32, None, 4096),
    "vgg16": ("torchvision:vgg16", 32, None, 2048),
    "bert-base": ("transformers:bert-base", 8, 512, 512),
}


def trace(name: str, batch: int, cache: str):
    spec, _, seq, _ = MODELS[name]
    path = os.path.join(cache, f"{name}_b{batch}.txt")
    if os.path.exists(path):
        with open(path) as f:
            return parse(f.read())
    from corefold.frontend.torch import load_torch

    g = load_torch(spec, batch=batch, seq=seq)
    os.makedirs(cache, exist_ok=True)
    with open(path + ".tmp", "w") as f:
        f.write(to_text(g))
    os.replace(path + ".tmp", path)
    return g


# -- the rules -------------------------------------------------------------------------------
def _saved_gaps(program):
    """(use gaps, gap index) of every storage produced in the forward phase and read in the
    backward phase: the gap from its last forward read to its first backward read."""
    gaps = use_gaps(program, step_profile(program).intervals)
    out = []
    for u in gaps.values():
        if u.storage.root.producer.meta.get("phase") != "forward":
            continue
        phases = [program.compute[int(k)].meta.get("phase") for k in u.points]
        for g in range(len(u.points) - 1):
            if phases[g] == "forward" and phases[g + 1] == "backward" and u.hi(g) - u.lo(g) >= 2:
                out.append((u, g))
                break
    return out


def rule_plan(graph, target, rule: str, lb: int = 1):
    """The evictions of a baseline rule (see the module doc) on ``graph``, transformed in place."""
    program = build_program(graph)
    S = np.concatenate([[0.0], np.cumsum([node_seconds(c, "compute", target) for c in program.compute])])
    picks = _saved_gaps(program)
    if rule == "vdnn-all":
        conv_inputs = {id(program.storage_of[id(n.inputs[0])]) for n in program.compute
                       if n.op_type == "Conv" and n.meta.get("phase") == "forward"}
        picks = [(u, g) for u, g in picks if id(u.storage) in conv_inputs]
    backward_convs = [program.step[n] for n in program.compute if n.op_type == "convolution_backward"]
    level: dict = {}
    for n in program.compute:
        level[n] = 1 + max((level.get(p, 0) for p in n.predecessors()), default=0)
    levels = np.array([level[n] for n in program.compute])
    free = 0.0
    evictions = []
    for u, g in sorted(picks, key=lambda t: int(t[0].points[0])):
        p, lo, hi = int(u.points[0]), u.lo(g), u.hi(g)
        length = copy_seconds(u.nbytes, target)
        start = max(S[p + 1], free)
        free = start + length
        if rule == "tflms":  # freed when the copy ends
            release = max(lo + 1, int(np.searchsorted(S[:-1], free, side="left")))
            release = min(release, hi - 1)
            below = np.nonzero(levels[:hi] <= levels[hi] - lb)[0]
            q = int(below[-1]) if below.size else lo + 1
        elif rule == "vdnn-all":  # the next layer waits; prefetch at the previous conv backward
            release = lo + 1
            prev = [k for k in backward_convs if k < hi]
            q = prev[-1] if prev else hi - 1
        else:  # save-on-cpu: the copy blocks compute at once; restored when unpacked
            release = p + 1
            q = hi - 1
        q = min(hi - 1, max(q, lo + 1, release - 1))
        ev = Eviction(u, "swap", None, [g], release=release, triggers=[q], swap_slot=(start, free),
                      swap_anchor=p, restore_slots=[(S[q + 1], S[q + 1] + length)])
        evictions.append(ev)
    apply_evictions(graph, program, evictions)
    return graph


# -- what the link allows ---------------------------------------------------------------------
def stall_lower_bound(graph, target, budget: int) -> tuple[float, float, float]:
    """(forward, backward, total) seconds that any swap-only plan within ``budget`` must stall,
    in the same time model. At step ``i`` the excess ``E_i = M(i) - budget`` of the no-swap
    step profile must be off the device, taken from the storages live there and not read
    there (fractionally, which only lowers the bound):

    * it has left over the d2h link, no byte before its producer ended: with the
      earliest-produced bytes chosen, the copies end at ``max_r (r + bytes released at or
      after r / bw)``, and step ``i`` cannot start before that: ``fwd_i = that - S(i)``;
    * it comes back over the h2d link after step ``i`` and by its next read ``h``: with the
      latest-read bytes chosen, ``bwd_i = max_h (S(i + 1) + bytes read by h / bw - S(h))``.

    The two stalls fall in disjoint intervals for ``i <= j``, so the step waits at least
    ``max_{i <= j} fwd_i + bwd_j``. O(n G) for G use gaps."""
    m = measure(graph, target)
    program = m.program
    bw = target.device.host_link_bytes_per_s
    S = np.concatenate([[0.0], np.cumsum([node_seconds(c, "compute", target) for c in program.compute])])
    gaps = list(use_gaps(program, m.steps.intervals).values())
    n = program.num_steps
    fwd, bwd = np.zeros(n), np.zeros(n)
    for i in range(n):
        excess = int(m.steps.memory[i]) - budget
        if excess <= 0:
            continue
        live = [(int(u.points[0]), u.hi(k), u.nbytes) for u in gaps if (k := u.gap_at(i)) is not None]
        out, rem = [], excess
        for p, _, nb in sorted(live):
            out.append((S[p + 1], min(nb, rem)))
            rem -= nb
            if rem <= 0:
                break
        after = np.cumsum([b for _, b in out][::-1])[::-1]
        fwd[i] = max(0.0, max(r + a / bw for (r, _), a in zip(out, after, strict=True)) - S[i])
        back, rem = [], excess
        for _, h, nb in sorted(live, key=lambda x: -x[1]):
            back.append((h, min(nb, rem)))
            rem -= nb
            if rem <= 0:
                break
        back.sort()
        by = np.cumsum([b for _, b in back])
        bwd[i] = max(0.0, max(S[i + 1] + c / bw - S[h] for (h, _), c in zip(back, by, strict=True)))
    total = float(np.max(np.maximum.accumulate(fwd) + bwd))
    return float(fwd.max()), float(bwd.max()), total


# -- measuring --------------------------------------------------------------------------------
def run_method(graph, target, method: str, budget: int | None):
    """(peak bytes, time seconds, floor bytes, pieces) after ``method``, or None when corefold
    finds no plan; floor and pieces (the most pieces a region was cut into, 0: none) are
    corefold's after batch splitting, else None."""
    g = clone_graph(graph)
    if method == "no-swap":
        m = measure(g, target)
        return m.step_peak, m.schedule.makespan, None, 0
    if method.startswith("corefold"):
        settings = MemorySettings(budget_bytes=budget, reduction="auto" if method.endswith("fp16") else "swap",
                                  split="off" if method.endswith("nosplit") else "auto")
        try:
            r = plan_memory(g, target, settings).report
        except (PlanError, BudgetError):
            return None
        pieces = max((o["pieces"] for o in r.get("split", {}).get("ops", [])), default=0)
        return r["peak_after"], r["time_after"], r["floor"], pieces
    rule_plan(g, target, method)
    m = measure(g, target)
    return m.step_peak, m.schedule.makespan, None, 0


def fits(name, batch, target, method, cache, base_times):
    g = trace(name, batch, cache)
    if batch not in base_times:
        base_times[batch] = measure(g, target).schedule.makespan
    res = run_method(g, target, method, CAPACITY)
    if res is None:
        return False
    peak, t = res[:2]
    return peak <= CAPACITY and t <= base_times[batch] * (1 + MAX_OVERHEAD)


def largest_batch(name, target, method, cache, start: int, limit: int, quick: bool) -> int:
    """The largest batch that fits 16 GiB within 20% overhead: double, then bisect."""
    base: dict[int, float] = {}
    lo, hi = 0, None
    b = start
    while b <= limit:
        if fits(name, b, target, method, cache, base):
            lo, b = b, b * 2
        else:
            hi = b
            break
    if lo == 0:
        b = start // 2
        while b >= 1 and not fits(name, b, target, method, cache, base):
            b //= 2
        return max(b, 0)
    hi = hi or lo
    steps = 2 if quick else 4
    for _ in range(steps):
        if hi - lo <= max(1, lo // 32):
            break
        mid = (lo + hi) // 2
        if fits(name, mid, target, method, cache, base):
            lo = mid
        else:
            hi = mid
    return lo


def smallest_budget(graph, target, floor: int, peak: int, reduction: str, iters: int) -> int:
    """The smallest budget (bisection to 1%) for which corefold finds a plan."""
    lo, hi = floor, peak
    for _ in range(iters):
        if hi - lo <= peak * 0.005:
            break
        mid = (lo + hi) // 2
        try:
            plan_memory(clone_graph(graph), target, MemorySettings(budget_bytes=mid, reduction=reduction, split="off"))
            hi = mid
        except PlanError:
            lo = mid
    return hi


def print_bounds(args) -> int:
    """The ``--bound-batches`` table: what the link allows against what corefold gets."""
    print(f"{'target':<11} {'model':<10} {'batch':>6} {'fwd bound':>10} {'bwd bound':>10} {'overhead >=':>12} "
          f"{'corefold':>9} {'timing':>7}")
    for tname in args.targets.split(","):
        target = load_target(tname)
        for name in args.models.split(","):
            for batch in map(int, args.bound_batches.split(",")):
                g = trace(name, batch, args.cache)
                base = measure(g, target).schedule.makespan
                fwd, bwd, total = stall_lower_bound(g, target, CAPACITY)
                try:
                    r = plan_memory(clone_graph(g), target, MemorySettings(budget_bytes=CAPACITY)).report
                    got, timing = f"{r['overhead'] * 100:.1f}%", r.get("timing", "-")
                except (PlanError, BudgetError) as exc:
                    got, timing = type(exc).__name__, "-"
                print(f"{tname:<11} {name:<10} {batch:>6} {fwd * 1e3:>8.0f}ms {bwd * 1e3:>8.0f}ms "
                      f"{total / base * 100:>11.1f}% {got:>9} {timing:>7}", flush=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--targets", default="gpu-nvlink,gpu")
    ap.add_argument("--methods", default="no-swap,vdnn-all,tflms,save-on-cpu,corefold,corefold+fp16")
    ap.add_argument("--cache", default=os.path.join(".bench_cache", "swap"))
    ap.add_argument("--quick", action="store_true", help="coarser searches")
    ap.add_argument("--no-batch-search", action="store_true")
    ap.add_argument("--smallest", default="swap", help="reductions to find the smallest budget for (swap,auto)")
    ap.add_argument("--bound-batches", default="",
                    help="only print, per model and target, at these batches and 16 GiB: the link's lower bound "
                         "on the stall of any swap-only plan and corefold's overhead (e.g. 768,896,960,1024)")
    args = ap.parse_args()
    if args.bound_batches:
        return print_bounds(args)
    methods = args.methods.split(",")
    goals = []
    for tname in args.targets.split(","):
        target = load_target(tname)
        print(f"\n== {tname}: {target.device.host_link_bytes_per_s / 1e9:.0f} GB/s host link ==")
        print(f"{'model':<10} {'method':<16} {'peak GiB':>9} {'floor GiB':>9} {'overhead':>9} {'max batch':>9}")
        for name in args.models.split(","):
            spec, batch, _, limit = MODELS[name]
            t0 = time.perf_counter()
            g = trace(name, batch, args.cache)
            base = measure(g, target)
            floor, _ = floor_bytes(base.program)
            half = base.step_peak // 2
            batches = {}
            for method in methods:
                res = run_method(g, target, method, half)
                mfloor, cut = floor, ""
                if res is None:
                    peak_s, over_s = "no plan", "-"
                    over = None
                else:
                    over = res[1] / base.schedule.makespan - 1
                    peak_s, over_s = f"{res[0] / GIB:.2f}", f"{over * 100:.1f}%"
                    if res[3]:
                        mfloor, cut = res[2], f"  (cut in {res[3]} pieces)"
                mb = "-" if args.no_batch_search else largest_batch(name, target, method, args.cache, batch,
                                                                    limit, args.quick) or "none"
                batches[method] = mb
                print(f"{name:<10} {method:<16} {peak_s:>9} {mfloor / GIB:>9.2f} {over_s:>9} {mb!s:>9}{cut}", flush=True)
                if method == "corefold" and tname == "gpu-nvlink" and name in ("resnet50", "bert-base"):
                    goals.append((f"{tname} {name}: overhead at half the no-swap peak <= 5%", over is not None
                                  and over <= 0.05, over_s))
            for reduction in args.smallest.split(","):
                smallest = smallest_budget(g, target, floor, base.step_peak, reduction, 10)
                ratio = smallest / floor
                print(f"{name:<10} smallest corefold budget ({reduction}): {smallest / GIB:.3f} GiB = "
                      f"{ratio:.3f}x the floor")
                if tname == "gpu-nvlink":
                    goals.append((f"{tname} {name}: smallest budget ({reduction}) within 1.2x of the floor",
                                  ratio <= 1.2, f"{ratio:.3f}x"))
            try:
                link = plan_memory(clone_graph(g), target, replace(MemorySettings(), budget_bytes=half)).report["link"]
            except (PlanError, BudgetError) as exc:
                link = {"bound_by": f"no plan at half the peak ({type(exc).__name__})"}
            if link.get("bound_by") == "link":
                print(f"{name:<10} at half the peak the host link binds: {link['excess_at_peak'] / GIB:.2f} GiB must "
                      f"leave by the peak, {link['transfer_needed'] * 1e3:.1f} ms of transfer against "
                      f"{link['compute_before_peak'] * 1e3:.1f} ms of compute before it")
            else:
                print(f"{name:<10} at half the peak the link keeps up (binding: {link.get('bound_by')})")
            if not args.no_batch_search and "no-swap" in batches:
                for method in ("corefold-nosplit", "corefold", "corefold+fp16"):
                    if method in batches and isinstance(batches[method], int) and isinstance(batches["no-swap"], int):
                        ratio = batches[method] / batches["no-swap"]
                        print(f"{name:<10} largest batch {method} / no-swap = {batches[method]} / "
                              f"{batches['no-swap']} = {ratio:.2f}x")
                        if tname == "gpu-nvlink" and method != "corefold-nosplit":
                            goals.append((f"{tname} {name}: largest batch ({method}) >= 4.7x no-swap's",
                                          ratio >= 4.7, f"{ratio:.2f}x"))
            print(f"{name:<10} ({time.perf_counter() - t0:.0f} s)", flush=True)
    print("\n== goals ==")
    for text, ok, value in goals:
        print(f"{'MET' if ok else 'NOT MET':<8} {text}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
