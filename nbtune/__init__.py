"""nbtune: Jupyter-first, resource-aware hyperparameter tuning.

The public surface is small: :func:`tune`, :class:`Experiment`, the search
space helpers, and the runtimes. Everything else lives in subpackages.
"""

from __future__ import annotations

from nbtune.api import tune
from nbtune.core.space import choice, grid, loguniform, qloguniform, quniform, randint, uniform
from nbtune.experiment import Experiment, TrialsFailed, set_frontend
from nbtune.runtimes.sim import SimRuntime
from nbtune.version import __version__
from nbtune.workloads import SyntheticWorkload, TraceWorkload

__all__ = [
    "tune", "resume", "Experiment", "SimRuntime", "DaskRuntime", "SyntheticWorkload", "TraceWorkload",
    "choice", "grid", "loguniform", "qloguniform", "quniform", "randint", "uniform",
    "__version__", "load_ipython_extension", "report", "should_stop", "get_trial",
    "TrialsFailed",
]


class _NotebookUI:
    """The dashboard and the HTML report for :class:`Experiment`, imported on first use.

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


set_frontend(_NotebookUI())


def load_ipython_extension(ipython: object) -> None:
    """``%load_ext nbtune``: register ``%%tune`` and the experiment line magics.

    The UI (ipywidgets, Bokeh) is imported here, on demand, never by ``import nbtune``.
    """
    from nbtune.ui.magics import load_ipython_extension as load

    load(ipython)


def __getattr__(name: str) -> object:
    # nbtune.resume needs the store; importing it (SQLAlchemy) on first use keeps
    # `import nbtune` fast for the many sessions that never persist anything
    if name == "resume":
        from nbtune.resumption import resume

        return resume
    if name in ("report", "should_stop", "get_trial"):  # inside a trial: Ray-style loops
        from nbtune.runtimes.dask import trial_api

        return getattr(trial_api, name)
    if name == "DaskRuntime":  # distributed is heavy: import it only when asked for
        from nbtune.runtimes.dask import DaskRuntime

        return DaskRuntime
    raise AttributeError(f"module 'nbtune' has no attribute {name!r}")
