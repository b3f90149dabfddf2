"""The analysis views' data (history, parallel coordinates, importance, slices) agree with
``exp.results()`` and with what scikit-learn computes from the same trials."""

from __future__ import annotations

from types import MappingProxyType

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nbtune.core.space import choice, loguniform, uniform
from nbtune.ui import analysis as an
from nbtune.ui.dashboard_model import DashboardModel, Points
from nbtune.ui.snapshot import Snapshots
from tests.ui.conftest import SPACE, experiment, run


@pytest.fixture(scope="module")
def finished():
    exp = run(experiment("asha", trials=40, gpus=4))
    snap = Snapshots(DashboardModel(exp.engine, runtime=exp.runtime)).take()
    return exp, snap


def test_history_has_one_point_per_trial_and_the_running_best(finished):
    exp, snap = finished
    res = exp.results().set_index("trial_id")
    h = an.history(snap, by="trial")
    assert list(h.trial_id) == sorted(res.index)
    assert list(h.value) == [res.loc[t, "last"] for t in h.trial_id]
    assert list(h.budget) == [res.loc[t, "budget_used"] for t in h.trial_id]
    assert list(h.best) == list(np.minimum.accumulate(h.value))
    by_time = an.history(snap)
    assert list(by_time.x) == sorted(by_time.x)  # in the order the values were reported
    assert sorted(by_time.trial_id) == list(h.trial_id)
    assert list(by_time.best) == list(np.minimum.accumulate(by_time.value))
    with pytest.raises(ValueError, match="by must be"):
        an.history(snap, by="epoch")


def test_a_budget_keeps_only_the_trials_that_reached_it(finished):
    exp, snap = finished
    res = exp.results()
    b = an.default_budget(snap)
    counts = {x: int((res["budget_used"] >= x).sum()) for x in set(res["budget_used"])}
    # the highest budget enough trials reached
    assert b == max(x for x, n in counts.items() if n >= an.MIN_TRIALS)
    assert an.budgets(snap) == sorted(set(res["budget_used"]))
    shown = an.history(snap, budget=b, by="trial")
    assert set(shown.trial_id) == set(res.loc[res["budget_used"] >= b, "trial_id"])
    assert min(shown.budget) >= b


def test_parallel_coordinates_carry_every_trials_values(finished):
    exp, snap = finished
    pc = an.parallel_coordinates(snap, SPACE)
    res = exp.results().set_index("trial_id")
    assert pc["trial_id"] == sorted(res.index)
    for k in SPACE:
        assert pc[k] == [res.loc[t, f"config/{k}"] for t in pc["trial_id"]]
        assert pc[f"{k}/unit"] == [SPACE[k].to_unit(v) for v in pc[k]]
        assert all(0.0 <= u <= 1.0 for u in pc[f"{k}/unit"])
    assert pc["loss"] == [res.loc[t, "last"] for t in pc["trial_id"]]
    assert min(pc["loss/unit"]) == 0.0 and max(pc["loss/unit"]) == 1.0
    sl = an.slices(snap, SPACE)
    assert set(sl) == set(SPACE)
    assert sl["lr"]["x"] == pc["lr"] and sl["lr"]["value"] == pc["loss"]


def test_importance_is_the_forests_and_the_same_each_time(finished):
    from sklearn.ensemble import RandomForestRegressor

    _, snap = finished
    imp = an.importance(snap, SPACE, seed=3)
    assert imp is not None and set(imp) == set(SPACE)
    assert sum(imp.values()) == pytest.approx(1.0)
    assert an.importance(snap, SPACE, seed=3) == imp  # a fixed seed: the same bars
    pc = an.parallel_coordinates(snap, SPACE)
    x = np.array([pc[f"{k}/unit"] for k in SPACE]).T
    forest = RandomForestRegressor(n_estimators=64, random_state=3).fit(x, pc["loss"])
    want = forest.feature_importances_ / forest.feature_importances_.sum()
    assert list(imp.values()) == pytest.approx(list(want))


