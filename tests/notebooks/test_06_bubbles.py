"""Notebook 06 (bubbles) executes top to bottom and draws the measured timeline."""

from __future__ import annotations

import pytest

from tests.notebooks.run import execute, shown_text


@pytest.mark.slow
@pytest.mark.integration
def test_notebook_06_executes():
    # real processes: a 2-stage gloo pipeline and two guests (most of the time is importing torch)
    nb = execute("06-bubbles.ipynb", timeout=400)
    text = shown_text(nb)
    assert "guest/stage overlap s" in text and "bubble ratio (measured)" in text
    assert "application/vnd.bokehjs_exec.v0+json" in text  # the timeline rendered
    assert "handoffs, median" in text
    assert "largest guest/stage overlap: 0.0 s" in text  # the gate held, by the clocks
