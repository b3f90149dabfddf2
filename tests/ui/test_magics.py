"""``%load_ext nbtune``, ``%%tune`` and the line magics in a real IPython shell."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from nbtune.experiment import Experiment
from nbtune.ui.magics import TuneMagics, make_trainable
from tests.ui.conftest import SPACE, workload


@pytest.fixture
def ip():
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "nbtune")
    saved = dict(shell.user_ns)
    shell.user_ns.update(space=SPACE, wl=workload(max_budget=9))
    yield shell
    shell.user_ns.clear()
    shell.user_ns.update(saved)
    shell.magics_manager.registry["TuneMagics"].experiments.clear()


def test_extension_registers_the_magics(ip):
    assert "tune" in ip.magics_manager.magics["cell"] and "tune" in ip.magics_manager.magics["line"]
    for name in ("tune_list", "tune_stop", "tune_pause", "tune_resume"):
        assert name in ip.magics_manager.magics["line"]


def test_tune_a_workload_binds_the_experiment(ip):
    ip.run_line_magic("tune", "space -m loss --workload wl -b 9 -n 8 -a random --gpus 2 --seed 3 "
                      "--name magic-1 --no-dashboard")
    exp = ip.user_ns["exp"]
    assert isinstance(exp, Experiment) and exp.done and exp.name == "magic-1"
    assert len(exp.results()) == 8 and exp.engine.cluster.n_gpus == 2
    assert exp.engine.algorithm.name == "random" and exp.engine.max_budget == 9


def test_options_reach_the_algorithm_and_as_renames(ip):
    ip.run_cell_magic("tune", "space -m loss -w wl -b 9 -n 9 -a asha -o eta=3 --mode min "
                      "--allocator waterfill --as e2 --no-dashboard", "# nothing to run\n")
    exp = ip.user_ns["e2"]
    assert exp.engine.algorithm.eta == 3 and exp.engine.allocator.name == "waterfill"
    assert "exp" not in ip.user_ns or ip.user_ns["exp"] is not exp


def test_inline_space_expression(ip):
    ip.run_cell("from nbtune import loguniform")
    ip.run_line_magic("tune", "'dict(space, lr=loguniform(1e-3, 1e-2))' -m loss -w wl -b 3 -n 2 "
                      "-a random --no-dashboard")
    assert ip.user_ns["exp"].engine.algorithm.space["lr"].low == 1e-3


@pytest.mark.parametrize("line, cell, message", [
    ("space -m loss -w wl -b 9 -n 4", "x = 1\n", "cell body would never run"),
    ("space -m loss -b 9 -n 4", "\n# just a comment\n", "it is empty"),
    ("space -m loss -b 9 -n 4 --runtime sim", "x = 1\n", "cannot run Python code"),
    ("space -m loss -b 9 -n 4 --gpus 2", "x = 1\n", "--gpus sizes the simulator"),
    ("nope -m loss -w wl -b 9", None, "cannot evaluate 'nope'"),
    ("space -m loss -w wl -b 9 -o eta", None, "KEY=VALUE"),
    ("space -m loss -w wl -b 9 --as 1x", None, "--as needs a variable name"),
    ("space -m loss -b 9", None, "it is empty"),
    ("space -m loss -b 9", "def f(:\n", "not valid Python"),
    ("space -m loss -b 9", "yield 1\n", "cannot use yield"),
])
def test_bad_usage_says_what_to_fix(ip, line, cell, message):
    with pytest.raises(UsageError, match=message):
        if cell is None:
            ip.run_line_magic("tune", line)
        else:
            ip.run_cell_magic("tune", line, cell)


def test_max_budget_is_required(ip):
    with pytest.raises(UsageError, match="max-budget"):
        ip.run_line_magic("tune", "space -m loss -w wl")


def test_dashboard_outside_a_kernel_prints_the_summary(ip, capsys):
    ip.run_line_magic("tune", "space -m loss -w wl -b 3 -n 3 -a random --name shown")
    assert "experiment 'shown'" in capsys.readouterr().out


def test_line_magics(ip):
    ip.run_line_magic("tune", "space -m loss -w wl -b 3 -n 3 -a random --name a1 --no-dashboard")
    ip.run_line_magic("tune", "space -m loss -w wl -b 3 -n 4 -a random --name a2 --as other "
                      "--no-dashboard")
    table = ip.run_line_magic("tune_list", "")
    assert list(table["name"]) == ["a1", "a2"] and list(table["trials"]) == [3, 4]
    assert set(table["state"]) == {"done"} and table["best"].notna().all()
    for magic in ("tune_stop", "tune_pause", "tune_resume"):
        with pytest.raises(UsageError, match="already finished"):
            ip.run_line_magic(magic, "a1")
    with pytest.raises(UsageError, match="no experiment named 'zz'"):
        ip.run_line_magic("tune_stop", "zz")
    with pytest.raises(UsageError, match="nbtune.resume"):
        ip.run_line_magic("tune_resume", "zz")


def test_line_magics_steer_a_live_experiment(ip):
    """Built, not started: the magics queue events the simulator then handles."""
    from tests.ui.conftest import experiment, run

    exp = experiment("random", trials=6, max_budget=10, gpus=2)
    ip.user_ns["live"] = exp
    seen = []
    exp.engine.subscribe(lambda events, cmds: seen.extend(type(e).__name__ for e in events))
    ip.run_line_magic("tune_pause", "live")
    ip.run_line_magic("tune_resume", "live")
    ip.run_line_magic("tune_stop", "live --trial 4")
    run(exp)
    assert {"ExperimentPauseRequested", "ExperimentResumeRequested",
            "TrialStopRequested"} <= set(seen)
    assert exp.engine.trials[4].state.value == "stopped"
    with pytest.raises(UsageError, match="already finished"):
        ip.run_line_magic("tune_stop", "live --trial 1")


def test_cell_body_becomes_the_training_function():
    ns = {"__name__": "__main__", "scale": 10}
    code = 'note = """two\n  lines"""\ntrial.append((config["x"] * scale, note))\nreturn 7\n'
    train = make_trainable(code, ns)
    out = []
    assert train({"x": 2}, out) == 7
    assert out == [(20, "two\n  lines")]  # the string literal kept its own indentation
    assert train.__module__ == "__main__" and train.__globals__ is ns
    assert "train" not in ns  # compiling the cell binds nothing in the notebook


def test_magics_class_is_registered_once(ip):
    ip.run_line_magic("load_ext", "nbtune")  # a second %load_ext is a no-op
    assert isinstance(ip.magics_manager.registry["TuneMagics"], TuneMagics)


def test_in_a_kernel_the_dashboard_is_built_before_the_run(ip, monkeypatch, wire):
    """With a kernel (here only its attribute: widgets render), %%tune shows a dashboard."""
    from nbtune.ui.dashboard import dashboard_for

    monkeypatch.setattr(ip, "kernel", object(), raising=False)
    ip.run_line_magic("tune", "space -m loss -w wl -b 3 -n 3 -a random --name with-dash")
    exp = ip.user_ns["exp"]
    dash = dashboard_for(exp)
    assert dash.experiment is exp and dash.finished
    assert len(dash.figures.table_src.data["trial_id"]) == 3
    with pytest.raises(UsageError):  # a bad option: the prebuilt dashboard is closed again
        ip.run_line_magic("tune", "space -m loss -w wl -b 3 -o nope=1 --name broken")
    dash.close()


def test_without_a_name_the_line_magics_mean_the_experiment_started_last(ip):
    import nbtune

    ip.user_ns["first"] = nbtune.tune(workload(max_budget=3), SPACE, algorithm="random",
                                      metric="loss", max_budget=3, num_trials=2, name="older")
    ip.run_line_magic("tune", "space -m loss -w wl -b 3 -n 2 -a random --name newer --as later "
                      "--no-dashboard")
    ip.user_ns["first"] = ip.user_ns["first"]  # rebinding an old variable changes nothing
    magics = ip.magics_manager.registry["TuneMagics"]
    assert magics._find("").name == "newer"
    with pytest.raises(UsageError, match="'newer' has already finished"):
        ip.run_line_magic("tune_stop", "")  # it names the one just run


def _cell(ip, line: str, body: str = "# simulated\n") -> str:
    from IPython.utils.capture import capture_output

    with capture_output() as cap:
        ip.run_cell(f"%%tune {line}\n{body}")
    return cap.stdout + cap.stderr


def test_rerunning_a_cell_starts_a_new_experiment_under_the_next_free_name(ip):
    line = "space -m loss -w wl -b 3 -n 2 -a random --name again --no-dashboard"
    _cell(ip, line)
    first = ip.user_ns["exp"]
    out = _cell(ip, line)
    second = ip.user_ns["exp"]
    assert second is not first and (first.name, second.name) == ("again", "again-2")
    assert "'again-2'" in out and "--replace" in out
    _cell(ip, line)
    assert ip.user_ns["exp"].name == "again-3"
    names = set(ip.run_line_magic("tune_list", "")["name"])
    assert {"again", "again-2", "again-3"} <= names


def test_rerunning_a_cell_with_a_store_and_replace(ip, tmp_path):
    line = f"space -m loss -w wl -b 3 -n 2 -a random --name kept --store {tmp_path} --no-dashboard"
    out = _cell(ip, line)
    assert ip.user_ns["exp"].name == "kept", out
    _cell(ip, line)  # today: "already exists ... pick another name=": an error
    assert ip.user_ns["exp"].name == "kept-2"
    store = ip.user_ns["exp"].store
    assert {"kept", "kept-2"} <= set(store.names())
    old_id = store.experiment_id("kept")
    _cell(ip, line + " --replace")
    exp = ip.user_ns["exp"]
    assert exp.name == "kept" and exp.done
    assert sorted(store.names()) == ["kept", "kept-2"]
    store._ids.clear()  # ask the database, not the store's cache
    assert store.experiment_id("kept") != old_id  # the old record was deleted, this is new
    magics = ip.magics_manager.registry["TuneMagics"]
    assert magics._known()["kept"] is exp  # the replaced one is gone from the session


def test_errors_speak_the_magics_options_and_never_quote_the_cell_body(ip):
    out = _cell(ip, "space -m loss -w wl -b 3 -n 0 --no-dashboard", "# BODY-MARKER\n")
    assert "--num-trials" in out and "num_trials" not in out
    out = _cell(ip, "space -m loss -w wl -b 3 -n 2 --store /proc/nbtune-nope/x.db --no-dashboard",
                "# BODY-MARKER\n")
    assert "UsageError" in out and "--store" in out
    assert "BODY-MARKER" not in out and "Traceback" not in out
    out = _cell(ip, "space -m loss -w wl -b 3 -n 2 --replace --no-dashboard")
    assert "--replace" in out and "--name" in out


def test_the_magic_has_tunes_defaults(ip):
    """%%tune's options default as nbtune.tune's keywords do: the metric has none, the
    allocator is tune's (``auto``)."""
    from nbtune.build.run_options import ResourceOptions, SearchOptions

    ip.run_cell("from nbtune import SyntheticWorkload, loguniform\n"
                "space = {'lr': loguniform(1e-4, 1e-1)}\nwl = SyntheticWorkload(space, seed=0)")
    with pytest.raises(UsageError, match="--metric"):
        ip.run_line_magic("tune", "space -w wl -b 3 -n 2 --no-dashboard")
    ip.run_line_magic("tune", "space -m loss -w wl -b 3 -n 2 --name defaults --no-dashboard")
    exp = ip.user_ns["exp"]
    assert ResourceOptions().allocator == "auto" and exp.engine.allocator.name == "auto"
    assert SearchOptions().algorithm == exp.engine.algorithm.name
