"""summary: the table at the top of RESULTS.md, from benchmarks/results.jsonl.

Run: ``python benchmarks/summary.py`` (``--print`` writes the table to stdout instead;
``--results``, ``--out``, ``--bench-dir``, ``--repo`` for other files).

One row per benchmark: every ``benchmarks/*.py`` with a ``__main__`` block (``_*.py`` and
this file aside), recorded or not. A row shows the benchmark's latest record in
``results.jsonl`` (written by ``_results.record``): met or not, its key figures against the
goal, date, commit, device and load, and whether it is **stale**: its figure was measured on
a commit before a change to the code it declares it measures (its module-level
``MEASURES``, plus its own file), i.e. ``git log <commit>..HEAD -- <paths>`` is not empty,
or the commit is unknown here or not an ancestor of HEAD. A benchmark with a GPU mode
(``RUNS_ON`` holds ``"gpu"``) gets a row for its latest run on a GPU, whatever ran since on
a CPU; ``RUNS_ON = ("gpu",)`` has only that row. A benchmark never recorded shows "not
run", and why when its module says (``WALL_CLOCK = True``: its figures are time on this
machine, to be measured on a quiet one; GPU only).

The table goes between ``<!-- summary:start -->`` and ``<!-- summary:end -->`` (added under
the title the first time); the log below is left as it is.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import datetime
import json
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
START, END = "<!-- summary:start -->", "<!-- summary:end -->"
NOT_BENCHMARKS = {"summary.py", "tta_svg.py"}  # tools over the records, no goal of their own
CELL = 110  # longest figures cell, characters


@dataclass
class Bench:
    name: str
    path: Path
    measures: tuple[str, ...] | None = None  # None: the module declares nothing
    wall_clock: bool | None = None
    runs_on: tuple[str, ...] = ("cpu",)
    key_figures: tuple[str, ...] = ()  # "a/b" paths into figures, when the goal's keys are not
    own: str | None = None  # the script's path relative to the repository
    notes: list[str] = field(default_factory=list)


def _constants(path: Path) -> tuple[dict[str, Any], bool]:
    """Module-level literal constants of a script, and whether it has a __main__ block."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out: dict[str, Any] = {}
    main = False
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name):
            with contextlib.suppress(ValueError, TypeError, SyntaxError):
                out[node.targets[0].id] = ast.literal_eval(node.value)
        elif isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            main = True
    return out, main


def benchmarks(bench_dir: Path, repo: Path) -> list[Bench]:
    out = []
    for p in sorted(bench_dir.glob("*.py")):
        if p.name.startswith("_") or p.name in NOT_BENCHMARKS:
            continue
        consts, main = _constants(p)
        if not main:  # a module benchmarks import (two_core_bound.py), not a benchmark
            continue
        b = Bench(p.stem, p)
        m = consts.get("MEASURES")
        if isinstance(m, str):
            m = (m,)
        b.measures = tuple(m) if m is not None else None
        b.wall_clock = consts.get("WALL_CLOCK")
        b.runs_on = tuple(consts.get("RUNS_ON", ("cpu",)))
        b.key_figures = tuple(consts.get("KEY_FIGURES", ()))
        try:
            b.own = str(p.resolve().relative_to(repo.resolve()))
        except ValueError:
            b.own = None
        out.append(b)
    return out


