"""The analysis views' data, as the notebook's report imports it.

The computation is :mod:`nbtune.core.trial_analysis`, one layer down, so the
server extension (a sibling entry point) computes the same views for the
JupyterLab panel; these names stay importable from here.
"""

from __future__ import annotations

from nbtune.core.trial_analysis import (
    MIN_TRIALS,
    Ended,
    History,
    budgets,
    default_budget,
    ended_trials,
    history,
    importance,
    parallel_coordinates,
    slices,
)

__all__ = ["Ended", "History", "ended_trials", "budgets", "default_budget", "history",
           "parallel_coordinates", "importance", "slices", "MIN_TRIALS"]