class Snap:
    """A snapshot's rows and curves, made by hand: trials whose loss depends on ``lr`` alone."""

    metric, mode = "loss", "min"

    def __init__(self, configs, values, budget=9.0) -> None:
        self.rows = tuple({"trial_id": i, "config": MappingProxyType(c), "last": v,
                           "budget": budget, "start": 0.0} for i, (c, v) in
                          enumerate(zip(configs, values, strict=True)))
        self.curves = {i: Points([budget], [v], [float(i)]) for i, v in enumerate(values)}


@given(st.integers(0, 2**31 - 1))
def test_the_hyperparameter_that_decides_the_loss_is_the_most_important(seed):
    space = {"lr": loguniform(1e-4, 1e-1), "dropout": uniform(0.0, 0.5),
             "opt": choice(["adam", "sgd"])}
    rng = np.random.default_rng(seed)
    configs = [{k: d.sample(rng) for k, d in space.items()} for _ in range(40)]
    values = [float((np.log10(c["lr"]) + 2.5) ** 2) for c in configs]
    imp = an.importance(Snap(configs, values), space)
    # the loss is a function of lr alone: lr explains more than all the others together
    assert imp is not None and max(imp, key=imp.get) == "lr" and imp["lr"] > 0.5


def test_too_few_or_equal_values_give_no_importance():
    space = {"lr": uniform(0.0, 1.0), "wd": uniform(0.0, 1.0)}
    few = [{"lr": 0.1 * i, "wd": 0.5} for i in range(an.MIN_TRIALS - 1)]
    assert an.importance(Snap(few, [float(i) for i in range(len(few))]), space) is None
    same = [{"lr": 0.1 * i, "wd": 0.5} for i in range(8)]
    assert an.importance(Snap(same, [1.0] * 8), space) is None
    assert an.default_budget(Snap([], [])) is None


def test_the_dashboard_and_the_report_show_the_views(wire, tmp_path):
    """The analysis tabs hold what ``nbtune.ui.analysis`` computes; picking a budget in the
    selector (the browser's change) re-renders every view at that budget."""
    from nbtune.ui import Dashboard, export_html
    from nbtune.ui.analysis_figures import ALL_BUDGETS

    exp = run(experiment("asha", trials=30, gpus=4))
    dash = Dashboard(exp)
    # everything but the importance at once; its fit ends in the background, and the
    # dashboard's thread shows it, then ends (joined with a deadline)
    assert dash.importance_settled(30)
    if dash._thread is not None:
        dash._thread.join(30)
    assert dash.settled
    snap, views = dash.last, dash.analysis
    b = an.default_budget(snap)
    assert views.budget_select.value == f"{b:g}"
    h = an.history(snap, budget=b)
    assert list(views.history_src.data["value"]) == list(h.value)
    assert list(views.best_src.data["best"]) == list(h.best)
    imp = an.importance(snap, SPACE, budget=b)
    got = dict(zip(views.importance_src.data["name"], views.importance_src.data["importance"],
                   strict=True))
    assert (imp is None and not got) or got == pytest.approx(imp)
    assert list(views.parallel_src.data["trial"]) == [e.trial_id for e in
                                                      an.ended_trials(snap, b)]
    assert [t.title for t in dash.layout.children[1].tabs] == [
        "run", "history", "importance", "parallel coordinates", "slices"]
    views.budget_select.value = ALL_BUDGETS  # as a person's pick arrives from the browser
    assert len(views.history_src.data["value"]) == len(exp.results())
    assert list(views.parallel_src.data["trial"]) == sorted(exp.results()["trial_id"])
    html = export_html(exp, tmp_path / "r.html").read_text()
    assert "parallel coordinates" in html and "importance" in html
    dash.close()


