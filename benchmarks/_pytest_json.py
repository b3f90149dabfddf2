"""A pytest plugin that keeps a JSON summary of the run up to date after every test.

``gpu_session.sh`` runs ``pytest -p benchmarks._pytest_json tests/gpu`` with
``NBTUNE_PYTEST_JSON=$OUT/gpu_tests.json``. The file is rewritten after each test, so a
run stopped by its time limit (SIGINT, then KILL) still says what passed, what failed and
which collected tests never ran (``not_run``: what the next device call should run)::

    {"name": "gpu_tests",
     "figures": {"collected": 8, "passed": [nodeid...], "failed": [...], "skipped": [...],
                 "not_run": [...], "skipped_modules": [{"nodeid", "reason"}],
                 "collect_errors": [nodeid...], "seconds": {nodeid: s}, "exitstatus": 0},
     "goal": {"collected_min": 1, "failed": 0, "not_run": 0}, "met": true}

``exitstatus`` is None until the session ends (a KILL leaves it None). ``met``: something
was collected, and every collected test ran and passed or was skipped (where the
machine lacks what it needs; ``-rs`` says why).

``NBTUNE_PYTEST_FIRST``: words (parts of node ids) whose tests run first, in the order the
words come, the others after them in their own order: what must not be left for the next
call when the time limit cuts the run short. A word that matches nothing changes nothing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

GOAL = {"collected_min": 1, "failed": 0, "not_run": 0}


class JsonSummary:
    def __init__(self, path: Path, first: list[str]) -> None:
        self.path, self.first = path, first
        self.collected: list[str] = []
        self.outcome: dict[str, str] = {}
        self.seconds: dict[str, float] = {}
        self.skipped_modules: list[dict[str, str]] = []
        self.collect_errors: list[str] = []
        self.exitstatus: int | None = None

    def summary(self) -> dict[str, Any]:
        by = {k: [n for n in self.collected if self.outcome.get(n) == k]
              for k in ("passed", "failed", "skipped")}
        not_run = [n for n in self.collected if n not in self.outcome]
        figures = {"collected": len(self.collected), **by, "not_run": not_run,
                   "skipped_modules": self.skipped_modules,
                   "collect_errors": self.collect_errors,
                   "seconds": {n: round(s, 2) for n, s in self.seconds.items()},
                   "exitstatus": self.exitstatus}
        met = (len(self.collected) >= GOAL["collected_min"] and not by["failed"]
               and not not_run and not self.collect_errors)
        return {"name": "gpu_tests", "figures": figures, "goal": GOAL, "met": met}

    def write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.summary(), indent=1) + "\n")
        os.replace(tmp, self.path)

    @pytest.hookimpl
    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.skipped:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(
                report.longrepr)
            self.skipped_modules.append({"nodeid": report.nodeid, "reason": reason})
        elif report.failed:
            self.collect_errors.append(report.nodeid)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        def rank(item: pytest.Item) -> int:
            return next((i for i, w in enumerate(self.first) if w in item.nodeid),
                        len(self.first))

        items.sort(key=rank)  # stable: the others keep their order

    @pytest.hookimpl
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.collected = [item.nodeid for item in session.items]
        self.write()

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        n = report.nodeid
        self.seconds[n] = self.seconds.get(n, 0.0) + report.duration
        if report.failed:
            self.outcome[n] = "failed"  # a failed setup, call or teardown
        elif report.skipped and n not in self.outcome:
            self.outcome[n] = "skipped"
        elif report.when == "call" and report.passed and n not in self.outcome:
            self.outcome[n] = "passed"
        if report.when == "teardown":
            self.write()

    @pytest.hookimpl
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self.exitstatus = int(exitstatus)
        self.write()


def pytest_configure(config: pytest.Config) -> None:
    path = os.environ.get("NBTUNE_PYTEST_JSON")
    if path:
        first = os.environ.get("NBTUNE_PYTEST_FIRST", "").split()
        config.pluginmanager.register(JsonSummary(Path(path), first), "nbtune-json-summary")
