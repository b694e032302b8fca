"""FLOP formulas of the aten operators that enter the IR without an ONNX counterpart.

``corefold.frontend.torch`` imports a PyTorch joint graph; operators with an ONNX
counterpart become ONNX nodes and are costed as such, the rest stay in
:data:`~corefold.ir.domains.ATEN_DOMAIN` under their aten name (``convolution_backward``,
``native_batch_norm_backward``, ...) with static shapes and the attributes these formulas
read. Matrix work (2 FLOPs per multiply-accumulate) is counted where the operator has it;
every other aten operator is element-wise for the cost model (one FLOP per output
element, so the memory bandwidth bounds its roofline time). O(1) per node.
"""

from __future__ import annotations

import numpy as np

from corefold.ir import Node


def _prod(shape) -> int:
    return int(np.prod(shape, dtype=np.int64)) if shape else 1


def _conv_macs(grad_out_shape, weight_shape, groups_free: bool = True) -> int:
    # forward convolution MACs: every output element sums over Cin/groups x kernel
    return _prod(grad_out_shape) * _prod(weight_shape[1:])


def _mm_flops(node: Node) -> int:
    a, b = node.inputs[-2].shape, node.inputs[-1].shape
    batch = _prod(node.outputs[0].shape[:-2])
    return 2 * batch * int(a[-2]) * int(a[-1]) * int(b[-1])


def _convolution_backward(node: Node) -> int:
    grad_out, _x, weight = node.inputs[:3]
    mask = node.attrs.get("output_mask", [1, 1, 1])
    macs = _conv_macs(grad_out.shape, weight.shape)
    return 2 * macs * (int(bool(mask[0])) + int(bool(mask[1]))) + (_prod(grad_out.shape) if mask[2] else 0)


def _sdpa(node: Node) -> int:
    q, k = node.inputs[0].shape, node.inputs[1].shape
    batch = _prod(q[:-2])
    return 4 * batch * int(q[-2]) * int(k[-2]) * int(q[-1])


#: aten name -> (FLOPs(node), whether the work is matrix work).
ATEN_FLOPS = {
    "convolution_backward": (_convolution_backward, True),
    "mm": (_mm_flops, True),
    "bmm": (_mm_flops, True),
    "baddbmm": (_mm_flops, True),
    "addmm": (_mm_flops, True),
    "_scaled_dot_product_flash_attention_for_cpu": (_sdpa, True),
    "_scaled_dot_product_flash_attention_for_cpu_backward": (lambda n: 2 * _sdpa(n), True),
    "_scaled_dot_product_efficient_attention": (_sdpa, True),
    "_scaled_dot_product_efficient_attention_backward": (lambda n: 2 * _sdpa(n), True),
}


def aten_flops(node: Node) -> tuple[int, bool]:
    """(FLOPs, is matrix work) of an aten-domain node; element-wise by default."""
    entry = ATEN_FLOPS.get(node.op_type)
    if entry is None:
        return sum(_prod(v.shape) for v in node.outputs), False
    fn, matrix = entry
    return int(fn(node)), matrix
