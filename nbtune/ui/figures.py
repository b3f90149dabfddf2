"""The dashboard's Bokeh figures and the code that feeds them a :class:`Delta`.

Pure Bokeh, no widgets: the live dashboard wraps these models in
``jupyter_bokeh.BokehModel`` widgets, and :func:`nbtune.ui.export_html`
writes the very same models to a standalone HTML file.

Every update is a handful of Bokeh document events, whatever the size of the
experiment: append-only data (curve points, closed allocation rectangles and
utilization segments) is ``stream``-ed with a rollover; the few things that
change in place (running rectangles, the current utilization level) are
replaced whole; table rows are patched by index. Trial colours live in one
``LinearColorMapper`` whose palette has one entry per trial id, so when a
trial changes state its whole curve is recoloured by one palette change
instead of re-sending its points, and no column holds strings (numbers go
out as binary buffers; strings would be JSON, one by one).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from bokeh.core.property.validation import validate
from bokeh.layouts import column
from bokeh.models import (
    ColorBar,
    ColumnDataSource,
    DataTable,
    Div,
    FixedTicker,
    HoverTool,
    LinearColorMapper,
    NumberFormatter,
    Range1d,
    StringEditor,
    StringFormatter,
    TableColumn,
)
from bokeh.palettes import Viridis256
from bokeh.plotting import figure

from nbtune.ui.columns import (
    TRIAL_COLORS,
    arrays,
    cell,
    config_columns,
    num,
    rect_cols,
    seg_cols,
)
from nbtune.ui.model import DISPLAY_STATES, Delta

__all__ = ["Figures", "STATE_COLORS", "config_columns", "summary_html", "format_duration"]

#: line colour of a trial by display state; finished-and-beaten trials recede
STATE_COLORS = {
    "best": "#d62728",
    "running": "#1f77b4",
    "promoted": "#2ca02c",
    "completed": "#17becf",
    "paused": "#9467bd",
    "pending": "#c5b0d5",
    "stopped": "#c7c7c7",
    "error": "#ff7f0e",
}
assert set(STATE_COLORS) == set(DISPLAY_STATES)
STATE_LEGEND = "curves: " + " ".join(
    f"<span style='color:{STATE_COLORS[s]}'>&#9644; {s}</span>"
    for s in ("best", "running", "promoted", "completed", "paused", "stopped", "error"))
_GREY = STATE_COLORS["stopped"]


class Figures:
    """The four views of an experiment as Bokeh models, updated by :meth:`apply`.

    ``rollover`` caps each streamed source, so a week-long experiment keeps
    the browser responsive (the oldest points scroll out; the table keeps
    every trial).
    """

    def __init__(self, metric: str, mode: str, *, space: Mapping[str, Any] | None = None,
                 title: str = "", rollover: int = 100_000, width: int = 900) -> None:
        self.metric, self.mode, self.rollover = metric, mode, int(rollover)
        self._row_of: dict[int, int] = {}
        self._last_point: dict[int, tuple[float, float]] = {}
        self._palette: list[str] = [_GREY]  # colour of each trial id
        self._lanes: list[int] = []
        self._util_kind = "allocated"
        # config key -> numeric?, fixed up front: new table columns later would be new models
        self._config_cols = config_columns(space or {})
        self._open_data: dict[int, Any] = {}

        self.header = Div(text=f"<b>{title}</b>", width=width)
        # the state colours as an HTML legend: a Bokeh legend needs a renderer per entry
        self.legend = Div(text=STATE_LEGEND, width=width)
        self._rows: list[dict[str, Any]] = []  # the table's rows, by row index
        self.seg_src = ColumnDataSource(arrays({"x0": [], "y0": [], "x1": [], "y1": [],
                                                 "trial": []}))
        self.pts_src = ColumnDataSource(arrays({"x": [], "y": [], "trial": [], "time": []}))
        self.best_src = ColumnDataSource(arrays({"x": [], "y": []}))
        self.alloc_src = ColumnDataSource(arrays(rect_cols(())))
        self.alloc_open_src = ColumnDataSource(arrays(rect_cols(())))
        self.util_src = ColumnDataSource(arrays(seg_cols(())))
        self.util_open_src = ColumnDataSource(arrays(seg_cols(())))
        self.table_src = ColumnDataSource(self._table_arrays([]))
        self.mapper = LinearColorMapper(palette=[_GREY], low=-0.5, high=0.5, nan_color=_GREY,
                                        low_color=_GREY, high_color=STATE_COLORS["running"])

        self.curves = self._curves_figure(width)
        self.util = self._util_figure(width)
        self.alloc = self._alloc_figure(width, self.util)
        self.table = DataTable(source=self.table_src, columns=self._table_columns(), width=width,
                               height=260, sortable=True, index_position=None)
        self.layout = column(self.header, self.legend, self.curves, self.util, self.alloc,
                             self.table)

    # -------------------------------------------------------------- figures
    def _curves_figure(self, width: int) -> Any:
        p = figure(title=f"learning curves ({self.metric}, {self.mode})", width=width, height=300,
                   x_axis_label="budget", y_axis_label=self.metric, tools="pan,wheel_zoom,"
                   "box_zoom,reset,save", output_backend="canvas")
        color = {"field": "trial", "transform": self.mapper}
        p.segment("x0", "y0", "x1", "y1", source=self.seg_src, line_color=color, line_width=1.5,
                  line_alpha=0.8)
        pts = p.scatter("x", "y", source=self.pts_src, size=3, color=color, alpha=0.8)
        p.line("x", "y", source=self.best_src, line_color=STATE_COLORS["best"], line_width=3)
        p.add_tools(HoverTool(renderers=[pts], tooltips=[
            ("trial", "@trial{0}"), ("budget", "@x"), (self.metric, "@y"),
            ("time", "@time{0.0} s")]))
        return p

    def _util_figure(self, width: int) -> Any:
        p = figure(title=util_title("GPU", "allocated"), width=width, height=180,
                   x_axis_label="time (s)", y_range=Range1d(0, 1), tools="xpan,xwheel_zoom,reset")
        cmap = LinearColorMapper(palette=Viridis256, low=0.0, high=1.0)
        fill = {"field": "util", "transform": cmap}
        rs = [p.quad(left="left", right="right", bottom="bottom", top="top", source=src,
                     fill_color=fill, line_color=None)
              for src in (self.util_src, self.util_open_src)]
        p.add_tools(HoverTool(renderers=rs, tooltips=[("GPU", "@gpu"), ("util", "@util{0%}")]))
        p.add_layout(ColorBar(color_mapper=cmap, width=8), "right")
        p.yaxis.ticker = FixedTicker(ticks=[])
        return p

    def _alloc_figure(self, width: int, share_x: Any) -> Any:
        trial_cmap = LinearColorMapper(palette=list(TRIAL_COLORS), low=-0.5,
                                       high=len(TRIAL_COLORS) - 0.5)
        p = figure(title="allocation (trials on GPU lanes; stacked = packed)", width=width,
                   height=220, x_range=share_x.x_range, y_range=Range1d(0, 1),
                   x_axis_label="time (s)", tools="xpan,xwheel_zoom,reset")
        rs = [p.quad(left="left", right="right", bottom="bottom", top="top", source=src,
                     fill_color={"field": "cidx", "transform": trial_cmap}, line_color="white",
                     line_width=0.5, fill_alpha=0.85)
              for src in (self.alloc_src, self.alloc_open_src)]
        p.add_tools(HoverTool(renderers=rs, tooltips=[
            ("trial", "@trial{0}"), ("GPU", "@gpu"), ("share", "@share{0.00}"),
            ("from", "@left{0.0}"), ("to", "@right{0.0}")]))
        p.yaxis.ticker = FixedTicker(ticks=[])
        return p

    # ---------------------------------------------------------------- table
    def _table_columns(self) -> list[TableColumn]:
        num = NumberFormatter(format="0.[0000]")
        text, editor = StringFormatter(), StringEditor()  # shared: fewer models to ship
        cols = [TableColumn(field="trial_id", title="trial", width=50, formatter=text),
                TableColumn(field="state", title="state", width=80, formatter=text),
                TableColumn(field="metric", title=f"{self.metric} (best)", formatter=num),
                TableColumn(field="last", title="last", formatter=num),
                TableColumn(field="budget", title="budget", formatter=num, width=60),
                TableColumn(field="promotions", title="promoted", width=60, formatter=text)]
        for k, is_num in self._config_cols.items():
            cols.append(TableColumn(field=f"config/{k}", title=k,
                                    formatter=num if is_num else text))
        cols += [TableColumn(field="start", title="start (s)", formatter=num),
                 TableColumn(field="end", title="end (s)", formatter=num),
                 TableColumn(field="error", title="error", formatter=text)]
        for c in cols:
            c.editor = editor
        return cols

    def _table_arrays(self, rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
        cols = arrays(self._table_cols(rows))
        for k, numeric in self._config_cols.items():
            if not numeric:
                cols[f"config/{k}"] = np.array(cols[f"config/{k}"], dtype=str)
        return cols

    def _table_cols(self, rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
        cols: dict[str, list[Any]] = {
            "trial_id": [r["trial_id"] for r in rows], "state": [r["state"] for r in rows],
            "metric": [num(r[self.metric]) for r in rows],
            "last": [num(r["last"]) for r in rows], "budget": [r["budget"] for r in rows],
            "promotions": [r["promotions"] for r in rows],
            "start": [num(r["start"]) for r in rows], "end": [num(r["end"]) for r in rows],
            "error": [r["error"] for r in rows],
        }
        for k in self._config_cols:
            cols[f"config/{k}"] = [cell(r["config"].get(k), self._config_cols[k]) for r in rows]
        return cols

    # ---------------------------------------------------------------- apply
    def apply(self, d: Delta) -> None:
        """Push one delta into the sources: a few document events, however much changed."""
        self._apply_rows(d)
        self._apply_curves(d)
        if d.lanes != self._lanes:
            self._set_lanes(d.lanes)
        if d.alloc_closed:
            self.alloc_src.stream(arrays(rect_cols(d.alloc_closed)), rollover=self.rollover)
        self._replace(self.alloc_open_src, rect_cols(d.alloc_open))
        if d.util_kind != self._util_kind:  # the runtime started measuring: drop estimates
            self._util_kind = d.util_kind
            self.util_src.data = arrays(seg_cols(()))
        title = util_title(d.util_device, d.util_kind)
        if self.util.title.text != title:
            self.util.title.text = title
        if d.util_closed:
            self.util_src.stream(arrays(seg_cols(d.util_closed)), rollover=self.rollover)
        self._replace(self.util_open_src, seg_cols(d.util_open))

    def _replace(self, src: ColumnDataSource, data: dict[str, list[Any]]) -> None:
        """Replace a small source's data, sending nothing when it did not change."""
        if self._open_data.get(id(src)) != data:
            self._open_data[id(src)] = data
            src.data = arrays(data)

    def _apply_rows(self, d: Delta) -> None:
        if not d.rows:
            return
        new = [r for tid, r in d.rows.items() if tid not in self._row_of]
        old = [(self._row_of[tid], r) for tid, r in d.rows.items() if tid in self._row_of]
        for i, r in old:
            self._rows[i] = r
        for r in new:
            self._row_of[r["trial_id"]] = len(self._rows)
            self._rows.append(r)
        if len(old) > 48:
            # many rows changed (a rung decided, the experiment ended): one binary replace
            # is cheaper than a patch listing every cell
            self.table_src.data = self._table_arrays(self._rows)
            return self._recolor(d)
        if old:
            patch: dict[str, list[tuple[int, Any]]] = {}
            for i, r in old:
                for col, vals in self._table_cols([r]).items():
                    patch.setdefault(col, []).append((i, vals[0]))
            self.table_src.patch(patch)
        if new:
            self.table_src.stream(self._table_arrays(new))
        self._recolor(d)

    def _recolor(self, d: Delta) -> None:
        """Give trials their state's colour through the mapper, in one change.

        Stopped and pending trials (the bulk of a long experiment) are grey.
        """
        pal = self._palette
        changed = False
        for tid, r in d.rows.items():
            if tid >= len(pal):
                pal.extend([_GREY] * (tid + 1 - len(pal)))
                changed = True
            color = _GREY if r["state"] in ("stopped", "pending") else STATE_COLORS[r["state"]]
            if pal[tid] != color:
                pal[tid] = color
                changed = True
        if changed:
            # Bokeh would validate each of the (one per trial) colours, the bulk of an
            # update's cost; they come from STATE_COLORS. The switch is process-wide, for
            # the duration of this one assignment.
            with validate(False):
                self.mapper.update(palette=list(pal), low=-0.5, high=len(pal) - 0.5)

    def _apply_curves(self, d: Delta) -> None:
        if d.points:
            seg: dict[str, list[Any]] = {"x0": [], "y0": [], "x1": [], "y1": [], "trial": []}
            pts: dict[str, list[Any]] = {"x": [], "y": [], "trial": [], "time": []}
            for tid, new in d.points.items():
                if not new.budget:
                    continue
                key, n = float(tid), len(new.budget)
                xs, ys = new.budget, new.value
                pts["x"] += xs
                pts["y"] += ys
                pts["time"] += new.time
                pts["trial"] += [key] * n
                prev = self._last_point.get(tid)
                if prev is not None:  # join the new points to the last one already drawn
                    xs, ys = [prev[0], *xs], [prev[1], *ys]
                seg["x0"] += xs[:-1]
                seg["y0"] += ys[:-1]
                seg["x1"] += xs[1:]
                seg["y1"] += ys[1:]
                seg["trial"] += [key] * (len(xs) - 1)
                self._last_point[tid] = (xs[-1], ys[-1])
            if seg["x0"]:
                self.seg_src.stream(arrays(seg), rollover=self.rollover)
            if pts["x"]:
                self.pts_src.stream(arrays(pts), rollover=self.rollover)
        if d.best_curve is not None:
            self.best_src.data = arrays({"x": d.best_curve.budget, "y": d.best_curve.value})

    def _set_lanes(self, lanes: list[int]) -> None:
        self._lanes = list(lanes)
        n = max(len(lanes), 1)
        ticks = [i + 0.5 for i in range(len(lanes))]
        labels = {i + 0.5: f"GPU {g}" for i, g in enumerate(lanes)}
        for p in (self.util, self.alloc):
            p.y_range.update(start=0, end=n)
            p.yaxis.ticker.ticks = ticks  # change the existing ticker: a new model costs more
            p.yaxis.major_label_overrides = labels
            p.height = max(140, min(60 + 24 * n, 600))

    def set_header(self, html: str) -> None:
        if self.header.text != html:
            self.header.text = html


