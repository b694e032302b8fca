"""Row bands: cut a convolution or pooling over an image into bands of output rows.

Each piece computes a band of output rows ``[a, b)`` from the input rows ``[a s - p_top,
(b - 1) s - p_top + (k_h - 1) d + 1)`` (a *halo* of ``(k_h - 1) d + 1 - s`` rows shared with
its neighbours), with the padding only where the band meets the border, and keeps the
operator's whole weights (and a fused integer node's quantization). The split rules
(:mod:`.rules`) map input slices linearly to output slices, which a halo is not, so bands
are cut here: by the split pass (:func:`~corefold.passes.split.split_graph`) when no cut of
the rules that reduces nothing fits (:func:`bands_to_fit`: an image too large for one core,
whose output-channel pieces would each still read all of it), and by the backend to give
every core work (:mod:`corefold.backend.parallel`). Pieces compute exactly what the
operator does. O(k) per cut of k bands.
"""

from __future__ import annotations

import numpy as np

from corefold.ir import Graph, Node, Value
from corefold.passes.split.rules import candidate_axes
from corefold.passes.split.split import JOIN_META, needs_fit, piece_bytes, touched_bytes

#: Operators that can be cut into bands of output rows.
ROW_OPS = frozenset({"Conv", "MaxPool", "AveragePool"})


def row_cuttable(node: Node) -> bool:
    """Whether ``node`` can be cut into bands of output rows: a rank-4 Conv or pooling
    with explicit pads (no ``auto_pad``), one output, and for AveragePool no ``ceil_mode``
    (its tail taps never count, which explicit pads would change)."""
    if node.op_type not in ROW_OPS or len(node.outputs) != 1:
        return False
    x, y = node.inputs[0], node.outputs[0]
    if x is None or x.shape is None or len(x.shape) != 4 or y.shape is None or len(y.shape) != 4:
        return False
    auto_pad = node.attrs.get("auto_pad", "NOTSET")
    if (auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad) not in ("NOTSET", ""):
        return False
    if node.op_type == "AveragePool" and int(node.attrs.get("ceil_mode", 0)):
        return False
    return not x.is_constant


def kernel_size(node: Node, axis: int) -> int:
    """The kernel's extent along spatial ``axis`` (0 rows, 1 columns)."""
    if "kernel_shape" in node.attrs:
        return int(node.attrs["kernel_shape"][axis])
    return int(node.inputs[1].shape[2 + axis])


def cut_rows(graph: Graph, node: Node, k: int) -> Node:
    """Replace ``node`` (see :func:`row_cuttable`) by ``k`` pieces over balanced bands of
    output rows and a Concat on axis 2 (meta ``split_join``) that takes over its output;
    return the Concat. Each piece reads its input rows through a shared constant Slice
    (``split_join``) and keeps the weights and quantization whole. O(k)."""
    x, y = node.inputs[0], node.outputs[0]
    h = x.shape[2]
    oh = y.shape[2]
    s = int(node.attrs.get("strides", [1, 1])[0])
    d = int(node.attrs.get("dilations", [1, 1])[0])
    pads = list(node.attrs.get("pads", [0, 0, 0, 0]))
    reach = (kernel_size(node, 0) - 1) * d + 1
    s_w = int(node.attrs.get("strides", [1, 1])[1])
    reach_w = (kernel_size(node, 1) - 1) * int(node.attrs.get("dilations", [1, 1])[1]) + 1
    pieces: list[Node] = []
    slices: dict[tuple[int, int], Value] = {}
    for j in range(k):
        a, b = j * oh // k, (j + 1) * oh // k
        lo = a * s - pads[0]
        hi = (b - 1) * s - pads[0] + reach
        lo_c, hi_c = max(lo, 0), min(hi, h)
        if (lo_c, hi_c) not in slices:
            slices[(lo_c, hi_c)] = x if (lo_c, hi_c) == (0, h) else slice_rows(graph, x, lo_c, hi_c)
        attrs = dict(node.attrs)
        attrs["pads"] = [lo_c - lo, pads[1], hi - hi_c, pads[3]]
        if int(attrs.get("ceil_mode", 0)):
            # NOTE: explicit pads give exactly the rows and columns ceil_mode gave (MaxPool
            # only: row_cuttable refuses an AveragePool, whose tail taps never count)
            attrs["ceil_mode"] = 0
            attrs["pads"][3] = max(0, (y.shape[3] - 1) * s_w - pads[1] + reach_w - x.shape[3])
        piece = graph.make_node(node.op_type, [slices[(lo_c, hi_c)], *node.inputs[1:]], attrs,
                                name=f"{node.name}_rows{j}", output_names=[f"{y.name}_rows{j}"],
                                domain=node.domain)
        piece.outputs[0].shape = (y.shape[0], y.shape[1], b - a, y.shape[3])
        piece.outputs[0].dtype = y.dtype
        piece.meta = {key: v for key, v in node.meta.items()}
        pieces.append(piece)
    hold = Value("__hold", y.shape, y.dtype)
    graph.replace_all_uses(y, hold)
    preds, succs = list(node.control_preds), list(node.control_succs)
    graph.remove_node(node)
    join = Node("Concat", [p.outputs[0] for p in pieces], [y], {"axis": 2}, name=f"{y.name}_rows_concat")
    join.meta[JOIN_META] = True
    graph.add_node(join)
    graph.replace_all_uses(hold, y)
    for p in preds:
        for piece in pieces:
            graph.add_control_edge(p, piece)
    for sc in succs:
        graph.add_control_edge(join, sc)
    return join


