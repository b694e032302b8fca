"""The first-compile notice of the CLI (``jit_notice``)."""

from __future__ import annotations

import numba
import numpy as np

from corefold.cli.common import JIT_NOTICE, jit_notice


def _fresh_kernels():
    """Two kernels numba has not compiled yet (no cache): each call compiles one."""

    @numba.njit
    def double(x):
        return 2 * x

    @numba.njit
    def total(x):
        return x.sum()

    return double, total


def test_the_notice_is_printed_once_when_numba_compiles_and_not_when_disabled(capsys):
    double, total = _fresh_kernels()
    with jit_notice(True):
        assert double(3) == 6
        assert total(np.arange(4)) == 6
    err = capsys.readouterr().err
    assert err.count(JIT_NOTICE) == 1

    double, total = _fresh_kernels()
    with jit_notice(False):
        assert double(4) == 8
    assert JIT_NOTICE not in capsys.readouterr().err


def test_no_notice_without_a_compile(capsys):
    double, _ = _fresh_kernels()
    double(1)  # compiled before the block
    with jit_notice(True):
        assert double(5) == 10
    assert JIT_NOTICE not in capsys.readouterr().err