def test_exp_plot_shows_one_view_of_the_trials_at_a_budget(finished, wire):
    """``exp.plot(view)``: the view alone (Optuna's plot_*), at the default budget, another
    budget the trials reached, or every trial; bad names and budgets say what would do."""
    from IPython.utils.capture import capture_output

    exp, snap = finished
    res = exp.results()
    b = an.default_budget(snap)
    imp = exp.plot("importance")
    assert imp.budget == f"{b:g}" and "reached budget" in repr(imp)
    bars = imp.figure.renderers[0].data_source.data
    assert dict(zip(bars["name"], bars["importance"], strict=True)) == pytest.approx(
        an.importance(snap, SPACE, budget=b))
    par = exp.plot("parallel", budget="all")
    assert sorted(par.figure.renderers[0].data_source.data["trial"]) == sorted(res["trial_id"])
    assert "every trial" in repr(par)
    low = min(an.budgets(snap))
    hist = exp.plot("history", budget=low)
    pts = hist.figure.renderers[0].data_source.data
    assert sorted(pts["trial"]) == sorted(res.loc[res["budget_used"] >= low, "trial_id"])
    assert exp.plot("slices").view == "slices"
    with pytest.raises(ValueError, match="pick one of history, importance, parallel, slices"):
        exp.plot("importances")
    with pytest.raises(ValueError, match="no trial reached budget 2.5"):
        exp.plot("history", budget=2.5)
    from bokeh.io.notebook import LOAD_MIME_TYPE
    from IPython.core.interactiveshell import InteractiveShell

    InteractiveShell.instance()  # where display data goes outside a kernel
    with capture_output() as shown:  # in a notebook: a Bokeh widget, BokehJS loaded with it
        hist._ipython_display_()
    assert any(LOAD_MIME_TYPE in o.data for o in shown.outputs)
    assert any(m[0] == "comm_open" and "jupyter_bokeh" in str(m[1]) for m in wire)


def test_a_live_run_refits_the_importance_only_when_shown_within_its_share(wire, monkeypatch):
    """A forest fit costs far more than an update, and its CPU is taken from the trials:
    while the run goes, the importance is refitted only while its tab is shown, and a
    change of the shown trials only once the last fit's cost is within its share of the
    time since it (here a share so small that it never is), the view saying as of when
    its bars are; a person's pick of the tab or of a budget is fitted at once, and so is
    the final state, whose bars are the library's for it."""
    import nbtune.ui.dashboard as dashboard_module
    from nbtune.ui import Dashboard
    from nbtune.ui.analysis_figures import ALL_BUDGETS

    fitted: list[float | None] = []
    real = dashboard_module.importance

    def counted(snap, space, *, budget=None):  # the real fit, counted
        fitted.append(budget)
        return real(snap, space, budget=budget)

    monkeypatch.setattr(dashboard_module, "importance", counted)
    exp = experiment("asha", trials=30, gpus=4)
    dash = Dashboard(exp, autostart=False, max_overhead=1e-9)
    # the state it was built on (no trial to fit yet); a fit is counted when it runs
    assert dash.importance_settled(30) and len(fitted) == 1
    title = dash.analysis.importance.title
    tab = [t.title for t in dash.tabs.tabs].index("importance")
    seen: dict[str, object] = {}

    def tick(events, cmds):
        reported = sum(1 for t in exp.engine.trials.values() if t.last is not None)
        if "first" not in seen and reported >= 8:
            dash.update()
            assert not dash.importance_shown  # nobody looks at it: not fitted
            assert dash.importance_settled(30) and len(fitted) == 1
            dash.tabs.active = tab  # a person opens the tab: fitted at once
            assert dash.importance_settled(30) and len(fitted) == 2
            dash.update()
            seen["first"] = len(fitted)
            seen["key"] = dash.analysis.importance_key(dash.last)
            assert len(dash.analysis.importance_src.data["importance"]) == len(SPACE)
            assert "as of" not in title.text
        elif "first" in seen and "later" not in seen and exp.engine.time > 2 * dash.last.time:
            dash.update()
            if dash.analysis.importance_key(dash.last) == seen["key"]:
                return  # the shown trials' values did not change: nothing to refit
            seen["later"] = title.text
            assert dash.importance_settled(30)  # not refitted: not within its share yet
            assert len(fitted) == seen["first"]
            dash.analysis.budget_select.value = ALL_BUDGETS  # a person's pick: fitted at once
            assert dash.importance_settled(30)
            assert fitted[-1] is None and len(fitted) == seen["first"] + 1

    exp.engine.subscribe(tick)
    run(exp)
    assert "later" in seen and "as of t = " in str(seen["later"])
    dash.tabs.active = 0  # back on the run's views: the end is fitted all the same
    dash.update()  # the final state: fitted at once, shown when it ends
    assert dash.importance_settled(30) and len(fitted) == seen["first"] + 2
    dash.update()
    assert dash.settled and "as of" not in title.text
    want = an.importance(dash.last, SPACE, budget=None)
    bars = dash.analysis.importance_src.data
    assert want and dict(zip(bars["name"], bars["importance"], strict=True)) == want
    dash.close()