def util_title(device: str, kind: str) -> str:
    """``CPU utilization (measured)``: what the lanes are and whether they were measured."""
    return f"{device} utilization ({kind})"


def state_word(d: Delta) -> str:
    """``failed`` (every trial errored), ``done``, ``paused`` or ``running``."""
    if d.done and d.progress is not None and d.progress.failed:
        return "failed"
    return "done" if d.done else ("paused" if d.paused else "running")


def progress_parts(d: Delta) -> list[str]:
    """Trials settled, trials in error (never hidden), ETA: the header's and status line's words."""
    p = d.progress
    if p is None:
        return []
    parts = [f"{p.settled}/{p.total} trials settled" if p.total
             else f"{p.settled} trials settled"]
    if p.errors:
        parts.append(f'<span style="color:#d62728"><b>{p.errors} errored</b></span>'
                     " (tracebacks: exp.results()['error'])")
    if p.eta is not None and not d.done:
        parts.append(f"ETA {format_duration(p.eta)}")
    return parts


def summary_html(title: str, d: Delta) -> str:
    """One line of status for the header: state, cost of a planned run, progress, errors."""
    parts = [f"<b>{title}</b> &middot; {state_word(d)} &middot; t = {d.time:,.0f} s"]
    if d.cost is not None:  # a planned run: the metered bill, live
        parts.append(f"${d.cost:,.2f} {'billed' if d.done else 'so far'}")
    return " &middot; ".join(parts + progress_parts(d))


def format_duration(seconds: float) -> str:
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"