def load_results(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            print(f"{path}:{n}: not JSON, skipped", file=sys.stderr)
            continue
        if isinstance(rec, dict) and "name" in rec:
            rec["_line"] = n
            out.append(rec)
    return out


def on_gpu(rec: dict[str, Any]) -> bool:
    return str(rec.get("device", "")).startswith("gpu")


def latest(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The latest record: by date, then by position in the file."""
    return max(records, key=lambda r: (str(r.get("date", "")), r["_line"]), default=None)


class Git:
    def __init__(self, repo: Path):
        self.repo = repo
        self._cache: dict[tuple, str] = {}

    def _run(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(self.repo), *args], capture_output=True,
                              text=True)

    def head(self) -> str | None:
        p = self._run("rev-parse", "HEAD")
        return p.stdout.strip() if p.returncode == 0 else None

    def staleness(self, commit: str | None, paths: tuple[str, ...]) -> str:
        """``""`` (fresh), ``"stale"`` (paths changed since), ``"stale (commit unknown)"``,
        ``"stale (not in HEAD)"``."""
        key = (commit, paths)
        if key not in self._cache:
            self._cache[key] = self._staleness(commit, paths)
        return self._cache[key]

    def _staleness(self, commit: str | None, paths: tuple[str, ...]) -> str:
        if not commit:
            return "stale (commit unknown)"
        if self._run("cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
            return "stale (commit unknown)"
        if self._run("merge-base", "--is-ancestor", commit, "HEAD").returncode != 0:
            return "stale (not in HEAD)"
        p = self._run("log", "--format=%H", f"{commit}..HEAD", "--", *paths)
        if p.returncode != 0:
            return "stale (git log failed)"
        return "stale" if p.stdout.strip() else ""


# --- rendering ------------------------------------------------------------------------

def _num(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return v
    return json.dumps(v, separators=(",", ":"))


def _goal_of(key: str, v: Any) -> tuple[str, str]:
    """(figure key, rendered goal) for one goal entry."""
    for suf, op in (("_min_exclusive", "> "), ("_max_exclusive", "< "), ("_min", "≥ "),
                    ("_max", "≤ ")):
        if key.endswith(suf) and not isinstance(v, str | bool):
            return key[: -len(suf)], op + _num(v)
    if isinstance(v, str):
        return key, v.replace(">=", "≥").replace("<=", "≤")
    if isinstance(v, int | float) and not isinstance(v, bool):
        return key, "goal " + _num(v)  # a bare number: bound or target, the module knows
    return key, _num(v)


def _short(s: str, n: int = CELL) -> str:
    s = " ".join(s.split())
    return s if len(s) <= n else s[: n - 1] + "…"


def _at(figures: Any, path: str) -> Any:
    for k in path.split("/"):
        if not isinstance(figures, dict) or k not in figures:
            return None
        figures = figures[k]
    return figures


def key_figures(rec: dict[str, Any], keys: tuple[str, ...] = ()) -> str:
    """The module's ``KEY_FIGURES`` and the goal; else the figures the goal names, each with
    its goal; else the first few scalar figures and the goal."""
    figures = rec.get("figures") or {}
    goal = rec.get("goal")
    parts = []
    if keys:
        parts = [f"{k} {_num(_at(figures, k))}" for k in keys if _at(figures, k) is not None]
        if parts and isinstance(goal, dict):
            parts.append("goal: " + ", ".join(f"{k} {_goal_of(k, v)[1]}"
                                              for k, v in goal.items()))
        elif parts and isinstance(goal, str):
            parts.append(f"goal: {goal}")
    if not parts and isinstance(figures, dict) and isinstance(goal, dict):
        for k, v in goal.items():
            fk, g = _goal_of(k, v)
            for cand in (fk, k, fk + "_pct", fk + "_s"):
                if cand in figures and not isinstance(figures[cand], dict | list):
                    parts.append(f"{cand} {_num(figures[cand])} ({g})")
                    break
    if not parts and isinstance(figures, dict):
        scal = [(k, v) for k, v in figures.items() if isinstance(v, int | float | bool)]
        parts = [f"{k} {_num(v)}" for k, v in scal[:3]]
        if isinstance(goal, str):
            parts.append(f"goal: {goal}")
        elif isinstance(goal, dict) and goal:
            parts.append("goal: " + ", ".join(f"{k} {_goal_of(k, v)[1]}"
                                              for k, v in goal.items()))
    return _short("; ".join(parts)) if parts else "—"


def _device(rec: dict[str, Any]) -> str:
    d = str(rec.get("device") or "?")
    if d.startswith("gpu"):
        out = d.split(";")[0][len("gpu:"):].strip()
    elif d.startswith("cpu:"):
        cores = d[len("cpu:"):].split(",")[0].replace("cores", "").strip()
        out = f"cpu {cores}c"
    else:
        out = d
    load = rec.get("load")
    return f"{out}, load {load:.1f}" if isinstance(load, int | float) else out


def _cell(s: str) -> str:
    return s.replace("|", "\\|")


@dataclass
class Row:
    label: str
    bench: Bench
    rec: dict[str, Any] | None
    stale: str = ""

    def cells(self) -> list[str]:
        if self.rec is None:
            why = []
            if "cpu" not in self.bench.runs_on:
                why.append("needs a GPU")
            elif self.label.endswith("(gpu)"):
                why.append("no GPU run recorded")
            if self.bench.wall_clock and "cpu" in self.bench.runs_on \
                    and not self.label.endswith("(gpu)"):
                why.append("wall clock: needs a quiet machine")
            return [self.label, "not run", "; ".join(why) or "—", "", "", "", ""]
        r = self.rec
        met = "**met**" if r.get("met") is True else "not met"
        date = str(r.get("date", ""))[:16].replace("T", " ")
        commit = (str(r.get("commit") or "?")[:7]) + ("*" if r.get("dirty") else "")
        return [self.label, met, key_figures(r, self.bench.key_figures), date, commit, _device(r),
                "**" + self.stale + "**" if self.stale else "no"]


def rows(benches: list[Bench], records: list[dict[str, Any]], git: Git) -> list[Row]:
    by_name: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by_name.setdefault(str(r["name"]), []).append(r)
    out = []
    for b in benches:
        recs = by_name.get(b.name, [])
        gpu_recs = [r for r in recs if on_gpu(r)]
        cpu_recs = [r for r in recs if not on_gpu(r)]
        wants_gpu = "gpu" in b.runs_on or bool(gpu_recs)
        pairs = []
        if "cpu" in b.runs_on:
            pairs.append((b.name, latest(cpu_recs)))
        if wants_gpu:
            pairs.append((b.name + (" (gpu)" if "cpu" in b.runs_on else ""), latest(gpu_recs)))
        for label, rec in pairs:
            row = Row(label, b, rec)
            if rec is not None:
                paths = tuple(b.measures) if b.measures is not None else ("nbtune",)
                if b.own:
                    paths += (b.own,)
                row.stale = git.staleness(rec.get("commit"), paths)
            out.append(row)
    return out


def table(bench_dir: Path, results: Path, repo: Path) -> str:
    git = Git(repo)
    benches = benchmarks(bench_dir, repo)
    rs = rows(benches, load_results(results), git)
    head = git.head()
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    n_met = sum(1 for r in rs if r.rec and r.rec.get("met") is True)
    n_not = sum(1 for r in rs if r.rec and r.rec.get("met") is not True)
    n_run = sum(1 for r in rs if not r.rec)
    n_stale = sum(1 for r in rs if r.rec and r.stale)
    undeclared = [b.name for b in benches if b.measures is None]
    for b in benches:
        gone = [m for m in b.measures or () if not (repo / m).exists()]
        if gone:
            print(f"summary: {b.name}'s MEASURES names what does not exist: {gone}",
                  file=sys.stderr)
    intro = (
        f"Made by `python benchmarks/summary.py` from `benchmarks/results.jsonl`, {now}, at "
        f"{(head or '?')[:7]}: {n_met} met, {n_not} not met, {n_run} not run; "
        f"{n_stale} of the recorded figures stale. Each row is the benchmark's latest "
        "record; *stale*: the code it declares it measures (`MEASURES`, and the script) "
        "changed after the figure's commit (or that commit is not in HEAD); `*` after a "
        "commit: measured with uncommitted changes; *load*: the 1-min load average at the "
        "start (2-core machines: over 2 distorts wall-clock figures). Figures: the ones the "
        "goal names, with the goal in brackets. The log below is each result's full story.")
    lines = [
        "## Where each goal stands",
        "",
        *textwrap.wrap(intro, 92, break_on_hyphens=False),
        "",
        "| benchmark | met | figures (goal) | date (UTC) | commit | device | stale |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    lines += ["| " + " | ".join(_cell(c) for c in r.cells()) + " |" for r in rs]
    if undeclared:
        lines += ["", "No `MEASURES` declared (stale whenever anything under nbtune/ changed): "
                  + ", ".join(undeclared) + "."]
    return "\n".join(lines) + "\n"


def update(md: Path, body: str) -> None:
    """Put ``body`` between the markers of ``md``; the rest of the file is kept as it is."""
    text = md.read_text() if md.exists() else ""
    block = f"{START}\n{body}{END}\n"
    if START in text and END in text:
        pre, rest = text.split(START, 1)
        post = rest.split(END, 1)[1].lstrip("\n")
        text = pre + block + ("\n" + post if post else "")
    else:
        lines = text.splitlines(keepends=True)
        if lines and lines[0].startswith("# "):  # under the title
            text = lines[0] + "\n" + block + "\n" + "".join(lines[1:]).lstrip("\n")
        else:
            text = block + ("\n" + text if text else "")
    md.write_text(text)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench-dir", type=Path, default=HERE)
    ap.add_argument("--results", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--repo", type=Path, default=None)
    ap.add_argument("--print", action="store_true", help="print the table, write nothing")
    a = ap.parse_args(argv)
    repo = a.repo or a.bench_dir.resolve().parent
    body = table(a.bench_dir, a.results or a.bench_dir / "results.jsonl", repo)
    if a.print:
        print(body, end="")
        return
    out = a.out or a.bench_dir / "RESULTS.md"
    update(out, body)
    print(f"summary: {out} updated ({len(body.splitlines())} lines between the markers)")


if __name__ == "__main__":
    main()
