"""The dashboard's widget tree, its Bokeh sources, its controls and the HTML report."""

from __future__ import annotations

import json
import math

import ipywidgets as W
import pytest
from bokeh.io.notebook import LOAD_MIME_TYPE
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from jupyter_bokeh import BokehModel

from nbtune.core import events as ev
from nbtune.core.trial import TrialState
from nbtune.ui import Dashboard, export_html, load_bokehjs, report_html
from nbtune.ui import analysis as an
from nbtune.ui.figures import STATE_COLORS
from tests.ui.conftest import RecordingComm, experiment, run
from tests.ui.frontend import Frontend, is_patch


def rows_of(src) -> int:
    return len(src.data[next(iter(src.data))])


def patches(wire) -> int:
    return sum(1 for kind, data, _ in wire if kind == "comm_msg"
               and isinstance(data, dict) and data.get("method") == "custom"
               and data.get("content", {}).get("msg") == "patch")


def test_dashboard_of_a_finished_experiment(wire):
    exp = run(experiment("asha", trials=30, allocator="waterfill"))
    dash = Dashboard(exp)
    assert isinstance(dash.widget, W.VBox) and isinstance(dash.plot, BokehModel)
    assert dash.plot in dash.widget.children and dash.controls in dash.widget.children
    f = dash.figures
    assert rows_of(f.table_src) == 30
    assert sorted(f.table_src.data["trial_id"]) == list(range(30))
    assert rows_of(f.pts_src) == sum(len(t.results) for t in exp.engine.trials.values())
    assert rows_of(f.seg_src) > 0 and rows_of(f.best_src) == len(
        exp.engine.trials[exp.best["trial_id"]].results)
    assert rows_of(f.alloc_src) == sum(1 for r in exp.engine.ledger.log if r.end > r.start)
    assert rows_of(f.util_src) > 0 and rows_of(f.alloc_open_src) == 0
    assert dash.finished
    # the importance of the final state is fitted in the background: the thread shows it
    # once the fit ends, then stops (nothing left to stream)
    assert dash.importance_settled(30)
    dash._thread.join(30)  # it ends by itself: joined with a deadline, not a sleep
    assert dash.settled and not dash._thread.is_alive()
    imp = an.importance(dash.last, dash.analysis.space, budget=dash.analysis.budget(dash.last))
    bars = dash.analysis.importance_src.data
    assert imp and dict(zip(bars["name"], bars["importance"], strict=True)) == imp
    assert dash.progress.value == 1.0 and "done" in dash.status.value
    assert f"trial {exp.best['trial_id']}" in dash.status.value
    assert all(w.disabled for w in (dash.stop_button, dash.pause_button, dash.concurrency))
    # the best trial is drawn in the best colour; stopped trials fall back to grey
    pal = f.mapper.palette  # one colour per trial id
    assert len(pal) == 30 and f.mapper.low == -0.5 and f.mapper.high == 29.5
    assert pal[exp.best["trial_id"]] == STATE_COLORS["best"]
    for tid in exp.trials_in(TrialState.STOPPED):
        assert pal[tid] == STATE_COLORS["stopped"]
    assert wire, "the widgets opened comms"
    dash.close()


def test_live_updates_stream_to_the_sources_and_the_wire(wire):
    exp = experiment("asha", trials=40, report_every=0.5)
    dash = Dashboard(exp, autostart=False)
    assert rows_of(dash.figures.table_src) == 0
    sizes = []

    def tick(events, cmds):
        if dash.model.updates % 25 == 0:
            dash.update()
            sizes.append(rows_of(dash.figures.pts_src))

    exp.engine.subscribe(tick)
    before = patches(wire)
    run(exp)
    dash.update()
    assert len(sizes) > 3 and sizes == sorted(sizes) and sizes[-1] > sizes[0]
    assert patches(wire) > before + len(sizes)  # every update reached the (absent) browser
    f = dash.figures
    assert rows_of(f.table_src) == 40
    shown = dict(zip(f.table_src.data["trial_id"], f.table_src.data["state"], strict=True))
    res = exp.results().set_index("trial_id")["state"].to_dict()
    for tid, state in shown.items():
        state = state.removeprefix("★ ")  # the best trial: its state, starred
        if state == "promoted":
            assert res[tid] in ("completed", "stopped", "paused")
        else:
            assert state == res[tid]
    dash.close()


