"""The dashboard's Bokeh figures and the code that renders a :class:`Snapshot` into them.

Pure Bokeh, no widgets: the live dashboard wraps these models in
``jupyter_bokeh.BokehModel`` widgets, and :func:`nbtune.ui.export_html`
writes the very same models to a standalone HTML file.

Every update renders a whole snapshot: each part that changed goes out as a
complete column set (see :meth:`Figures.render` for why never increments).
Trial colours live in one ``LinearColorMapper`` whose palette has one entry
per trial id, so when a trial changes state its whole curve is recoloured by
one palette change, and no column but the table's holds strings.
"""

from __future__ import annotations

import html
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
from nbtune.ui.dashboard_model import DISPLAY_STATES, Delta
from nbtune.ui.snapshot import Snapshot

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
        self._palette: list[str] = [_GREY]  # colour of each trial id
        self._lanes: list[int] = []
        # config key -> numeric?, fixed up front: new table columns later would be new models
        self._config_cols = config_columns(space or {})
        self._sent: dict[str, Any] = {}  # part -> the version last sent (see render)

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
        # columns keep their widths (force_fit squeezed "completed" to "comple" once config
        # columns were added); wider than the panel, the table scrolls sideways
        self.table = DataTable(source=self.table_src, columns=self._table_columns(), width=width,
                               height=260, sortable=True, index_position=None,
                               autosize_mode="none")
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
        p = figure(title="utilization (waiting for the cluster)", width=width, height=180,
                   x_axis_label="time (s)", y_range=Range1d(0, 1), tools="xpan,xwheel_zoom,reset")
        cmap = LinearColorMapper(palette=Viridis256, low=0.0, high=1.0)
        fill = {"field": "util", "transform": cmap}
        rs = [p.quad(left="left", right="right", bottom="bottom", top="top", source=src,
                     fill_color=fill, line_color=None)
              for src in (self.util_src, self.util_open_src)]
        p.add_tools(HoverTool(renderers=rs, tooltips=[("lane", "@gpu"), ("busy", "@util{0%}")]))
        p.add_layout(ColorBar(color_mapper=cmap, width=8), "right")
        p.yaxis.ticker = FixedTicker(ticks=[])
        return p

    def _alloc_figure(self, width: int, share_x: Any) -> Any:
        trial_cmap = LinearColorMapper(palette=list(TRIAL_COLORS), low=-0.5,
                                       high=len(TRIAL_COLORS) - 0.5)
        p = figure(title=alloc_title(None), width=width,
                   height=220, x_range=share_x.x_range, y_range=Range1d(0, 1),
                   x_axis_label="time (s)", tools="xpan,xwheel_zoom,reset")
        rs = [p.quad(left="left", right="right", bottom="bottom", top="top", source=src,
                     fill_color={"field": "cidx", "transform": trial_cmap}, line_color="white",
                     line_width=0.5, fill_alpha=0.85)
              for src in (self.alloc_src, self.alloc_open_src)]
        p.add_tools(HoverTool(renderers=rs, tooltips=[
            ("trial", "@trial{0}"), ("lane", "@gpu"), ("share", "@share{0.00}"),
            ("from", "@left{0.0}"), ("to", "@right{0.0}")]))
        p.yaxis.ticker = FixedTicker(ticks=[])
        return p

    # ---------------------------------------------------------------- table
    def _table_columns(self) -> list[TableColumn]:
        num = NumberFormatter(format="0.[0000]")
        text, editor = StringFormatter(), StringEditor()  # shared: fewer models to ship
        cols = [TableColumn(field="trial_id", title="trial", width=50, formatter=text),
                TableColumn(field="state", title="state", width=105, formatter=text),
                TableColumn(field="metric", title=f"{self.metric} (best)", formatter=num,
                            width=110),
                TableColumn(field="last", title="last", formatter=num, width=80),
                TableColumn(field="budget", title="budget", formatter=num, width=70),
                TableColumn(field="promotions", title="promoted", width=80, formatter=text),
                TableColumn(field="role", title="role", width=70, formatter=text)]
        for k, is_num in self._config_cols.items():
            cols.append(TableColumn(field=f"config/{k}", title=k, width=max(80, 9 * len(k)),
                                    formatter=num if is_num else text))
        cols += [TableColumn(field="start", title="start (s)", formatter=num, width=75),
                 TableColumn(field="end", title="end (s)", formatter=num, width=75),
                 TableColumn(field="error", title="error", formatter=text, width=300)]
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
            "role": [r.get("role", "") for r in rows],
            "metric": [num(r[self.metric]) for r in rows],
            "last": [num(r["last"]) for r in rows], "budget": [r["budget"] for r in rows],
            "promotions": [r["promotions"] for r in rows],
            "start": [num(r["start"]) for r in rows], "end": [num(r["end"]) for r in rows],
            "error": [r["error"] for r in rows],
        }
        for k in self._config_cols:
            cols[f"config/{k}"] = [cell(r["config"].get(k), self._config_cols[k]) for r in rows]
        return cols

    # --------------------------------------------------------------- render
    def render(self, s: Snapshot, *, force: bool = False) -> None:
        """Show a snapshot whole: each part that changed goes out as a complete column set.

        Whole sets, never increments, so every browser view converges at the
        next update, however many messages it missed (a view is created
        asynchronously while updates flow; a reloaded page or a second tab
        starts from the widget's render bundle). ``force`` re-sends every
        part and property, changed or not. The table is *streamed* whole with
        a rollover of its length (see :meth:`_render_table` for its redraw).
        """
        v = s.versions
        if self._due("rows", v["rows"], force):
            self._render_table(s.rows)
            self._recolor(s.rows, force)
        if self._due("curves", v["curves"], force):
            self._render_curves(s)
        best = s.best_curve
        if self._due("best", (s.best, 0 if best is None else len(best.budget)), force):
            self.best_src.data = arrays({"x": [] if best is None else list(best.budget),
                                         "y": [] if best is None else list(best.value)})
        if force or list(s.lanes) != self._lanes:
            self._set_lanes(list(s.lanes), s.util_device, force)
        if self._due("alloc", v["alloc"], force):
            self.alloc_src.data = arrays(rect_cols(s.alloc_closed[-self.rollover:]))
        if self._due("alloc_open", s.alloc_open, force):
            self.alloc_open_src.data = arrays(rect_cols(s.alloc_open))
        if self._due("util", v["util"], force):
            self.util_src.data = arrays(seg_cols(s.util_closed[-self.rollover:]))
        if self._due("util_open", s.util_open, force):
            self.util_open_src.data = arrays(seg_cols(s.util_open))
        if s.util_device is not None:  # the title waits for the cluster: it never switches
            _set(self.util.title, "text", util_title(s.util_device, s.util_kind), force)
            _set(self.alloc.title, "text", alloc_title(s.util_device), force)

    def _due(self, part: str, key: Any, force: bool) -> bool:
        """Whether a part must go out: its content changed since it was sent, or ``force``."""
        if force or self._sent.get(part) != key:
            self._sent[part] = key
            return True
        return False

    def _render_table(self, rows: tuple[Mapping[str, Any], ...]) -> None:
        """Send the rows, and make every view's grid redraw them.

        BokehJS's DataTable redraws only when its view's ``indices`` change or the
        view itself changes; a same-length update (states and budgets changing while
        the set of trials does not: trials waiting at a rung) left the drawn grid
        stale while its source was current. Flipping the view's ``tags`` between two
        values is a view change that selects the same rows; a plain value, not a model, so
        Bokeh does not walk the whole document again for it, as it does when a model-valued
        property (the view's filter) changes.
        """
        if not rows:
            return
        same_length = len(rows) == len(self._rows)
        self._rows = list(rows)
        self._row_of = {r["trial_id"]: i for i, r in enumerate(rows)}
        self.table_src.stream(self._table_arrays(self._rows), rollover=len(rows))
        if same_length:
            view = self.table.view
            view.tags = [1] if view.tags == [0] else [0]

    def _recolor(self, rows: tuple[Mapping[str, Any], ...], force: bool) -> None:
        """Give trials their state's colour through the mapper, in one change.

        Stopped and pending trials (the bulk of a long experiment) are grey.
        """
        n = max((r["trial_id"] for r in rows), default=-1) + 1
        pal = [_GREY] * max(n, 1)
        for r in rows:
            state = r["colour"]
            pal[r["trial_id"]] = _GREY if state in ("stopped", "pending") else STATE_COLORS[state]
        if force or pal != self._palette:
            self._palette = pal
            # Bokeh would validate each of the (one per trial) colours, the bulk of an
            # update's cost; they come from STATE_COLORS. The switch is process-wide, for
            # the duration of this one assignment.
            with validate(False):
                self.mapper.update(palette=list(pal), low=-0.5, high=len(pal) - 0.5)
            if force:
                _set(self.mapper, "palette", self.mapper.palette, True)

    def _render_curves(self, s: Snapshot) -> None:
        seg: dict[str, list[Any]] = {"x0": [], "y0": [], "x1": [], "y1": [], "trial": []}
        pts: dict[str, list[Any]] = {"x": [], "y": [], "trial": [], "time": []}
        for tid in sorted(s.curves):
            c = s.curves[tid]
            n = len(c.budget)
            if not n:
                continue
            key = float(tid)
            pts["x"] += c.budget
            pts["y"] += c.value
            pts["time"] += c.time
            pts["trial"] += [key] * n
            seg["x0"] += c.budget[:-1]
            seg["y0"] += c.value[:-1]
            seg["x1"] += c.budget[1:]
            seg["y1"] += c.value[1:]
            seg["trial"] += [key] * (n - 1)
        cap = self.rollover
        self.seg_src.data = arrays({k: v[-cap:] for k, v in seg.items()})
        self.pts_src.data = arrays({k: v[-cap:] for k, v in pts.items()})

    def _set_lanes(self, lanes: list[int], device: str | None, force: bool) -> None:
        self._lanes = list(lanes)
        n = max(len(lanes), 1)
        ticks = [i + 0.5 for i in range(len(lanes))]
        word = "worker" if device == "CPU" else "GPU"
        # float keys: BokehJS looks labels up by the tick's number (string keys never match)
        labels = {i + 0.5: f"{word} {g}" for i, g in enumerate(lanes)}
        for p in (self.util, self.alloc):
            for model, attr, value in ((p.y_range, "start", 0), (p.y_range, "end", n),
                                       (p.yaxis[0].ticker, "ticks", ticks),
                                       (p.yaxis[0], "major_label_overrides", labels),
                                       (p, "height", max(140, min(60 + 24 * n, 600)))):
                _set(model, attr, value, force)

    def set_header(self, html: str, force: bool = False) -> None:
        _set(self.header, "text", html, force)


