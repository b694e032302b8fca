"""The placement read from an executable: every Compute counted once on its core, every
Send's bytes on its pair of cores, routes that join them."""

from importlib import resources

import numpy as np

from corefold.backend.executable import Compute, Send, route_end
from corefold.backend.lower import FAST, lower
from corefold.frontend.onnx import load_model
from corefold.sim.placement import placement
from corefold.target import load_target


def test_placement_counts_every_compute_and_send_once():
    target = load_target("npu-2x2")
    exe = lower(load_model(str(resources.files("corefold.examples").joinpath("tiny_cnn.onnx"))), target, FAST)
    pl = placement(exe, target)
    computes = [(c, exe.ops[i.op].op_type) for c, _, i in exe.instructions() if isinstance(i, Compute)]
    assert sum(sum(v.values()) for v in pl.ops.values()) == len(computes) == len(exe.ops)
    for c, op_type in computes:
        assert pl.ops[c][op_type] >= 1 and pl.seconds[c][op_type] > 0
    sends = [(c, i) for c, _, i in exe.instructions() if isinstance(i, Send)]
    assert sends, "tiny_cnn on 2 cores exchanges data"
    total = sum(i.src.elements * np.dtype(exe.buffers[i.src.ref].dtype).itemsize for _, i in sends)
    assert sum(b for b, _ in pl.sends.values()) == total
    for (src, dst), (_, route) in pl.sends.items():
        assert src != dst and route_end(src, route) == dst
    assert pl.instructions == {p.core: len(p.instructions) for p in exe.programs}
