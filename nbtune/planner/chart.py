"""Bokeh chart of a :class:`~nbtune.planner.plan.Plan`: cluster size over time and the bill.

Kept apart from :mod:`nbtune.planner.plan` so the planner itself needs no
Bokeh; the notebook shows this chart under the plan's table.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nbtune.planner.dag import Prediction

__all__ = ["plan_chart_html", "plan_figure", "step_series"]

_COLORS = {"static": "#7f7f7f", "naive elastic": "#ff7f0e", "planned": "#1f77b4"}


def step_series(p: Prediction) -> tuple[list[float], list[float]]:
    """Minutes and instances held, as a step line (one segment per stage)."""
    xs: list[float] = [0.0]
    ys: list[float] = [0.0]
    for start, end, inst in p.timeline():
        xs += [start / 60, start / 60, end / 60]
        ys += [ys[-1], inst, inst]
    xs.append(xs[-1])
    ys.append(0.0)
    return xs, ys


def plan_figure(plan: Any, width: int = 720) -> Any:  # plan: a planner.plan.Plan
    from bokeh.layouts import row
    from bokeh.models import ColumnDataSource, Span
    from bokeh.plotting import figure

    size = figure(width=width, height=260, title="Cluster size over time (predicted)",
                  x_axis_label="minutes", y_axis_label=f"{plan.cloud.name} instances")
    policies = [("static", plan.static), ("naive elastic", plan.naive), ("planned", plan.planned)]
    for name, p in policies:
        if p is None:
            continue
        xs, ys = step_series(p)
        size.line(xs, ys, color=_COLORS[name], line_width=2, legend_label=name)
    size.add_layout(Span(location=plan.deadline / 60, dimension="height",
                         line_color="red", line_dash="dashed"))
    size.legend.location = "top_right"
    names = [n for n, p in policies if p is not None]
    src = ColumnDataSource({
        "policy": names,
        "cost": [p.cost for _, p in policies if p is not None],
        "jct": [p.jct / 60 for _, p in policies if p is not None],
        "color": [_COLORS[n] for n in names],
    })
    cost = figure(x_range=names, width=220, height=260, title="Predicted cost ($)",
                  tooltips=[("cost", "$@cost{0.00}"), ("JCT min", "@jct{0.0}")])
    cost.vbar(x="policy", top="cost", width=0.7, color="color", source=src)
    jct = figure(x_range=names, width=220, height=260, title="Predicted JCT (min)")
    jct.vbar(x="policy", top="jct", width=0.7, color="color", source=src)
    jct.add_layout(Span(location=plan.deadline / 60, dimension="width",
                        line_color="red", line_dash="dashed"))
    return row(size, cost, jct)


def plan_chart_html(plan: Any) -> str:
    """The chart as a self-contained iframe (BokehJS from the CDN) for ``_repr_html_``."""
    from bokeh.embed import file_html
    from bokeh.resources import CDN

    page = file_html(plan_figure(plan), CDN, title="nbtune plan")
    return (f'<iframe srcdoc="{html.escape(page, quote=True)}" '
            f'style="width:100%;height:300px;border:0"></iframe>')
