"""DashboardModel against a real Engine and SimRuntime: deltas add up to the engine's state."""

from __future__ import annotations

import threading
from collections import defaultdict

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nbtune.core import events as ev
from nbtune.core.resources import ClusterSpec
from nbtune.core.trial import TrialState
from nbtune.engine.engine import Engine
from nbtune.ui.dashboard_model import DISPLAY_STATES, DashboardModel, Delta
from tests.engine.toy import OneShot
from tests.ui.conftest import SPACE, experiment, run


def merge(deltas: list[Delta]) -> dict:
    """What a view that applied every delta in order holds at the end."""
    rows, points, closed = {}, defaultdict(list), []
    util = defaultdict(list)
    for d in deltas:
        rows.update(d.rows)
        for tid, p in d.points.items():
            points[tid] += list(zip(p.budget, p.value, p.time, strict=True))
        closed += d.alloc_closed
        for s in d.util_closed:
            util[s.gpu_id].append(s)
    last = deltas[-1]
    for s in last.util_open:
        util[s.gpu_id].append(s)
    return {"rows": rows, "points": dict(points), "closed": closed, "util": dict(util),
            "last": last}


def engine_points(exp) -> dict[int, list[tuple[float, float, float]]]:
    return {t.trial_id: [(b, m["loss"], w) for w, b, m in t.results]
            for t in exp.engine.trials.values() if t.results}


def busy_time(segments) -> float:
    return sum(s.util * (s.end - s.start) for s in segments)


@pytest.mark.parametrize("allocator", ["fifo", "waterfill", "knapsack-ff"])
def test_live_deltas_add_up_to_the_engine_and_to_a_late_catch_up(allocator):
    exp = experiment("asha", allocator=allocator, trials=30)
    model = DashboardModel(exp.engine, max_points=None)
    deltas = [model.pull()]
    # pull every few engine updates, as a view thread would, while the simulation runs
    exp.engine.subscribe(lambda e, c: deltas.append(model.pull()) if model.updates % 7 == 0
                         else None)
    run(exp)
    deltas.append(model.pull())
    live = merge(deltas)
    late = merge([DashboardModel(exp.engine, max_points=None).pull()])

    assert live["points"] == engine_points(exp) == late["points"]
    assert live["rows"] == late["rows"]
    assert set(live["rows"]) == set(exp.engine.trials)
    ledger = [r for r in exp.engine.ledger.log if r.end > r.start]
    for view in (live, late):
        assert len(view["closed"]) == len(ledger)
        assert not view["last"].alloc_open
        assert sorted((r.trial_id, r.gpu_id, r.start, r.end, r.share) for r in view["closed"]) \
            == sorted((r.trial_id, r.gpu_id, r.start, r.end, r.share) for r in ledger)
        assert view["last"].done and view["last"].progress.fraction == 1.0
    assert live["last"].best == late["last"].best == exp.best["trial_id"]
    assert live["last"].best_value == pytest.approx(exp.best["loss"])


@pytest.mark.parametrize("allocator", ["fifo", "waterfill", "knapsack-ff"])
def test_utilization_matches_the_simulator(allocator):
    exp = run(experiment("asha", allocator=allocator, trials=25))
    d = DashboardModel(exp.engine).pull()
    assert d.util_kind == "allocated"
    segs = defaultdict(list)
    for s in d.util_closed + d.util_open:
        assert 0.0 <= s.util <= 1.0 and s.end >= s.start
        segs[s.gpu_id].append(s)
    u = exp.utilization()
    span = exp.engine.time
    for g, rows in u.groupby("gpu_id"):
        times = list(rows["time"]) + [span]
        expected = sum(v * (times[i + 1] - times[i]) for i, v in enumerate(rows["util"]))
        assert busy_time(segs[g]) == pytest.approx(expected, rel=1e-9, abs=1e-9)
        # segments tile time without overlap
        ordered = sorted(segs[g], key=lambda s: s.start)
        for a, b in zip(ordered, ordered[1:], strict=False):
            assert a.end <= b.start + 1e-9


