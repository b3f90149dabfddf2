"""Where a benchmark's result goes: its JSON line on stdout, and a record in results.jsonl.

Every ``benchmarks/<name>.py`` ends with ``record({"name", "figures", "goal", "met"})``
instead of printing that line itself. ``record`` prints the line unchanged (still the last
line of stdout: people and scripts read it) and appends it, with where and when it was
measured, to ``benchmarks/results.jsonl``, one JSON object per line::

    {"name", "figures", "goal", "met",          # the benchmark's own line
     "date": "2026-11-28T18:05:12+00:00",        # UTC, when the result was recorded
     "commit": "<git rev-parse HEAD>" | null,    # null where git or .git is missing
     "dirty": true,                              # only when nbtune/ or benchmarks/ had
                                                 # uncommitted changes (results files aside)
     "device": "cpu: 2 cores, <model>" | "gpu: <name> (<count>); cpu: ...",
     "command": ["benchmarks/<name>.py", "--quick"],   # the argv
     "load": 6.2,                                # 1-min load average when the run started
     "wall_s": 81.3}                             # seconds from start to the record

``benchmarks/summary.py`` turns the file into the table at the top of RESULTS.md.

Environment:

* ``NBTUNE_BENCH_NO_RECORD=1``: print the line, append nothing (tests that run a
  benchmark set it: they must not write to the repository's file);
* ``NBTUNE_BENCH_RESULTS=<path>``: append there instead (a GPU machine's ``$OUT``);
* ``NBTUNE_BENCH_COMMIT=<sha>``: the commit to record where the checkout has no ``.git``
  (a copy of the tree on a lent machine).

The module notes the load average when it is imported: benchmarks import it first thing.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results.jsonl"
# files under the dirty check's paths that running benchmarks changes by itself
NOT_CODE = ("benchmarks/results.jsonl", "benchmarks/RESULTS.md")


def _load() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


START_LOAD = _load()
START = time.monotonic()


def _git(*args: str) -> str | None:
    try:
        p = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                           timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout if p.returncode == 0 else None


def commit() -> tuple[str | None, bool]:
    """HEAD's commit (or ``NBTUNE_BENCH_COMMIT``) and whether the measured code is dirty."""
    sha = os.environ.get("NBTUNE_BENCH_COMMIT") or (_git("rev-parse", "HEAD") or "").strip()
    if not sha:
        return None, False
    status = _git("status", "--porcelain", "--", "nbtune", "benchmarks",
                  *(f":(exclude){p}" for p in NOT_CODE))
    return sha, bool(status and status.strip())


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def _gpus() -> list[str]:
    try:
        p = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return []
    return [x.strip() for x in p.stdout.splitlines() if x.strip()] if p.returncode == 0 else []


def device(gpu: bool | None = None) -> str:
    """``"cpu: N cores, <model>"``, prefixed by ``"gpu: <name> (<count>); "`` when the run
    used a GPU (``gpu=None``: whenever nvidia-smi lists one)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 0
    cpu = f"cpu: {cores} cores, {_cpu_model()}"
    if gpu is False:
        return cpu
    names = _gpus()
    if not names:
        return cpu
    return f"gpu: {names[0]} ({len(names)}); {cpu}"


def _command() -> list[str]:
    argv = list(sys.argv)
    if argv:
        with contextlib.suppress(ValueError):
            argv[0] = str(Path(argv[0]).resolve().relative_to(ROOT))
    return argv


def context(gpu: bool | None = None) -> dict[str, Any]:
    """What ``record`` adds to the benchmark's line."""
    sha, dirty = commit()
    out: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": sha}
    if dirty:
        out["dirty"] = True
    out.update(device=device(gpu), command=_command(), load=START_LOAD,
               wall_s=round(time.monotonic() - START, 1))
    return out


def _off(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


def record(line: dict[str, Any], *, gpu: bool | None = None) -> dict[str, Any]:
    """Append ``line`` with its context to the results file, then print ``line`` as JSON.

    ``gpu``: whether the run used a GPU (``None``: the machine has one). Returns ``line``.
    """
    if not _off("NBTUNE_BENCH_NO_RECORD"):
        path = Path(os.environ.get("NBTUNE_BENCH_RESULTS") or RESULTS)
        entry = {**line, **context(gpu)}
        try:
            with path.open("a") as f:
                f.write(json.dumps(entry, default=str) + "\n")
            print(f"result recorded in {path}", file=sys.stderr, flush=True)
        except OSError as e:  # a read-only checkout must not lose the printed line
            print(f"result not recorded ({e})", file=sys.stderr, flush=True)
    print(json.dumps(line), flush=True)
    return line
