"""The knobs of :func:`~corefold.backend.lower.lower` and its presets (re-exported there)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LowerSettings:
    """Knobs of :func:`lower`.

    Attributes:
        seed: seed of the mesh placement's random choices.
        placement_effort: scales the M4 force-directed iterations and annealing.
        order_budget_seconds: budget of the M3 order search over all cores together
            (converted into simulated steps, so the result does not depend on the
            machine); 0 keeps the list-scheduling order.
        acyclic: keep the graph of cores acyclic (data flows one way between any two
            cores, as in a pipeline); False lets cores exchange data both ways.
        spread: how fast the clustering opens cores: at most ``spread`` times the share
            of the work scheduled so far of all cores (see :func:`~corefold.backend.place.cluster`).
            One value or more: each spread is clustered with each ``headroom`` (below).
        pieces_per_core: the tile step cuts every operator longer than the graph's work
            over ``cores x pieces_per_core`` into pieces (:mod:`corefold.backend.parallel`),
            so that the mesh has work; 0 cuts only what does not fit a core.
        floor_pieces: with SRAM to spare (the weights within ``ROOMY_WEIGHTS`` or
            ``ROOMY_WEIGHTLESS`` of all cores' SRAM), the tile step cuts a long operator into at
            least this many pieces (at most a quarter of the cores), whatever ``pieces_per_core``
            asks for (:func:`~corefold.backend.parallel.cut_for_parallelism`). ``lower``'s tries
            with half and a quarter of the pieces per core halve it too: the light DenseNet-121
            in int8 cut into 7557 tasks at any pieces per core, so that a core's program overflowed
            its instruction memory at each try and only the last one, nothing cut, lowered (6482
            us); with the floor halved it lowers at 4 pieces per core in 1328 us (stop 52).
        dram_interleave: stripe every DRAM region over all channels of its chip, as DRAM
            controllers interleave addresses, so that one transfer uses every channel's
            bandwidth (the clustering's cost model assumes it); False puts each region on
            one channel, balancing the channels' traffic.
        headroom: with ``spread``, the clusterings tried (:func:`~corefold.backend.place.cluster`'s
            ``headroom``: SRAM left beside the weights, in working sets): every spread with
            every headroom, each one's list executable timed and the fastest kept; a
            clustering that would repeat one already made is skipped (:func:`~corefold.backend.trials.repeats`).
            Without the order search (nothing is timed), the first pair only.
        trial_tasks: the trials of the placement seeds, of ``reserve_pieces`` and of sharing in place
            (:class:`~corefold.backend.plan.Planner`) run only on lowered graphs of at most this
            many tasks (the tilings' and knobs' trials: ``trial_knobs_tasks``, since stop 45; the
            other ``spread`` and ``headroom`` values too, since stop 46): each costs steps 3-6 and a timed run. The int8 ResNet-50 on
            ``npu-array`` (1633 tasks since its rows are cut with SRAM to spare) lowers in
            7.1 s without them, in 22.6 s with them, past the 20 s goal, for 408.7 -> 341.7 us;
            the bench's 8 x 8 rows have at most 1470 (the int8 EfficientNet-B0). At stop 45, with
            the lowering 1.6x faster, the same ResNet-50 with every trial (``trial_tasks`` and
            ``trial_knobs_tasks`` 3000) ran 322.0 -> 241.5 us (rows of one row, bands, the finer
            input), lowered in 19.5 s: still too near the goal to be the default (the strong
            preset runs them); the tilings' and knobs' trials alone (``trial_knobs_tasks``) 274.4
            us in 10.6 s.
        min_rows: the fewest output rows of a row band the tile step cuts
            (:func:`~corefold.backend.parallel.cut_for_parallelism`); with the order search and
            at most ``trial_knobs_tasks`` tasks, each further value tiles the graph again, is
            clustered with the first tiling's fastest ``spread`` and ``headroom``, and its
            list executable is kept when the timed simulation runs it faster (bands of one
            row read three times their rows through a 3 x 3 window, but halve the chain
            of bands: no one value suits every model).
        bands: the tile step's *banded pointwise* tiling off or on
            (:func:`~corefold.backend.parallel.cut_for_parallelism`'s ``bands``: pointwise
            convolutions of few rows cut in row bands, each band on channels, instead of channel
            pieces that each read the whole input); each further value is tried like
            ``min_rows`` after it and the pieces (with what they kept), when it changes the
            tiling: int8 SqueezeNet 50.9 -> 46.8 us, while the int8 EfficientNet-B0 ran 98.3 ->
            111.3 with it, so the timed simulation decides.
        input_pieces: the fewest pieces of an operator reading a graph input
            (:func:`~corefold.backend.parallel.cut_for_parallelism`'s ``input_pieces``; 0: no
            floor); each further value is tried like ``bands``, after it: int8 SqueezeNet 46.8
            -> 40.5 us at 32, while the int8 EfficientNet-B0 ran 98.3 -> 112.2 us.
        heavy_channels: whether the tile step cuts a matrix operator whose weights exceed
            :data:`~corefold.backend.parallel.HEAVY_WEIGHTS` times its input, and whose rows
            give fewer bands than its time asks for, on output channels even with SRAM to spare
            (:func:`~corefold.backend.parallel.cut_for_parallelism`'s ``heavy_channels``): no
            band copies its weights. Each further value is tried like ``input_pieces``, after
            it, when it changes the tiling (stop 55): the held-out int8 Inception v2 230.6 ->
            188.8 us; of the bench's rows only the int8 Inception v1 tiles otherwise, and keeps
            False (135.2 us against 151.3 at that trial).
        insertion: the clustering's insertion list scheduling off or on
            (:func:`~corefold.backend.place.cluster`'s ``insert``); each further value is
            clustered with the fastest ``spread`` and ``headroom`` (on graphs of at most
            ``trial_knobs_tasks`` tasks) and kept when the timed simulation runs its list executable
            faster; the tilings tried after it cluster with the value kept: int8 ResNet-18
            119.3 -> 109.4 us and MobileNetV3 34.8 -> 34.0 with it, int8 SqueezeNet 40.6 ->
            53.9 and Inception v1 123.6 -> 129.8 without a choice.
        vector_copies: a core's local copies on the engine ``Target.copy_unit`` names (True: a
            vector engine for float32 on the ``npu`` preset, 4x the DMA engine's bytes a cycle)
            or on the DMA engine (False); each further value is tried like ``insertion``, after
            it: the float rows of ``bench/backend.py`` gain with it (Inception v1 495.6 -> 426.1
            us), while on the 4-core ``npu-2x2`` some of M1's float ResNet-50 executables,
            bound by DRAM staging, lose (250.2 -> 398.7 us).
        reserve_pieces: whether the clustering keeps fresh cores for the weights still to place
            counted once per task that reads them (True) or once per weight (False)
            (:func:`~corefold.backend.place.cluster`'s ``reserve_pieces``); each further value is
            tried after the tilings and knobs, on the kept tiling, on graphs of at most
            ``trial_tasks`` tasks (stop 46: int8 Inception v1 135.2 -> 104.5 us with it, which
            pays off with its bands; the float Inception v1 ran 409.5 -> 545.2 and the float
            SqueezeNet 73.9 -> 78.5 us with it always on).
        pack_cores: place the tasks on cores by SRAM alone (:func:`~corefold.backend.pack.pack`:
            the tasks reading the same weights together, best fit decreasing with each operator's
            weights ``pack_apart`` cores apart, the tasks without weights beside their producer,
            copies of the busiest weights, then moves until the NoC buffers take every core's
            senders), then list-schedule them there, instead of list-scheduling onto the cores. :func:`~corefold.backend.lower.lower`
            falls back to it when every try runs out of SRAM or cores (the float ResNet-18 on
            ``npu``, whose weights are 70% of the SRAM); the other clusterings' and the
            clustering knobs' trials then fail, the tilings' trials are packed too.
        pack_apart: with ``pack_cores``, the fewest cores an operator's weight items are put on
            apart (each onto a core without the operator, a fresh one if none has room, while it
            is on fewer; :func:`~corefold.backend.pack.pack`'s ``apart``): the float ResNet-18's
            convolutions ran their channel parts two after each other on half as many cores.
            :func:`~corefold.backend.lower.lower` tries 0 (best fit only) when it does not lower.
            The float ResNet-18 with ``pack_slices`` 2: 1138.9 us at 0, 1099.3 at 2, **837.9**
            at 3, 903.5 at 4, 927.8 at 10 (lowered in 12.3 s, since its 2 pieces per core
            overflowed a core's NoC buffers), at 16 it did not lower before 0 pieces per core.
        pack_slices: with ``pack_cores``, the tile step cuts each row band of a matrix operator
            with more than :data:`~corefold.backend.parallel.SLICE_BYTES` of weights into this
            many pieces on output channels (:func:`~corefold.backend.parallel.cut_for_parallelism`'s
            ``slices``; 0 or 1: none): the float ResNet-18 at ``pack_apart`` 3, 1066.8 us without,
            **837.9** with 2, 1136.0 with 3, 1096.5 with 2 and every matrix operator sliced.
        trial_knobs_tasks: the trials of the further ``spread`` and ``headroom`` pairs, of ``insertion``,
            ``vector_copies``, ``bands`` and ``input_pieces``, and of the further ``min_rows`` and
            ``trial_pieces`` values, run on graphs whose first tiling has at most this many tasks,
            even past ``trial_tasks``. Stop 46 added the pairs: the int8 ResNet-50 on ``npu-array``
            (first tiling of 1633 tasks) then keeps spread 4 and headroom 0.5, with which its
            finer rows (``min_rows`` 1) fit the NoC buffers, 274.4 -> 242.9 us, lowered in 13.0 s
            (10.0-11.9 s before); no row of the 8x8 ``npu`` moves (stop 45: a tiling moves a large
            graph more than the clusterings' pairs do; the int8 ResNet-50 on ``npu-array`` 322.0 ->
            274.4 us, lowered in 10.6 s, with these trials but not the clusterings', the seeds' and
            sharing's, which ``trial_tasks`` keeps for smaller graphs): each costs a clustering or a tiling
            and a timed trial (2.5-3 s on the int8 EfficientNet-B0, 1470 tasks, which lowered in
            19.4 s with the two tilings, against the 20 s goal, for 98.3 -> 96.4 us); the int8
            Inception v1 (1093 tasks) gains 149.6 -> 123.6 us from its bands. 2000 since stop 45
            (1200 before), when the lowering ran 1.6x faster (``resources.fewer_collections``): the
            int8 EfficientNet-B0 (first tiling of 1470 tasks) then tries them, 96.9 -> 92.8 us
            (insertion, bands and the finer input all kept), lowered in 11.2 s; no other row moves.
        relay_chips: on a board of several chips, send a box that crosses chips once per
            destination chip, its first reader there relaying it to the others
            (:class:`~corefold.backend.plan.Planner`; the int8 ResNet-50 on ``npu-array``
            408.7 -> 342.3 us); False: every reader receives it from its producer.
        trial_pieces, trial_pieces_tasks: further values of ``pieces_per_core`` tried like
            ``min_rows`` (with the kept ``min_rows``, ``spread`` and ``headroom``), on graphs whose
            first tiling has at most ``trial_pieces_tasks`` tasks: each trial tiles the graph
            again, into up to 1.4x the tasks. Smaller pieces shorten a chain of small layers
            (the int8 MobileNetV3 39.3 -> 36.5 us; the int8 Inception v1 168.6 -> 156.3, which
            the task limit leaves out) and lengthen others' (the int8 ResNet-18 122.0 -> 260.1
            at 16), so the timed simulation decides. ``trial_pieces_tasks`` keeps every bench
            row's lowering under 20 s with room for a noisy machine: the int8 Inception v1
            (1093 tasks) lowered in 14.0-20.2 s with its trial (12 s without), the float
            EfficientNet-B0 (1185) in 19.4 s for 277.5 -> 274.1 us. A graph that lowered only
            with fewer pieces than asked tries no more. (16, 20) since stop 42: 20 pieces per
            core take the int8 SqueezeNet 36.4 -> 35.5 us (1.50x its roofline), no other bench
            row moves, lowering +1-2 s where it runs.
        trial_seeds: further seeds of the mesh placement (``seed``), each tried on the kept
            tiling and clustering after every other trial (with the order search, on graphs of
            at most ``trial_tasks`` tasks, within ``trial_budget``): each places the groups
            again, emits and times the list executable, and the fastest is kept. Seeds 1-3
            moved the list executables of the nine rows of ``bench/backend.py`` by -3.3% to
            +12.2% against seed 0 (stop 43), seed 0 the best on 4 of them: a rule's effect
            under about 3% on one row is within the placement seed's own spread.
        trial_budget: the instructions a lowering may emit before it tries no further seed
            (nor, past ``trial_pieces_tasks``, more pieces per core): a seed's trial runs only if the instructions emitted so far plus about three times
            the kept executable's (the seed's own, then the sharing trial's and the searched
            orders') stay within it. Emitting and timing an executable costs about 0.1 ms an
            instruction: over the nine bench rows, lowering took 3.9 s + 0.97 s per 10,000
            instructions emitted (within 1.1 s; stop 43, 24k-130k instructions). 140,000 keeps
            a lowering within 17.4 s on that machine, the 20 s goal with 15% to spare for a
            slower one: on the bench the int8 Inception v1 (130k before any seed) and
            ResNet-18 try none, the int8 EfficientNet-B0 two, the other six rows all three
            (int8 SqueezeNet 35.5 -> 35.0 us, MobileNetV3 34.8 -> 34.6, float SqueezeNet
            71.4 -> 69.2, int8 EfficientNet-B0 98.3 -> 98.1; lowering at most 17.1 s). The
            ``trial_pieces`` run past ``trial_pieces_tasks`` too when they fit it (the
            instructions emitted so far, the ``min_rows`` trials, and 1.4 times the first
            tiling's executable for each pieces trial and the four executables that may follow
            it): the float EfficientNet-B0 (1197 tasks) then keeps 16 pieces, 225.5 -> 209.6 us,
            lowered in 13.6 s; the int8 Inception v1 and EfficientNet-B0 do not fit.
        tune_pieces, tune_efforts: values of ``pieces_per_core`` and ``placement_effort``
            to try, every pair of them (an empty one: the setting's own value); the pair
            whose executable (list-scheduling orders) the timed simulation runs fastest is
            lowered again with the order search (no ``trial_pieces``: the pieces were tuned),
            and so are the settings untuned (every trial on their own tiling); the faster of
            the two is kept (``meta["tuning_final"]``). Both empty: no tuning. The strong
            preset tries six pairs.
        workers: processes a lowering's independent trials run on (the clustering pairs,
            the ``min_rows`` values, then the pieces per core, and the placement seeds): 1
            runs every trial in this process, N > 1 forks up to N - 1 children beside it (where
            the system has ``fork``), 0 one process per CPU. Each trial is deterministic and the
            lowering keeps what the one-process loop keeps, so the executable is the same, byte
            for byte, for every value (``forks``). ``meta["lower_seconds"]`` then adds up the
            time each process spent in a step, so its parts may exceed the wall time. On stop
            49's machine, whose two CPUs ran two processes at 1.26 times one's pace, 2 workers
            lowered three bench rows 3-11% faster (medians of three interleaved runs).
    """

    seed: int = 0
    placement_effort: int = 1
    order_budget_seconds: float = 1.0
    acyclic: bool = False
    spread: tuple[float, ...] = (2.5, 4.0)
    pieces_per_core: float = 8.0
    floor_pieces: int = 16
    dram_interleave: bool = True
    headroom: tuple[float, ...] = (0.0, 0.5)
    trial_tasks: int = 1500
    min_rows: tuple[int, ...] = (2, 1)
    bands: tuple[bool, ...] = (False, True)
    input_pieces: tuple[int, ...] = (0, 32)
    heavy_channels: tuple[bool, ...] = (False, True)
    insertion: tuple[bool, ...] = (False, True)
    vector_copies: tuple[bool, ...] = (True, False)
    reserve_pieces: tuple[bool, ...] = (False, True)
    pack_cores: bool = False
    pack_apart: int = 3
    pack_slices: int = 2
    trial_knobs_tasks: int = 2000
    relay_chips: bool = True
    trial_pieces: tuple[float, ...] = (16.0, 20.0)
    trial_pieces_tasks: int = 1000
    trial_seeds: tuple[int, ...] = (1, 2, 3)
    trial_budget: int = 140_000
    tune_pieces: tuple[float, ...] = ()
    tune_efforts: tuple[int, ...] = ()
    workers: int = 1


FAST = LowerSettings(placement_effort=1, order_budget_seconds=0.0)
DEFAULT = LowerSettings()
#: measured on bench/backend.py: fewer pieces suit ResNet-18 (int8 -31%), more Inception
#: (int8 -10%), EfficientNet keeps the default's; the M4 placement's effort 4 lowers the
#: NoC traffic, yet moved the latency by -3% to +4%: no one setting is best everywhere
STRONG = LowerSettings(order_budget_seconds=5.0, tune_pieces=(4.0, 8.0, 16.0), tune_efforts=(1, 4),
                       trial_tasks=1 << 30, trial_budget=1 << 62)
PRESETS = {"fast": FAST, "default": DEFAULT, "strong": STRONG}
#: M1's candidate compiles and fit checks: the list-scheduling order on each core, no M3
#: search, and the clustering that opens cores slowly: with spread 2.5 the torchvision
#: ResNet-50 on npu-2x2 took 69 executables (the minimum the checks then allowed) and 84
#: compiles, against 67 and 67 at 1.5
SEARCH = LowerSettings(order_budget_seconds=0.0, spread=(1.5,))