@pytest.mark.parametrize("allocator", ["waterfill", "knapsack-ff"])
def test_packed_trials_stack_without_overlap_inside_their_lane(allocator):
    exp = run(experiment("asha", allocator=allocator, trials=30))
    d = DashboardModel(exp.engine).pull()
    assert any(r.share < 1 for r in d.alloc_closed), "the allocator should have packed trials"
    by_gpu = defaultdict(list)
    for r in d.alloc_closed:
        assert r.lane <= r.bottom < r.top <= r.lane + 1 + 1e-9
        assert r.top - r.bottom == pytest.approx(r.share)
        by_gpu[r.gpu_id].append(r)
    for rects in by_gpu.values():
        for i, a in enumerate(rects):
            for b in rects[i + 1:]:
                if a.start < b.end - 1e-9 and b.start < a.end - 1e-9:  # overlap in time
                    assert a.top <= b.bottom + 1e-9 or b.top <= a.bottom + 1e-9


def test_states_shown_cover_promotions_and_the_best():
    exp = run(experiment("asha", trials=30))
    d = DashboardModel(exp.engine).pull()
    assert {r["colour"] for r in d.rows.values()} <= set(DISPLAY_STATES)
    assert [tid for tid, r in d.rows.items() if r["colour"] == "best"] == [exp.best["trial_id"]]
    # the best trial's cell still says what it is doing, starred: "best" alone hid that
    starred = {tid: r["state"] for tid, r in d.rows.items() if r["state"].startswith("★ ")}
    assert list(starred) == [exp.best["trial_id"]]
    assert starred[exp.best["trial_id"]][2:] in set(DISPLAY_STATES) - {"best"}
    assert {r["state"] for r in d.rows.values()} - set(starred.values()) <= set(DISPLAY_STATES)
    promoted = [r for r in d.rows.values() if r["promotions"] > 0]
    assert promoted and all(r["budget"] > 1 for r in promoted)
    stopped = set(exp.trials_in(TrialState.STOPPED))
    assert {tid for tid, r in d.rows.items() if r["state"] == "stopped"} <= stopped


def test_a_pull_sends_only_what_changed():
    exp = run(experiment("random", trials=6, max_budget=3))
    model = DashboardModel(exp.engine)
    first = model.pull()
    assert len(first.rows) == 6 and first.points and first.best_changed
    again = model.pull()
    assert not again.rows and not again.points and not again.alloc_closed
    assert not again.util_closed and not again.best_changed and again.best_curve is None


@given(cap=st.integers(1, 40), reports=st.integers(1, 120))
def test_bursts_are_thinned_to_the_cap_and_end_on_the_latest_report(cap, reports):
    algo = OneShot(SPACE, metric="loss", max_budget=reports, num_trials=1, seed=0)
    engine = Engine(algo)
    model = DashboardModel(engine, max_points=cap)
    engine.handle(ev.ExperimentStarted(0.0, ClusterSpec.homogeneous(1)))
    for b in range(1, reports + 1):
        engine.handle(ev.TrialReported(float(b), 0, float(b), {"loss": 1.0 / b}))
    pts = model.pull().points[0]
    assert 1 <= len(pts.budget) <= cap
    assert pts.budget[-1] == reports and pts.value[-1] == 1.0 / reports
    assert pts.budget == sorted(pts.budget)
    if reports <= cap:
        assert pts.budget == [float(b) for b in range(1, reports + 1)]


def test_measured_utilization_replaces_the_estimate():
    algo = OneShot(SPACE, metric="loss", max_budget=5, num_trials=2, seed=0)
    engine = Engine(algo)
    model = DashboardModel(engine)
    engine.handle(ev.ExperimentStarted(0.0, ClusterSpec.homogeneous(2)))
    assert model.pull().util_kind == "allocated"
    engine.handle(ev.UtilizationSampled(1.0, {0: 0.5, 1: 0.25}))
    engine.handle(ev.UtilizationSampled(3.0, {0: 0.75, 1: 0.0}))
    d = model.pull()
    assert d.util_kind == "measured"
    assert sorted((s.gpu_id, s.start, s.end, s.util) for s in d.util_closed) == [
        (0, 1.0, 3.0, 0.5), (1, 1.0, 3.0, 0.25)]
    assert sorted((s.gpu_id, s.start, s.util) for s in d.util_open) == [
        (0, 3.0, 0.75), (1, 3.0, 0.0)]