def test_background_thread_follows_a_run_on_another_thread(wire):
    exp = experiment("asha", trials=40, report_every=0.25)
    dash = Dashboard(exp, period=0.01)
    assert dash._thread is not None and dash._thread.is_alive()
    run(exp)
    dash._thread.join(timeout=20)
    assert not dash._thread.is_alive() and dash.finished
    assert rows_of(dash.figures.table_src) == 40 and dash.progress.value == 1.0
    assert dash.update_seconds > 0
    dash.close()


def test_controls_send_engine_events(wire):
    exp = experiment("random", trials=6, max_budget=10, gpus=3)
    seen = []
    exp.engine.subscribe(lambda events, cmds: seen.extend(type(e) for e in events))
    dash = Dashboard(exp, autostart=False)
    dash.concurrency.value = 2
    dash.pause_button.value = True
    assert dash.pause_button.description == "Resume"
    dash.pause_button.value = False
    dash.trial_box.value = 5
    dash.stop_trial_button.click()
    run(exp)
    assert ev.ConcurrencyChanged in seen and ev.ExperimentPauseRequested in seen
    assert ev.ExperimentResumeRequested in seen
    assert exp.engine.max_concurrent == 2
    assert exp.engine.trials[5].state.value == "stopped"
    assert max(len({r.trial_id for r in exp.engine.ledger.log
                    if r.start <= t < (1e18 if r.end is None else r.end)})
               for t in {r.start for r in exp.engine.ledger.log}) <= 2
    dash._control("set_concurrency", 0)
    assert "max_concurrent" in dash.message.value
    dash.close()


def test_stop_button_ends_the_experiment(wire):
    exp = experiment("random", trials=6, max_budget=10, gpus=2)
    dash = Dashboard(exp, autostart=False)
    dash.stop_button.click()
    run(exp)
    dash.update()
    assert exp.done and set(exp.results()["state"]) == {"stopped"}
    assert dash.finished
    dash.close()


def test_table_selection_fills_the_trial_box(wire):
    exp = run(experiment("random", trials=5, max_budget=3))
    dash = Dashboard(exp)
    ids = list(dash.figures.table_src.data["trial_id"])
    dash.figures.table_src.selected.indices = [3]
    assert dash.trial_box.value == int(ids[3])
    dash.close()


def test_report_is_standalone_html(tmp_path):
    exp = run(experiment("asha", trials=20))
    path = exp.report(tmp_path / "report.html")
    html = path.read_text()
    assert "Bokeh" in html and "cdn.bokeh.org" not in html  # BokehJS inline, works offline
    assert exp.name in html and "learning curves" in html
    assert "ui-test" in report_html(exp)
    with pytest.raises(ValueError, match=r"\.html"):
        export_html(exp, tmp_path / "report.png")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        export_html(exp, tmp_path / "missing" / "r.html")


def test_bokehjs_is_published_inline_once():
    import nbtune.ui.dashboard as d

    InteractiveShell.instance()  # where display data goes outside a kernel
    d._BOKEHJS_LOADED = False
    with capture_output() as first:
        load_bokehjs()
    with capture_output() as second:
        load_bokehjs()
    bundles = [o.data for o in first.outputs]
    assert any(LOAD_MIME_TYPE in b for b in bundles)
    js = next(b[LOAD_MIME_TYPE] for b in bundles if LOAD_MIME_TYPE in b)
    assert "cdn.bokeh.org" not in js and len(js) > 500_000  # the library itself, inline
    assert not second.outputs


def test_experiment_display_hooks(wire):
    exp = run(experiment("random", trials=4, max_budget=3))
    bundle = exp._repr_mimebundle_()
    assert "experiment 'ui-test'" in bundle["text/plain"] and "<pre>" in bundle["text/html"]
    assert exp.dashboard() is exp.dashboard()  # one dashboard per experiment, shared
    exp.dashboard().close()


def test_bad_options_are_refused():
    exp = experiment("random", trials=2)
    with pytest.raises(ValueError, match="period"):
        Dashboard(exp, period=0)
    with pytest.raises(ValueError, match="max_overhead"):
        Dashboard(exp, max_overhead=2)
    with pytest.raises(ValueError, match="max_concurrent"):
        exp.set_concurrency(0)


