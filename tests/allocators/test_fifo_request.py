"""FIFO with Ray Tune's fixed per-trial request (``tune(..., gpus_per_trial=...)``)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nbtune
from nbtune import SimRuntime, grid
from nbtune.allocators import FifoAllocator
from nbtune.workloads import SyntheticWorkload
from tests.allocators.test_fluid import gpu_peaks


def run(n_trials: int, gpus: int, request: float):
    wl = SyntheticWorkload({"i": grid(list(range(n_trials)))}, unit_time=1.0)
    return nbtune.tune(wl, algorithm="grid", metric="loss", max_budget=2, gpus_per_trial=request,
                       runtime=SimRuntime(cluster=gpus), validate=True)


def test_whole_gpus_per_trial_give_every_trial_that_many_gpus():
    exp = run(4, 4, 2)
    a = exp.allocations()
    assert list(a.groupby("trial_id")["gpu_id"].nunique()) == [2, 2, 2, 2]
    assert set(a["share"]) == {1.0}
    starts = a.groupby("trial_id")["start"].min()
    assert list(starts) == [0.0, 0.0, *[starts[2]] * 2] and starts[2] > 0  # two at a time


def test_a_fraction_packs_that_many_trials_on_a_gpu():
    exp = run(4, 2, 0.5)
    a = exp.allocations()
    assert set(a["share"]) == {0.5} and list(a.groupby("trial_id")["start"].min()) == [0.0] * 4
    assert gpu_peaks(a) == (pytest.approx(1.0), 2)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 9), gpus=st.integers(1, 4), k=st.sampled_from([0.25, 1 / 3, 0.5, 1, 2, 3]))
def test_a_request_is_never_exceeded_nor_a_gpu_overfilled(n, gpus, k):
    if k > gpus:
        with pytest.raises(ValueError, match="asks for more GPUs than the cluster has"):
            run(n, gpus, k)
        return
    a = run(n, gpus, k).allocations()
    for _, rows in a.groupby("trial_id"):
        assert rows["share"].sum() == pytest.approx(k)  # the request, exactly
    assert gpu_peaks(a)[0] <= 1.0 + 1e-9


def test_the_request_is_kept_by_the_store_for_resume(tmp_path):
    wl = SyntheticWorkload({"i": grid([0, 1])}, unit_time=1.0)
    exp = nbtune.tune(wl, algorithm="grid", metric="loss", max_budget=2, gpus_per_trial=0.5,
                      runtime=SimRuntime(cluster=1), store=tmp_path, name="packed")
    from nbtune.store.resume import rebuild_allocator

    exp.recorder.close()
    alloc = rebuild_allocator(exp.store.experiment("packed"))
    assert isinstance(alloc, FifoAllocator) and alloc.gpus_per_trial == 0.5
