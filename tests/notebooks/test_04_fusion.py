"""Notebook 04 (fusion) executes top to bottom and shows what it claims."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "04-fusion.ipynb"


@pytest.mark.slow
def test_notebook_04_executes():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs)
    assert "speedup" in text
    diff = float(re.search(r"max \|fused - separate\| over all parameters: (\S+)", text)[1])
    assert diff <= 1e-5  # SGD: fused == separate to float32 rounding
    assert "members left: 4" in text
