"""A resize that restarts a loop without checkpoints costs the steps it trains again.

The Dask runtime says which resizes relaunch a trial's process (engine hint
``"resize_restarts"``: ``"moves"`` on CPU workers and GPUs without MPS, ``"any"`` with MPS;
absent when the loop checkpoints). A Ray- or Optuna-style loop that keeps no checkpoint goes
back to step 1 when relaunched, so Fluid's resize test (Alg. 2: h_new + ε < h_old) counts
those steps in ε: a trial far into its budget stays where it is, one that just started still
moves, and without the hint nothing changes (the simulator's allocation logs hash the same).
"""

from __future__ import annotations

import pytest

from nbtune.allocators import DynamicFluidAllocator
from nbtune.allocators.fluid_knapsack import FluidKnapsackAllocator
from nbtune.core.resources import ClusterSpec
from nbtune.core.trial import TrialRecord, TrialState
from nbtune.runtimes.dask.driver_side.jobs import RunSettings, resize_restarts
from tests.allocators.fluid_views import View


def _view(n_gpus, running, used, rule):
    trials = {t: TrialRecord(t, {"i": t}, TrialState.RUNNING, target_budget=10.0,
                             budget_used=used) for t in running}
    hints = {} if rule is None else {"resize_restarts": rule}
    return View(ClusterSpec.homogeneous(n_gpus), trials, dict(running), hints=hints)


PACKED = {0: ((0, 0.5),), 1: ((0, 0.5),)}  # two trials on GPU 0, GPU 1 idle


@pytest.mark.parametrize("used,rule,moves", [
    (8.0, None, True),  # the loop checkpoints: the move pays as before
    (8.0, "moves", False),  # 8 of 10 units trained again: it stays packed
    (0.5, "moves", True),  # just started: little to train again, the move pays
    (8.0, "any", False),
])
def test_waterfill_moves_a_trial_only_when_it_pays_after_the_steps_trained_again(used, rule,
                                                                                  moves):
    alloc = DynamicFluidAllocator(alpha=2.0).allocate(_view(2, PACKED, used, rule))
    assert bool(alloc.resize) is moves, alloc.resize
    if moves:  # one trial to the idle GPU, the other then spreads over GPU 0 (in place)
        assert sorted(alloc.resize.values()) == [((0, 1.0),), ((1, 1.0),)]


@pytest.mark.parametrize("rule,spreads", [("moves", True), ("any", False)])
def test_a_share_change_on_the_same_gpu_restarts_only_where_every_resize_relaunches(rule,
                                                                                    spreads):
    # one trial left at half of GPU 0 after its neighbour ended: spreading it to the whole
    # GPU is in place on CPU workers ("moves"), a relaunch on MPS GPUs ("any")
    alloc = DynamicFluidAllocator(alpha=2.0).allocate(_view(1, {0: ((0, 0.5),)}, 8.0, rule))
    assert (alloc.resize == {0: ((0, 1.0),)}) is spreads, alloc.resize


@pytest.mark.parametrize("used,rule,grows", [(8.0, None, True), (8.0, "moves", False),
                                             (0.5, "moves", True)])
def test_fluid_knapsack_grows_onto_more_gpus_only_when_it_pays(used, rule, grows):
    alloc = FluidKnapsackAllocator(alpha=2.0, beta=1.0).allocate(
        _view(2, {0: ((0, 1.0),)}, used, rule))
    assert (alloc.resize == {0: ((0, 1.0), (1, 1.0))}) is grows, alloc.resize


def test_the_dask_runtime_says_which_resizes_restart():
    def settings(checkpointing, gpus, mps):
        return RunSettings("t", b"", None, checkpointing, gpus, mps, True, None, None, 1.0)

    assert resize_restarts(settings(True, True, True)) is None
    assert resize_restarts(settings(False, False, False)) == "moves"
    assert resize_restarts(settings(False, True, False)) == "moves"
    assert resize_restarts(settings(False, True, True)) == "any"
