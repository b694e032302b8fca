"""Settings of the memory pass (SPEC M2)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal


@dataclass(frozen=True)
class MemorySettings:
    """How the memory pass chooses and builds its reductions.

    Attributes:
        mode: ``budget`` fits the step-model peak under ``budget_bytes``, choosing the
            tensors, the reduction of each, its release and its trigger from the cost
            model's op times and the host link; ``thresholds`` applies the seed's rule
            (``th_tts``, ``th_size``, ``max_count``) as given, with no budget.
        budget_bytes: device memory budget in budget mode; None means the target
            device's memory (a core's SRAM on many-core targets).
        reduction: what a reduction does: ``swap`` (copy to host: bit-exact),
            ``compress`` (on the device, lossy), ``both`` (compress, then swap the
            compressed form), or ``auto`` (budget mode picks per tensor among the three,
            at least cost).
        compress_format: ``fp16``, ``bf16``, ``fp8`` (e4m3, per-tensor scale) or ``int8``
            (per-tensor scale); only floating tensors wider than the format are compressed.
        th_tts: thTTS, seconds: thresholds mode keeps inputs whose timing slack exceeds it.
        th_size: thS, bytes: ... and whose tensor is larger than this.
        max_count: N: ... at most this many, largest first.
        slack: ``parallel``: the seed's timing analysis (every node as early as its inputs
            allow); ``serial``: nodes in the compute order on one stream, as on a GPU.
        serialize_restores: add the seed's control edge from the consumer of the previous
            restore to the next restore (two restores never hold memory at once).
        candidates: budget mode: the largest tensors live at the peak step that each
            round evaluates.
        link_weight: budget mode: a second of host-link time costs this many seconds in
            a choice's score (keeps the link free for later choices).
        timing: budget mode, once the tensors are chosen: ``retime`` list-schedules the
            copies on the two links (each as early as the link and the budget allow,
            :meth:`~corefold.passes.memory.planner.BudgetPlanner.retime`); ``relax`` keeps
            the greedy's bookings and only spends the headroom left on them; ``best``
            simulates both and keeps the faster.
        split: budget mode, when the budget is below the floor or no plan is found:
            ``auto`` cuts the neediest operators along their batch into pieces
            (:mod:`~corefold.passes.memory.batchsplit`), then plans again; ``off`` never.
        split_goal: ``auto`` cuts each region into the fewest pieces that bring the floor
            to at most this fraction of the budget (or, if none does, as low as cuts go).
        max_pieces: the most pieces one region is cut into.
    """

    mode: Literal["budget", "thresholds"] = "budget"
    budget_bytes: int | None = None
    reduction: Literal["swap", "compress", "both", "auto"] = "swap"
    compress_format: Literal["fp16", "bf16", "fp8", "int8"] = "fp16"
    th_tts: float = 1e-3
    th_size: int = 1 << 20
    max_count: int = 64
    slack: Literal["parallel", "serial"] = "serial"
    serialize_restores: bool = False
    candidates: int = 32
    link_weight: float = 0.05
    timing: Literal["best", "retime", "relax"] = "best"
    split: Literal["auto", "off"] = "auto"
    split_goal: float = 0.5
    max_pieces: int = 64

    # NOTE: the seed names thTTS, thS and N but gives no values; ``seed`` uses ours with
    # the seed's literal timing (unbounded parallelism) and its restore serialization.
    PRESETS: ClassVar[dict[str, dict]] = {
        "fast": {"candidates": 8},
        "strong": {"candidates": 128},
        "seed": {"mode": "thresholds", "reduction": "swap", "slack": "parallel", "serialize_restores": True,
                 "split": "off"},
    }
