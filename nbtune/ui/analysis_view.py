"""One analysis view of an experiment in a notebook cell: ``exp.plot("importance")``.

What Optuna's ``optuna.visualization.plot_*`` functions give a study: the
history, importance, parallel-coordinates or slice view of the dashboard's
analysis tabs, alone, rendered once from a snapshot of the experiment as it is
now (the live dashboard keeps its tabs current; this is the figure a person
puts at the end of a notebook). It shows the trials that reached the default
budget (the highest budget enough trials reached), another one, or every trial.
"""

from __future__ import annotations

from typing import Any

from nbtune.ui.analysis import budgets, importance
from nbtune.ui.analysis_figures import ALL_BUDGETS, AnalysisFigures
from nbtune.ui.snapshot import experiment_snapshot

__all__ = ["AnalysisView", "analysis_view", "VIEWS"]

#: the views by the names ``exp.plot`` takes
VIEWS = ("history", "importance", "parallel", "slices")


class AnalysisView:
    """A rendered analysis view: displays itself in a notebook; ``figure`` is the Bokeh model."""

    def __init__(self, view: str, figure: Any, budget: str) -> None:
        self.view = view
        self.figure = figure
        #: the budget shown (``"every budget"``: every trial)
        self.budget = budget

    def __repr__(self) -> str:
        shown = "every trial" if self.budget == ALL_BUDGETS else \
            f"the trials that reached budget {self.budget}"
        return f"<AnalysisView {self.view!r} of {shown}>"

    def _ipython_display_(self) -> None:
        from IPython.display import display
        from jupyter_bokeh import BokehModel

        from nbtune.ui.dashboard import load_bokehjs

        load_bokehjs(force=True)  # a page opened later has BokehJS only if an output loads it
        display(BokehModel(self.figure))


def analysis_view(experiment: Any, view: str = "history", *,
                  budget: float | str | None = None) -> AnalysisView:
    """``view`` (one of :data:`VIEWS`) of ``experiment``'s trials that reached ``budget``
    (None: the default budget; ``"all"``: every trial)."""
    if view not in VIEWS:
        raise ValueError(f"unknown view {view!r}: pick one of {', '.join(VIEWS)}")
    snap = experiment_snapshot(experiment)
    views = AnalysisFigures(experiment.metric, experiment.mode,
                            experiment.engine.algorithm.space)
    if budget == "all":
        views.chosen = ALL_BUDGETS
    elif budget is not None:
        reached = budgets(snap)
        if not any(abs(float(budget) - b) < 1e-9 for b in reached):
            raise ValueError(f"no trial reached budget {budget!r}; the budgets trials reached: "
                             f"{', '.join(f'{b:g}' for b in reached) or 'none yet'} (or 'all')")
        views.chosen = f"{float(budget):g}"
    chosen = views.budget(snap)
    views.render(snap, importance(snap, views.space, budget=chosen)
                 if view == "importance" else None)
    figure = {"history": views.history, "importance": views.importance,
              "parallel": views.parallel, "slices": views.slices}[view]
    return AnalysisView(view, figure, views.shown or ALL_BUDGETS)