def test_figures_switch_to_measured_utilization():
    from nbtune.core.resources import ClusterSpec
    from nbtune.engine.engine import Engine
    from nbtune.ui.dashboard_model import DashboardModel
    from nbtune.ui.figures import Figures
    from nbtune.ui.snapshot import Snapshots
    from tests.engine.toy import OneShot
    from tests.ui.conftest import SPACE

    engine = Engine(OneShot(SPACE, metric="loss", max_budget=5, num_trials=2, seed=0))
    model = DashboardModel(engine)
    figs = Figures("loss", "min", space=SPACE)
    snaps = Snapshots(model)
    engine.handle(ev.ExperimentStarted(0.0, ClusterSpec.homogeneous(2)))
    engine.handle(ev.TrialReported(2.0, 0, 1.0, {"loss": 0.5}))
    figs.render(snaps.take())
    assert "allocated" in figs.util.title.text and rows_of(figs.util_open_src) == 2
    engine.handle(ev.UtilizationSampled(3.0, {0: 0.5, 1: 0.25}))
    engine.handle(ev.UtilizationSampled(4.0, {0: 0.75, 1: 0.0}))
    figs.render(snaps.take())
    assert "measured" in figs.util.title.text
    assert sorted(figs.util_src.data["util"]) == [0.25, 0.5]  # the estimates were dropped
    assert rows_of(figs.util_open_src) == 2


def test_browser_selection_message_fills_the_trial_box(wire):
    """The message BokehJS sends when a row is clicked, applied under the dashboard's lock."""
    exp = run(experiment("random", trials=5, max_budget=3))
    dash = Dashboard(exp)
    ids = list(dash.figures.table_src.data["trial_id"])
    selection = dash.figures.table_src.selected
    dash.plot._sync_model(dash.plot, {"event": "jsevent", "kind": "ModelChanged",
                                      "model": {"id": selection.id}, "attr": "indices",
                                      "new": [2]}, [])
    assert selection.indices == [2] and dash.trial_box.value == int(ids[2])
    dash.close()


def test_built_before_the_experiment_then_attached(wire):
    from tests.ui.conftest import SPACE

    dash = Dashboard(metric="loss", mode="min", space=SPACE, name="early")
    assert dash.experiment is None and "starting" in dash.status.value
    dash.stop_button.click()  # nothing to stop yet: says so instead of failing
    assert "not started" in dash.message.value
    with pytest.raises(RuntimeError, match="attach"):
        dash.update()
    exp = run(experiment("random", trials=5, max_budget=3))
    dash.attach(exp)
    assert dash.finished and rows_of(dash.figures.table_src) == 5
    assert exp.dashboard() is dash  # displaying the experiment reuses it
    with pytest.raises(RuntimeError, match="already shows"):
        dash.attach(exp)
    other = experiment("random", trials=2)
    other.engine.metric = "accuracy"
    with pytest.raises(ValueError, match="plots 'loss'"):
        Dashboard(metric="loss", mode="min", space=SPACE).attach(other)
    with pytest.raises(ValueError, match="metric and mode"):
        Dashboard()
    dash.close()


def test_header_shows_the_bill_only_for_a_planned_run(wire):
    exp = run(experiment("random", trials=3))
    dash = Dashboard(exp)
    assert exp.cost is None and dash.model.cost() is None  # the model reads exp.cost
    assert "$" not in dash.figures.header.text
    dash.close()


def _patch_groups(msgs) -> list[tuple[int, int]]:
    """``(first, end)`` message indices of each PATCH-DOC (its header frame, then the rest)."""
    starts = []
    for i, m in enumerate(msgs):
        if is_patch(m) and isinstance(m[1]["content"].get("payload"), str):
            head = json.loads(m[1]["content"]["payload"])
            if isinstance(head, dict) and head.get("msgtype") == "PATCH-DOC":
                starts.append(i)
    out = []
    for a in starts:
        b = a + 1
        while b < len(msgs) and is_patch(msgs[b]) and b not in starts:
            b += 1
        out.append((a, b))
    return out


@pytest.mark.parametrize("how", ["final patch missed", "final patch late",
                                 "view made mid-patch"])
