"""The JSON side of ``benchmarks/gpu_session.sh``: the plan, each step's JSON, the final check.

``gpu_session.sh`` runs its steps under time limits and calls this module (with the
machine's ``python3``, standard library only) to write, in its output folder:

* ``session.json``: the plan (each step's name and budget, in order), then each step's
  ``rc``, seconds, budget, time limit (the budget; more in a dry run) and whether its JSON
  came out, written after every step, so a
  call cut short still brings back what ran;
* ``<step>.json``: the last JSON line the step's benchmark printed (its ``record`` line),
  taken from ``<step>.log``; the ``gpu_tests`` step's JSON is written by pytest itself
  (``benchmarks/_pytest_json.py``).

Commands::

    python3 benchmarks/_gpu_session.py plan OUT DRY_RUN SESSION_BUDGET NAME=BUDGET...
    python3 benchmarks/_gpu_session.py step OUT NAME BUDGET RC START END [LIMIT]
    python3 benchmarks/_gpu_session.py check OUT

``check`` prints one line per step and exits 1 unless every planned step ran with rc 0 and
left a JSON file whose ``name`` is its benchmark's (in a dry run, the tests' step may end
with pytest's 5, "no tests collected": without a GPU every module in tests/gpu skips).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

#: the order the steps run in, and the ``name`` each step's JSON carries
STEPS = {"gpu_packing": "gpu_packing", "fusion_cuda": "fusion_throughput",
         "bubbles": "bubble_squeeze", "gpu_tests": "gpu_tests"}


def last_json(log: Path, name: str) -> dict[str, Any] | None:
    """The last line of ``log`` that is a JSON object named ``name`` (None if there is none)."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        line = line.strip()
        if not (line.startswith("{") and line.endswith("}")):
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and obj.get("name") == name:
            return obj
    return None


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def write_json(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=1) + "\n")
    os.replace(tmp, path)


def plan(out: Path, dry_run: str, budget: str, steps: list[str]) -> None:
    planned = []
    for s in steps:
        name, _, b = s.partition("=")
        if name not in STEPS:
            raise SystemExit(f"unknown step {name!r} (steps: {', '.join(STEPS)})")
        planned.append({"name": name, "budget_s": int(b)})
    write_json(out / "session.json", {
        "dry_run": dry_run not in ("", "0"), "session_budget_s": int(budget),
        "commit": os.environ.get("NBTUNE_BENCH_COMMIT") or None,
        "missing_modules": [m for m in os.environ.get("GPU_SESSION_MISSING", "").split() if m],
        "plan": planned, "steps": []})


def step(out: Path, name: str, budget: str, rc: str, start: str, end: str,
         limit: str | None = None) -> None:
    path = out / f"{name}.json"
    if name != "gpu_tests":  # pytest writes its own (_pytest_json); the others print theirs
        found = last_json(out / f"{name}.log", STEPS[name])
        if found is not None:
            write_json(path, found)
    got = read_json(path)
    session = read_json(out / "session.json") or {"plan": [], "steps": []}
    code = int(rc)
    session["steps"].append({
        "name": name, "budget_s": int(budget),
        "limit_s": int(budget) if limit is None else int(limit), "rc": code,
        "seconds": round(float(end) - float(start), 1),
        # timeout's status: 124 after its first signal, 137 after its KILL
        "timed_out": code in (124, 137),
        "json": isinstance(got, dict) and got.get("name") == STEPS[name],
        "met": got.get("met") if isinstance(got, dict) else None})
    write_json(out / "session.json", session)


def check(out: Path) -> int:
    session = read_json(out / "session.json")
    if not isinstance(session, dict):
        print(f"no session.json in {out}")
        return 1
    ran = {s["name"]: s for s in session["steps"]}
    bad = 0
    for p in session["plan"]:
        s = ran.get(p["name"])
        if s is None:
            print(f"{p['name']:12s} did not run (budget {p['budget_s']} s)")
            bad += 1
            continue
        # pytest's 5: no test collected, as where every module skips itself (no GPU: dry run)
        ok = s["json"] and (s["rc"] == 0 or (s["rc"] == 5 and s["name"] == "gpu_tests"
                                             and session["dry_run"]))
        bad += not ok
        print(f"{s['name']:12s} {'ok ' if ok else 'BAD'} rc {s['rc']:3d}  {s['seconds']:6.1f} s "
              f"of {s['budget_s']} s  json {'yes' if s['json'] else 'NO'}  met {s['met']}")
    total = sum(s["seconds"] for s in session["steps"])
    print(f"{len(ran)} steps in {total:.0f} s of a {session['session_budget_s']} s plan "
          f"({sum(p['budget_s'] for p in session['plan'])} s budgeted)"
          + (f"; missing modules: {' '.join(session['missing_modules'])}"
             if session.get("missing_modules") else ""))
    return 1 if bad else 0


def main(argv: list[str]) -> int:
    if len(argv) >= 4 and argv[0] == "plan":
        plan(Path(argv[1]), argv[2], argv[3], argv[4:])
        return 0
    if len(argv) in (7, 8) and argv[0] == "step":
        step(Path(argv[1]), *argv[2:])
        return 0
    if len(argv) == 2 and argv[0] == "check":
        return check(Path(argv[1]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
