"""Part of step 1 of lowering, *Tile*: cut operators so that the whole mesh has work.

The split pass (:mod:`corefold.passes.split`) cuts an operator only until it *fits* a
core; an operator that fits stays one task on one core however long it runs, so a
network that is mostly a chain of such operators runs on a handful of cores. This pass
cuts every operator whose time exceeds a share of the whole graph's::

    tau = sum over operators of seconds(o) / (P * pieces_per_core)
    k(o) = ceil(seconds(o) / tau)                     (capped by what the axis allows)

and, when the graph's weights take at most :data:`ROOMY_WEIGHTS` of all cores' SRAM (an
operator without weights: :data:`ROOMY_WEIGHTLESS`), at
least ``min(P / 4, 16, ceil(seconds(o) / MIN_PIECE_SECONDS))``: at batch 1 a network runs
layer after layer, so its latency is about the sum of each layer's longest piece, and
``tau`` alone makes the pieces of a network of many layers about ``tau`` long (int8
EfficientNet-B0: tau is 3 us, and its critical path ran 2 to 3 us per layer). With more
weights, more pieces cost SRAM (a row cut copies its weights to each piece's core): the
float Inception v1 ran 542 us as before and 1490 with the floor. Where a convolution's
rows (bands of :data:`MIN_ROWS`) are fewer than half the pieces its time asks for, each
band is cut again on output channels (:func:`_band_pieces`; int8 Inception v1 227 -> 207
us, whose 3 x 3 convolutions of 64 -> 192 channels on 56 x 56 ran as 27 bands of 12 us):
a band's channel pieces share its weights out, copying none, so this needs only the room
:data:`ROOMY_WEIGHTLESS` asks of operators without weights (int8 ResNet-18, whose weights
take 17% of the 8 x 8 chip's SRAM: its 28 x 28 layers' 14 bands of 8 us, 131.3 -> 122.0).

The cut is made for ``P`` usable cores, along one of two kinds of axis:

* **rows** (Conv, MaxPool, AveragePool of rank 4): each piece computes a band of output
  rows ``[a, b)`` from the input rows ``[a s - p_top, (b - 1) s - p_top + (k_h - 1) d + 1)``
  (a *halo* of ``(k_h - 1) d + 1 - s`` rows shared with its neighbours), with the padding
  only where the band meets the border. Each piece keeps the operator's whole weights,
  so rows are chosen when the weights are no larger than the input (early, wide layers),
  or whatever the weights while they take at most :data:`ROOMY_WEIGHTS` of all cores'
  SRAM: a band then reads only its rows and their halo, from the bands before it, where
  each channel piece reads the whole input from every piece of its producer (an
  all-gather over the NoC at every layer; the int8 ResNet-50 on ``npu-array``, whose late
  1 x 1 convolutions outweigh their 7 x 7 inputs, 809.1 -> 408.7 us). A pointwise
  convolution behind a row cut whose rows are too few for its time still takes its own
  channel cut (:func:`_rows_too_few`, which keeps the weights' rule);
* **channels** (every other case; the split rules' first axis that reduces nothing, e.g.
  a convolution's output channels): each piece keeps its share of the weights and reads
  the whole input.

A row cut that a reader of row stride 2 follows takes equal bands of an even number of rows
(:func:`_even_bands`), so that the reader's band ``j`` reads the producer's band ``j``.
An operator that reads the join of a cut producer is cut the same way (same axis, same
piece count), so that piece ``j`` reads mostly what piece ``j`` of its producer wrote and
the placement can keep them on one core (one that cannot cut the followed axis, e.g. an
LRN behind a channel cut, takes its own count instead when SRAM has room and that is
more; an element-wise op or an LRN behind the split pass's parts that this pass cut into
row bands follows the bands across the parts instead, :func:`_rows_across_parts`), and
one that reads only its own part of the producer's (a depthwise convolution,
a pooling or an element-wise op behind a channel cut) takes a multiple of the producer's
count when its time asks for more: balanced cuts into ``m k`` pieces put a boundary at
every boundary of the ``k`` (float EfficientNet-B0's depthwise convolutions followed the
split pass's two channel parts of the 1 x 1 expansion before them, two pieces of 12.9 us
each; 322.5 -> 309.4 us, int8 140.1 -> 132.9, int8 Inception v1 176.5 -> 168.5); a matrix
operator follows only a row cut, or a
channel cut whose pieces read only their own channels (depthwise convolutions), and a
pointwise convolution whose rows are too few for its time takes its own channel cut
instead of following rows (:func:`_rows_too_few`). A join of the split pass counts too,
with the pieces this pass cut its pieces into (:func:`joined_cut`): a residual Add after a Conv
split three ways to fit and each third eleven ways for the mesh would otherwise read from
33 cores, more than a core's NoC buffers take (int8 ResNet-18). For the same reason no
operator is cut into more pieces than a core receives from (``noc_streams_per_core``,
over the pieces of the join it feeds). Pieces compute exactly what the operator would (no
reduction is split), so outputs are unchanged. O(V + pieces).
"""