def test_person_controls_show_up_in_the_model():
    exp = experiment("random", trials=8, max_budget=20, gpus=2)
    model = DashboardModel(exp.engine)
    exp.runtime.at(15.0, ev.TrialStopRequested, trial_id=0)
    exp.runtime.at(30.0, ev.ExperimentPauseRequested)
    exp.runtime.at(40.0, ev.ExperimentResumeRequested)
    run(exp)
    d = model.pull()
    assert d.rows[0]["state"] == "stopped" and d.rows[0]["budget"] < 20
    assert d.done and not d.paused
    # the pause freed both GPUs for 10 s: no rectangle covers (30, 40)
    assert not [r for r in d.alloc_closed if r.start < 40 - 1e-9 and r.end > 30 + 1e-9]


def test_pulls_from_another_thread_converge():
    """The engine runs on one thread, the view pulls from another: the last pull is exact."""
    exp = experiment("asha", trials=40, allocator="waterfill", report_every=0.5)
    model = DashboardModel(exp.engine, max_points=None)
    deltas = [model.pull()]
    done = threading.Event()
    worker = threading.Thread(target=lambda: (run(exp), done.set()))
    worker.start()
    while not done.is_set():
        deltas.append(model.pull())
    worker.join()
    deltas.append(model.pull())
    live = merge(deltas)
    late = merge([DashboardModel(exp.engine, max_points=None).pull()])
    assert live["points"] == late["points"] and live["rows"] == late["rows"]
    assert len(live["closed"]) == len(late["closed"])


def test_progress_and_eta():
    exp = experiment("random", trials=10, max_budget=4, gpus=2)
    model = DashboardModel(exp.engine)
    p = model.pull().progress
    assert p.settled == 0 and p.total == 10 and p.eta is None
    run(exp)
    p = model.pull().progress
    assert p.settled == 10 and p.fraction == 1.0 and p.eta == 0.0


def test_eta_during_a_run_estimates_the_time_left():
    exp = experiment("random", trials=10, max_budget=4, gpus=2)
    model = DashboardModel(exp.engine)
    seen = []
    exp.engine.subscribe(lambda events, cmds: seen.append(model.pull().progress))
    run(exp)
    mid = [p for p in seen if p.fraction is not None and 0 < p.fraction < 1]
    assert mid, "the model reported no progress while the run went on"
    for p in mid:  # time so far scaled by what is left: settled trials are all alike here
        assert p.eta is not None and p.eta > 0
        assert p.eta == pytest.approx(p.elapsed * (1 - p.fraction) / p.fraction)
    half = next(p for p in mid if p.fraction >= 0.5)
    assert 0.5 * exp.makespan <= half.elapsed + half.eta <= 2.0 * exp.makespan


def test_bad_cap_is_refused():
    exp = experiment("random", trials=2)
    with pytest.raises(ValueError, match="max_points"):
        DashboardModel(exp.engine, max_points=0)


def test_close_stops_listening():
    exp = experiment("random", trials=4, max_budget=3)
    model = DashboardModel(exp.engine)
    model.close()
    run(exp)
    assert model.updates == 0


def test_a_planned_runs_bill_shows_live_in_the_header():
    from nbtune.planner import CloudProfile
    from nbtune.planner.plan_executor import CostMeter
    from nbtune.ui.figures import summary_html

    exp = experiment("random", trials=4, max_budget=3, gpus=2)
    meter = CostMeter(CloudProfile("w", 3.6, 1, min_billed_s=0.0))  # $0.001 per worker-second
    meter.observe(0.0, {"w0", "w1"})
    model = DashboardModel(exp.engine, cost=lambda: meter.cost(float(exp.engine.time)))
    d = model.pull()
    assert d.cost == 0.0 and "$0.00 so far" in summary_html("exp", d)
    run(exp)
    d = model.pull()
    assert d.cost == pytest.approx(2 * exp.engine.time * 0.001) and d.cost > 0
    assert f"${d.cost:,.2f} billed" in summary_html("exp", d)
    plain = DashboardModel(exp.engine).pull()  # no plan: no bill in the header
    assert plain.cost is None and "$" not in summary_html("exp", plain)


