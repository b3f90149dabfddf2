"""The ``nbtune`` command line: ``demo`` and ``version``, in-process."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

import nbtune
from nbtune.cli import main


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("nbtune ")
    assert nbtune.__version__ in out


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    out = capsys.readouterr().out
    assert "demo" in out and "version" in out


def test_unknown_command_exits_with_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["frobnicate"])
    assert exc.value.code == 2


def test_demo_prints_summary_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--sim"]) == 0
    out = capsys.readouterr().out

    # a sign is matched too, so a negative loss fails the check instead of the regex
    m = re.search(r"^best loss\s+([-+]?\d+\.\d+) \(trial (\d+), budget ([\d.]+)\)", out, re.M)
    assert m, out
    assert float(m.group(1)) >= 0.0
    assert float(m.group(3)) == 27  # the best is a trial trained to the max budget
    assert re.search(r"^best config\s+lr=\S+, batch_size=\d+, dropout=\S+$", out, re.M), out

    trials = re.search(r"^trials\s+(\d+) \(", out, re.M)
    assert trials and int(trials.group(1)) > 0, out
    makespan = re.search(r"^makespan\s+([\d,]+\.\d) s simulated", out, re.M)
    assert makespan and float(makespan.group(1).replace(",", "")) > 0, out
    util = re.search(r"^GPU utilization\s+mean (\d+\.\d)%", out, re.M)
    assert util and 0.0 < float(util.group(1)) <= 100.0, out


def test_demo_is_deterministic_under_seed(capsys: pytest.CaptureFixture[str]) -> None:
    def run() -> list[str]:
        assert main(["demo", "--sim", "--gpus", "2", "--seed", "3"]) == 0
        out = capsys.readouterr().out
        return [line for line in out.splitlines() if not line.startswith("wall time")]

    assert run() == run()


def test_python_dash_m(tmp_path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "nbtune", "version"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("nbtune ")


def test_demo_bad_allocator_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--sim", "--allocator", "no-such-allocator"]) == 2
    err = capsys.readouterr().err
    assert "no-such-allocator" in err


@pytest.mark.parametrize("argv", [["--allocator", "no-such-allocator"],
                                  ["--algorithm", "no-such-algorithm"], ["--trials", "0"],
                                  ["--gpus", "0"], ["--report", "out.txt"], ["--report", " "],
                                  ["--store", ""]])
def test_real_demo_bad_option_fails_before_a_cluster_starts(
        argv: list[str], capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    store = [] if argv[0] == "--store" else ["--store", str(tmp_path / "store")]
    assert main(["demo", *store, *argv]) == 2
    captured = capsys.readouterr()
    assert f"error: {argv[0]}" in captured.err and "cluster up" not in captured.out
    assert not (tmp_path / "store").exists()  # the flags are checked before a store opens


def test_run_demo_names_its_own_parameters(tmp_path) -> None:
    """The library function says ``workers``, not the command line's ``--gpus``."""
    from nbtune.demo import DemoOptionError, run_demo

    with pytest.raises(DemoOptionError, match="^workers must be >= 1") as err:
        run_demo(workers=0, store=tmp_path, out=sys.stdout)
    assert err.value.option == "workers" and "--" not in str(err.value)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"trials": 0}, "^trials must be >= 1, got 0$"),
    ({"algorithm": "no-such-algorithm"}, "^algorithm 'no-such-algorithm' is unknown"),
    ({"allocator": "no-such-allocator"}, "^allocator 'no-such-allocator' is unknown"),
    ({"report": "out.txt"}, "^report must name an .html file, got 'out.txt'$"),
])
def test_run_demo_refuses_bad_values_with_a_value_error(kwargs, message, tmp_path) -> None:
    """The library checks its plain arguments itself, whoever calls it."""
    from nbtune.demo import run_demo

    with pytest.raises(ValueError, match=message):
        run_demo(store=tmp_path / "store", out=sys.stdout, **kwargs)