from __future__ import annotations

import math

import numpy as np

from corefold.cost import op_cost
from corefold.ir import Graph, Node, Value
from corefold.passes.split.rows import ROW_OPS, cut_rows, kernel_size, row_cuttable, slice_rows
from corefold.passes.split.rules import candidate_axes
from corefold.passes.split.split import JOIN_META, needs_fit
from corefold.target import Target

#: Pieces per core the cut aims at (the ``pieces_per_core`` of the module docstring).
PIECES_PER_CORE = 8.0

#: Fewest output rows a row piece computes (fewer would read mostly halo).
MIN_ROWS = 2

#: With SRAM to spare (:data:`ROOMY_WEIGHTS`), an operator is cut into pieces of about this
#: long, into at most a quarter of the cores or :data:`FLOOR_PIECES` pieces, even when
#: ``tau`` would cut it less.
MIN_PIECE_SECONDS = 1e-6
FLOOR_PIECES = 16

#: The graph's weights (the constants its nodes read), as a share of all cores' SRAM, up
#: to which pieces are cut to :data:`MIN_PIECE_SECONDS`: more pieces replicate a row cut's
#: weights and add buffers. Until stop 28 the weights were counted with the constants the
#: split pass had replaced by slices (1.4-2.6x the real bytes) against 0.25; 0.15 of the real
#: bytes kept every bench row's choice (int8 ResNet-18, 17% of the 8x8 chip's SRAM, stayed
#: out: cut as roomy it took 171.2 us instead of 144.9). 0.2 since stop 47, when the rest of
#: the lowering had changed: the int8 ResNet-18 110.7 -> 106.2 us (bands kept, 63 cores
#: instead of 39), the float MobileNetV3 (10.2 MB of weights, 15.2%) 62.4 -> 55.8; the
#: float EfficientNet-B0 (31%) ran 209.6 -> 260.1 us at 0.35.
ROOMY_WEIGHTS = 0.2

#: An operator without weights (at most :data:`WEIGHTLESS_BYTES` of constants: a pooling,
#: an element-wise op, a quantizer) gets that floor too while the graph's weights take at
#: most this share: its pieces copy no weights, they only add buffers (int8 ResNet-18, 17%:
#: its input quantizer, max pool and residual Adds in more pieces, 144.9 -> 131.3 us; at
#: 42%, the float Inception v1's weightless pieces crowd out its activations: 515.5 ->
#: 1409.5 us). 0.25 -> 0.35 at stop 47: the float EfficientNet-B0 (31%) 209.6 -> 192.9 us
#: (0.3 changes nothing, it is the share that decides); at 0.45 the float Inception v1 ran
#: 409.5 -> 752.8 us.
ROOMY_WEIGHTLESS = 0.35
WEIGHTLESS_BYTES = 1024

#: ``heavy_channels``: a matrix operator whose weights exceed this many times its input
#: and whose rows give fewer bands than its time asks for is cut on output channels (:func:`_heavy`).
HEAVY_WEIGHTS = 16

#: With SRAM to spare (:data:`ROOMY_WEIGHTLESS`), at most this many channel pieces per row
#: band of a matrix operator whose rows are too few for its time (:func:`_band_pieces`).
BAND_PIECES = 4

#: A tiling for cores packed by SRAM (``cut_for_parallelism``'s ``slices``) cuts the row bands
#: of a matrix operator with more than this many bytes of weights on output channels: a band
#: then holds a slice of the weights, which the packing may copy into the room a packed core
#: leaves (about 120 KB a core when the float ResNet-18 is packed).
SLICE_BYTES = 64 * 1024

