"""The ``%%tune`` notebook both browser tests run (JupyterLab 4 and Notebook 7), and how they
read its trials back from the store the magic writes."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat

from nbtune.store import Store
from tests.browser.conftest import LabServer

SETUP = """\
%load_ext nbtune
import time
import nbtune
from nbtune.runtimes.dask import DaskRuntime
space = {"lr": nbtune.loguniform(1e-4, 1e-1)}
# two CPU workers (one "GPU" each); no warm processes importing torch: start fast
rt = DaskRuntime(n_workers=2, warm_processes=0, preload=())"""


def tune_cell(name: str) -> str:
    return f"""\
%%tune space --metric loss --max-budget 100000 --num-trials 2 -a random --runtime rt --name {name} --store --seed 0
for step in trial.steps():
    time.sleep(0.2)
    trial.report(step, loss=1.0 / step + config["lr"])"""


def write_tune_notebook(path: Path, name: str) -> Path:
    """Setup cell + ``%%tune`` cell, with kernelspec metadata: without it both front ends
    ask "Select Kernel" and nothing runs."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                 "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(SETUP), nbformat.v4.new_code_cell(tune_cell(name))]
    nbformat.write(nb, path)
    return path


def trial_states(server: LabServer, name: str) -> dict[int, str]:
    """Trial id -> state of experiment ``name`` in the store under the server's root."""
    db = server.root_dir / "nbtune-store" / "nbtune.db"
    if not db.exists():
        return {}
    store = Store(db)
    try:
        if name not in store.names():
            return {}
        frame = store.results(name)
        return {int(t): str(s) for t, s in zip(frame["trial_id"], frame["state"], strict=True)}
    finally:
        store.close()


def wait_until(predicate: Callable[[], Any], timeout: float, what: str,
               seen: Callable[[], str] | None = None) -> Any:
    """``predicate()`` once true; else an error naming ``what`` and what ``seen()`` says is
    there instead (the page's state at the deadline)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            instead = f"; instead: {seen()}" if seen is not None else ""
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}{instead}")
        time.sleep(0.5)


def json_written(path: Path, timeout: float, what: str) -> Any:
    """The JSON a kernel writes to ``path``, once whole: ``json.dump(..., open(path, "w"))``
    makes the file before it writes, so "it exists" once read as an empty document."""
    def parsed() -> Any:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    return wait_until(parsed, timeout, what)


def run_all_cells(page: Any, server: LabServer, notebook: str) -> None:
    """Open ``notebook`` in JupyterLab and Run All Cells once its kernel is up
    ("Run All Cells" does nothing before)."""
    page.goto(server.url(f"lab/tree/{notebook}"))
    page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=60_000)
    page.locator(".jp-StatusBar-TextItem", has_text=re.compile(r"\| Idle$")).wait_for(
        timeout=60_000)
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-item:not(.lm-mod-disabled) .lm-Menu-itemLabel",
                 has_text=re.compile(r"^Run All Cells$")).click()
