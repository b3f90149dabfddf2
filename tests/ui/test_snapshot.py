"""Snapshots, whole renders and views that start late: every view converges to the truth.

A browser view of the dashboard is a Bokeh document built from the widget's
render bundle, to which it applies the PATCH-DOC messages that follow. Here a
"view" is exactly that, in Python: ``Document.from_json`` of the bundle, then
``apply_json_patch`` of the messages, except those it missed (a view the
browser creates while updates already flow, a reload, a second tab). After a
forced update it must hold what a fresh render of the finished experiment
holds. The incremental sync this replaced failed this test (rows missing,
columns of different lengths).
"""

from __future__ import annotations

import queue
import threading
import time

import pytest
from bokeh.core.serialization import Serialized
from bokeh.document import Document
from bokeh.protocol import Protocol

from nbtune.core import events as ev
from nbtune.core.clock import ManualClock
from nbtune.core.resources import ClusterSpec
from nbtune.engine.engine import Engine
from nbtune.ui.dashboard_model import DashboardModel
from nbtune.ui.figures import Figures
from nbtune.ui.snapshot import Snapshots
from tests.engine.toy import OneShot
from tests.ui.conftest import SPACE, experiment

SOURCES = ("table_src", "seg_src", "pts_src", "best_src", "alloc_src", "alloc_open_src",
           "util_src", "util_open_src")


class View:
    """A browser view in Python: a document from a bundle, then the patches it receives."""

    def __init__(self, figs: Figures) -> None:
        self.doc = Document.from_json(figs.layout.document.to_json())

    def apply(self, msg) -> None:
        self.doc.apply_json_patch(Serialized(content=msg.content, buffers=msg.buffers))

    def data(self, figs: Figures, name: str) -> dict:
        model = self.doc.get_model_by_id(getattr(figs, name).id)
        return {k: list(v) for k, v in model.data.items()}


def wire(figs: Figures) -> list:
    """Every document change, as the PATCH-DOC message jupyter_bokeh would send."""
    doc = Document()
    doc.add_root(figs.layout)
    sent: list = []
    doc.on_change(lambda e: sent.append(Protocol().create("PATCH-DOC", [e])))
    return sent


def same(a: dict, b: dict) -> bool:
    def norm(v):
        return [None if isinstance(x, float) and x != x else x for x in v]
    return {k: norm(v) for k, v in a.items()} == {k: norm(v) for k, v in b.items()}


@pytest.mark.parametrize("missed", [0, 3, 10])
def test_a_view_that_missed_messages_converges_to_a_fresh_render(missed):
    exp = experiment("asha", trials=12, gpus=2, max_budget=9)
    model = DashboardModel(exp.engine)
    snaps = Snapshots(model)
    figs = Figures("loss", "min", space=SPACE)
    sent = wire(figs)
    early = View(figs)  # built from the first bundle, like the %%tune cell's first view
    late = None
    exp.runtime.start(exp.engine, exp.trainable)  # the simulator: runs to the end
    # replay the run as a live view saw it: snapshots at several instants are what the
    # thread renders; here the whole run has happened, so render the deltas step by step
    for i in range(4):
        figs.render(snaps.take(), force=i == 3)
        if i == 0:
            late = View(figs)  # made from a bundle taken now; misses nothing after it
            late_from = len(sent)
    for msg in sent[missed:]:
        early.apply(msg)
    for msg in sent[late_from:]:
        late.apply(msg)
    fresh = Figures("loss", "min", space=SPACE)
    fresh_model = DashboardModel(exp.engine)
    fresh.render(Snapshots(fresh_model).take())
    for name in SOURCES:
        want = {k: list(v) for k, v in getattr(fresh, name).data.items()}
        for view in (early, late):
            got = view.data(figs, name)
            assert len({len(v) for v in got.values()}) <= 1, (name, got)
            assert same(got, want), name
    rows = early.data(figs, "table_src")
    assert sorted(rows["trial_id"]) == sorted(exp.engine.trials)
    starred = [t for t, s in zip(rows["trial_id"], rows["state"], strict=True) if s[0] == "★"]
    assert starred == [exp.best["trial_id"]]


def test_the_table_is_streamed_whole_so_the_grid_redraws():
    """BokehJS's DataTable redraws on a stream, not on a patch or a same-length replace."""
    exp = experiment("asha", trials=6, gpus=2, max_budget=9)
    model = DashboardModel(exp.engine)
    snaps = Snapshots(model)
    figs = Figures("loss", "min", space=SPACE)
    sent = wire(figs)
    exp.runtime.start(exp.engine, exp.trainable)
    figs.render(snaps.take())
    kinds = [e["kind"] for m in sent for e in m.content["events"]
             if e.get("model", {}).get("id") == figs.table_src.id]
    assert kinds == ["ColumnsStreamed"]
    rollover = [e["rollover"] for m in sent for e in m.content["events"]
                if e["kind"] == "ColumnsStreamed" and e["model"]["id"] == figs.table_src.id]
    assert rollover == [len(exp.engine.trials)]


