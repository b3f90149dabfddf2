"""benchmarks/summary.py: the table at the top of RESULTS.md, from a results file.

A tiny git repository stands in for the project: two measured modules, four benchmark
scripts (one never recorded, one GPU-only), a helper module that is no benchmark, and a
RESULTS.md whose log must come through untouched.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _load(name: str):
    """benchmarks/<name>.py as a module (benchmarks/ is no package)."""
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def commit_all(repo: Path, msg: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", msg)
    return git(repo, "rev-parse", "HEAD")


def script(measures: tuple[str, ...] | None, extra: str = "", main: bool = True) -> str:
    out = '"""a benchmark"""\n'
    if measures is not None:
        out += f"MEASURES = {measures!r}\n"
    out += extra
    out += "\n\ndef main():\n    pass\n"
    if main:
        out += '\n\nif __name__ == "__main__":\n    main()\n'
    return out


LOG = "\nRows appended by hand.\n\n## alpha, session 1\n\nsome | table | row\n\n## beta\n\ntext\n"


def rec(name: str, commit: str, date: str, met: bool, device: str = "cpu: 2 cores, X",
        **figures) -> dict:
    return {"name": name, "figures": figures, "goal": {"speedup_min": 2.0}, "met": met,
            "date": date, "commit": commit, "device": device, "command": [name], "load": 0.5}


@pytest.fixture
def project(tmp_path: Path) -> dict:
    repo = tmp_path / "proj"
    (repo / "pkg").mkdir(parents=True)
    (repo / "benchmarks").mkdir()
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    git(repo, "config", "commit.gpgsign", "false")
    (repo / "pkg" / "a.py").write_text("A = 1\n")
    (repo / "pkg" / "b.py").write_text("B = 1\n")
    b = repo / "benchmarks"
    (b / "alpha.py").write_text(script(("pkg/a.py",)))
    (b / "beta.py").write_text(script(("pkg/b.py",)))
    (b / "gamma.py").write_text(script(("pkg/",), "WALL_CLOCK = True\n"))
    (b / "gpuonly.py").write_text(script(("pkg/b.py",), 'RUNS_ON = ("gpu",)\n'))
    (b / "helper.py").write_text(script(None, main=False))  # imported by benchmarks: no row
    (b / "_results.py").write_text("")
    (b / "RESULTS.md").write_text("# Benchmark results\n" + LOG)
    c1 = commit_all(repo, "first")
    return {"repo": repo, "bench": b, "c1": c1}


def run_summary(p: dict, records: list[dict]) -> tuple[str, dict[str, list[str]]]:
    results = p["bench"] / "results.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in records))
    _load("summary").main(["--bench-dir", str(p["bench"]), "--repo", str(p["repo"])])
    text = (p["bench"] / "RESULTS.md").read_text()
    rows = {}
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith(("| benchmark", "| ---")):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            rows[cells[0]] = cells
    return text, rows


def test_table_latest_met_not_run_and_log_kept(project):
    c1 = project["c1"]
    records = [
        rec("alpha", c1, "2026-11-20T10:00:00+00:00", True, speedup=2.5),
        rec("alpha", c1, "2026-11-21T10:00:00+00:00", False, speedup=1.5),  # the latest
        rec("beta", c1, "2026-11-21T09:00:00+00:00", True, speedup=3.0),
        rec("gpuonly", c1, "2026-11-22T09:00:00+00:00", False, speedup=0.1),  # a --cpu check
        rec("gpuonly", c1, "2026-11-19T09:00:00+00:00", True,
            device="gpu: NVIDIA H200 (1); cpu: 16 cores, Y", speedup=2.2),
        rec("retired", c1, "2026-11-21T09:00:00+00:00", True),  # no script any more: no row
    ]
    text, rows = run_summary(project, records)
    assert set(rows) == {"alpha", "beta", "gamma", "gpuonly"}  # helper.py, _results.py: none
    # columns: benchmark | met | figures (goal) | date | commit | device | stale
    assert rows["alpha"][1] == "not met" and "speedup 1.5 (≥ 2)" in rows["alpha"][2]
    assert rows["alpha"][3] == "2026-11-21 10:00" and rows["alpha"][4] == c1[:7]
    assert rows["beta"][1] == "**met**" and "speedup 3 (≥ 2)" in rows["beta"][2]
    assert rows["gamma"][1] == "not run" and "quiet machine" in rows["gamma"][2]
    # a GPU benchmark shows its last run on a GPU, not the later CPU check
    assert rows["gpuonly"][1] == "**met**" and rows["gpuonly"][5].startswith("NVIDIA H200")
    assert all(r[6] == "no" for r in rows.values() if r[1] != "not run")
    # the table sits under the title, between the markers; the log follows unchanged
    assert text.startswith("# Benchmark results\n\n<!-- summary:start -->\n")
    assert text.split("<!-- summary:end -->\n", 1)[1] == LOG
    # again: one table, replaced, the log still as it was
    text2, _ = run_summary(project, records)
    assert text2.count("<!-- summary:start -->") == 1
    assert text2.split("<!-- summary:end -->\n", 1)[1] == LOG


def test_stale_after_a_commit_to_a_declared_path(project):
    repo, c1 = project["repo"], project["c1"]
    records = [rec("alpha", c1, "2026-11-21T10:00:00+00:00", True, speedup=2.5),
               rec("beta", c1, "2026-11-21T10:00:00+00:00", True, speedup=2.5)]
    _, rows = run_summary(project, records)
    assert rows["alpha"][6] == "no" and rows["beta"][6] == "no"

    (repo / "pkg" / "a.py").write_text("A = 2\n")  # alpha declares pkg/a.py; beta does not
    commit_all(repo, "change a")
    _, rows = run_summary(project, records)
    assert "stale" in rows["alpha"][6]
    assert rows["beta"][6] == "no"

    (repo / "benchmarks" / "beta.py").write_text(script(("pkg/b.py",), "X = 1\n"))
    commit_all(repo, "change the beta benchmark itself")
    _, rows = run_summary(project, records)
    assert "stale" in rows["beta"][6]


def test_unknown_commit_is_stale(project):
    records = [rec("alpha", "0" * 40, "2026-11-21T10:00:00+00:00", True, speedup=2.5),
               rec("beta", None, "2026-11-21T10:00:00+00:00", True, speedup=2.5)]
    _, rows = run_summary(project, records)
    assert "stale" in rows["alpha"][6] and "stale" in rows["beta"][6]


def test_record_appends_and_prints_the_line_last(tmp_path, monkeypatch, capsys):
    mod = _load("_results")
    out = tmp_path / "r.jsonl"
    line = {"name": "x", "figures": {"a": 1}, "goal": {"a_min": 1}, "met": True}
    monkeypatch.setenv("NBTUNE_BENCH_RESULTS", str(out))
    monkeypatch.delenv("NBTUNE_BENCH_NO_RECORD", raising=False)
    mod.record(line)
    assert json.loads(capsys.readouterr().out.splitlines()[-1]) == line
    got = json.loads(out.read_text())
    assert {k: got[k] for k in line} == line
    assert {"date", "commit", "device", "command", "load"} <= set(got)
    monkeypatch.setenv("NBTUNE_BENCH_NO_RECORD", "1")
    mod.record(line)
    assert len(out.read_text().splitlines()) == 1
    assert json.loads(capsys.readouterr().out.splitlines()[-1]) == line


def test_every_benchmark_declares_what_it_measures():
    summary = _load("summary")
    benches = summary.benchmarks(ROOT / "benchmarks", ROOT)
    assert len(benches) >= 20
    for b in benches:
        assert b.measures, f"{b.name}.py declares no MEASURES"
        assert isinstance(b.wall_clock, bool), f"{b.name}.py declares no WALL_CLOCK"
        for m in b.measures:
            assert (ROOT / m).exists(), f"{b.name}.py: MEASURES names {m}, which does not exist"
