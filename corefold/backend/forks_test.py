import os

import numpy as np
import pytest

from corefold.backend.forks import Forks, worker_count
from corefold.errors import CompileError, InternalError

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="forked workers need fork")


def _pid_and(value):
    return os.getpid(), value


def test_values_come_back_in_order_and_only_the_jobs_before_the_last_leave_the_caller():
    with Forks(2) as forks:
        results = [forks.submit(lambda v=v: _pid_and(np.arange(v) * 2)) for v in range(4)]
        got = [r() for r in results]
    for v, (_, array) in enumerate(got):
        np.testing.assert_array_equal(array, np.arange(v) * 2)
    pids = [pid for pid, _ in got]
    assert pids[-1] == os.getpid()  # the last job runs in the caller: nothing to pickle
    assert pids[0] != os.getpid()  # the first ran in a child while the caller went on


def test_one_worker_runs_every_job_in_the_caller():
    with Forks(1) as forks:
        results = [forks.submit(lambda v=v: _pid_and(v)) for v in range(3)]
        assert [r() for r in results] == [(os.getpid(), v) for v in range(3)]


def test_a_lone_job_never_forks():
    with Forks(4) as forks:
        result = forks.submit(lambda: _pid_and(1))
        assert result() == (os.getpid(), 1)


def test_a_childs_exception_is_raised_at_its_result_with_its_fields():
    def fails():
        raise CompileError("SRAM", "core (1,2)", 2048, 1024)

    with Forks(2) as forks:
        first = forks.submit(fails)
        second = forks.submit(lambda: 7)
        assert second() == 7
        with pytest.raises(CompileError) as info:
            first()
    assert (info.value.resource, info.value.where, info.value.need, info.value.limit) == ("SRAM", "core (1,2)",
                                                                                         2048, 1024)


def test_an_exception_that_does_not_pickle_becomes_an_internal_error_with_its_traceback():
    class Local(Exception):  # a local class does not pickle
        pass

    def fails():
        raise Local("lost")

    with Forks(2) as forks:
        first = forks.submit(fails)
        forks.submit(lambda: 0)
        with pytest.raises(InternalError, match="Local: lost"):
            first()


def test_a_child_that_dies_is_an_internal_error_naming_it():
    with Forks(2) as forks:
        first = forks.submit(lambda: os._exit(3))
        forks.submit(lambda: 0)
        with pytest.raises(InternalError, match="ended without a result"):
            first()


def test_leaving_early_reaps_every_child_and_removes_its_file(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    with Forks(3) as forks:
        for v in range(3):
            forks.submit(lambda v=v: v)
        forks.submit(lambda: 0)
    assert list(tmp_path.iterdir()) == []
    assert forks._children == {}  # every child waited for


def test_worker_count_reads_zero_as_one_per_cpu():
    assert worker_count(3) == 3
    assert worker_count(0) == len(os.sched_getaffinity(0))


def test_a_job_run_in_the_caller_raises_at_its_result_not_at_submit():
    def fails():
        raise CompileError("core count", "target 't'", 65, 64)

    with Forks(1) as forks:
        first = forks.submit(fails)
        second = forks.submit(lambda: 2)  # runs the first here: its error waits for its result
        assert second() == 2
        with pytest.raises(CompileError, match="core count"):
            first()


def test_without_room_for_a_result_file_the_caller_runs_the_job(monkeypatch):
    def no_room(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("tempfile.mkstemp", no_room)
    with Forks(2) as forks:
        results = [forks.submit(lambda v=v: _pid_and(v)) for v in range(3)]
        assert [r() for r in results] == [(os.getpid(), v) for v in range(3)]
