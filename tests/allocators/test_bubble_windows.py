"""``allocator="bubbles"``: measured idle windows, and shortest work into the shortest window."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nbtune.allocators import ALLOCATORS, BubblesAllocator, make_allocator
from nbtune.allocators.bubble_windows import barrier_windows, ledger_idle_windows
from nbtune.allocators.bubbles import IdleWindow
from nbtune.core.resources import GPU, ClusterSpec
from nbtune.core.trial import TrialRecord, TrialSpec, TrialState
from nbtune.engine.state import AllocationRecord
from tests.allocators.fluid_views import View


@dataclass
class MeasuredView(View):
    """A view whose trials have measured seconds per budget unit."""

    unit: dict[int, float] = field(default_factory=dict)

    def unit_time(self, tid):
        return (self.unit[tid], 1.0) if tid in self.unit else None


def test_registry_names_follow_the_composition_convention():
    assert ALLOCATORS["bubbles"] is BubblesAllocator
    for base in ("fifo", "waterfill", "knapsack-wfd", "fluid+knapsack", "auto"):
        a = make_allocator(f"bubbles+{base}")
        assert isinstance(a, BubblesAllocator) and a.name == f"bubbles+{base}"
        assert type(a.base) is ALLOCATORS[base]
    assert BubblesAllocator(base=make_allocator("knapsack-ff")).name == "bubbles+knapsack-ff"
    assert make_allocator("bubbles").base.name == "fifo"


def test_ledger_idle_windows_are_the_gaps_between_allocations():
    log = [AllocationRecord(1, 0, 1.0, 0.0, 4.0), AllocationRecord(2, 0, 1.0, 6.0, 9.0),
           AllocationRecord(3, 1, 1.0, 1.0, None)]
    ws = ledger_idle_windows(log, [0, 1, 2], until=10.0)
    got = sorted((w.gpu_id, w.start, w.end) for w in ws)
    assert got == [(0, 4.0, 6.0), (0, 9.0, 10.0), (1, 0.0, 1.0), (2, 0.0, 10.0)]


@settings(max_examples=60)
@given(st.lists(st.tuples(st.integers(0, 2), st.floats(0, 50), st.floats(0, 20)), max_size=12))
def test_idle_and_held_time_add_up_to_the_run(spans):
    log = [AllocationRecord(i, g, 1.0, a, a + d) for i, (g, a, d) in enumerate(spans)]
    until = 80.0
    for g in (0, 1, 2):
        idle = sum(w.end - w.start for w in ledger_idle_windows(log, [g], until, start=0.0))
        # the union of held intervals, measured independently on a fine grid
        held = sum(1 for k in range(8000) if any(
            r.gpu_id == g and r.start <= (k + 0.5) / 100 < r.end for r in log)) / 100
        assert idle + held == pytest.approx(until, abs=0.05)


def _view(works, windows, running=None):
    """Idle GPUs 0..n-1 with published windows; pending trial 100+i needs ``works[i]`` seconds."""
    n = len(windows)
    cluster = ClusterSpec.of([GPU(g, "n0") for g in range(n + len(running or {}))])
    trials, pending, unit = {}, [], {}
    for i, w in enumerate(works):
        tid = 100 + i
        trials[tid] = TrialRecord(tid, {}, TrialState.PENDING, target_budget=4.0)
        pending.append(TrialSpec(tid, {}, 4.0))
        unit[tid] = w / 4.0
    placed = {}
    for j, (tid, (left, u)) in enumerate((running or {}).items()):
        trials[tid] = TrialRecord(tid, {}, TrialState.RUNNING, target_budget=4.0,
                            budget_used=4.0 - left)
        placed[tid] = ((n + j, 1.0),)
        unit[tid] = u
    hints = {"bubbles": {g: [IdleWindow(g, 0.0, windows[g], "bubble")] for g in range(n)}}
    return MeasuredView(cluster, trials, placed, pending, hints=hints, time=0.0, unit=unit)


def test_shortest_work_goes_into_the_shortest_window():
    view = _view([9.0, 1.0, 5.0], [2.0, 10.0, 6.0])
    out = BubblesAllocator().allocate(view)
    assert out.launch == {100: ((1, 1.0),), 101: ((0, 1.0),), 102: ((2, 1.0),)}
    # FIFO alone puts them in queue order: trial 100 (9 s) into GPU 0's 2 s window
    assert make_allocator("fifo").allocate(view).launch[100] == ((0, 1.0),)


def _fits(view, launch):
    return sum(view.unit[t] * 4.0 <= view.hints["bubbles"][pl[0][0]][0].end
               for t, pl in launch.items())


@settings(max_examples=60)
@given(st.lists(st.floats(0.1, 20), min_size=1, max_size=5), st.data())
def test_the_pairing_fits_as_many_trials_as_any_other(works, data):
    windows = data.draw(st.lists(st.floats(0.1, 20), min_size=len(works), max_size=len(works)))
    view = _view(works, windows)
    base = make_allocator("fifo").allocate(view)
    out = BubblesAllocator().allocate(view)
    # the same trials and the same GPUs as the base chose: only who goes where changes
    assert set(out.launch) == set(base.launch)
    assert sorted(out.launch.values()) == sorted(base.launch.values())
    gpus = [pl for pl in base.launch.values()]
    best = max(_fits(view, dict(zip(base.launch, perm, strict=True)))
               for perm in itertools.permutations(gpus))
    assert _fits(view, out.launch) == best


def test_barrier_window_is_predicted_from_the_stragglers_measured_pace():
    # one straggler with 3 units left at 2 s/unit: the idle GPUs wait 6 s for the barrier
    view = _view([1.0, 1.0], [math.inf, math.inf], running={7: (3.0, 2.0)})
    view.hints = {}
    assert barrier_windows(view) == {0: pytest.approx(6.0), 1: pytest.approx(6.0)}
    view.running = {}
    assert barrier_windows(view) == {0: math.inf, 1: math.inf, 2: math.inf}


def test_a_held_trial_keeps_its_own_gpu():
    view = _view([9.0, 1.0], [2.0, 10.0])
    view.held = {100: ((0, 1.0),)}
    out = BubblesAllocator().allocate(view)
    assert out.launch[100] == ((0, 1.0),)
