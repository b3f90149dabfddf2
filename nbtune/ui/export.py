"""Standalone HTML reports: the dashboard's figures, frozen, with BokehJS inlined.

The file opens offline (GPU servers and their users' laptops often have no CDN
access) and needs no kernel: the same :class:`~nbtune.ui.figures.Figures` the
live dashboard uses, and its analysis views at their default budget, rendered once
from a snapshot of the experiment.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from nbtune.ui.analysis import importance
from nbtune.ui.analysis_figures import AnalysisFigures, analysis_layout
from nbtune.ui.figures import Figures, summary_html
from nbtune.ui.snapshot import experiment_snapshot

if TYPE_CHECKING:
    from nbtune.experiment import Experiment

__all__ = ["export_html", "report_html"]


def report_html(experiment: Experiment, *, title: str | None = None) -> str:
    """The report as one HTML string (BokehJS inline, no network needed to view it)."""
    from bokeh.embed import file_html
    from bokeh.resources import INLINE

    snap = experiment_snapshot(experiment)
    name = title or f"nbtune: {experiment.name}"
    space = experiment.engine.algorithm.space
    figs = Figures(experiment.metric, experiment.mode, title=name, space=space)
    figs.render(snap)
    figs.set_header(summary_html(name, snap))
    views = AnalysisFigures(experiment.metric, experiment.mode, space)
    views.render(snap, importance(snap, views.space, budget=views.budget(snap)))
    # no kernel behind a file to re-render another budget: the selector says which it shows
    views.budget_select.disabled = True
    return file_html(analysis_layout(figs, views), INLINE, title=name)


def export_html(experiment: Experiment, path: str | Path, *, title: str | None = None) -> Path:
    """Write the experiment's report to ``path`` (a ``.html`` file) and return the path."""
    path = Path(path)
    if path.suffix.lower() not in (".html", ".htm"):
        raise ValueError(f"report path must end in .html, got {str(path)!r}")
    if not path.parent.exists():
        raise FileNotFoundError(f"folder {str(path.parent)!r} does not exist; create it first")
    path.write_text(report_html(experiment, title=title), encoding="utf-8")
    return path