def _set(model: Any, attr: str, value: Any, force: bool) -> None:
    """Set a property; with ``force`` send it even when unchanged (a view may have missed it)."""
    if getattr(model, attr) != value:
        setattr(model, attr, value)
    elif force:
        model.trigger(attr, value, value)


def alloc_title(device: str | None) -> str:
    """The allocation lanes' title: GPU lanes only on GPUs, worker lanes on CPU workers
    standing in for them, just lanes while the cluster is not known."""
    lanes = {"GPU": "GPU lanes", "CPU": "worker lanes"}.get(device or "", "lanes")
    return f"allocation (trials on {lanes}; stacked = packed)"


def util_title(device: str, kind: str) -> str:
    """What the utilization lanes show and whether it was measured.

    On CPU workers (standing in for GPUs) it is the CPU share of each worker's
    trial processes (psutil), never a GPU utilization.
    """
    if device == "CPU":
        how = "measured with psutil" if kind == "measured" else kind
        return f"CPU share of each worker's trial processes ({how})"
    return f"GPU utilization ({kind})"


def state_word(d: Delta | Snapshot) -> str:
    """``failed`` (every trial errored), ``done``, ``paused`` or ``running``."""
    if d.done and d.progress is not None and d.progress.failed:
        return "failed"
    return "done" if d.done else ("paused" if d.paused else "running")