#: Operators whose pieces read their whole input when cut on output channels.
MATRIX_OPS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul"})


def cut_for_parallelism(graph: Graph, target: Target, pieces_per_core: float = PIECES_PER_CORE,
                        min_rows: int = MIN_ROWS, bands: bool = False, input_pieces: int = 0,
                        slices: int = 0, floor_pieces: int = FLOOR_PIECES, heavy_channels: bool = False) -> int:
    """Cut the operators of ``graph`` (in place, topologically sorted) as the module
    docstring says, row bands of at least ``min_rows`` rows; return how many were cut.

    ``bands`` (*banded* tiling): with SRAM to spare (:data:`ROOMY_WEIGHTS`), a pointwise
    convolution behind a row cut whose rows are too few for its time keeps the rows instead
    of taking its own channel cut (:func:`_rows_too_few`), and every row-cut convolution or
    pooling, a piece of a weight cut too, whose time asks for more pieces than its bands has
    its bands cut on channels (:func:`_band_pieces`; without ``bands``, only a matrix
    operator asking for twice as many): each piece then reads its band, not the whole input,
    and starts as soon as its band is in (the int8 SqueezeNet's ``conv10``, 512 -> 1000
    channels on 13 x 13: 32 channel pieces each received the whole 86.5 KB input, 3.4 us on
    the critical path, then ran 2.6 us; banded, its pieces run 0.8 us behind their bands),
    and a band's 3 x 3 convolution or pooling of 1 us runs as two or more shorter pieces.
    Each band copies the weights, so :func:`~corefold.backend.lower.lower` tries it as a
    further tiling and the timed simulation decides.

    ``input_pieces``: an operator that reads a graph input is cut into at least that many
    pieces (within the same caps as any cut), so that the input, read from DRAM share by
    share, leaves less work behind its last share: on a model whose roofline is that read,
    what runs after it sets the latency (the int8 SqueezeNet's input quantizer in 8 pieces
    of 0.9 us behind shares of 2.95 us; in 32, 46.8 -> 40.5 us). The operators after it
    follow the finer cut, so it too is a tiling :func:`~corefold.backend.lower.lower` tries.

    ``slices`` (a tiling for cores packed by SRAM, ``LowerSettings.pack_cores``): every row
    band of a matrix operator with more than :data:`SLICE_BYTES` of weights is cut into that
    many pieces on output channels (none: 0 or 1), so that the operator's weights are several
    items that the packing puts on several cores, and that fit where a copy of the whole would
    not (:func:`~corefold.backend.pack.pack`; float ResNet-18, whose 3 x 3 convolutions on
    56 x 56 and 28 x 28 ran their bands on one or two cores: with the other packing rules
    1428.1 -> 837.9 us).

    ``floor_pieces``: with SRAM to spare, a long operator is cut into at least this many
    pieces (:data:`FLOOR_PIECES`; at most a quarter of the cores), whatever
    ``pieces_per_core`` asks for; :func:`~corefold.backend.lower.lower` halves it with the
    pieces per core when a lowering runs out of a resource.

    ``heavy_channels``: a matrix operator that rows would cut into fewer bands than its
    time asks for, and whose weights exceed :data:`HEAVY_WEIGHTS` times its input, takes
    its own cut on output channels whatever the room (:func:`_heavy`): with SRAM to spare
    its bands would each copy all its weights, which later layers then lack (the held-out
    int8 Inception v2's 3 x 3 convolutions of 224 channels on 7 x 7 ran their six bands on
    one core). A tiling knob: :func:`~corefold.backend.lower.lower` tries it.

    ``graph`` is the tile step's private copy: every operator already fits a core, and
    pieces, being smaller, fit too.
    """
    from corefold.backend.tile import cut_along

    cores = max(1, len(target.usable_cores))
    seconds = {n: _seconds(n, target) for n in graph.nodes if needs_fit(n)}
    total = sum(seconds.values())
    if total <= 0:
        return 0
    tau = total / (cores * pieces_per_core)
    # NOTE: the constants the nodes read, once each: the split pass's sliced weights replace
    # the originals, which stay among graph.values() (int8 ResNet-18 counted 30.8 MB for 11.7)
    weights = sum({id(v): v.nbytes for n in graph.nodes for v in n.inputs
                   if v is not None and v.is_constant}.values())
    roomy = weights <= ROOMY_WEIGHTS * cores * target.sram_bytes
    roomy_weightless = weights <= ROOMY_WEIGHTLESS * cores * target.sram_bytes
    cut_of: dict[int, tuple[int, int]] = {}  # id(join output) -> (output axis, k) of the cut behind it
    cut = 0
    for node in list(graph.nodes):
        if node not in seconds or len(node.outputs) != 1:
            continue
        follow = _followed(node, cut_of)
        # NOTE: not with the weights past ROOMY_WEIGHTLESS: the float Inception v1's LRNs and
        # pools following rows took other piece counts and it ran 426.1 -> 752.8 us; nor a
        # matrix op or a pooling, which read their own channel part where they follow it
        if follow is not None and follow[0] != 2 and roomy_weightless and node.op_type not in MATRIX_OPS | ROW_OPS:
            across = _rows_across_parts(node, cut_of)
            ax = None if across is None else _channel_axis(node, across)
            if across is not None and (spatial_mean(node) is not None or (ax is not None and ax.output[0] == 2)):
                follow = across  # (a global pool of integers sums the rows: it cannot follow them)
        if follow is not None and follow[0] == 2 and spatial_mean(node) is not None:
            cut_mean_rows(graph, node, _band_bounds(node.inputs[0], follow[1]))
            cut += 1
            continue
        if (follow is not None and follow[0] != 2 and node.op_type in MATRIX_OPS
                and not _reads_own_part(node, follow)):
            follow = None  # it reads its whole input anyway: its own cut
        k = math.ceil(seconds[node] / tau)
        if roomy or (roomy_weightless and _constant_bytes(node) <= WEIGHTLESS_BYTES):
            k = max(k, min(cores // 4, floor_pieces, math.ceil(seconds[node] / MIN_PIECE_SECONDS)))
        if input_pieces and any(v is not None and v.producer is None and not v.is_constant for v in node.inputs):
            k = max(k, input_pieces)
        if follow is None and k < 2:
            continue
        how = _choose(node, follow, roomy)
        if heavy_channels and how == "rows" and _heavy(node, k, min_rows):
            follow, how = None, "channels"
        banded = bands and roomy
        if how == "rows" and follow is not None and _rows_too_few(node, k, min_rows):
            if not banded:
                follow, how = None, "channels"
        own = k
        # a multiple of the followed cut's pieces: each piece then reads one of its producer's
        multiple = (how != "rows" and follow is not None and own > follow[1] and _reads_own_part(node, follow))
        if multiple:
            k = follow[1] * math.ceil(own / follow[1])
        elif follow is not None:
            k = max(k, follow[1]) if how == "rows" else follow[1]
        # every piece may land on its own core, and a reader of the whole output (the next
        # matrix operator) must receive from all of them: its NoC buffers bound the pieces
        want = k
        k = min(k, max(1, target.noc_streams_per_core // _siblings(node)))
        if multiple and k >= follow[1]:  # below it, the streams cap it as they did the follow
            k -= k % follow[1]
        if how == "rows":
            k = min(k, node.outputs[0].shape[2] // min_rows)
            if follow is None and k >= 2 and _halving_reader(node):
                k = _even_bands(node.outputs[0].shape[2], k, min_rows)
            if k < 2:
                continue
            own_weights = _constant_bytes(node)  # (the cut empties the node)
            join = cut_rows(graph, node, k)
            if slices >= 2 and node.op_type in MATRIX_OPS and own_weights > SLICE_BYTES:
                _cut_bands(graph, join, slices)
            elif banded and want > k and _siblings(node) <= 2 and (node.op_type in MATRIX_OPS or node.op_type in ROW_OPS):
                _cut_bands(graph, join, _band_pieces(node, want, k, seconds[node], target))
            elif roomy_weightless and node.op_type in MATRIX_OPS and want >= 2 * k and _siblings(node) == 1:
                _cut_bands(graph, join, _band_pieces(node, want, k, seconds[node], target))
        else:
            ax = _channel_axis(node, follow)
            if ax is None:
                continue
            if roomy and follow is not None and ax.output[0] != follow[0]:
                # NOTE: it cannot cut the followed axis (an LRN's window spans channels), so
                # its pieces read across the producer's anyway: with SRAM to spare it takes
                # its own count when that is more (int8 Inception v1: the LRN behind the
                # split pass's two channel parts ran as two 12 us pieces; 188.6 -> 176.5 us)
                k = max(k, min(own, max(1, target.noc_streams_per_core // _siblings(node))))
            k = min(k, ax.extent)
            if multiple and k >= follow[1]:
                k -= k % follow[1]
            if k < 2:
                continue
            join = cut_along(graph, node, ax, k)
        cut_of[id(join.outputs[0])] = (2 if how == "rows" else ax.output[0], k)
        cut += 1
    if cut:
        graph.sort()
    return cut


def _heavy(node: Node, k: int, min_rows: int) -> bool:
    """Whether matrix operator ``node``, which a row cut would give fewer bands than the
    ``k`` pieces its time asks for, reads weights of more than :data:`HEAVY_WEIGHTS` times
    its input: each row band would copy them all for a few rows of a small map, so
    ``cut_for_parallelism``'s ``heavy_channels`` cuts it on output channels instead, each
    piece with its share of the weights reading the whole (small) input. O(inputs)."""
    x = node.inputs[0]
    if node.op_type not in MATRIX_OPS or x is None or x.shape is None or len(node.outputs[0].shape or ()) != 4:
        return False
    return node.outputs[0].shape[2] // min_rows < k and _constant_bytes(node) > HEAVY_WEIGHTS * x.nbytes


def _halving_reader(node: Node) -> bool:
    """Whether a reader of ``node``'s output is a convolution or pooling of row stride 2
    (it follows ``node``'s row cut with bands of half as many rows). O(readers)."""
    return any(u.op_type in ROW_OPS and list(u.attrs.get("strides", [1, 1]))[:1] == [2]
               for u in node.outputs[0].consumers())


def _even_bands(h: int, k: int, min_rows: int) -> int:
    """The largest band count up to ``k`` (never more pieces than the caps allowed) that cuts
    ``h`` rows into equal bands of an even number of rows, at least ``min_rows``; ``k`` when
    none does. A reader of row stride 2 follows the cut with bands of half the rows: with 32
    bands of 3 or 4 of a 112-row map, its 28 bands of 2 rows (56 // ``min_rows``) each
    straddled two of the producer's bands, often on two cores (the float MobileNetV3's stem
    sent its 803 KB output over one link, the last band 6.7 us behind the others; 66.8 ->
    62.4 us with 28 bands of 4 rows, float Inception v1 426.1 -> 409.5). O(h)."""
    even = [d for d in range(2, min(k, h // max(1, min_rows)) + 1) if h % d == 0 and (h // d) % 2 == 0]
    return max(even) if even else k


def _band_pieces(node: Node, want: int, k: int, seconds: float, target: Target) -> int:
    """How many channel pieces each of the ``k`` row bands of matrix operator ``node`` is
    cut into when its time asks for ``want`` >= 2k pieces, more than its rows allow: up to
    ``want / k`` and :data:`BAND_PIECES`, and no more than ``seconds * link / output
    bytes``. Beyond that a piece computes for less time than its band's reader takes to
    receive the band over one link (``bytes / k / link``), so cutting further saves
    nothing. O(1)."""
    link = target.noc_link_bytes_per_cycle * target.clock_hz
    return min(math.ceil(want / k), BAND_PIECES, int(seconds * link / max(1, node.outputs[0].nbytes)))


def _cut_bands(graph: Graph, join: Node, kc: int) -> None:
    """Cut every row band behind ``join`` into ``kc`` pieces on output channels (each
    keeps its share of the weights and reads its band whole). O(k * kc)."""
    from corefold.backend.tile import cut_along

    for v in list(join.inputs):
        ax = _channel_axis(v.producer, None)
        if ax is not None and min(kc, ax.extent) >= 2:
            cut_along(graph, v.producer, ax, min(kc, ax.extent))


def _followed(node: Node, cut_of: dict[int, tuple[int, int]]) -> tuple[int, int] | None:
    """The cut ``node`` follows: that of its first non-constant input of the output's size
    (an SE block's ``scale * x`` follows ``x``, not the ``[1, C, 1, 1]`` scale), else of its
    first non-constant input; None when that input is not a cut's join. O(inputs)."""
    x = _followed_input(node)
    return None if x is None else cut_of.get(id(x)) or joined_cut(x) or _through_reshape(x, cut_of)


def _through_reshape(x: Value, cut_of: dict[int, tuple[int, int]]) -> tuple[int, int] | None:
    """The cut behind ``x = Reshape(y)`` on the axis of ``x`` that the cut axis of ``y``
    becomes, when the reshape regroups only axes before it (:func:`~corefold.backend.boxes.kept_suffix`):
    its bands stay boxes of ``x`` (a channel shuffle's ``Reshape -> Transpose -> Reshape``
    behind a row cut then follows the rows, each band shuffled on its own core). O(rank)."""
    from corefold.backend.boxes import kept_suffix

    view = x.producer
    if view is None or view.op_type != "Reshape" or view.inputs[0] is None or view.inputs[0].shape is None \
            or x.shape is None:
        return None
    y = view.inputs[0]
    cut = cut_of.get(id(y)) or joined_cut(y)
    kept = kept_suffix(tuple(y.shape), tuple(x.shape))
    if cut is None or kept is None or cut[0] < kept[0]:
        return None
    return cut[0] - kept[0] + kept[1], cut[1]


def _followed_input(node: Node) -> Value | None:
    """The input whose cut ``node`` follows (:func:`_followed`). O(inputs)."""
    xs = [v for v in node.inputs if v is not None and not v.is_constant]
    if not xs:
        return None
    y = node.outputs[0].shape
    return next((v for v in xs if v.shape is not None and v.shape == y), xs[0])


def _rows_across_parts(node: Node, cut_of: dict[int, tuple[int, int]]) -> tuple[int, int] | None:
    """``(2, k)`` when ``node`` reads the join of the split pass's ``P`` parts on another
    axis (a max pool cut into two channel parts to fit a core) and this pass cut every
    part into the same ``k >= 2 P`` row bands: the reader then follows the rows across the
    parts (its band ``j`` reads band ``j`` of each part and starts when those are in)
    instead of the parts, each whole only when its last band is. With fewer bands, the
    parts' cut gives more pieces, each reading less (the float SqueezeNet's last global
    pool behind 8 parts of 4 bands: 69.2 -> 80.9 us as 4 bands). O(P)."""
    x = _followed_input(node)
    join = None if x is None else x.producer
    if (join is None or join.op_type != "Concat" or not join.meta.get(JOIN_META) or x.shape is None
            or len(x.shape) != 4 or int(join.attrs.get("axis", 0)) % 4 == 2):
        return None
    cuts = {cut_of.get(id(v)) for v in join.inputs if v is not None}
    cut = cuts.pop() if len(cuts) == 1 else None
    return cut if cut is not None and cut[0] == 2 and cut[1] >= 2 * len(join.inputs) else None


def joined_cut(x: Value) -> tuple[int, int] | None:
    """``(axis, pieces)`` when ``x`` is the Concat join of a cut (``split_join``, e.g. the
    split pass's, whose pieces this pass may have cut again): its leaf pieces counted
    through nested joins on the same axis; else None. O(pieces)."""
    join = x.producer
    if join is None or join.op_type != "Concat" or not join.meta.get(JOIN_META) or x.shape is None:
        return None
    axis = int(join.attrs.get("axis", 0)) % len(x.shape)

    def leaves(v: Value) -> int:
        n = v.producer
        if (n is not None and n.op_type == "Concat" and n.meta.get(JOIN_META) and v.shape is not None
                and int(n.attrs.get("axis", 0)) % len(v.shape) == axis):
            return sum(leaves(i) for i in n.inputs)
        return 1

    pieces = leaves(x)
    return (axis, pieces) if pieces >= 2 else None


def _constant_bytes(node: Node) -> int:
    """Bytes of the constants ``node`` reads (what each of its pieces would copy). O(inputs)."""
    return sum(v.nbytes for v in node.inputs if v is not None and v.is_constant)


def _siblings(node: Node) -> int:
    """How many pieces the output of ``node`` is joined with: 1, or the leaf count of the
    outermost chain of Concat joins it feeds (``node`` a piece of a split). O(depth)."""
    count, v = 1, node.outputs[0]
    while True:
        users = v.consumers()
        if len(users) != 1 or users[0].op_type != "Concat" or not users[0].meta.get(JOIN_META):
            return count
        count *= len(users[0].inputs)
        v = users[0].outputs[0]


def _seconds(node: Node, target: Target) -> float:
    """The node's compute time, a fused activation's included."""
    from corefold.backend.activations import activation_cost, fused_activation

    try:
        act = fused_activation(node)
        extra = activation_cost(act, node.outputs[0], target)[1] if act else 0.0
        return op_cost(node, target).compute_seconds + extra
    except (ValueError, KeyError):
        return 0.0


def _reads_own_part(node: Node, follow: tuple[int, int]) -> bool:
    """Whether ``node`` has a split axis on the followed cut's output axis whose pieces
    read only their own part of the first input (a depthwise or grouped convolution's
    groups, a pooling's channels), so that following the cut keeps each piece beside
    its producer. O(axes)."""
    axes, _ = candidate_axes(node)
    return any(not a.reduce and a.output is not None and a.output[0] == follow[0] and a.inputs
               and a.inputs[0] is not None for a in axes)


def _rows_too_few(node: Node, k: int, min_rows: int = MIN_ROWS) -> bool:
    """Whether a pointwise (1 x 1) convolution that would follow a row cut takes its own
    channel cut instead: its time asks for more pieces than its output has bands of
    :data:`MIN_ROWS` rows (a 7 x 7 layer gives 3), and its weights outweigh its input
    (the own cut :func:`_choose` picks), so that each piece reading the whole small input
    costs less than running a few long bands. A pointwise convolution shares no halo
    with its neighbours' bands. (On the int8 EfficientNet-B0, with :func:`_reads_own_part`
    letting the depthwise convolutions follow the channels: 232 -> 203 us; the int8
    MobileNetV3 51 -> 41 us.) O(1)."""
    return (node.op_type == "Conv" and kernel_size(node, 0) == 1 and kernel_size(node, 1) == 1
            and node.outputs[0].shape[2] // min_rows < k and _choose(node, None) == "channels")


def _choose(node: Node, follow: tuple[int, int] | None, roomy: bool = False) -> str:
    """``"rows"`` or ``"channels"`` (module docstring): ``roomy``, the graph's weights
    within :data:`ROOMY_WEIGHTS` of all cores' SRAM, takes rows whatever the weights."""
    if not row_cuttable(node):
        return "channels"
    if follow is not None and follow[0] == 2:
        return "rows"
    if follow is not None and _reads_own_part(node, follow):
        return "channels"
    if roomy:
        return "rows"
    x = node.inputs[0]
    weights = sum(v.nbytes for v in node.inputs[1:] if v is not None and v.is_constant)
    return "rows" if weights <= x.nbytes else "channels"


def _channel_axis(node: Node, follow: tuple[int, int] | None):
    """The split rules' axis for a channel cut: the producer's output axis when following
    one, else the first axis that reduces nothing; None if there is none. A grouped
    convolution's ``groups`` axis counts, though each of its units is a group of output
    channels: cut into whole groups (at most ``group`` pieces), each piece a convolution of
    its group's channels (the onnx package's ShuffleNet, whose 1 x 1 convolutions of four
    groups on 7 x 7 maps have too few rows for bands: each ran whole on one core, 3.5 us of
    its critical path; as four pieces 0.9 us, the int8 model 134.2 -> 127.4 us)."""
    axes, _ = candidate_axes(node)
    axes = [a for a in axes if not a.reduce and a.output is not None and (a.output[1] == 1 or a.name == "groups")]
    if follow is not None:
        # (a Transpose moves the followed axis: match the axis it reads)
        same = [a for a in axes if (a.inputs[0][0] if node.op_type == "Transpose" and a.inputs and a.inputs[0]
                                    else a.output[0]) == follow[0]]
        if same:
            return same[0]
    if node.op_type in MATRIX_OPS or node.op_type in ROW_OPS:
        return axes[0] if axes else None
    # element-wise and the like: rows of an image (as the convolutions next to it are
    # cut), else channels; never the batch of one
    rank = len(node.outputs[0].shape)
    wide = [a for a in axes if a.extent >= 2]
    pick = [a for a in wide if a.output[0] == (2 if rank == 4 else min(1, rank - 1))]
    return (pick or wide or [None])[0]


def spatial_mean(node: Node) -> int | None:
    """``keepdims`` (0 or 1) when ``node`` is a float mean over the rows and columns of a
    rank-4 tensor (GlobalAveragePool, or ReduceMean over axes 2 and 3), else None. O(1)."""
    if node.domain not in ("", "ai.onnx") or len(node.outputs) != 1 or not node.inputs:
        return None
    x = node.inputs[0]
    if (x is None or x.is_constant or x.shape is None or len(x.shape) != 4 or x.dtype is None
            or np.dtype(x.dtype).kind != "f" or node.outputs[0].shape is None):
        return None
    if node.op_type == "GlobalAveragePool":
        return 1
    if node.op_type != "ReduceMean":
        return None
    if len(node.inputs) > 1 and node.inputs[1] is not None:
        if not node.inputs[1].is_constant:
            return None
        axes = [int(a) for a in np.asarray(node.inputs[1].const).reshape(-1)]
    else:
        axes = [int(a) for a in node.attrs.get("axes", [])]
    if sorted(a % 4 for a in axes) != [2, 3]:
        return None
    return int(node.attrs.get("keepdims", 1))


def _band_bounds(x: Value, k: int) -> list[tuple[int, int]]:
    """The row bands ``[a, b)`` of ``x``, the join of a row cut into ``k`` pieces: its
    Concat's inputs when that is flat, else balanced bands (as :func:`cut_rows` makes). O(k)."""
    join = x.producer
    if (join is not None and join.op_type == "Concat" and len(join.inputs) == k
            and all(v is not None and v.shape is not None for v in join.inputs)):
        bounds, a = [], 0
        for v in join.inputs:
            bounds.append((a, a + v.shape[2]))
            a += v.shape[2]
        if a == x.shape[2]:
            return bounds
    h = x.shape[2]
    return [(j * h // k, (j + 1) * h // k) for j in range(k)]


def cut_mean_rows(graph: Graph, node: Node, bounds: list[tuple[int, int]]) -> None:
    """Replace ``node`` (see :func:`spatial_mean`), whose input is cut into the row
    ``bounds``, by a ReduceSum over each band (read where the band was computed, so that
    only ``C`` sums per band cross the NoC instead of the whole map), a Sum of the partial
    sums and a Div by the number of pixels. The mean reassociates (partial sums, then their
    sum): within float rounding of the reference, as any split reduction. An SE block's
    pool behind row bands read every band from each of its channel pieces before (float
    EfficientNet-B0: the whole activation across the NoC at each of its 16 blocks). O(k)."""
    keepdims = spatial_mean(node)
    x, y = node.inputs[0], node.outputs[0]
    axes = graph.add_constant(f"{y.name}_axes", np.array([2, 3], np.int64))
    count = graph.add_constant(f"{y.name}_pixels", np.array(x.shape[2] * x.shape[3], dtype=y.dtype))
    parts: list[Value] = []
    for j, (a, b) in enumerate(bounds):
        band = slice_rows(graph, x, a, b)
        piece = graph.make_node("ReduceSum", [band, axes], {"keepdims": keepdims}, name=f"{node.name}_rows{j}",
                                output_names=[f"{y.name}_rows{j}"])
        piece.outputs[0].shape = y.shape
        piece.outputs[0].dtype = y.dtype
        parts.append(piece.outputs[0])
    total = graph.make_node("Sum", parts, name=f"{node.name}_sum", output_names=[f"{y.name}_sum"])
    total.outputs[0].shape = y.shape
    total.outputs[0].dtype = y.dtype
    hold = Value("__hold", y.shape, y.dtype)
    graph.replace_all_uses(y, hold)
    preds, succs = list(node.control_preds), list(node.control_succs)
    graph.remove_node(node)
    mean = Node("Div", [total.outputs[0], count], [y], {}, name=f"{node.name}_mean")
    graph.add_node(mean)
    graph.replace_all_uses(hold, y)
    for p in preds:
        for part in parts:
            graph.add_control_edge(p, part.producer)
    for sc in succs:
        graph.add_control_edge(mean, sc)

