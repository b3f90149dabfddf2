"""Jupyter UI: the live dashboard, HTML reports and the ``%%tune`` magics.

Nothing outside this package imports it at module level (the engine,
runtimes, algorithms and allocators stay UI-free); :class:`Experiment` and
``nbtune.load_ipython_extension`` import it lazily when a notebook asks.
"""

from __future__ import annotations

from nbtune.ui.dashboard import Dashboard, dashboard_for, load_bokehjs, show
from nbtune.ui.dashboard_model import DashboardModel, Delta
from nbtune.ui.export import export_html, report_html

__all__ = ["Dashboard", "DashboardModel", "Delta", "dashboard_for", "export_html",
           "load_bokehjs", "report_html", "show"]