class InlineFits:
    """The fitting pool, run in the caller: each fit has ended when ``submit`` returns (the
    order a fast failure takes on a loaded machine, fixed)."""

    def submit(self, fn, *args):
        from concurrent.futures import Future

        out: Future = Future()
        try:
            out.set_result(fn(*args))
        except Exception as exc:  # noqa: BLE001 - what the pool would hold
            out.set_exception(exc)
        return out


@pytest.mark.parametrize("fits", ["pool", "inline"])
def test_a_fit_that_raised_is_tried_again_and_else_the_view_says_why(monkeypatch, fits):
    """A failed forest fit (memory, an import another thread was running) does not leave a
    finished run's importance empty for good: the fit is asked for again, up to
    ``FIT_RETRIES`` times, at once for the final state (here with a share of the time so
    small that a live refit would never be due), and the view says why it has no bars
    meanwhile; a fit that keeps failing is shown as such, with its error. ``inline``: each
    fit has ended before the update that asked for it looks (a fast failure's order)."""
    import nbtune.ui.dashboard as dashboard_module
    from nbtune.ui import Dashboard
    from nbtune.ui.analysis_figures import AnalysisFigures

    real = dashboard_module.importance
    failures: list[Exception] = [MemoryError("no room for the forest")]
    calls: list[int] = []

    def failing(snap, space, *, budget=None):  # raises what ``failures`` holds, then fits
        calls.append(1)
        if failures:
            raise failures.pop()
        return real(snap, space, budget=budget)

    said: list[str | None] = []  # why the view had no bars, each time it rendered them
    render = AnalysisFigures.render_importance

    def rendered(self, importance, *, as_of=None, failed=None):
        said.append(failed)
        render(self, importance, as_of=as_of, failed=failed)

    monkeypatch.setattr(dashboard_module, "importance", failing)
    monkeypatch.setattr(AnalysisFigures, "render_importance", rendered)
    if fits == "inline":
        monkeypatch.setattr(dashboard_module, "_IMPORTANCE", InlineFits())
    retries = dashboard_module.FIT_RETRIES

    def settle(dash) -> None:
        for _ in range(retries + 2):  # one update per fit, at most
            if dash.settled:
                return
            assert dash.importance_settled(30)
            dash.update()
        assert dash.settled

    exp = run(experiment("asha", trials=30, gpus=4))
    dash = Dashboard(exp, autostart=False, max_overhead=1e-9)
    settle(dash)
    bars = dash.analysis.importance_src.data
    want = real(dash.last, SPACE, budget=dash.analysis.budget(dash.last))
    assert want and dict(zip(bars["name"], bars["importance"], strict=True)) == want
    assert "MemoryError: no room for the forest" in said and len(calls) == 2
    dash.close()

    calls.clear()
    failures.extend(ValueError("a bad fit") for _ in range(retries + 1))
    dash = Dashboard(exp, autostart=False, max_overhead=1e-9)
    settle(dash)
    assert not failures and len(calls) == retries + 1  # tried FIT_RETRIES times after the first
    assert list(dash.analysis.importance_src.data["name"]) == []
    assert "the fit failed (ValueError: a bad fit)" in dash.analysis.importance.title.text
    dash.close()
