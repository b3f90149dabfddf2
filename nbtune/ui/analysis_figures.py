"""The analysis views as Bokeh models: history, importance, parallel coordinates, slices.

One tab each (:attr:`AnalysisFigures.panels`), beside the run's own views, so
a narrow notebook cell shows one view at a time; a budget selector above them
says which trials every view shows (:mod:`nbtune.ui.analysis`: each trial's
last value at the budget it reached; by default the highest budget enough
trials reached). Like :class:`~nbtune.ui.figures.Figures`, every render sends
whole column sets, so any browser view converges.

Importance fits a forest: :meth:`AnalysisFigures.render` takes it as an
argument, so the live dashboard computes it on a background thread once per
change of the trials or the budget, and shows it when it is ready.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bokeh.layouts import column, gridplot
from bokeh.models import (
    ColorBar,
    ColumnDataSource,
    Div,
    FactorRange,
    FixedTicker,
    HoverTool,
    LinearColorMapper,
    Range1d,
    Select,
    TabPanel,
    Tabs,
)
from bokeh.palettes import Viridis256
from bokeh.plotting import figure

from nbtune.core.space import Choice, Domain
from nbtune.ui import analysis as an
from nbtune.ui.columns import arrays

__all__ = ["AnalysisFigures", "ALL_BUDGETS", "analysis_layout"]

#: the selector's entry that shows every trial with a value, whatever its budget
ALL_BUDGETS = "every budget"


class AnalysisFigures:
    """Bokeh models of the four analysis views of one experiment (see the module doc)."""

    def __init__(self, metric: str, mode: str, space: Mapping[str, Any] | None, *,
                 width: int = 900) -> None:
        self.metric, self.mode = metric, mode
        self.space = {k: d for k, d in (space or {}).items() if isinstance(d, Domain)}
        self.names = list(self.space)
        self.chosen: str | None = None  # the budget a person picked (None: the default)
        self.shown: str | None = None  # the selector's value as the last render set it
        self._key: Any = None  # what the views show now: (rows version, budget)
        #: the importance the bars show now (None: not enough trials; a fresh object before
        #: the first render); a render sends it only when it changes
        self._shown_importance: Any = object()
        self.budget_select = Select(title="show trials that reached budget", value=ALL_BUDGETS,
                                    options=[ALL_BUDGETS], width=260, name="analysis-budget")
        self.budget_cmap = LinearColorMapper(palette=Viridis256, low=0.0, high=1.0)
        by_budget = {"field": "budget", "transform": self.budget_cmap}

        # named so that a page's BokehJS documents say which source is which view
        self.history_src = ColumnDataSource(arrays({"x": [], "value": [], "budget": [],
                                                    "trial": []}), name="analysis-history")
        self.best_src = ColumnDataSource(arrays({"x": [], "best": []}), name="analysis-best")
        self.history = figure(title=f"optimization history: each trial's last {metric}, "
                              "coloured by its budget; best so far", width=width, height=320,
                              x_axis_label="time (s)", y_axis_label=metric,
                              tools="pan,wheel_zoom,box_zoom,reset,save")
        dots = self.history.scatter("x", "value", source=self.history_src, size=6,
                                    color=by_budget, alpha=0.85)
        self.history.step("x", "best", source=self.best_src, mode="after", line_width=2.5,
                          line_color="#d62728")
        self.history.add_tools(HoverTool(renderers=[dots], tooltips=[
            ("trial", "@trial{0}"), (metric, "@value"), ("budget", "@budget"),
            ("time", "@x{0.0} s")]))
        # ticks at the budgets trials reached (the rungs), not at the mapper's in-between values
        self.budget_ticker = FixedTicker(ticks=[])
        self.history.add_layout(ColorBar(color_mapper=self.budget_cmap, width=8,
                                         ticker=self.budget_ticker, title="budget"), "right")

        names = self.names or ["(no searched hyperparameter)"]
        self.importance_src = ColumnDataSource(arrays({"name": [], "importance": []}),
                                               name="analysis-importance")
        self.importance = figure(title="hyperparameter importance (random forest, "
                                 "scikit-learn; waiting for enough trials)", width=width,
                                 height=max(160, 40 * len(names) + 60),
                                 y_range=FactorRange(*names), x_range=Range1d(0, 1),
                                 x_axis_label="share of the metric's variance explained",
                                 tools="save")
        self.importance.hbar(y="name", right="importance", height=0.6,
                             source=self.importance_src, color="#1f77b4")

        axes = [*self.names, metric]
        self.metric_cmap = LinearColorMapper(palette=list(reversed(Viridis256)) if mode == "min"
                                             else Viridis256, low=0.0, high=1.0)
        self.parallel_src = ColumnDataSource({"xs": [], "ys": [], "trial": [], "value": [],
                                              "scaled": [], "budget": []},
                                             name="analysis-parallel")
        self.parallel = figure(title=f"parallel coordinates: one line per trial, coloured by "
                               f"{metric} (yellow is better)", width=width, height=340,
                               x_range=FactorRange(*axes), y_range=Range1d(-0.05, 1.05),
                               tools="pan,box_zoom,tap,reset,save")
        lines = self.parallel.multi_line("xs", "ys", source=self.parallel_src, line_width=1.5,
                                         line_alpha=0.7,
                                         line_color={"field": "scaled",
                                                     "transform": self.metric_cmap})
        self.parallel.add_tools(HoverTool(renderers=[lines], tooltips=[
            ("trial", "@trial{0}"), (metric, "@value"), ("budget", "@budget")]))
        self.parallel.yaxis.axis_label = "position in the search space (0 = low end)"
        self.parallel.add_layout(ColorBar(color_mapper=self.metric_cmap, width=8,
                                          title=f"{metric} (scaled)"), "right")

        self.slice_srcs: dict[str, ColumnDataSource] = {}
        plots = []
        for k, d in self.space.items():
            src = ColumnDataSource(arrays({"x": [], "value": [], "budget": [], "trial": []}),
                                   name=f"analysis-slice-{k}")
            self.slice_srcs[k] = src
            cat = isinstance(d, Choice)
            ranged = {"x_range": FactorRange(*[str(o) for o in d.options])} if cat else {}
            p = figure(title=k, width=max(220, width // 3 - 10), height=220,
                       x_axis_type="log" if _is_log(d) else "linear", x_axis_label=k,
                       y_axis_label=metric, tools="pan,box_zoom,reset", **ranged)
            r = p.scatter("x", "value", source=src, size=5, color=by_budget, alpha=0.85)
            p.add_tools(HoverTool(renderers=[r], tooltips=[("trial", "@trial{0}"),
                                                           (metric, "@value"), (k, "@x")]))
            plots.append(p)
        self.slices = gridplot(plots, ncols=3, toolbar_location=None) if plots else \
            Div(text="no searched hyperparameter")

        #: the importance view's tab: while no view shows it, a live run is not refitted
        self.importance_panel = TabPanel(child=column(self.importance), title="importance")
        self.panels = [
            TabPanel(child=column(self.history), title="history"),
            self.importance_panel,
            TabPanel(child=column(self.parallel), title="parallel coordinates"),
            TabPanel(child=column(self.slices), title="slices"),
        ]

    # --------------------------------------------------------------- render
    def budget(self, snap: Any) -> float | None:
        """The budget every view filters on: the person's choice, else the default."""
        if self.chosen == ALL_BUDGETS:
            return None
        if self.chosen is not None:
            return float(self.chosen)
        return an.default_budget(snap)

    def wanted(self, snap: Any) -> Any:
        """What a render of ``snap`` would show: when it changes, render (and importance)."""
        return snap.versions["rows"], self.budget(snap)

    def importance_key(self, snap: Any) -> Any:
        """What the importance of ``snap`` depends on: the budget the views show and each
        shown trial's value (two snapshots of equal keys give the same bars)."""
        budget = self.budget(snap)
        return budget, tuple((e.trial_id, e.value) for e in an.ended_trials(snap, budget))

    def render(self, snap: Any, importance: Mapping[str, float] | None = None, *,
               force: bool = False, as_of: float | None = None,
               failed: str | None = None) -> None:
        """Show ``snap`` at the chosen budget (every part whole); ``importance`` as computed
        for :meth:`importance_key` (None: not yet, not enough trials, or the fit raised
        ``failed``), fitted on the state at time ``as_of`` when that is not ``snap``'s (a
        live run refits it every few seconds)."""
        key = self.wanted(snap)
        if key != self._key or force:
            self._key = key
            budget = key[1]
            self._render_select(snap, budget)
            self._render_history(snap, budget)
            self._render_parallel(snap, budget)
            for k, cols in an.slices(snap, self.space, budget=budget).items():
                x = cols["x"] if not isinstance(self.space[k], Choice) else [str(v) for v in
                                                                           cols["x"]]
                self.slice_srcs[k].data = arrays({"x": x, "value": cols["value"],
                                                  "budget": cols["budget"],
                                                  "trial": cols["trial_id"]})
        shown = failed if importance is None else (dict(importance), as_of)
        if force or shown != self._shown_importance:  # each change once, as the rest
            self.render_importance(importance, as_of=as_of, failed=failed)

    def render_importance(self, importance: Mapping[str, float] | None, *,
                          as_of: float | None = None, failed: str | None = None) -> None:
        """Show the bars of ``importance``, fitted on the state at time ``as_of`` (None: the
        state the other views show); without it, why there are none (``failed``: what the
        fit raised)."""
        self._shown_importance = failed if importance is None else (dict(importance), as_of)
        if importance is None:
            self.importance_src.data = arrays({"name": [], "importance": []})
            self.importance.title.text = (
                f"hyperparameter importance: the fit failed ({failed})" if failed else
                "hyperparameter importance (random forest, scikit-learn): needs "
                f"{an.MIN_TRIALS} trials with different values at this budget")
            return
        names = sorted(importance, key=importance.get)  # the largest bar on top
        self.importance_src.data = arrays({"name": names,
                                           "importance": [importance[k] for k in names]})
        self.importance.y_range.factors = names
        self.importance.title.text = ("hyperparameter importance (random forest, "
                                      "scikit-learn, seed 0)" + (
                                          "" if as_of is None else
                                          f" as of t = {as_of:,.0f} s: refitted every few "
                                          "seconds while the run goes"))

    def _render_select(self, snap: Any, budget: float | None) -> None:
        options = [ALL_BUDGETS, *(_label(b) for b in an.budgets(snap))]
        value = ALL_BUDGETS if budget is None else _label(budget)
        self.shown = value
        if list(self.budget_select.options) != options:
            self.budget_select.options = options
        if self.budget_select.value != value and value in options:
            self.budget_select.value = value
        reached = an.budgets(snap)
        lo, hi = (reached[0], reached[-1]) if reached else (0.0, 1.0)
        if hi - lo < 1e-9:  # one budget reached: a unit-wide scale, its colour the low end
            hi = lo + 1.0
        if (self.budget_cmap.low, self.budget_cmap.high) != (lo, hi):
            self.budget_cmap.low, self.budget_cmap.high = lo, hi
        if list(self.budget_ticker.ticks) != list(reached):
            self.budget_ticker.ticks = list(reached)

    def _render_history(self, snap: Any, budget: float | None) -> None:
        h = an.history(snap, budget=budget)
        self.history_src.data = arrays({"x": list(h.x), "value": list(h.value),
                                        "budget": list(h.budget), "trial": list(h.trial_id)})
        self.best_src.data = arrays({"x": list(h.x), "best": list(h.best)})

    def _render_parallel(self, snap: Any, budget: float | None) -> None:
        pc = an.parallel_coordinates(snap, self.space, budget=budget)
        axes = [*self.names, self.metric]
        units = [pc[f"{k}/unit"] for k in axes]
        n = len(pc["trial_id"])
        ys = [[0.5 if col[i] is None else col[i] for col in units] for i in range(n)]
        self.parallel_src.data = {"xs": [list(axes)] * n, "ys": ys, "trial": pc["trial_id"],
                                  "value": pc[self.metric],
                                  "scaled": pc[f"{self.metric}/unit"], "budget": pc["budget"]}


def _label(budget: float) -> str:
    return f"{budget:g}"


def _is_log(d: Domain) -> bool:
    return type(d).__name__ in ("LogUniform", "QLogUniform")


def analysis_layout(run: Any, analysis: AnalysisFigures) -> Any:
    """The dashboard's root: the budget selector, then the tabs (``children[1]``): the run's
    views (``run.layout``) in the first, then one per analysis view."""
    tabs = Tabs(tabs=[TabPanel(child=run.layout, title="run"), *analysis.panels])
    return column(analysis.budget_select, tabs)
