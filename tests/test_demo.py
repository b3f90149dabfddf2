"""``nbtune demo`` end to end on a real LocalCluster, and the simulator against that real run.

One real demo (6 configs, ASHA to 3 epochs, water-filling, 2 local workers)
serves the module: the CLI's output, the SQLite store, the HTML report, and
the differential test that replays the stored run on the simulator with its
measured timings and checks the simulator makes the same decisions.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import distributed  # noqa: F401  (a hard dependency: a broken install fails here)
import pytest
import sklearn  # noqa: F401  (a hard dependency: a broken install fails here)
import torch  # noqa: F401  (a hard dependency: a broken install fails here)

from nbtune.cli import main

pytestmark = pytest.mark.integration

ARGS = ["--trials", "6", "--max-budget", "3", "--seed", "0"]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, Path]:
    root = tmp_path_factory.mktemp("demo")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["demo", *ARGS, "--store", str(root / "store"),
                     "--report", str(root / "report.html")])
    text = out.getvalue()
    assert code == 0, text
    return text, root / "store" / "nbtune.db", root / "report.html"


def stored_experiment(db: Path, name: str):
    """The real run rebuilt from the store: its event log replayed into a fresh engine.

    The real run's profiler measured the trials from the same events and the
    allocator decided on those measurements, so one watches the replay too (as
    ``nbtune.resume`` does); the demo's store was new, so it has no job history.
    """
    from nbtune.engine.engine import Engine
    from nbtune.experiment import Experiment
    from nbtune.runtimes.profiler import Profiler
    from nbtune.store import Store, rebuild_algorithm, rebuild_allocator, replay
    from nbtune.store.resume import rebuild_trainable

    st = Store(str(db))
    row = st.experiment(name)
    engine = Engine(rebuild_algorithm(row), rebuild_allocator(row))
    Profiler().attach(engine, rebuild_trainable(row))
    replay(engine, st.event_log(name))  # check=True: the store holds exactly what ran
    return Experiment(name, engine, runtime=None, trainable=None), st  # type: ignore[arg-type]


def test_demo_prints_progress_and_a_summary_above_chance(demo) -> None:
    text, _, _ = demo
    # live progress: launches, rung results, and the status tail on every line
    assert re.search(r"^\[\s*\d+\.\ds\] trial\s+\d+ (start|running)", text, re.M), text
    assert re.search(r"trial\s+\d+ reached 1: accuracy 0\.\d{4}\s+\| running \d+, "
                     r"started \d+/6, done \d+", text), text
    m = re.search(r"^best accuracy\s+(\d\.\d+) \(trial (\d+), budget ([\d.]+)\)", text, re.M)
    assert m, text
    assert float(m.group(1)) > 0.2  # chance is 0.1 (ten digits)
    assert float(m.group(3)) == 3.0  # the winner was trained to the full budget
    assert re.search(r"^trials\s+6 \(", text, re.M), text
    assert re.search(r"^makespan\s+[\d.]+ s measured", text, re.M), text


def test_demo_stores_every_trial(demo) -> None:
    from nbtune.store import Store

    text, db, _ = demo
    assert db.exists()
    name = re.search(r"experiment '([^']+)'", text).group(1)  # type: ignore[union-attr]
    st = Store(str(db))
    res = st.results(name)
    assert sorted(res["trial_id"]) == list(range(6))
    assert set(res["state"]) <= {"completed", "stopped"}
    assert res["accuracy"].max() > 0.2
    curves = st.learning_curves(name)
    assert set(curves["trial_id"]) == set(range(6)) and curves["budget"].max() == 3.0
    assert not st.allocations(name).empty


def test_demo_report_holds_the_figures_offline(demo) -> None:
    _, _, report = demo
    html = report.read_text(encoding="utf-8")
    # the demo runs on CPU workers: the panel measures their trial processes, and says so
    for title in ("learning curves (accuracy, max)", "trial processes (measured with psutil)", "allocation"):
        assert title in html
    assert "cdn.bokeh.org" not in html  # BokehJS inlined: opens without network


def test_reports_the_engine_handled_together_carry_one_time(demo) -> None:
    """The runtime stamps what it hands the engine at once with one time, so a replay on the
    simulator (which hands the engine simultaneous events together) decides as the run did."""
    from nbtune.core import events as ev
    from nbtune.store import Store

    text, db, _ = demo
    name = re.search(r"experiment '([^']+)'", text).group(1)  # type: ignore[union-attr]
    log = Store(str(db)).event_log(name)
    assert sum(isinstance(e, ev.TrialReported) for events, _ in log for e in events) >= 6
    for events, _ in log:
        assert len({e.time for e in events if isinstance(e, ev.TrialReported)}) <= 1, events


def test_simulator_replaying_the_real_run_makes_the_same_decisions(demo) -> None:
    from nbtune.replay import decisions, replay_in_simulator
    from nbtune.workloads import TraceWorkload

    text, db, _ = demo
    name = re.search(r"experiment '([^']+)'", text).group(1)  # type: ignore[union-attr]
    real, _ = stored_experiment(db, name)
    trace = TraceWorkload.from_experiment(real)
    assert trace.launch_overhead >= 0 and len(trace.trials) == 6
    sim = replay_in_simulator(real, algorithm="asha", seed=0, max_budget=3, num_trials=6,
                              allocator="waterfill", allocator_options={"c": 2}, trace=trace)
    assert sim.done
    want, got = decisions(real), decisions(sim)
    assert want.configs == got.configs  # same seed, same space: the same configs, same ids
    assert not want.differences(got), want.differences(got)
    # the prediction is reported; how close it comes to the measured makespan is a figure of
    # the machine's load, benchmarks/sim_fidelity.py's goal (medians of a longer run)
    print(f"makespan measured {real.makespan:.1f} s, simulated {sim.makespan:.1f} s")


def test_trace_from_experiment_rejects_a_config_it_never_ran(demo) -> None:
    from nbtune.workloads import TraceWorkload

    text, db, _ = demo
    name = re.search(r"experiment '([^']+)'", text).group(1)  # type: ignore[union-attr]
    real, _ = stored_experiment(db, name)
    trace = TraceWorkload.from_experiment(real)
    cfg = dict(real.engine.trials[0].config)
    assert trace.unit_time(0, cfg) > 0
    assert trace.metrics(0, cfg, 1.0)["accuracy"] == real.learning_curves().query(
        "trial_id == 0 and budget == 1.0")["accuracy"].iloc[0]
    cfg["lr"] = cfg["lr"] * 1.5
    with pytest.raises(KeyError, match="same algorithm, space and seed"):
        trace.unit_time(0, cfg)


def test_what_if_replays_the_real_run_at_another_scale(demo) -> None:
    """``exp.what_if``: the real run on the simulator from its own measurements, at its own
    scale (the same decisions) and at twice the GPUs, priced, side by side with the run."""
    from nbtune.replay import decisions
    from nbtune.resumption import recipe_of

    text, db, _ = demo
    name = re.search(r"experiment '([^']+)'", text).group(1)  # type: ignore[union-attr]
    real, st = stored_experiment(db, name)
    with pytest.raises(ValueError, match="no recipe"):
        real.what_if(gpus=4)
    real.recipe = recipe_of(st.experiment(name))
    assert real.recipe is not None and real.recipe.allocator == "waterfill"
    same = real.what_if()
    assert not decisions(real).differences(decisions(same.experiment))
    bigger = real.what_if(gpus=4, cloud="aws-p3.2xlarge")
    t = bigger.table
    assert list(t.index) == ["real", "what-if"] and list(t["gpus"]) == [2, 4]
    assert list(t["trials"]) == [6, 6] and list(t["allocator"]) == ["waterfill"] * 2
    assert t.loc["real", "makespan_s"] == pytest.approx(real.makespan)
    assert t.loc["what-if", "makespan_s"] == pytest.approx(bigger.experiment.makespan)
    assert t.loc["what-if", "makespan_s"] > 0
    assert bigger.experiment.engine.cluster.gpus and len(bigger.experiment.engine.cluster.gpus) == 4
    # instances held for the whole run, at least a minute each (the profile's billing)
    assert t.loc["what-if", "cost"] == pytest.approx(4 * max(t.loc["what-if", "makespan_s"], 60)
                                                     * 3.06 / 3600)
    assert "what-if" in bigger._repr_html_()
    with pytest.raises(ValueError, match="whole number"):
        real.what_if(gpus=0)