def test_a_same_length_update_changes_the_tables_view_so_the_grid_redraws(monkeypatch):
    """BokehJS redraws the grid only when its view changes; rows whose states change while
    their number does not (trials waiting at a rung) once stayed stale in the browser. The
    change is a plain value: changing a model-valued property makes Bokeh walk the whole
    document again, the bulk of a live update's cost."""
    exp = experiment("asha", trials=6, gpus=2, max_budget=9)
    snaps = Snapshots(DashboardModel(exp.engine))
    figs = Figures("loss", "min", space=SPACE)
    sent = wire(figs)
    exp.runtime.start(exp.engine, exp.trainable)
    rows = snaps.take().rows
    figs.render(snaps.take())

    def view_changes() -> list[str]:
        return [e["attr"] for m in sent for e in m.content["events"]
                if e["kind"] == "ModelChanged" and e["model"]["id"] == figs.table.view.id]

    assert view_changes() == []  # a new length redraws by itself
    models = figs.layout.document.models
    walks: list[int] = []
    real = models.recompute
    monkeypatch.setattr(models, "recompute", lambda: walks.append(1) or real())
    figs._render_table(tuple({**r, "state": "stopped"} for r in rows))
    assert view_changes() == ["tags"]
    figs._render_table(tuple({**r, "state": "running"} for r in rows))
    assert view_changes() == ["tags", "tags"]  # flips back and forth, each a change
    figs._render_table(rows[:-1])
    assert len(view_changes()) == 2  # a new length needs no flip
    assert walks == []  # no model was swapped for the flip


class ThreadCheckedEngine:
    """The engine, noting which thread reads which attribute."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self.reads: list[tuple[str, int]] = []

    def __getattr__(self, name: str):
        self.reads.append((name, threading.get_ident()))
        return getattr(self._engine, name)


def test_the_model_reads_the_engine_only_on_the_engines_thread():
    engine = Engine(OneShot(SPACE, metric="loss", max_budget=50, num_trials=4, seed=0))
    engine.handle(ev.ExperimentStarted(0.0, ClusterSpec.homogeneous(2)))
    checked = ThreadCheckedEngine(engine)
    model = DashboardModel(checked)  # attached while running: catches up at the next handle
    snaps = Snapshots(model)
    stop = threading.Event()
    engine_thread: list[int] = []

    def drive() -> None:
        engine_thread.append(threading.get_ident())
        for b in range(1, 51):
            for t in list(engine.trials):
                if engine.trials[t].state.value == "running":
                    engine.handle(ev.TrialReported(float(b), t, float(b), {"loss": 1.0 / b + t}))
        stop.set()

    checked.reads.clear()
    th = threading.Thread(target=drive)
    th.start()
    while not stop.is_set():
        snaps.take()
    th.join()
    last = snaps.take()
    me = threading.get_ident()
    # from the viewer's thread: only the done flag and the (immutable) cluster value
    foreign = {name for name, who in checked.reads if who == me}
    assert foreign <= {"done", "ledger"}, foreign
    assert {r["trial_id"] for r in last.rows} == set(engine.trials)
    assert all(r["last"] is not None for r in last.rows)  # the trials did report
    for r in last.rows:
        assert r["last"] == engine.trials[r["trial_id"]].last


def test_table_columns_keep_their_widths():
    """With config columns added, BokehJS's default force_fit squeezed every column to fit the
    panel ("completed" drawn as "comple"); the table now keeps each column's width and scrolls
    sideways instead, and a column is wide enough for what it shows."""
    figs = Figures("loss", "min", space=SPACE)
    assert figs.table.autosize_mode == "none"
    width = {c.field: c.width for c in figs.table.columns}
    assert width["state"] >= 9 * len("completed") and width["promotions"] >= 9 * len("promoted")
    assert all(width[f"config/{k}"] >= 9 * len(k) for k in SPACE)


class Holding(OneShot):
    """OneShot whose report at budget ``hold_at`` holds the engine's thread inside ``handle``
    until the test lets it go (an algorithm callback that takes long)."""

    def __init__(self, *args, hold_at: float, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.hold_at = hold_at
        self.holding = threading.Event()
        self.release = threading.Event()

    def on_report(self, trial_id, budget, metrics):
        if budget == self.hold_at and not self.release.is_set():
            self.holding.set()
            assert self.release.wait(timeout=120), "the test never let the engine go"
        return super().on_report(trial_id, budget, metrics)


class EngineThread:
    """What the model relies on from a runtime: one thread drives the engine, fed by
    ``submit`` (trial messages and a person's events alike), and ``drives`` says whether
    that thread may still call ``handle``."""

    virtual_clock = False

    def __init__(self, engine) -> None:
        self.engine = engine
        self.clock = ManualClock()
        self.submitted: list[ev.Event] = []
        self.handled: list[ev.Event] = []
        self._inbox: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def submit(self, *events) -> None:
        self.submitted.extend(events)
        for e in events:
            self._inbox.put(e)

    def drives(self, engine) -> bool:
        return engine is self.engine and self._thread.is_alive()

    def let_go(self) -> None:
        self._inbox.put(None)
        self._thread.join(timeout=60)

    def _run(self) -> None:
        while (e := self._inbox.get()) is not None:
            self.engine.handle(e)
            self.handled.append(e)


def reported(t: int, budget: float) -> ev.TrialReported:
    return ev.TrialReported(budget, t, budget, {"loss": 1.0 / budget + t})


def until(what, timeout: float = 60.0):
    """Poll ``what()`` until it returns something truthy (the state a test waits for)."""
    deadline = time.monotonic() + timeout
    while not (got := what()):
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.01)
    return got


def viewer_reads(checked: ThreadCheckedEngine) -> set[str]:
    me = threading.get_ident()
    return {name for name, who in checked.reads if who == me}


@pytest.mark.parametrize("attach", ["before", "while-held"])
def test_a_view_never_reads_an_engine_held_inside_handle(attach, monkeypatch):
    """The engine's thread sits inside ``handle`` far longer than any view waits (a slow
    algorithm callback); the view's thread, pulling all the while, must read nothing of
    the engine's state, and once the engine goes on, the view shows it whole."""
    monkeypatch.setattr("nbtune.ui.dashboard_model.SYNC_EVERY", 3600.0)  # every copy is one asked for
    algo = Holding(SPACE, metric="loss", max_budget=5, num_trials=4, seed=0, hold_at=2.0)
    checked = ThreadCheckedEngine(Engine(algo))
    rt = EngineThread(checked)
    rt.submit(ev.ExperimentStarted(0.0, ClusterSpec.homogeneous(2)))
    model = None
    if attach == "before":
        model = DashboardModel(checked, runtime=rt)
    rt.submit(reported(0, 1.0), reported(1, 1.0), reported(0, 2.0))  # trial 0 holds at 2
    assert algo.holding.wait(timeout=60)
    if model is None:
        model = DashboardModel(checked, runtime=rt)
    snaps = Snapshots(model)
    checked.reads.clear()
    held_until = time.monotonic() + 3.0  # longer than any timeout the model ever had
    while time.monotonic() < held_until:
        snaps.take()
    assert viewer_reads(checked) <= {"ledger"}, viewer_reads(checked)
    assert any(isinstance(e, ev.SnapshotRequested) for e in rt.submitted)  # it asked
    algo.release.set()
    rt.submit(reported(1, 2.0))
    snap = until(lambda: (s := snaps.take()).row(1) and s.row(1)["last"] == 1.5 and s)
    assert viewer_reads(checked) <= {"ledger"}, viewer_reads(checked)
    assert snap.row(0)["last"] == 0.5 and snap.row(0)["budget"] == 2.0
    assert {r["trial_id"] for r in snap.rows} == set(checked._engine.trials)
    rt.let_go()


