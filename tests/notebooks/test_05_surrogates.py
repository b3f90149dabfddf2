"""Notebook 05 (surrogates) executes top to bottom and shows what it claims."""

from __future__ import annotations

import pytest

from tests.notebooks.run import execute, shown_text


@pytest.mark.slow
@pytest.mark.integration
def test_notebook_05_executes():
    # the kernel inherits PYTHONPATH, so a worktree's nbtune is the one used
    text = shown_text(execute("05-surrogates.ipynb"))
    assert "coordinate check FAILED" in text  # the standard parametrization is flagged
    assert "coordinate check passed" in text  # µP is not
    assert "application/vnd.bokehjs_exec.v0+json" in text  # the plots rendered
    assert "TargetTrial(s); the last one completed" in text
    assert "12 surrogates in" in text and "fused units" in text  # scaling + fusion