def progress_parts(d: Delta | Snapshot) -> list[str]:
    """Trials ended, trials in error (never hidden), ETA: the header's and status line's words."""
    p = d.progress
    if p is None:
        return []
    # ended/total, as `nbtune ls` and the sidebar count (a trial paused at a rung has not
    # ended); the progress bar and ETA count settled trials (paused or ended)
    parts = [f"{p.ended} trials ended" if p.ended else f"{p.settled} trials settled"]
    if p.errors:
        parts.append(f'<span style="color:#d62728"><b>{p.errors} errored</b></span>'
                     " (tracebacks: exp.results()['error'])")
    if p.eta is not None and not d.done:
        parts.append(f"ETA {format_duration(p.eta)}")
    return parts


def summary_html(title: str, d: Delta | Snapshot, dask_link: str | None = None,
                 dask_page: str | None = None) -> str:
    """One line of status for the header: state, cost of a planned run, progress, errors,
    and links to the Dask dashboard of the cluster the trials run on and to its nbtune page
    (if any)."""
    parts = [f"<b>{title}</b> &middot; {state_word(d)} &middot; t = {d.time:,.0f} s"]
    planned = getattr(d, "planned", None)
    if planned is not None:  # a planned run: its JCT, measured (so far) beside predicted
        parts.append(f"JCT {format_duration(d.time)} {'measured' if d.done else 'so far'}, "
                     f"{format_duration(planned[0])} planned")
    if d.cost is not None:  # a planned run: the metered bill, live
        bill = f"${d.cost:,.2f} {'billed' if d.done else 'so far'}"
        parts.append(bill if planned is None else f"{bill}, ${planned[1]:,.2f} planned")
    parts += progress_parts(d)
    if dask_link:
        href = html.escape(dask_link, quote=True)
        parts.append(f'<a href="{href}" target="_blank" rel="noopener" '
                     f'class="nbtune-dask-link">Dask dashboard</a>')
    if dask_page:
        href = html.escape(dask_page, quote=True)
        parts.append(f'<a href="{href}" target="_blank" rel="noopener" '
                     f'class="nbtune-dask-page">trials on Dask</a>')
    return " &middot; ".join(parts)


def format_duration(seconds: float) -> str:
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"
