"""nbtune: Jupyter-first, resource-aware hyperparameter tuning.

The public surface is small: :func:`tune`, :class:`Experiment`, the search
space helpers, and the runtimes. Everything else lives in subpackages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nbtune.core.frontend import set_frontend
from nbtune.core.space import choice, grid, loguniform, qloguniform, quniform, randint, uniform
from nbtune.version import __version__

if TYPE_CHECKING:
    from nbtune.experiment import Experiment

__all__ = [
    "tune", "resume", "Experiment", "SimRuntime", "DaskRuntime", "SyntheticWorkload", "TraceWorkload",
    "choice", "grid", "loguniform", "qloguniform", "quniform", "randint", "uniform",
    "__version__", "load_ipython_extension", "report", "should_stop", "get_trial",
    "TrialsFailed", "SearchOptions", "ResourceOptions", "ExecutionOptions", "RecordingOptions",
]


class _NotebookUI:
    """The dashboard, the HTML report and the what-if for :class:`Experiment`, imported on
    first use.

    The facade is the top layer: it may reach the UI, the experiment may not.
    """

    def report(self, exp: Experiment, path: object) -> object:
        from nbtune.ui.export import export_html

        return export_html(exp, path)

    def dashboard(self, exp: Experiment, **options: object) -> object:
        from nbtune.ui.dashboard import dashboard_for

        return dashboard_for(exp, **options)

    def show(self, exp: Experiment) -> None:
        from nbtune.ui.dashboard import show

        show(exp)

    def plot(self, exp: Experiment, view: str, **options: object) -> object:
        from nbtune.ui.analysis_view import analysis_view

        return analysis_view(exp, view, **options)  # type: ignore[arg-type]

    def what_if(self, exp: Experiment, **options: object) -> object:
        from nbtune.replay import what_if

        return what_if(exp, **options)  # type: ignore[arg-type]


set_frontend(_NotebookUI())


def load_ipython_extension(ipython: object) -> None:
    """``%load_ext nbtune``: register ``%%tune`` and the experiment line magics.

    The UI (ipywidgets, Bokeh) is imported here, on demand, never by ``import nbtune``.
    """
    from nbtune.ui.magics import load_ipython_extension as load

    load(ipython)


def _lazy(name: str) -> object:
    """The public name ``name``, imported now (None: not one of nbtune's)."""
    # tune and Experiment bring pandas and the engine; each Dask worker and the fork
    # server import nbtune only to unpickle its plugins, which need neither (so their
    # start-up does not pay for them); nbtune.resume needs the store (SQLAlchemy);
    # distributed is heavy. Each is imported on first use.
    if name == "tune":
        from nbtune.api import tune

        return tune
    if name in ("Experiment", "TrialsFailed"):
        from nbtune import experiment

        return getattr(experiment, name)
    if name in ("SearchOptions", "ResourceOptions", "ExecutionOptions", "RecordingOptions"):
        from nbtune.build import run_options

        return getattr(run_options, name)
    if name == "SimRuntime":
        from nbtune.runtimes.sim import SimRuntime

        return SimRuntime
    if name in ("SyntheticWorkload", "TraceWorkload"):
        from nbtune import workloads

        return getattr(workloads, name)
    if name == "resume":
        from nbtune.resumption import resume

        return resume
    if name in ("report", "should_stop", "get_trial"):  # inside a trial: Ray-style loops
        from nbtune.runtimes.dask.trial_side import trial_api

        return getattr(trial_api, name)
    if name == "DaskRuntime":
        from nbtune.runtimes.dask import DaskRuntime

        return DaskRuntime
    return None


def __getattr__(name: str) -> object:
    value = _lazy(name)
    if value is None:
        raise AttributeError(f"module 'nbtune' has no attribute {name!r}")
    if name not in ("report", "should_stop", "get_trial"):  # those read the current trial
        globals()[name] = value  # asked for once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