def test_a_view_of_an_idle_engine_shows_everything():
    """No event comes (an idle or paused run): the view asks, the engine's thread hands its
    state over, and the view shows every trial without reading the engine itself."""
    algo = OneShot(SPACE, metric="loss", max_budget=5, num_trials=4, seed=0)
    checked = ThreadCheckedEngine(Engine(algo))
    rt = EngineThread(checked)
    rt.submit(ev.ExperimentStarted(0.0, ClusterSpec.homogeneous(2)), reported(0, 1.0),
              ev.ExperimentPauseRequested(1.0))
    until(lambda: len(rt.handled) == 3)  # then idle: nothing more is submitted
    model = DashboardModel(checked, runtime=rt)
    snaps = Snapshots(model)
    checked.reads.clear()
    snap = until(lambda: (s := snaps.take()).paused and s)
    assert viewer_reads(checked) <= {"ledger"}, viewer_reads(checked)
    assert {r["trial_id"] for r in snap.rows} == set(checked._engine.trials) == {0, 1, 2, 3}
    assert snap.row(0)["last"] == 1.0
    assert [type(e) for e in rt.handled[3:]] == [ev.SnapshotRequested]
    rt.let_go()


def test_an_engine_let_go_is_read_at_once():
    algo = OneShot(SPACE, metric="loss", max_budget=5, num_trials=4, seed=0)
    engine = Engine(algo)
    rt = EngineThread(engine)
    rt.submit(ev.ExperimentStarted(0.0, ClusterSpec.homogeneous(2)), reported(0, 1.0))
    rt.let_go()
    snap = Snapshots(DashboardModel(engine, runtime=rt)).take()
    assert snap.row(0)["last"] == 1.0 and len(snap.rows) == 4
    assert not any(isinstance(e, ev.SnapshotRequested) for e in rt.submitted)
