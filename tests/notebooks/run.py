"""Execute a shipped notebook the way the notebook tests all do, and read what it showed.

One helper so every notebook test runs its notebook the same way (nbclient, the
``python3`` kernel, a working directory, a timeout) and fails with the cell that
raised, instead of each test repeating the set-up.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbclient
import nbformat

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def execute(name: str, *, cwd: Path | None = None, timeout: int = 300) -> Any:
    """Run ``notebooks/<name>`` top to bottom in ``cwd`` (default: notebooks/); no cell may fail."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    # self-contained: a notebook copied out of the repository still runs
    assert not any("sys.path" in c.source for c in nb.cells if c.cell_type == "code"), name
    client = nbclient.NotebookClient(nb, timeout=timeout, startup_timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(cwd or NOTEBOOKS)}})
    client.execute()
    failed = [(c.source[:60], o) for c in nb.cells if c.cell_type == "code"
              for o in c.get("outputs", []) if o.output_type == "error"]
    assert not failed, failed
    return nb


def all_outputs(nb: Any) -> list[Any]:
    """Every output of every code cell, in order."""
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]


def shown_text(nb: Any) -> str:
    """Printed text and displayed data of the whole notebook, as one string to search."""
    return "".join(str(o.get("text", "")) + str(o.get("data", {})) for o in all_outputs(nb))
