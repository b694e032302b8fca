"""The backend on real architectures no one here wrote: onnx's light model-zoo networks
(Caffe2 exports, opset 9: LRN, Sum, Dropout, BatchNormalization left unfolded, concats of
four branches), lowered with the fast preset onto the smallest preset they fit and run by
the simulator against the reference executor.

Their weights are single values, so every class gets the same logit and the final Softmax
is 1/1000 everywhere; the logits (the last Softmax's input, which the test makes the
output) depend on the image and are compared, within 1e-5 of their scale (split
reductions reassociate); so are they with the weights replaced by seeded random ones, under
which data moved to the wrong place shows (the models' own make the channels nearly equal). The three that do not fit even the 2 x 2 board of 8 x 8 chips
(AlexNet, VGG-19, ZFNet-512) and the float ResNet-50 there are refused in one line naming
the resource. Skipped when onnx ships no light models.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from corefold.backend import lower, run_executable
from corefold.backend.lower import FAST
from corefold.errors import CompileError
from corefold.executor import random_inputs, run
from corefold.frontend.onnx import load_model
from corefold.sim import run_simulation
from corefold.target import load_target

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
#: the smallest preset each lowers onto with the fast preset
LOWERS = {"shufflenet": "npu", "squeezenet": "npu", "inception_v1": "npu", "densenet121": "npu-array",
          "inception_v2": "npu-array"}
#: refused even on npu-array, and the resource named
REFUSED = {"bvlc_alexnet": "core count", "vgg19": "core count", "zfnet512": "core count",
           # its 102 MB of float weights fill the cores a layer4 reader of 50 pieces hears from
           "resnet50": "NoC buffers"}

pytestmark = pytest.mark.skipif(not (LIGHT / "light_squeezenet.onnx").exists(),
                                reason="this onnx wheel ships no light models")


def _randomized(g, seed: int = 0):
    """``g`` with every float weight of more than one element replaced by seeded random
    values (variances positive): with the light models' single-valued weights, channels are
    nearly equal, and data moved to the wrong channel barely shows."""
    rng = np.random.default_rng(seed)
    for n in g.nodes:
        for j, v in enumerate(n.inputs):
            if v is not None and v.const is not None and v.dtype == np.float32 and v.const.size > 1:
                if n.op_type == "BatchNormalization" and j == 4:
                    v.const = (rng.random(v.const.shape) + 0.5).astype(np.float32)
                else:
                    v.const = (rng.standard_normal(v.const.shape) * 0.3).astype(np.float32)
    return g


def _prefix(name: str, last: int):
    """The model up to its node ``last`` (that node's output the graph's), weights
    randomized."""
    g = load_model(LIGHT / f"light_{name}.onnx")
    out = list(g.nodes)[last].outputs[0]
    g.outputs = [out]
    changed = True
    while changed:
        changed = False
        for n in reversed(list(g.nodes)):
            if all(not o.uses() and o is not out for o in n.outputs):
                g.remove_node(n)
                changed = True
    return _randomized(g)


def test_the_shufflenet_channel_shuffle_staged_through_dram_keeps_every_channel():
    """ShuffleNet's first units up to a channel shuffle (node 33: Reshape to 1 x 4 x 34 x 28 x
    28, Transpose), with random weights: pieces of the shuffle staged through DRAM for
    readers that see them reshaped. Until stop 54, on ``npu``, the first shuffle's Transpose
    pieces (1 x 1 x 4 x 56 x 56) were staged for the next convolution's row bands, which read
    them as 1 x 4 x 56 x 56; the staged store applied the reader's 4-d box to the piece's
    5-d shape and left one channel of a band unwritten: the output was off by 9.9e-4 of its
    scale (by 2.9e-5 at the full model's logits with its own weights). The store now takes
    the reader's view shape (``spill._stage``). Since stop 54 the shuffle runs band by band
    where its bands were computed and ``npu`` stages nothing, so the case runs on cores of
    384 KiB with fewer pieces, where 7 stores of buffers seen through a view of another rank
    go through DRAM."""
    from dataclasses import replace

    from corefold.backend.executable import DmaStore
    from corefold.backend.testing import small_target

    g = _prefix("shufflenet", 33)
    target = small_target(width=8, height=8, sram_kib=384, reserved_kib=32)
    exe = lower(g, target, replace(FAST, pieces_per_core=2.0))
    reshaped = [ins for p in exe.programs for ins in p.instructions
                if isinstance(ins, DmaStore) and exe.regions[ins.dst.ref].kind == "staging"
                and len(exe.buffers[ins.src.ref].shape) != len(ins.src.shape)]
    assert reshaped, "the case no longer stages a buffer seen through a view of another rank"
    feeds = random_inputs(g, 0)
    (k, want), = run(g, feeds).items()
    got = run_executable(exe, feeds)[k]
    assert float(np.abs(got - want).max()) <= 1e-5 * float(np.abs(want).max())


def _logits(name: str):
    """The light model with its final Softmax (and any Reshape or Flatten after it) removed:
    the logits are the output. SqueezeNet ends in ``Softmax -> Reshape``; with its own
    weights its logits are equal up to rounding and near 6.8e9, where one float32 step is
    512, so the Softmax of logits one step apart is 1/512 or 0 instead of 1/1000: its output
    depended on how the BLAS kernel blocked the sums (it failed with
    ``OPENBLAS_NUM_THREADS=1``), the logits do not."""
    g = load_model(LIGHT / f"light_{name}.onnx")
    out = g.outputs[0]
    tail = []
    while out.producer is not None and out.producer.op_type in ("Reshape", "Flatten") and len(out.uses()) == 0:
        tail.append(out.producer)
        out = out.producer.inputs[0]
    if out.producer is not None and out.producer.op_type == "Softmax" and len(out.uses()) == len(tail[-1:]):
        sm = out.producer
        g.outputs = [sm.inputs[0]]
        for n in [*tail, sm]:
            g.remove_node(n)
    return g


@pytest.mark.parametrize("weights", ["own", "random"])
@pytest.mark.parametrize("name", sorted(LOWERS))
def test_a_light_model_lowers_and_simulates_to_the_executors_logits(name, weights):
    g = _logits(name) if weights == "own" else _randomized(_logits(name))
    target = load_target(LOWERS[name])
    exe = lower(g, target, FAST)
    feeds = random_inputs(g, 0)
    want = run(g, feeds)
    sim = run_simulation(exe, feeds, target)
    for k, v in want.items():
        scale = float(np.abs(v).max())
        assert scale > 0
        assert float(np.abs(sim.outputs[k].astype(np.float64) - v).max()) <= 1e-5 * scale, k
    assert sim.report.latency_s >= sim.report.roofline_s > 0


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_light_model_too_big_for_the_board_is_refused_in_one_line(name):
    g = load_model(LIGHT / f"light_{name}.onnx")
    with pytest.raises(CompileError) as info:
        lower(g, load_target("npu-array"), FAST)
    assert info.value.resource == REFUSED[name]
    assert "\n" not in str(info.value) and info.value.need > info.value.limit


def _quantized(name: str, tmp_path):
    """The light model ``name`` (logits, seeded random weights), quantized by corefold with
    min/max calibration on 4 seeded random images."""
    from corefold.passes.quantize import QuantizeSettings, load_calibration, quantize_graph

    g = _randomized(_logits(name))
    rng = np.random.default_rng(0)
    calib = tmp_path / "calib.npz"
    np.savez(calib, **{v.name: rng.standard_normal((4,) + tuple(v.shape[1:])).astype(np.float32)
                       for v in g.inputs})
    quantize_graph(g, load_calibration(calib, g), QuantizeSettings(calibration="minmax", max_batches=4),
                   progress=False)
    return g


def test_an_int8_model_on_small_cores_cuts_its_first_convolution_in_row_bands(tmp_path):
    """The int8 SqueezeNet on 8 x 8 cores of 128 KiB: its first convolution, fused with its
    integers, reads 147 KiB of quantized image, and cut on output channels every piece
    still reads all of it; only a cut over its input channels fitted, which integer
    pieces cannot be (each would round its partial sum), so the model was refused
    ("SRAM ... fits a core only cut over a reduced dimension"). Cut in bands of output
    rows (each reading its rows and their halo), it lowers and equals the integer runner;
    so does the max pool behind it, which follows the bands instead of reading all of them."""
    from corefold.backend.testing import small_target
    from corefold.passes.quantize.integer import IntegerRunner

    g = _quantized("squeezenet", tmp_path)
    attach = "[[0, 3], [0, 4], [7, 3], [7, 4]]"
    exe = lower(g, small_target(8, 8, 128, reserved_kib=8, dram_attach=attach), FAST)
    names = {exe.ops[i.op].name for p in exe.programs for i in p.instructions if hasattr(i, "op")}
    assert len([n for n in names if n.startswith("n0_int_rows")]) >= 2
    assert len([n for n in names if n.startswith("n2_int_rows")]) >= 2
    feeds = random_inputs(g, 0)
    got = run_executable(exe, feeds)
    for k, v in IntegerRunner(g).run(feeds).items():
        np.testing.assert_array_equal(got[k], v)
