"""RunningH1 fed the engine's change log gives what a look at every running trial gives.

With the engine as its view, :class:`~nbtune.allocators.running_h1.RunningH1` redoes only
the trials :meth:`Engine.trial_changes <nbtune.engine.engine.Engine.trial_changes>` names.
Here every such call of a simulated run is checked against a second table that looks at
every trial (no view) at the same moment: the same h_i1 in the same order, the same
guesses. Runs cover water-filling and fluid+knapsack, promotions, ends, resizes, a cluster
that shrinks and grows, configs the unit-cost fit guesses from, and a log short enough to be
dropped on the way (the table then looks at everything again).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nbtune
from nbtune.allocators import fluid as fluid_module
from nbtune.allocators.running_h1 import RunningH1
from nbtune.core.events import ResourcesChanged
from nbtune.core.resources import ClusterSpec
from nbtune.core.space import grid, uniform
from nbtune.core.trial import TrialRecord
from nbtune.engine import engine as engine_module
from nbtune.engine.engine import Engine
from nbtune.engine.state import ResourceLedger
from nbtune.runtimes.sim import SimRuntime
from nbtune.workloads import SyntheticWorkload

SPACE = {"lr": uniform(1e-4, 1e-1), "layers": grid([1, 2, 4]), "width": grid([16, 64])}


class Checked(RunningH1):
    """A RunningH1 that checks each answer against a table that looks at every trial."""

    calls: list[str] = []

    def __init__(self) -> None:
        super().__init__()
        self._shadow = RunningH1()

    def h1(self, est: Any, running: Any, records: Any, now: float,
           view: Any = None) -> dict[int, float] | None:
        incremental = (isinstance(view, Engine) and self._source == view.trial_changes
                       and view.trial_changes(self._mark, running)[1] is not None)
        before = set(est.guessed)
        got = super().h1(est, running, records, now, view)
        guessed = set(est.guessed)
        est.guessed.clear()
        est.guessed.update(before)
        recs = list(map(est.view.trial, running)) if records is None else records
        want = self._shadow.h1(est, running, recs, now)
        assert (got is None) == (want is None)
        if got is not None:
            assert list(got.items()) == list(want.items())
            assert guessed == est.guessed
            assert list(self.widths(running).tolist()) == list(
                self._shadow.widths(running).tolist())
        Checked.calls.append("log" if incremental else "all")
        return got


def _workload(seed: int) -> SyntheticWorkload:
    return SyntheticWorkload(SPACE, unit_time=lambda c: 1.0 + c["layers"] * c["width"] / 16,
                             alpha=1.2, beta=1.1, unit_time_jitter=0.2, seed=seed,
                             launch_overhead=1.0)


@pytest.mark.parametrize(("allocator", "algorithm", "kept"), [
    ("waterfill", "asha", None),
    ("waterfill", "hyperband", 7),
    ("fluid+knapsack", "asha", None),
    ("fluid+knapsack", "random", 5),
])
def test_the_log_gives_what_a_full_look_gives(monkeypatch, allocator, algorithm, kept):
    monkeypatch.setattr(fluid_module, "RunningH1", Checked)
    if kept is not None:  # the log is dropped often: readers behind it look at everything
        monkeypatch.setattr(engine_module, "_CHANGES_KEPT", kept)
    Checked.calls = []
    sim = SimRuntime(cluster=ClusterSpec.homogeneous(8, gpus_per_node=4), resize_overhead=1.0)
    sim.at(40.0, ResourcesChanged, cluster=ClusterSpec.homogeneous(6, gpus_per_node=3))
    sim.at(120.0, ResourcesChanged, cluster=ClusterSpec.homogeneous(12, gpus_per_node=4))
    kw = {"eta": 3} if algorithm in ("asha", "hyperband") else {}
    opts = {"c": 3, "d": 3, "resize_overhead": 1.0}
    nbtune.tune(_workload(3), SPACE, algorithm=algorithm, metric="loss", max_budget=27,
                num_trials=48, allocator=allocator, runtime=sim, seed=3, validate=True,
                allocator_options=opts, **kw)
    assert "log" in Checked.calls and "all" in Checked.calls


def test_trial_changes_names_what_moved():
    """Every trial that ran is in the log; marks move with it; another view gets no mark."""
    sim = SimRuntime(cluster=4)
    exp = nbtune.tune(_workload(1), SPACE, algorithm="asha", eta=3, metric="loss",
                      max_budget=9, num_trials=12, allocator="waterfill", runtime=sim, seed=1)
    eng = exp.engine
    mark, log = eng.trial_changes(0, eng.running)
    assert log is not None and set(log) == set(eng.trials)
    assert eng.trial_changes(mark, {}) == (-1, None)  # another view's running: no mark
    assert eng.trial_changes(mark, eng.running) == (mark, [])
    assert eng.trial_changes(-1, eng.running) == (mark, None)


def test_in_running_order_follows_running():
    """A launch goes last; a resize re-places a trial last, as ``running`` orders them."""
    led = ResourceLedger()
    led.set_cluster(ClusterSpec.homogeneous(4))
    recs = {i: TrialRecord(i, {}) for i in range(4)}
    for i in (2, 0, 3, 1):
        led.place(recs[i], ((i, 1.0),), 0.0)
    led.release(recs[0], 1.0)
    led.place(recs[0], ((0, 0.5),), 1.0)
    led.release(recs[3], 1.0)
    assert list(led.placed_seq) == list(led.placements) == [2, 1, 0]
    assert sorted(led.placed_seq, key=led.placed_seq.__getitem__) == [2, 1, 0]


def test_the_book_kept_after_a_launch_is_the_one_a_sync_gives(monkeypatch):
    """Where _static just appended its launch to the held book, the book _dynamic takes (synced
    to running, the launch after it) holds the same placements in the same order, loads and
    counts as a book built afresh."""
    from nbtune.allocators.fluid import DynamicFluidAllocator
    from nbtune.allocators.held_book import HeldBook

    kept = []
    plain = DynamicFluidAllocator._book

    def checked(self, view, held, extra=None):
        book = plain(self, view, held, extra)
        if held is view.running and extra is not None:  # _dynamic's book after a launch
            want = {**view.running, **extra}
            fresh = HeldBook(view.cluster, self.c, self._caps(view), want)
            assert list(book.held.items()) == list(want.items())
            assert book.load == fresh.load and book.count == fresh.count
            assert book.spreadable == fresh.spreadable
            kept.append(bool(extra))
        return book

    monkeypatch.setattr(DynamicFluidAllocator, "_book", checked)
    sim = SimRuntime(cluster=ClusterSpec.homogeneous(8, gpus_per_node=4), resize_overhead=1.0)
    nbtune.tune(_workload(5), SPACE, algorithm="asha", eta=3, metric="loss", max_budget=27,
                num_trials=64, allocator="waterfill", runtime=sim, seed=5, validate=True,
                allocator_options={"c": 3, "d": 3, "resize_overhead": 1.0})
    assert True in kept and False in kept


@pytest.mark.parametrize(("allocator", "algorithm", "kept"), [
    ("waterfill", "asha", None),
    ("waterfill", "hyperband", 7),
    ("waterfill", "asha", 3),
])
def test_a_book_sync_by_the_log_is_the_full_sync(monkeypatch, allocator, algorithm, kept):
    """HeldBook.sync fed the engine's change log (and a launch to follow running) leaves the
    book exactly as a sync that looks at every trial does (positions, placements, loads,
    indexes), on every call of a run."""
    import copy

    from nbtune.allocators.held_book import HeldBook

    if kept is not None:
        monkeypatch.setattr(engine_module, "_CHANGES_KEPT", kept)
    plain = HeldBook.sync
    used: list[tuple[bool, bool]] = []

    def state(book: HeldBook) -> tuple:
        on = {g: sorted((p, t, list(sh)) for p, (t, sh) in e.items()) for g, e in book.on.items()}
        return (list(book.held.items()), dict(book.pos), book._next, dict(book.load),
                dict(book.count), on, set(book.spreadable), book.spread_groups(),
                list(book._idle), book._n_free, {n: v for n, v in book._node_free.items() if v},
                {k: v for k, v in book._bucket.items() if v},
                {k: v for k, v in book._shared.items() if v})

    def checked(self, held, changes=None, extra=None):
        twin = copy.copy(self)
        for name, value in vars(self).items():
            if name not in ("cluster", "caps", "_source"):
                setattr(twin, name, copy.deepcopy(value))
        plain(twin, {**held, **extra} if extra else held)
        logged = changes is not None and self._source == changes and \
            changes(self._mark, held)[1] is not None
        plain(self, held, changes, extra)
        assert state(self) == state(twin)
        used.append((logged, bool(extra)))

    monkeypatch.setattr(HeldBook, "sync", checked)
    sim = SimRuntime(cluster=ClusterSpec.homogeneous(8, gpus_per_node=4), resize_overhead=1.0)
    sim.at(40.0, ResourcesChanged, cluster=ClusterSpec.homogeneous(6, gpus_per_node=3))
    sim.at(120.0, ResourcesChanged, cluster=ClusterSpec.homogeneous(12, gpus_per_node=4))
    nbtune.tune(_workload(7), SPACE, algorithm=algorithm, eta=3, metric="loss", max_budget=27,
                num_trials=64, allocator=allocator, runtime=sim, seed=7, validate=True,
                allocator_options={"c": 3, "d": 3, "resize_overhead": 1.0})
    assert {logged for logged, _ in used} == {True, False}


def _book_state(book: Any) -> tuple:
    on = {g: sorted((p, t, list(sh)) for p, (t, sh) in e.items()) for g, e in book.on.items()}
    return (list(book.held.items()), dict(book.pos), dict(book.load), dict(book.count), on,
            book.spread_groups())


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_a_logged_sync_with_a_launch_tail_is_the_full_sync(data):
    """``HeldBook.sync(held, changes, extra)`` where the log names what changed and ``extra``
    (a launch) follows ``held``: the book a full sync of ``{**held, **extra}`` makes, or the
    same after its own fallback. Trials leave, move (placed anew: last in ``held``), stay or
    join; the log also names trials that changed only their records."""
    import copy

    from nbtune.allocators.held_book import HeldBook

    cluster = ClusterSpec.homogeneous(4, gpus_per_node=2)
    gpus = [g.gpu_id for g in cluster.gpus]
    shares = st.sampled_from([0.5, 1.0])
    placement = st.builds(lambda g, s: ((g, s),), st.sampled_from(gpus), shares)
    start = data.draw(st.dictionaries(st.integers(0, 9), placement, max_size=6))
    held0 = dict(start)
    book = HeldBook(cluster, 2, dict.fromkeys(gpus, 1.0), held0)
    log: list[int] = []

    def changes(mark: int, running: Any) -> tuple[int, list[int] | None]:
        return len(log), (log[mark:] if mark >= 0 else None)

    book.sync(held0, changes)  # the book now follows this log
    gone = data.draw(st.sets(st.sampled_from(sorted(held0)))) if held0 else set()
    stay = [t for t in held0 if t not in gone]
    moved = data.draw(st.sets(st.sampled_from(stay))) if stay else set()
    touched = data.draw(st.sets(st.sampled_from(stay))) if stay else set()
    new = data.draw(st.dictionaries(st.integers(10, 14), placement, max_size=3))
    held1 = {t: held0[t] for t in stay if t not in moved}
    for t in sorted(moved):  # placed anew: a new placement object, last in the order
        held1[t] = data.draw(placement)
    held1.update(new)
    log.extend([*gone, *moved, *touched, *new])
    extra = data.draw(st.dictionaries(st.integers(20, 23), placement, max_size=3))
    twin = copy.copy(book)
    for name, value in vars(book).items():
        if name not in ("cluster", "caps", "_source"):
            setattr(twin, name, copy.deepcopy(value))
    HeldBook.sync(twin, {**held1, **extra})
    book.sync(held1, changes, extra)
    assert _book_state(book) == _book_state(twin)
