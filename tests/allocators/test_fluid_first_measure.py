"""A new trial's own time: placed on a guess, measured by its first unit, then re-split.

On a first run nothing has measured a new trial's model, so DynamicFluid places
it on the other trials' mean time. Its first budget unit is its profile: once
the last trial launched with it has measured itself, the engine asks the
allocator again and the split is redone from the measurements (each resize
under Alg. 2's ε test). Only what the runtime measured is used: the simulator
hands the allocators no workload model and these runs start with an empty
job history.
"""

from __future__ import annotations

import nbtune
from nbtune import SimRuntime, grid
from nbtune.allocators import DynamicFluidAllocator, FifoAllocator
from nbtune.allocators.profiling import InMemoryProfileStore
from nbtune.runtimes.profiler import Profiler
from nbtune.workloads import SyntheticWorkload

UNIT = {0: 2.0, 1: 6.0}  # seconds per budget unit alone on one GPU
EPS = 0.5


class Blind(DynamicFluidAllocator):
    """DynamicFluid that does not re-plan on a trial's first measurement."""

    def on_measured(self, trial_id: int) -> bool:
        super().on_measured(trial_id)
        return False


def _run(allocator: DynamicFluidAllocator) -> nbtune.Experiment:
    wl = SyntheticWorkload({"i": grid([0, 1])}, unit_time=lambda c: UNIT[c["i"]])
    sim = SimRuntime(cluster=4, resize_overhead=EPS, profiler=Profiler(InMemoryProfileStore()))
    return nbtune.tune(wl, algorithm="grid", metric="loss", max_budget=10, allocator=allocator,
                       runtime=sim, validate=True)


def _widths_at(exp: nbtune.Experiment, t: float) -> dict[int, float]:
    a = exp.allocations()
    on = a[(a.start <= t) & ((a.end > t) | a.end.isna())]
    return on.groupby("trial_id").share.sum().to_dict()


def test_new_trials_run_one_unit_on_a_guess_then_the_split_follows_the_measurements():
    exp = _run(DynamicFluidAllocator(resize_overhead=EPS))
    assert "workload" not in exp.engine.hints  # the allocator read measurements only
    # the guess: nothing measured either model, so both got half of the 4 GPUs
    assert _widths_at(exp, 0.0) == {0: 2.0, 1: 2.0}
    # trial 0 measured itself at t = 1 (2 s/unit on 2 GPUs): trial 1 still unmeasured, no
    # re-split; trial 1's first unit ends at t = 3 and the split is redone at that instant
    first = {tid: t.results[0][0] for tid, t in exp.engine.trials.items()}
    assert first == {0: 1.0, 1: 3.0}
    resized = sorted({r.start for r in exp.engine.ledger.log if r.start > 0})
    assert resized[0] == 3.0
    # measured: 7 units x 2 s left against 9 x 6 s; the slow trial takes 3 GPUs, the fast
    # one a fraction of the fourth
    after = _widths_at(exp, 3.0)
    assert after[1] == 3.0 and after[0] < 1.0


def test_without_the_re_split_the_guess_holds_until_a_trial_ends():
    guessed = _run(Blind(resize_overhead=EPS))
    # the first change of placements is trial 0's end (10 units x 1 s on 2 GPUs)
    assert sorted({r.start for r in guessed.engine.ledger.log})[1] == 10.0


def test_the_engine_tells_the_allocator_of_each_trial_s_first_measurement_once():
    calls: list[int] = []
    passes: list[float] = []

    class Listening(FifoAllocator):
        def on_measured(self, trial_id: int) -> bool:
            calls.append(trial_id)
            return True

        def allocate(self, view):
            passes.append(view.time)
            return super().allocate(view)

    wl = SyntheticWorkload({"i": grid([0, 1, 2])}, unit_time=lambda c: 2.0 + 2.0 * c["i"])
    exp = nbtune.tune(wl, algorithm="grid", metric="loss", max_budget=3, allocator=Listening(),
                      runtime=SimRuntime(cluster=3), validate=True)
    assert exp.engine.done
    # three reports each, one call each; each asked for a scheduling pass at that instant
    assert sorted(calls) == [0, 1, 2]
    assert {2.0, 4.0, 6.0} <= set(passes)
