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

import threading

import pytest
from bokeh.core.serialization import Serialized
from bokeh.document import Document
from bokeh.protocol import Protocol

from nbtune.core import events as ev
from nbtune.core.resources import ClusterSpec
from nbtune.engine.engine import Engine
from nbtune.ui.figures import Figures
from nbtune.ui.model import DashboardModel
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


def test_a_same_length_update_changes_the_tables_view_so_the_grid_redraws():
    """BokehJS redraws the grid only when its view changes; rows whose states change while
    their number does not (trials waiting at a rung) once stayed stale in the browser."""
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
    figs._render_table(tuple({**r, "state": "stopped"} for r in rows))
    assert view_changes() == ["filter"]
    figs._render_table(tuple({**r, "state": "running"} for r in rows))
    assert view_changes() == ["filter", "filter"]  # flips back and forth, each a change
    figs._render_table(rows[:-1])
    assert len(view_changes()) == 2  # a new length needs no flip


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
