"""The ``.cfx`` bytes of a DMA copy and of an interleaved region against docs/executable.md, and
the version rule."""

import struct

import pytest

from corefold.backend import executable as ex
from corefold.backend.cfx import (
    CfxError,
    encode_instruction,
    from_bytes,
    instruction_size,
    to_bytes,
)
from corefold.backend.executable import DmaCopy, View, xy_route
from corefold.sim.testing import ExeBuilder, small_target, striped_copy_exe


def _copy_exe():
    """Input ``x`` (channel 0, router (1, 0)) copied into output ``y`` as two halves by core (0, 0)."""
    t = small_target()
    b = ExeBuilder(t)
    x = b.graph_input("x", (2, 8))
    y = b.graph_output("y", (2, 8))
    b.add((0, 0), DmaCopy("dma0", View(x, (2, 8), (0, 0), (1, 8)), View(y, (2, 8), (1, 0), (1, 8)), ()))
    b.add((0, 0), DmaCopy("dma0", View(x, (2, 8), (1, 0), (1, 8)), View(y, (2, 8), (0, 0), (1, 8)),
                          xy_route((1, 0), (1, 0))))
    return b.build(), t


def test_dma_copy_bytes_as_documented_and_version_2():
    exe, t = _copy_exe()
    ins = exe.programs[0].instructions[0]
    src = struct.pack("<IB6I", 0, 2, 2, 8, 0, 0, 1, 8)
    dst = struct.pack("<IB6I", 1, 2, 2, 8, 1, 0, 1, 8)
    assert encode_instruction(ins) == bytes([9, 0x00, 0, 0]) + src + dst + bytes.fromhex("ffffffff0000")
    data = to_bytes(exe)
    assert data[8:10] == b"\x02\x00"
    back = from_bytes(data, target=t)
    assert back.programs[0].instructions == exe.programs[0].instructions


def test_a_dma_copy_in_a_version_1_file_is_refused():
    exe, _ = _copy_exe()
    data = bytearray(to_bytes(exe))
    data[8:10] = b"\x01\x00"  # the header has no checksum of its own; PROG is intact
    with pytest.raises(CfxError, match="opcode 9 in a format version 1 file"):
        from_bytes(bytes(data))
    data[8:10] = b"\x06\x00"
    with pytest.raises(CfxError, match="format version 6, this corefold reads versions 1, 2, 3, 4, 5"):
        from_bytes(bytes(data))


def test_an_interleaved_region_is_version_3_and_refused_in_version_2():
    """A region striped over channels is a ninth REGS field and needs version 3; the same
    bytes labelled version 2 are refused, and a file without one keeps its lower version."""
    exe, t = striped_copy_exe(2)
    data = bytearray(to_bytes(exe))
    assert data[8:10] == b"\x03\x00"
    back = from_bytes(bytes(data), target=t)
    assert [r.interleave for r in back.regions] == [2, 2] and back.regions == exe.regions
    assert back.programs[0].instructions == exe.programs[0].instructions
    data[8:10] = b"\x02\x00"
    with pytest.raises(CfxError, match="an interleaved DRAM region in a format version 2 file"):
        from_bytes(bytes(data))
    one, _ = striped_copy_exe(1)
    assert to_bytes(one)[8:10] == b"\x01\x00"


def test_an_interleave_below_one_is_refused_in_one_line():
    from dataclasses import replace

    exe, t = striped_copy_exe(2)
    exe.regions[0] = replace(exe.regions[0], interleave=0)
    with pytest.raises(CfxError, match="DRAM region 0 is interleaved over 0 channels"):
        from_bytes(to_bytes(exe), target=t)


def test_a_fused_activation_is_version_4_and_refused_in_version_3():
    """An op with a fused float activation (``Op.activation``, ``activation_work``) writes
    format version 4 and reads back the same; labelled version 3 it is refused."""
    import dataclasses

    exe, t = _copy_exe()
    exe.ops.append(dataclasses.replace(_an_op(), activation="Silu", activation_work=96.0))
    data = bytearray(to_bytes(exe))
    assert data[8:10] == b"\x04\x00"
    back = from_bytes(bytes(data), target=t)
    assert (back.ops[-1].activation, back.ops[-1].activation_work) == ("Silu", 96.0)
    data[8:10] = b"\x03\x00"
    with pytest.raises(CfxError, match="fused activation's work, unknown to format version 3"):
        from_bytes(bytes(data))


def _an_op():
    from corefold.backend.executable import Op

    return Op("mm", "MatMul", {}, ((1, 4), (4, 8)), ("float32", "float32"), ((1, 8),), ("float32",), "matrix", 32.0)


def test_an_instruction_size_is_the_length_of_its_encoding():
    """``instruction_size`` (what the instruction-memory check adds up) equals the encoded
    record's length for every opcode, with and without deps, optional inputs and routes."""

    a, b = View(0, (2, 8), (0, 0), (1, 8)), View(1, (1, 4, 8, 8), (0, 0, 2, 0), (1, 4, 3, 8))
    route = xy_route((0, 0), (2, 3))
    assert len(route) == 5
    cases = [ex.Compute(0, "matrix0", (a, None, b), (b,), (0, 2)), ex.Compute(3, "vector1", (), (a,)),
             ex.DmaLoad("dma0", a, b, route, (1,)), ex.DmaLoad("dma0", a, b, ()), ex.DmaStore("dma0", b, a, route),
             DmaCopy("dma0", a, a, route, (0, 1, 2)), ex.Copy("dma0", a, b), ex.Send(7, a, (2, 3), b, route, (4,)),
             ex.Recv(7, (0, 0), b), ex.Signal(9, (1, 1), route[:2]), ex.Wait(9, (0, 0), (3,))]
    for ins in cases:
        assert instruction_size(ins) == len(encode_instruction(ins)), ins


def test_an_integer_sum_is_version_5_and_refused_in_version_4():
    """An integer Sum of partial accumulators (int32 inputs at the accumulator's per-channel
    scale) writes format version 5 and reads back the same; labelled version 4 it is refused."""
    import numpy as np

    from corefold.backend.executable import Op, QuantOp, QuantTensor

    exe, t = _copy_exe()
    acc = QuantTensor(np.array([1e-4, 2e-4]), np.zeros(2, np.int32), 1, "int32")
    out = QuantTensor(np.array(0.05), np.array(0, np.int8), None, "int8")
    exe.ops.append(Op("acc_sum", "Sum", {}, ((1, 2), (1, 2)), ("int32", "int32"), ((1, 2),), ("int8",), "vector",
                      4.0, QuantOp((acc, acc), out, "Relu")))
    data = bytearray(to_bytes(exe))
    assert data[8:10] == b"\x05\x00"
    assert from_bytes(bytes(data), target=t).ops[-1].quant == exe.ops[-1].quant
    data[8:10] = b"\x04\x00"
    with pytest.raises(CfxError, match="integer Sum 'acc_sum', unknown to format version 4"):
        from_bytes(bytes(data))