def test_a_planned_run_shows_its_predicted_jct_and_cost_beside_the_measured():
    from nbtune.planner import CloudProfile
    from nbtune.planner.plan_executor import CostMeter
    from nbtune.ui.figures import format_duration, summary_html
    from nbtune.ui.snapshot import Snapshots

    exp = experiment("random", trials=4, max_budget=3, gpus=2)
    meter = CostMeter(CloudProfile("w", 3.6, 1, min_billed_s=0.0))
    meter.observe(0.0, {"w0", "w1"})
    model = DashboardModel(exp.engine, cost=lambda: meter.cost(float(exp.engine.time)),
                           planned=(125.0, 0.5))
    head = summary_html("exp", Snapshots(model).take())
    assert "JCT 0 s so far, 2 min 05 s planned" in head and "$0.00 so far, $0.50 planned" in head
    run(exp)
    d = model.pull()
    assert d.planned == (125.0, 0.5)
    head = summary_html("exp", d)
    assert f"JCT {format_duration(d.time)} measured, 2 min 05 s planned" in head
    assert f"${d.cost:,.2f} billed, $0.50 planned" in head
    assert "planned" not in summary_html("exp", DashboardModel(exp.engine).pull())


def test_the_role_column_tells_fused_members_and_target_trials_apart():
    """A fused unit's members say which unit; a Hydro target says so."""
    import nbtune
    from nbtune import SimRuntime, SyntheticWorkload, uniform
    from nbtune.core.space import choice
    from nbtune.engine.fusion_units import enable

    algo = OneShot({"x": uniform(0, 1), "width": choice([8])}, metric="loss", max_budget=3,
                   num_trials=6, seed=0)
    eng = Engine(algo, validate=True)
    enable(eng, 3, ("width",))
    model = DashboardModel(eng)  # attached before the start, as a live dashboard is
    cmds = eng.handle(ev.ExperimentStarted(0.0, ClusterSpec.homogeneous(2)))
    units = {c.trial_id: c.unit for c in cmds if getattr(c, "unit", None) is not None}
    rows = model.pull().rows
    model.close()
    assert units and {tid: rows[tid]["role"] for tid in units} == {
        tid: f"unit {u}" for tid, u in units.items()}

    wl = SyntheticWorkload({"lr": uniform(0, 1)}, unit_time=1.0)
    exp = nbtune.tune(wl, algorithm="random", metric="loss", max_budget=2, num_trials=6,
                      scaling=2, seed=0, runtime=SimRuntime(cluster=2))
    roles = {tid: r["role"] for tid, r in DashboardModel(exp.engine).pull().rows.items()}
    assert {tid for tid, role in roles.items() if role == "target"} == set(
        exp.engine.algorithm.targets) != set()
    assert {role for tid, role in roles.items() if tid < 1_000_000} == {""}


def test_a_trial_whose_function_returned_shows_completed_at_once():
    """TrialReturned ends a trial by no command of its own: the model must still re-read it."""
    engine = Engine(OneShot(SPACE, metric="loss", max_budget=9, num_trials=2, seed=0))
    model = DashboardModel(engine)
    engine.handle(ev.ExperimentStarted(0.0, ClusterSpec.homogeneous(1)))
    engine.handle(ev.TrialReported(1.0, 0, 1.0, {"loss": 0.5}))
    assert model.pull().rows[0]["state"] == "★ running"
    engine.handle(ev.TrialReturned(2.0, 0))
    rows = model.pull().rows
    assert engine.trials[0].state is TrialState.COMPLETED
    assert rows[0]["state"] == "★ completed" and rows[0]["end"] == 2.0, rows.get(0)
    assert rows[1]["state"] == "running"
