"""``--compiler-cmd``: a user's compiler as M1's compile callable. A stand-in compiler (a
script that refuses models of more than N operators) drives serial partitioning."""

from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest

from corefold.errors import CompileError, CorefoldError
from corefold.executor import random_inputs, run
from corefold.passes.order.random_network import random_network
from corefold.passes.serial import SerialSettings, serial_partition
from corefold.toolchain import CommandCompiler

VENDORC = textwrap.dedent("""\
    import sys
    import onnx
    model, out, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
    # constants travel as ConstantOfShape nodes: they are data, not operators
    n = sum(node.op_type not in ("Constant", "ConstantOfShape") for node in onnx.load(model).graph.node)
    if n > limit:
        sys.exit(f"vendorc: {n} operators do not fit (at most {limit})")
    open(out, "wb").write(b"EXE" + bytes([n]))
""")


@pytest.fixture()
def vendorc(tmp_path):
    script = tmp_path / "vendorc.py"
    script.write_text(VENDORC)
    return lambda limit: CommandCompiler(f"{sys.executable} {script} {{onnx}} {{out}} {limit}")


def test_a_failing_command_is_a_compile_error_with_its_message(vendorc):
    g = random_network(6, seed=0, channels=2, size=4, batch=1, ctrl_edges=0)
    with pytest.raises(CompileError, match="do not fit"):
        vendorc(2)(g)
    exe = vendorc(100)(g)
    assert exe.data[:3] == b"EXE" and exe.data[3] == len(g)


def test_serial_partitioning_with_a_users_compiler(vendorc):
    g = random_network(9, seed=1, channels=2, size=4, batch=1, ctrl_edges=0)
    res = serial_partition(g, vendorc(4), SerialSettings(fusion="d"))
    assert all(len(p) <= 4 for p in res.pieces)
    assert all(o.data[3] == len(p) for o, p in zip(res.outcomes, res.pieces, strict=True))
    assert len(res.pieces) >= res.minimum_executables == -(-len(g) // 4)
    env = random_inputs(g, 0)
    want = run(g, env)
    for sub in res.subgraphs(g):
        env.update(run(sub, {v.name: env[v.name] for v in sub.inputs}))
    for k in want:
        np.testing.assert_array_equal(env[k], want[k])


def test_bad_commands_are_user_errors():
    with pytest.raises(CorefoldError, match="placeholder"):
        CommandCompiler("vendorc -o {out}")
    g = random_network(3, seed=0, channels=2, size=4, batch=1, ctrl_edges=0)
    with pytest.raises(CorefoldError, match="no such program"):
        CommandCompiler("no-such-compiler-xyz {onnx}")(g)
