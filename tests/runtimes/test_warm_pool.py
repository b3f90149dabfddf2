"""The warm pool on its own (real trial processes, no cluster): start-up order and preloads.

A cold ``tune()`` does not wait for every warm process of every worker, the
processes do not import torch all at once, and the first trial does not pay its
own imports (scikit-learn) inside its first epoch.
"""

from __future__ import annotations

import sys
import time

import cloudpickle
import pytest

from nbtune.core.code_names import names_used
from nbtune.runtimes.dask.driver_side.worker_setup import trainable_imports
from nbtune.runtimes.dask.protocol import Exit, Job, Report, decode, encode
from nbtune.runtimes.dask.worker_side.pool import WarmPool

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture
def pool():
    made: list[WarmPool] = []
    yield lambda *a, **k: made.append(WarmPool(*a, **k)) or made[-1]
    for p in made:
        p.shutdown()


def test_processes_start_one_after_another_and_one_ready_is_enough_to_begin(pool):
    """Each process imports a 1 s module; the second is started only once the first is ready,
    so the first is ready after one import, not after two side by side."""
    p = pool(2, ("tests.runtimes.slow_import",))
    t0 = time.monotonic()
    assert p.wait_ready(60, need=1)
    first = time.monotonic()
    assert p.wait_ready(60)
    both = time.monotonic()
    assert first - t0 >= 1.0 and both - first >= 1.0  # the second slept after the first
    assert p.idle == 2


def modules_seen(config, trial):
    """Reports which of the modules it would import were already there when it started."""
    seen = float("wave" in sys.modules)
    import wave  # noqa: F401  (what the warm process should have imported ahead)

    trial.report(1, loss=0.0, wave_warm=seen)


def run_one(child, tmp_path, fn, **job) -> dict:
    """One job through the trial process's real protocol; its report's metrics."""
    child.conn.send(encode(Job(spec={
        "trial_id": 0, "config": {}, "start_step": 0.0, "budget": 1.0,
        "checkpoint_dir": str(tmp_path), "fn": cloudpickle.dumps(fn),
        "sys_path": list(sys.path), **job})))
    metrics = None
    while True:
        assert child.conn.poll(60), "the trial process did not answer"
        msg = decode(child.conn.recv())
        if isinstance(msg, Report):
            metrics = msg.metrics
        if isinstance(msg, Exit):
            assert msg.ok, msg.error
            return metrics


def test_an_experiments_modules_are_imported_by_idle_and_later_processes(pool, tmp_path):
    p = pool(1, ())
    assert p.wait_ready(60)
    p.add_imports(["wave"])  # sent to the idle process
    assert run_one(p.take(refill=False), tmp_path, modules_seen) == {"loss": 0.0,
                                                                     "wave_warm": 1.0}
    later = p.take(refill=False)  # started after add_imports: imports them itself
    assert run_one(later, tmp_path, modules_seen)["wave_warm"] == 1.0
    before = pool(1, ())
    assert run_one(before.take(refill=False), tmp_path, modules_seen)["wave_warm"] == 0.0


def test_a_module_sent_by_value_is_not_imported_ahead_but_what_its_function_uses_is():
    """This module is registered with cloudpickle by value: its functions reach a trial inside
    the pickle, so no trial process imports it; preloading it would cost every new process
    its imports (pytest here), and trials that wait at a rung each start a new process."""
    mods = trainable_imports(modules_seen)
    assert __name__ not in mods
    assert "wave" in mods and "sys" in mods
    # a function pickled by reference: its module is imported by the unpickling anyway
    assert "nbtune.core.code_names" in trainable_imports(names_used)


def test_modules_added_while_a_process_starts_reach_it(pool, tmp_path):
    """``tune()`` no longer waits for the warm processes: the experiment's modules are added
    while the first one still imports its preload, held by the filler outside the idle list."""
    p = pool(1, ("tests.runtimes.slow_import",))
    p.fill_async()
    deadline = time.monotonic() + 30
    while not p._held:  # the filler has started it and waits for its "ready"
        assert time.monotonic() < deadline, "the filler never started a process"
        time.sleep(0.01)
    p.add_imports(["wave"])
    assert p.wait_ready(60)
    assert run_one(p.take(refill=False), tmp_path, modules_seen)["wave_warm"] == 1.0


def test_a_process_that_ran_a_trial_serves_the_next_before_a_fresh_one(pool, tmp_path):
    """Processes that never ran a trial still pay its first-use costs (the data set, torch's
    first operation); one handed back by a finished trial has paid them (CPU reuse)."""
    p = pool(2, ())
    assert p.wait_ready(60)
    used = p.take(refill=False)
    run_one(used, tmp_path, modules_seen, reuse=True)
    p.give_back(used)
    assert p.idle == 2 and p.take(refill=False) is used


def test_a_gpu_process_serves_only_trials_of_its_gpu_and_mps_share(pool):
    """A CUDA context is bound to one GPU and one MPS thread percentage: a process handed
    back after a GPU trial gets only trials with the same ones (the same context first), and
    one without a context fits any trial. CPU trials never get a process with a context."""
    from nbtune.runtimes.dask.trial_side.trial_process import cuda_key

    whole = cuda_key({"CUDA_VISIBLE_DEVICES": "GPU-a"})
    half = cuda_key({"CUDA_VISIBLE_DEVICES": "GPU-a", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50"})
    assert whole != half and whole == cuda_key({"CUDA_VISIBLE_DEVICES": "GPU-a", "X": "1"})
    p = pool(3, ())
    assert p.wait_ready(60)
    a, b = p.take(refill=False), p.take(refill=False)
    a.cuda, b.cuda = whole, half
    p.give_back(b)
    p.give_back(a)
    assert p.take_idle(refill=False, cuda=half) is b  # its own context, though not first
    p.give_back(b)
    other = cuda_key({"CUDA_VISIBLE_DEVICES": "GPU-b"})
    fresh = p.take_idle(refill=False, cuda=other)
    assert fresh is not None and fresh.cuda is None  # never a context of another GPU
    assert p.take_idle(refill=False, cuda=other) is None
    assert p.take_idle(refill=False) is None  # a CPU trial: neither a nor b
    assert p.take_idle(refill=False, cuda=whole) is a


def test_a_process_refuses_a_trial_its_cuda_context_was_not_made_for():
    """The last guard: a context made for one GPU and share never runs a trial of another.

    The key is the environment CUDA read, kept from the trial that made the context (a
    key read again after the worker's environment is restored, ``'0|'``, would refuse
    every reused process)."""
    from nbtune.runtimes.dask.trial_side.trial_process import cuda_key, refusal

    base = {"CUDA_VISIBLE_DEVICES": "0", "PATH": "/bin"}  # a dask-cuda worker's own
    job = {"CUDA_VISIBLE_DEVICES": "GPU-a"}
    made = cuda_key({**base, **job})
    assert refusal(None, {**base, **job}) is None  # no context yet: any trial
    assert refusal(made, {**base, **job}) is None
    assert refusal(made, {**base, "CUDA_VISIBLE_DEVICES": "GPU-b"}) is not None
    packed = {**base, **job, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50"}
    assert "GPU-a|50" in refusal(made, packed)
    assert refusal(cuda_key(base), {**base, **job}) is not None  # the session-9 bug's key