def band_bytes(node: Node, k: int) -> tuple[int, int]:
    """``(activations, constants)``: the most bytes of input rows (halo included) plus
    output rows that one of ``k`` balanced row bands of ``node`` (see
    :func:`row_cuttable`) touches, and the bytes of the constants each band keeps whole.
    O(k)."""
    x, y = node.inputs[0], node.outputs[0]
    h, oh = x.shape[2], y.shape[2]
    s = int(node.attrs.get("strides", [1, 1])[0])
    pad = int(node.attrs.get("pads", [0, 0, 0, 0])[0])
    reach = (kernel_size(node, 0) - 1) * int(node.attrs.get("dilations", [1, 1])[0]) + 1
    row_in, row_out = x.nbytes // max(1, h), y.nbytes // max(1, oh)
    most = 0
    for j in range(k):
        a, b = j * oh // k, (j + 1) * oh // k
        lo, hi = max(a * s - pad, 0), min((b - 1) * s - pad + reach, h)
        most = max(most, (hi - lo) * row_in + (b - a) * row_out)
    seen: set[int] = set()
    consts = 0
    for v in node.inputs[1:]:
        if v is not None and id(v) not in seen:
            seen.add(id(v))
            consts += v.nbytes
    return most, consts


def bands_to_fit(node: Node, threshold: int) -> int | None:
    """How many row bands make ``node`` fit a core when no cut of the split rules that
    reduces nothing does (a convolution or pooling over an image too large for one core,
    e.g. the first layer of a 224 x 224 network on 128 KiB cores: its output channels cut
    to one still read every input row), or None: it fits already, a split-rule cut fits,
    it cannot be cut in rows, or no band count leaves its constants room. An operator
    reading a row cut's join, with constants no larger than its input, takes rows whatever
    the split rules offer: cut on channels, each piece would read every band (a max pool
    behind the first convolution's 33 bands, more than a core receives from).

    The fewest bands whose every band fits with the constants whole; when the constants
    alone take more than half of ``threshold``, the fewest whose activations take at most
    half, and the split pass then cuts each band's constants (output channels).
    O(H^2) for H output rows (each band count k costs O(k)), plus O(E) per split axis of
    extent E."""
    if not needs_fit(node) or touched_bytes(node) <= threshold or not row_cuttable(node):
        return None
    join = node.inputs[0].producer
    banded = (join is not None and join.op_type == "Concat" and join.meta.get(JOIN_META) and join.attrs.get("axis") == 2
              and band_bytes(node, 1)[1] <= node.inputs[0].nbytes)
    for ax in [] if banded else candidate_axes(node)[0]:
        if not ax.reduce and any(piece_bytes(node, ax, -(-ax.extent // k)) <= threshold
                                 for k in range(2, ax.extent + 1)):
            return None
    oh = node.outputs[0].shape[2]
    half = threshold // 2
    for k in range(2, oh + 1):
        act, consts = band_bytes(node, k)
        if act + consts <= threshold or (consts > half and act <= half):
            return k
    return None


def slice_rows(graph: Graph, x: Value, lo: int, hi: int) -> Value:
    """Rows ``[lo, hi)`` of the rank-4 ``x``: a constant-bounded Slice marked ``split_join``
    (a view of the pieces that hold those rows, not a copy), its output. O(1)."""
    consts = [graph.add_constant(f"{x.name}_rows_{what}", np.array([v], np.int64))
              for what, v in (("starts", lo), ("ends", hi), ("axes", 2))]
    sl = graph.make_node("Slice", [x, *consts], name=f"{x.name}_rows_slice")
    sl.meta[JOIN_META] = True
    out = sl.outputs[0]
    out.shape = (x.shape[0], x.shape[1], hi - lo, x.shape[3])
    out.dtype = x.dtype
    return out
