"""The knapsack's room, derived once per engine state and handed out again, equals a fresh one.

The engine asks an allocator's ``capacity`` and then ``allocate`` of the same state in one
scheduling round; :meth:`KnapsackAllocator.room` reuses what it derived while the engine's
``state_version`` is unchanged. These runs check every room handed out against one derived
from scratch (exact floats), over whole simulated runs with profiles learnt as they go, a
cluster that changes, resizes and oversubscription, and that the reuse happens at all.
"""

from __future__ import annotations

import numpy as np
import pytest

import nbtune
from nbtune.allocators.fluid_knapsack import FluidKnapsackAllocator
from nbtune.allocators.knapsack import KnapsackAllocator, cluster_room
from nbtune.core.events import ResourcesChanged
from nbtune.core.resources import ClusterSpec, Demand
from nbtune.core.space import loguniform, uniform
from nbtune.runtimes.sim import SimRuntime
from nbtune.workloads import SyntheticWorkload

SPACE = {"lr": loguniform(1e-4, 1e-1), "width": uniform(0.0, 1.0)}


def _workload(seed: int) -> SyntheticWorkload:
    return SyntheticWorkload(SPACE, unit_time=lambda c: 2.0 + 30.0 * c["width"], alpha=1.2,
                             beta=1.1, unit_time_jitter=0.2, seed=seed, launch_overhead=1.0,
                             demand=lambda c: Demand(0.2 + 0.6 * c["width"],
                                                     2.0 + 8 * c["width"], 1.0))


class _Checked:
    """Mixed into an allocator: each room it hands out is compared with a fresh derivation."""

    def room(self, view):
        stamp = view.state_version
        room, demands = super().room(view)
        fresh = cluster_room(view, self.ratios(view), self.demand_of)
        for name in ("ratio", "compute", "memory", "gpu_node", "node_cpus", "speed"):
            got, want = getattr(room, name), getattr(fresh, name)
            assert got.dtype == want.dtype and np.array_equal(got, want), name
            assert got.tobytes() == want.tobytes(), name  # the very floats (and signs of zero)
        assert room.gpu_ids == fresh.gpu_ids and room.nodes == fresh.nodes
        assert demands == self.demand_of.many(view, view.running)
        self.calls += 1
        self.reused += stamp == self.last
        self.last = stamp
        # what is handed out is the caller's to take from: a second copy is untouched by it
        room.compute -= 1.0
        room.memory -= 1.0
        again = super().room(view)[0]
        room.compute += 1.0
        room.memory += 1.0
        assert np.array_equal(again.compute, fresh.compute)
        assert np.array_equal(again.memory, fresh.memory)
        return super().room(view)


class CheckedFluidKnapsack(_Checked, FluidKnapsackAllocator):
    calls = reused = 0
    last = None


class CheckedKnapsack(_Checked, KnapsackAllocator):
    calls = reused = 0
    last = None


@pytest.mark.parametrize("seed", [3, 8])
def test_fluid_knapsack_rooms_equal_fresh_ones_through_a_run(seed):
    alloc = CheckedFluidKnapsack(c=3, d=3, resize_overhead=2.0,
                                 oversubscription={"generic": 1.5})
    sim = SimRuntime(cluster=ClusterSpec.homogeneous(8, gpus_per_node=4), resize_overhead=2.0)
    sim.at(30.0, ResourcesChanged, cluster=ClusterSpec.homogeneous(4, gpus_per_node=4))
    sim.at(90.0, ResourcesChanged, cluster=ClusterSpec.homogeneous(12, gpus_per_node=4))
    exp = nbtune.tune(_workload(seed), SPACE, algorithm="asha", eta=3, metric="loss",
                      max_budget=27, num_trials=40, allocator=alloc, runtime=sim, seed=seed,
                      validate=True)
    assert exp.engine.done
    assert alloc.calls > 50 and 0 < alloc.reused < alloc.calls


def test_knapsack_rooms_equal_fresh_ones_through_a_run():
    alloc = CheckedKnapsack("wfd", oversubscription={"generic": 2.0})
    exp = nbtune.tune(_workload(1), SPACE, algorithm="random", metric="loss", max_budget=9,
                      num_trials=30, allocator=alloc, seed=1, validate=True,
                      runtime=SimRuntime(cluster=ClusterSpec.homogeneous(4, gpus_per_node=2)))
    assert exp.engine.done
    assert alloc.calls > 20 and 0 < alloc.reused < alloc.calls


def test_a_view_without_a_stamp_gets_a_fresh_room_each_time():
    """Views other than the engine's (tests build their own) carry no state_version."""
    alloc = KnapsackAllocator()

    class View:
        cluster = ClusterSpec.homogeneous(2, gpus_per_node=2)
        running = {0: ((0, 0.5),)}
        gpu_load = {0: 0.5, 1: 0.0}
        hints: dict = {}

        def trial(self, tid):
            from nbtune.core.trial import TrialRecord
            return TrialRecord(tid, {})

    view = View()
    first = alloc.room(view)[0]
    view.gpu_load = {0: 0.25, 1: 0.0}  # changed behind its back: nothing may be reused
    assert alloc.room(view)[0].compute.tolist() == [0.75, 1.0]
    assert first.compute.tolist() == [0.5, 1.0]


def test_a_narrowed_view_that_passes_the_stamp_on_gets_its_own_room():
    """Views that hide GPUs or trials (bubbles, fusion units) forward the engine's stamp."""
    alloc = KnapsackAllocator()
    cluster = ClusterSpec.homogeneous(2, gpus_per_node=2)

    class View:
        state_version = (7, 3)
        hints: dict = {}

        def __init__(self, running, load):
            self.cluster, self.running, self.gpu_load = cluster, running, load

        def trial(self, tid):
            from nbtune.core.trial import TrialRecord
            return TrialRecord(tid, {})

    full = View({0: ((0, 0.5),), 1: ((1, 0.25),)}, {0: 0.5, 1: 0.25})
    assert alloc.room(full)[0].compute.tolist() == [0.5, 0.75]
    narrowed = View({0: ((0, 0.5),)}, {0: 0.5, 1: 0.0})  # trial 1 hidden, same stamp
    assert alloc.room(narrowed)[0].compute.tolist() == [0.5, 1.0]
    assert alloc.room(full)[0].compute.tolist() == [0.5, 0.75]
    same = View(dict(full.running), dict(full.gpu_load))  # other objects, equal contents
    assert alloc.room(same)[0].compute.tolist() == [0.5, 0.75]
