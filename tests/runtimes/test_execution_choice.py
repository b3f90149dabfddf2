"""Choosing where a trial runs (``nbtune.runtimes.dask.driver_side.execution_mode``), as pure code.

The decision reads two measurements: the process path's extra seconds per
report and the loop's work per report; these tests give it measured-looking
numbers and check the rule the module docstring states.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nbtune.runtimes.dask.driver_side.execution_mode import (
    MAX_INTERVAL,
    MIN_SAMPLES,
    THRESHOLD,
    ExecutionChoice,
    check_execution,
    check_thread_limits,
    choose,
)
from nbtune.runtimes.dask.protocol import Report

OVERHEAD = 0.020  # s per report: what overhead.py measured on the 2-core test machine


def test_tiny_steps_go_to_threads_long_ones_stay_in_processes():
    assert choose([0.005, 0.006, 0.004, 0.005], OVERHEAD) == "thread"
    assert choose([0.2, 0.25, 0.22], OVERHEAD) == "process"  # a normal epoch
    # the threshold itself: overhead >= THRESHOLD x median work
    edge = OVERHEAD / THRESHOLD
    assert choose([edge * 0.99] * 3, OVERHEAD) == "thread"
    assert choose([edge * 1.01] * 3, OVERHEAD) == "process"


def test_no_thread_without_measurements_or_for_a_loop_that_rarely_reports():
    assert choose([0.001] * (MIN_SAMPLES - 1), OVERHEAD) == "process"  # not measured yet
    assert choose([0.001] * 5, None) == "process"  # overhead unknown
    # a thread cannot be killed: one long silence keeps the loop in a process
    assert choose([0.001] * 10 + [MAX_INTERVAL * 2], 10.0) == "process"


@given(st.lists(st.floats(1e-5, 0.5), min_size=MIN_SAMPLES, max_size=20),
       st.floats(1e-5, 0.1), st.floats(0.01, 1.0))
def test_shorter_steps_never_turn_a_thread_back_into_a_process(work, overhead, factor):
    """Monotone: if work w runs in a thread, every uniformly shorter work does too, and so
    does every larger overhead."""
    if choose(work, overhead) == "thread":
        assert choose([w * factor for w in work], overhead) == "thread"
        assert choose(work, overhead / factor) == "thread"


def test_bad_values_fail_early_with_the_choices():
    with pytest.raises(ValueError, match="'auto', 'process', 'thread'"):
        check_execution("threads")
    for ok in ("auto", "process", "thread"):
        assert check_execution(ok) == ok


def test_thread_mode_refuses_what_only_a_process_can_enforce():
    with pytest.raises(ValueError, match="trial_timeout"):
        check_thread_limits("thread", gpus=False, trial_timeout=5.0, memory_limit=None)
    with pytest.raises(ValueError, match="trial_memory_limit"):
        check_thread_limits("thread", gpus=False, trial_timeout=None, memory_limit=10**9)
    with pytest.raises(ValueError, match="GPU"):
        check_thread_limits("thread", gpus=True, trial_timeout=None, memory_limit=None)
    check_thread_limits("auto", gpus=True, trial_timeout=5.0, memory_limit=10**9)  # auto: fine


def test_the_choice_per_launch():
    c = ExecutionChoice("auto", OVERHEAD)
    assert c.mode() == "process"  # nothing measured yet
    for _ in range(MIN_SAMPLES):
        c.observe(Report(step=1.0, metrics={}, work=0.004))
    c.observe(Report(step=1.0, metrics={}))  # a first report says no work interval
    assert c.mode() == "thread"
    assert c.mode(world_size=2) == "process" and c.mode(fused=True) == "process"
    assert c.launched == {"process": 3, "thread": 1}
    assert ExecutionChoice("auto", OVERHEAD, gpus=True).decided() == "process"
    assert ExecutionChoice("thread").decided() == "thread"


def test_the_runtime_checks_execution_before_it_starts_anything():
    pytest.importorskip("distributed")
    from nbtune.runtimes.dask import DaskRuntime

    with pytest.raises(ValueError, match="execution must be one of"):
        DaskRuntime(execution="inproc")
    rt = DaskRuntime(execution="thread", trial_timeout=5.0)
    with pytest.raises(ValueError, match="cannot enforce trial_timeout"):
        rt.start(object(), lambda config, trial: None)
    assert rt.client is None  # no cluster was started


def test_tune_checks_execution_before_it_starts_a_runtime():
    import nbtune
    from nbtune.core.space import uniform

    with pytest.raises(ValueError, match="execution must be one of"):
        nbtune.tune(lambda config, trial: None, {"lr": uniform(0.0, 1.0)}, metric="loss",
                    max_budget=1, execution="fast")


def test_auto_keeps_processes_where_workers_share_one_process():
    """LocalCluster(processes=False): every worker's trial threads would share one GIL."""
    from nbtune.runtimes.dask.driver_side.execution_mode import share_a_process

    apart = {"tcp://a:1": {"host": "h", "pid": 10}, "tcp://a:2": {"host": "h", "pid": 11}}
    together = {"tcp://a:1": {"host": "h", "pid": 10}, "tcp://a:2": {"host": "h", "pid": 10}}
    other_host = {"tcp://a:1": {"host": "h", "pid": 10}, "tcp://b:2": {"host": "g", "pid": 10}}
    assert not share_a_process(apart) and share_a_process(together)
    assert not share_a_process(other_host)  # the same pid on two machines is two processes
    # what the scheduler says of LocalCluster(processes=False)'s workers (no pid)
    assert share_a_process({"inproc://192.0.2.2/24996/4": {"host": "192.0.2.2", "pid": None}})