def test_every_view_ends_on_the_final_state(wire, how):
    """Whatever a view missed or got out of order, it ends showing the finished experiment
    (a view that still read "running" after the run was seen in a real page)."""
    exp = experiment("asha", trials=12, gpus=2, max_budget=9, report_every=0.5)
    dash = Dashboard(exp, autostart=False)

    def tick(events, cmds):
        if dash.model.updates % 10 == 0:
            dash.update()

    exp.engine.subscribe(tick)
    run(exp)
    dash.update()
    assert dash.finished
    msgs = [m for m in wire_of(dash.plot) if m[0] == "comm_msg"]
    opened = next(m for m in wire_of(dash.plot) if m[0] == "comm_open")
    groups = _patch_groups(msgs)
    final = next(g for g in reversed(groups))
    assert len(groups) > 3 and final[1] <= len(msgs)
    front = Frontend(opened)
    if how == "view made mid-patch":  # made after the first frame of a patch during the run
        made_at = groups[len(groups) // 2][0] + 1
        for m in msgs[:made_at]:
            front.deliver(m)
        view = front.new_view()
        for m in msgs[made_at:]:
            front.deliver(m)
        assert view.failed > 0  # its receiver read the frames that followed shifted
    else:
        view = front.new_view()
        rest = msgs[:final[0]] + msgs[final[1]:]
        for m in rest:
            front.deliver(m)
        if how == "final patch late":
            for m in msgs[final[0]:final[1]]:
                front.deliver(m)
    for name in ("table_src", "pts_src", "alloc_src", "util_src"):
        model = getattr(dash.figures, name)
        want = {k: list(v) for k, v in model.data.items()}
        assert view.data(model.id) == want, name
    assert "done" in view.divs()
    dash.close()


def wire_of(widget) -> list:
    return RecordingComm.by_comm[widget.comm.comm_id]


def test_the_widget_state_bundles_the_document_once_per_change(wire, monkeypatch):
    """A reloaded page asks every widget's state in one request it abandons after a few
    seconds: the bundle is made once per change of the document, and is always current."""
    exp = run(experiment("random", trials=5, max_budget=3))
    dash = Dashboard(exp)
    if dash._thread is not None:  # it shows the final importance fit, then ends
        dash._thread.join(30)
    assert dash.settled
    made = []
    real = type(dash.plot)._model_to_traits
    monkeypatch.setattr(type(dash.plot), "_model_to_traits",
                        classmethod(lambda cls, m: made.append(1) or real.__func__(cls, m)))
    first = dash.plot.get_state()["render_bundle"]
    assert dash.plot.get_state()["render_bundle"] == first and made == []  # final: bundled
    dash.figures.header.text = "<b>renamed</b>"  # the document changes
    again = dash.plot.get_state()["render_bundle"]
    assert made == [1] and "renamed" in str(again)
    dash.plot.get_state()
    assert made == [1]
    dash.close()


def columns(data) -> dict[str, list]:
    """A source's columns, comparable: NaN (a trial still running has no end) as None."""
    return {k: [None if isinstance(x, float) and math.isnan(x) else x for x in v]
            for k, v in data.items()}


def test_a_view_made_while_the_run_is_steady_catches_up_once_it_speaks(wire, monkeypatch):
    """The first view of a ``%%tune`` cell is made by the page whenever it gets to it, from
    the widget's state when the page made its model; the patches sent before are lost to
    it. If the run is then steady (every trial inside a long epoch), no change would ever
    reach it: the view's first message (its layout, sent once it exists) brings everything.
    Seen in a real page under load: a live table that stayed empty while trials ran."""
    monkeypatch.setattr("nbtune.ui.dashboard.RESYNC", 0.0)  # only what changed, from the start
    exp = experiment("asha", trials=12, gpus=2, max_budget=9, report_every=0.5)
    dash = Dashboard(exp, autostart=False)
    seen: dict[str, object] = {}

    def tick(events, cmds):
        if dash.model.updates != 40 or seen:
            return
        dash.update()
        assert dash.importance_settled(30)  # the analysis views' fit this update started
        dash.update()
        sent = len(wire_of(dash.plot))
        dash.update()  # nothing changed since: nothing is sent
        assert len(wire_of(dash.plot)) == sent
        front = Frontend(next(m for m in wire_of(dash.plot) if m[0] == "comm_open"))
        for m in wire_of(dash.plot):
            if m[0] == "comm_msg":
                front.deliver(m, to=[])  # the page's model: any bundle, but no view yet
        view = front.new_view()
        table = dash.figures.table_src
        seen["stale"] = columns(view.data(table.id)) != columns(table.data)
        # its layout, as BokehJS reports it once the view exists
        dash.plot._sync_model(dash.plot, {"event": "jsevent", "kind": "ModelChanged",
                                          "model": {"id": table.id}, "attr": "name",
                                          "new": "laid out"}, [])
        dash.update()
        for m in wire_of(dash.plot)[sent:]:
            if m[0] == "comm_msg":
                front.deliver(m)
        seen["caught up"] = {name: columns(view.data(src.id)) == columns(src.data)
                             for name in ("table_src", "pts_src", "alloc_src", "util_src")
                             for src in [getattr(dash.figures, name)]}
        seen["running"] = "running" in view.divs()
        # the views echo every patch back; that does not force again within RESYNC
        monkeypatch.setattr("nbtune.ui.dashboard.RESYNC", 3600.0)
        dash.plot._sync_model(dash.plot, {"event": "jsevent", "kind": "ModelChanged",
                                          "model": {"id": table.id}, "attr": "name",
                                          "new": "echo"}, [])
        sent = len(wire_of(dash.plot))
        dash.update()
        seen["quiet after"] = len(wire_of(dash.plot)) == sent

    exp.engine.subscribe(tick)
    run(exp)
    assert seen, "the run never reached the 40th engine step"
    assert seen["stale"]  # what the view had before it spoke: the state when the page began
    assert seen["caught up"] == dict.fromkeys(("table_src", "pts_src", "alloc_src", "util_src"),
                                              True)
    assert seen["running"] and seen["quiet after"]
    dash.close()


def test_a_view_the_page_makes_while_the_run_streams_follows_it(wire):
    """A patch is several messages; a view made between two of them reads every later
    patch shifted and applies none (seen in a real page: a live table empty for the whole
    run). After a display and until a view has spoken, updates go out as whole render
    bundles, one message each, so a view made at any message shows the run; once a view
    has spoken, patches again, which that view applies."""
    exp = experiment("asha", trials=12, gpus=2, max_budget=9, report_every=0.5)
    dash = Dashboard(exp, autostart=False)
    with capture_output():
        dash._ipython_display_()  # the page will make the first view whenever it gets to it
    shown = len(wire_of(dash.plot))
    marks: list[tuple[int, dict]] = []  # (messages sent so far, the table then)

    def tick(events, cmds):
        if dash.model.updates % 6 == 0 and len(marks) < 12:
            dash.update()
            marks.append((len(wire_of(dash.plot)), columns(dash.figures.table_src.data)))

    exp.engine.subscribe(tick)
    run(exp)
    msgs = wire_of(dash.plot)
    opened = next(m for m in msgs if m[0] == "comm_open")
    assert len(marks) == 12 and marks[-1][0] > shown
    table = dash.figures.table_src.id
    for made in range(shown, marks[-1][0]):  # a view made after any message of the run
        front = Frontend(opened)
        for m in msgs[:made]:
            if m[0] == "comm_msg":
                front.deliver(m, to=[])
        view = front.new_view()
        upto, want = next((n, t) for n, t in marks if n > made)
        for m in msgs[made:upto]:
            if m[0] == "comm_msg":
                front.deliver(m)
        assert columns(view.data(table)) == want, made
    assert not [m for m in msgs[shown:marks[-1][0]] if is_patch(m)]  # bundles only
    dash.close()


def test_once_a_view_has_spoken_updates_are_patches_again(wire):
    exp = experiment("asha", trials=12, gpus=2, max_budget=9, report_every=0.5)
    dash = Dashboard(exp, autostart=False)
    with capture_output():
        dash._ipython_display_()
    front = Frontend(next(m for m in wire_of(dash.plot) if m[0] == "comm_open"))
    for m in wire_of(dash.plot):
        if m[0] == "comm_msg":
            front.deliver(m, to=[])
    view = front.new_view()
    table = dash.figures.table_src
    dash.plot._sync_model(dash.plot, {"event": "jsevent", "kind": "ModelChanged",
                                      "model": {"id": table.id}, "attr": "name",
                                      "new": "laid out"}, [])
    spoke = len(wire_of(dash.plot))
    checks: list[bool] = []

    def tick(events, cmds):
        if dash.model.updates % 8 == 0 and len(checks) < 6:
            before = len(wire_of(dash.plot))
            dash.update()
            for m in wire_of(dash.plot)[before:]:
                if m[0] == "comm_msg":
                    front.deliver(m)
            checks.append(columns(view.data(table.id)) == columns(table.data))

    exp.engine.subscribe(tick)
    run(exp)
    assert [m for m in wire_of(dash.plot)[spoke:] if is_patch(m)]
    assert checks == [True] * 6
    dash.close()
