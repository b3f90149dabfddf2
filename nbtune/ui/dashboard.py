"""The live dashboard: ipywidgets controls around the Bokeh figures, fed on a throttle.

A :class:`Dashboard` owns a :class:`~nbtune.ui.dashboard_model.DashboardModel` and a
:class:`~nbtune.ui.figures.Figures`; a daemon thread takes an immutable
snapshot of the model every ``period`` seconds and renders it whole into the
Bokeh sources, which ``jupyter_bokeh.BokehModel`` forwards to the browser as
ordinary widget messages. A thread rather than a task on the kernel's event loop keeps the
dashboard moving while a cell blocks in ``exp.wait()``. The dashboard measures
its own cost and spaces its work so it never takes more than ``max_overhead``
of the process's time, whatever the experiment's size: half for the updates
(the thread stretches its period), half for refitting the importance view's
forest while the run goes (see :meth:`Dashboard._importance_of`).

One source of truth for every view. Each browser view of a BokehModel
builds its own document from the widget's ``render_bundle`` and then applies
the messages that follow; a view made later (``exp`` shown again, a page
reload, a second tab) or made while messages were already flowing (the first
display, rendered asynchronously) would start from a stale bundle or miss
messages; one made between the messages of a patch reads all later patches
shifted, and applies none of them. So: every update renders the whole snapshot
(whole column sets, never increments; everything is re-sent for :data:`RESYNC` seconds after a
display, at the end, and after a message from a view, which a new view sends
once it has laid itself out, at most once per :data:`RESYNC` seconds); a display
pushes a fresh render bundle, and until the page's first view has sent a message,
updates are render bundles (one message each) rather than patches; and a
frontend asking for the widget's state (reload, second tab) gets a bundle
made from the current document.

BokehJS is loaded inline (no CDN is reachable on many GPU servers) with every
display: a page opened later (Notebook 7 opens a second page per notebook)
has no BokehJS unless an output it renders loads it. The jupyter_bokeh
frontend extension uses that global BokehJS, so the Python and JavaScript
sides are always the same Bokeh version.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

import ipywidgets as W

from nbtune.ui.analysis import importance
from nbtune.ui.analysis_figures import AnalysisFigures, analysis_layout
from nbtune.ui.dashboard_model import DashboardModel
from nbtune.ui.figures import Figures, progress_parts, state_word, summary_html
from nbtune.ui.snapshot import Snapshot, Snapshots

if TYPE_CHECKING:
    from nbtune.experiment import Experiment

__all__ = ["Dashboard", "dashboard_for", "load_bokehjs", "patch_message", "show"]

log = logging.getLogger(__name__)
_BOKEHJS_LOADED = False
_DASHBOARDS: weakref.WeakKeyDictionary[Any, Dashboard] = weakref.WeakKeyDictionary()
#: seconds after a display during which every update re-sends everything (the browser
#: creates its view asynchronously; messages sent before that are not applied to it)
RESYNC = 10.0
#: seconds after a display during which, until a view has sent a message, every update
#: goes out as a whole render bundle (one message) rather than a patch (several)
FIRST_VIEW = 60.0
#: fits the analysis views' importance off the dashboards' threads, one at a time
_IMPORTANCE = ThreadPoolExecutor(1, thread_name_prefix="nbtune-importance")
#: fits of one state tried again after the first raised (a failure may be passing: memory,
#: an import another thread was running); then the view says why it has no bars
FIT_RETRIES = 2


def _log_failure(future: Future[Any]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.warning("nbtune: importance failed: %s", future.exception())


def load_bokehjs(force: bool = False) -> None:
    """Publish BokehJS (inline: core, widgets, tables) into the notebook.

    Once per kernel unless ``force=True``; every dashboard display forces it,
    because a page opened later only has BokehJS if an output it shows loads it.
    """
    global _BOKEHJS_LOADED
    if _BOKEHJS_LOADED and not force:
        return
    from bokeh.io.notebook import JS_MIME_TYPE, LOAD_MIME_TYPE, publish_display_data
    from bokeh.resources import INLINE

    try:  # only the bundles the dashboard uses: ~2 MB instead of ~4 MB with MathJax and GL
        from bokeh.embed.bundle import bundle_for_objs_and_resources
        from bokeh.io.notebook import _loading_js

        bundle = bundle_for_objs_and_resources(
            [Figures("metric", "min").layout], INLINE)
        publish_display_data({JS_MIME_TYPE: _loading_js(bundle, None, 5000, True),
                              LOAD_MIME_TYPE: _loading_js(bundle, None, 5000, False)})
    except (ImportError, AttributeError, TypeError):  # Bokeh changed its private helper:
        # load everything the public way
        from bokeh.io.notebook import load_notebook

        load_notebook(resources=INLINE, hide_banner=True)
    _BOKEHJS_LOADED = True


def _batched_bokeh_model() -> type:
    """``BokehModel`` that sends the events of one update as one PATCH-DOC message.

    ``jupyter_bokeh`` sends every Bokeh document event as its own PATCH-DOC,
    and Bokeh builds a serializer over every model of the document for each
    one; a dashboard update makes a dozen events, so batching them cuts the
    kernel-side cost several-fold. The message is the standard one (a
    PATCH-DOC may carry any number of events), so the frontend is unchanged.
    """
    from jupyter_bokeh import BokehModel

    class BatchedBokehModel(BokehModel):
        _batch: list[Any] | None = None
        #: held while the browser's changes (a table selection) are applied, so they do
        #: not interleave with an update from the dashboard's thread
        lock: Any = None

        #: called (under ``lock``) for every message a browser view sends; see Dashboard
        view_spoke: Callable[[], None] | None = None

        def _sync_model(self, model: Any, content: Any, buffers: Any) -> None:
            with self.lock or nullcontext():
                super()._sync_model(model, content, buffers)
                if self.view_spoke is not None:
                    self.view_spoke()

        #: document changes so far, and the bundle made at which count (see get_state): the
        #: widget is made with a bundle of the document as it is (count 0)
        _changes = 0
        _bundled_at = 0

        def get_state(self, key: Any = None, drop_defaults: bool = False) -> dict[str, Any]:
            """The state a frontend gets (a reload and a second tab ask for every widget's
            state at once, a single view by ``request_state``): with a bundle of the
            document as it is now, not as it was when the widget was made. The bundle is
            made once per change of the document: a reloaded page asks for every widget's
            state in one request it gives up on after a few seconds, so the answer must
            not wait on serializing the whole document again."""
            if key is not None and key != "render_bundle" and "render_bundle" not in key:
                return super().get_state(key, drop_defaults)
            with self.lock or nullcontext():  # no update half-applied meanwhile
                if self._bundled_at != self._changes:
                    # stored silently: a trait change would re-render every open view
                    self._trait_values["render_bundle"] = self._model_to_traits(self._model)
                    self._bundled_at = self._changes
                return super().get_state(key, drop_defaults)

        def refresh(self) -> None:
            """Push a bundle of the current document to the frontend: views made from now
            on (and the open ones, re-rendered) start from the current state."""
            self.send_state("render_bundle")

        def _document_patched(self, event: Any) -> None:
            self._changes += 1  # the document changed: the next state gets a new bundle
            if self._batch is not None and event.setter is not self:
                self._batch.append(event)
            else:
                super()._document_patched(event)

        @property
        def changes(self) -> int:
            """How many times the document changed (a counter: compare two readings)."""
            return self._changes

        @contextmanager
        def batch(self, *, send: bool = True) -> Iterator[None]:
            """Collect the document's events, then send them as one patch (or, with
            ``send=False``, not at all: a later :meth:`refresh` carries them)."""
            self._batch = []
            try:
                yield
            finally:
                events, self._batch = self._batch, None
                if events and send:
                    self._send_patch(patch_message(events))

        def _send_patch(self, msg: Any) -> None:  # the same frames as BokehModel's
            self.send({"msg": "patch", "payload": msg.header_json})
            self.send({"msg": "patch", "payload": msg.metadata_json})
            self.send({"msg": "patch", "payload": msg.content_json})
            for buffer in msg.buffers:
                self.send({"msg": "patch", "payload": json.dumps(buffer.ref)})
                self.send({"msg": "patch"}, [buffer.to_bytes()])

    return BatchedBokehModel


def patch_message(events: list[Any]) -> Any:
    """One PATCH-DOC message of ``events``, their numpy columns inline (base64) rather than
    as binary buffers.

    Each buffer of a message costs the widget two more comm messages (jupyter_bokeh
    sends one per part), more than encoding it inline; the dashboard's long columns
    are numpy arrays (:func:`nbtune.ui.columns.arrays`), so each goes out as one block
    inside the message's JSON. The message is the standard one: BokehJS reads an inline
    block as it reads a buffer.
    """
    try:
        from bokeh.core.serialization import Serializer
        from bokeh.document.json import PatchJson
        from bokeh.protocol.messages.patch_doc import patch_doc
    except ImportError:  # Bokeh moved these: its own message, arrays as buffers
        from bokeh.protocol import Protocol

        return Protocol().create("PATCH-DOC", events)
    doc = events[0].document
    serializer = Serializer(references=doc.models.synced_references, deferred=False)
    content = PatchJson(events=serializer.encode(events))
    doc.models.flush_synced(lambda model: not serializer.has_ref(model))
    return patch_doc(patch_doc.create_header(), {}, content)


class Dashboard:
    """Live view and controls of one :class:`~nbtune.experiment.Experiment`.

    ``period`` is the update interval in seconds; ``max_overhead`` the share of
    time the dashboard's own work may take, half for the updates (the period
    stretches to respect it), half for the live importance refits;
    ``autostart=False`` leaves updating to explicit :meth:`update` calls.

    Built from an experiment, it attaches at once. Built with ``metric``,
    ``mode`` and ``space`` instead (what ``%%tune`` does), it can be shown
    before the experiment exists and :meth:`attach`-ed when ``tune`` returns:
    the one-off cost of building ~200 Bokeh models and their widget then lands
    before the trials start instead of competing with their first launches.
    """

    def __init__(self, experiment: Experiment | None = None, *, metric: str | None = None,
                 mode: str | None = None, space: Any = None, name: str = "",
                 period: float = 0.5, max_overhead: float = 0.02,
                 autostart: bool = True) -> None:
        if period <= 0:
            raise ValueError(f"period must be > 0 seconds, got {period}")
        if not 0 < max_overhead <= 1:
            raise ValueError(f"max_overhead must be in (0, 1], got {max_overhead}")
        if experiment is not None:
            metric, mode = experiment.metric, experiment.mode
            space, name = experiment.engine.algorithm.space, experiment.name
        elif metric is None or mode is None:
            raise ValueError("give the experiment, or metric and mode (and space) to attach "
                             "one later")
        self.experiment: Experiment | None = None
        self.model: DashboardModel | None = None
        self.period, self.max_overhead = float(period), float(max_overhead)
        self.figures = Figures(metric, mode, title=name, space=space)
        self.analysis = AnalysisFigures(metric, mode, space)
        #: the Bokeh root: the run's views and the analysis views, one tab each
        self.layout = analysis_layout(self.figures, self.analysis)
        #: the tabs of the run's and the analysis views (a person's pick arrives as ``active``)
        self.tabs = self.layout.children[1]
        self._tab_seen = self.tabs.active
        self.tabs.on_change("active", self._on_tab)
        #: the last fit asked for and the last one ended: (what it fits, the fit, the
        #: snapshot's time)
        self._importance: tuple[Any, Future[Any], float] | None = None
        self._fit_ready: tuple[Any, Future[Any], float] | None = None
        self._fit_cost = 0.0  # CPU seconds the last ended fit took (on the fitting thread)
        self._fit_started = -float("inf")  # time.monotonic() when the last fit was asked for
        self._fit_now = False  # a person picked a budget or the importance tab: fit at once
        self._fit_retries = 0  # fits of the current state asked for again after one raised
        self._fit_shown: Future[Any] | None = None  # the ended fit the last update rendered
        self._autostart = autostart
        self.analysis.budget_select.on_change("value", self._on_budget)
        self.updates = 0
        self.update_seconds = 0.0  # CPU time spent in update(), for the overhead budget
        self.last: Snapshot | None = None
        self.dask_link: str | None = None
        self.dask_page: str | None = None
        self._resync_until = 0.0  # re-send everything until then (see RESYNC)
        self._view_spoke = False  # a browser view sent a message since the last forced update
        self._forced_at = -float("inf")  # time.monotonic() of the last forced update
        self._view_seen = False  # some browser view has sent a message (see _ipython_display_)
        self._bundles_until = 0.0  # until then, while no view was seen: bundles, not patches
        self._lock = threading.RLock()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self._build_controls()
        #: the Bokeh widget; made after the first update when built for an experiment, so
        #: that its first bundle is the one serialization of the rendered document
        self.plot: Any = None
        if experiment is not None:
            self._follow(experiment, autostart)
            self.update()  # renders into the figures only: there is no widget yet
        self.plot = _batched_bokeh_model()(self.layout)
        self.plot.lock = self._lock
        self.plot.view_spoke = self._on_view_message
        self.widget = W.VBox([W.HBox([self.progress, self.status]), self.controls,
                              self.message, self.plot])
        if experiment is None:
            self.status.value = "<b>starting</b>"
        elif autostart and not self.settled:
            self.start()

    def attach(self, experiment: Experiment, *, autostart: bool = True) -> Dashboard:
        """Follow ``experiment`` (once): listen to its engine, show it, start updating."""
        self._follow(experiment, autostart)
        self.update()
        if autostart and not self.settled:
            self.start()
        return self

    def _follow(self, experiment: Experiment, autostart: bool) -> None:
        """Listen to ``experiment``'s engine (the first half of :meth:`attach`)."""
        if self.experiment is not None:
            raise RuntimeError(f"this dashboard already shows {self.experiment.name!r}")
        if experiment.metric != self.figures.metric:
            raise ValueError(f"the dashboard plots {self.figures.metric!r} but the experiment "
                             f"reports {experiment.metric!r}")
        self.experiment = experiment
        # a runtime on the wall clock samples utilization: "measured" from the first frame
        self.model = DashboardModel(experiment.engine,
                                    measured=not experiment.runtime.virtual_clock,
                                    cost=lambda: experiment.cost, runtime=experiment.runtime,
                                    planned=experiment.planned)
        self.snapshots = Snapshots(self.model)
        # a runtime with live workers runs them on a cluster that may have a Dask dashboard
        live = experiment.runtime.live_workers
        self.dask_link = experiment.runtime.dashboard_link if live else None
        self.dask_page = getattr(experiment.runtime, "trials_page_link", None) if live else None
        _DASHBOARDS.setdefault(experiment, self)
        self._resync_until = time.monotonic() + RESYNC
        self._autostart = autostart

    # -------------------------------------------------------------- widgets
    def _build_controls(self) -> None:
        lay = W.Layout(width="auto")
        self.progress = W.FloatProgress(value=0.0, min=0.0, max=1.0, bar_style="info",
                                        layout=W.Layout(width="300px"))
        self.status = W.HTML()
        self.message = W.HTML()
        self.stop_button = W.Button(description="Stop experiment", button_style="danger",
                                    icon="stop", layout=lay)
        self.pause_button = W.ToggleButton(description="Pause", icon="pause", layout=lay)
        self.concurrency = W.BoundedIntText(value=0, min=0, max=100_000, step=1,
                                            description="max running (0 = all)",
                                            style={"description_width": "initial"},
                                            layout=W.Layout(width="200px"))
        self.trial_box = W.IntText(value=0, description="trial",
                                   layout=W.Layout(width="130px"))
        self.stop_trial_button = W.Button(description="Stop trial", icon="times", layout=lay)
        self.stop_button.on_click(lambda _: self._control("stop"))
        self.pause_button.observe(self._on_pause, names="value")
        self.concurrency.observe(self._on_concurrency, names="value")
        self.stop_trial_button.on_click(
            lambda _: self._control("stop_trial", int(self.trial_box.value)))
        self.figures.table_src.selected.on_change("indices", self._on_select)
        self.controls = W.HBox([self.stop_button, self.pause_button, self.concurrency,
                                self.trial_box, self.stop_trial_button])

    def _control(self, name: str, *args: Any) -> None:
        """Run a control action; report bad input in the dashboard instead of a traceback."""
        if self.experiment is None:
            self.message.value = "the experiment has not started yet"
            return
        try:
            getattr(self.experiment, name)(*args)
            self.message.value = ""
        except (ValueError, TypeError, KeyError) as exc:
            self.message.value = f"<span style='color:#d62728'>{exc}</span>"

    def _on_pause(self, change: dict[str, Any]) -> None:
        paused = bool(change["new"])
        self.pause_button.description = "Resume" if paused else "Pause"
        self.pause_button.icon = "play" if paused else "pause"
        self._control("pause" if paused else "unpause")

    def _on_concurrency(self, change: dict[str, Any]) -> None:
        n = int(change["new"])
        self._control("set_concurrency", None if n == 0 else n)

    def _on_select(self, attr: str, old: Any, new: list[int]) -> None:
        ids = self.figures.table_src.data["trial_id"]
        if new and new[0] < len(ids):
            self.trial_box.value = int(ids[new[0]])

    def _on_view_message(self) -> None:
        """A browser view sent a message (its first layout, a click): it exists and
        applies what comes next. A view made from an old render bundle has missed the
        patches sent before it, and in a steady run (trials in long epochs) no change
        would reach it; so an update re-sends everything, at once if nothing was forced
        for :data:`RESYNC` seconds, else when that much time has passed. Open views send
        messages after every patch (jupyter_bokeh echoes what a patch changed), so this
        re-sends at most once per :data:`RESYNC` seconds while a page is open, and never
        without one."""
        self._view_spoke = self._view_seen = True

    # --------------------------------------------------------------- update
    @property
    def finished(self) -> bool:
        """The experiment is over and its final state has been pushed."""
        return self.last is not None and self.last.done

    @property
    def settled(self) -> bool:
        """Finished, and the importance fit of the final state is shown too, with no retry
        of it due: nothing is left for an update to show."""
        fit = None if self._importance is None else self._importance[1]
        return (self.finished and fit is not None and fit is self._fit_shown
                and not self._retry_due(self.last, fit))

    def update(self, *, force: bool = False) -> Snapshot:
        """Render the model's snapshot into the figures and widgets (thread-safe).

        Whole column sets for what changed; everything with ``force``, during
        :data:`RESYNC` seconds after a display, after a view's message, and for the
        final state. After a display and until a view has sent a message (for at most
        :data:`FIRST_VIEW` seconds), what changed goes out as a render bundle, one
        message, instead of a patch: a patch is several messages, and a view the page
        makes between two of them reads every later patch shifted, so it would show
        nothing new until the end. The final state also goes out as a fresh render
        bundle, after its patch: every open view re-renders from it whole, so a view that
        missed or could not apply a patch (one made between the frames of a patch, or
        whose bundle arrived after a later patch) still ends on the final state. The
        importance fit of the final state ends later, in the background: the update
        that shows it is final too (patch, then bundle).

        Before the widget exists (the first update of a dashboard built for an
        experiment) it only renders into the figures: the widget is then made with a
        bundle of them, the one serialization of the document a build needs.
        """
        if self.model is None:
            raise RuntimeError("attach an experiment first: dashboard.attach(exp)")
        t0 = time.thread_time()
        with self._lock:
            now = time.monotonic()
            bundles = not self._view_seen and now < self._bundles_until
            plot = self.plot  # None: not made yet, it will bundle what this renders
            changes = 0 if plot is None else plot.changes
            with nullcontext() if plot is None else plot.batch(send=not bundles):
                s = self.snapshots.take()
                force = (force or s.done or now < self._resync_until
                         or self._view_spoke and now >= self._forced_at + RESYNC)
                if force:
                    self._forced_at, self._view_spoke = now, False
                self.figures.render(s, force=force)
                self.figures.set_header(summary_html(self.experiment.name, s, self.dask_link,
                                                     self.dask_page), force)
                fit, as_of = self._importance_of(s)
                self.analysis.render(s, self._fitted(fit), force=force, as_of=as_of,
                                     failed=self._failure(fit))
                self._update_widgets(s)
                # the final state, or its importance now shown: a bundle follows (not while
                # the fit is still running: those updates are patches, as before the end)
                final = s.done and (not self.finished or fit is not None
                                    and fit is not self._fit_shown)
                self.last = s
                self._fit_shown = fit
                self.updates += 1
            # after the batch's patch: nothing the views receive comes after it
            if plot is not None and (final or bundles and plot.changes != changes):
                plot.refresh()
        self.update_seconds += time.thread_time() - t0
        return s

    def _importance_of(self, s: Snapshot) -> tuple[Future[Any] | None, float | None]:
        """The ended fit the importance view shows for ``s`` (None: none ended yet), and
        the time of the snapshot it was fitted on when that is not ``s``'s state (None: it
        is). Fitted on a background thread, off the views' path: everything else is
        shown at once. A fit that ends between two updates is shown by the next one,
        through the same path (patch or bundle) as every other change: nothing is sent
        from the fitting thread.

        A fit depends only on the shown trials' values and the budget
        (:meth:`~nbtune.ui.analysis_figures.AnalysisFigures.importance_key`): a snapshot
        where those did not change is not refitted. While the run goes, a change is
        refitted only while the importance tab is shown (:attr:`importance_shown`), once the
        last fit has ended and as much time has passed since it was asked for as its cost
        allows (:meth:`_refit_due`): a forest fit is far more work than an update, and its
        CPU is taken from the trials; the view meanwhile shows the last fit, saying as of
        when. A person's pick of a budget or of the importance tab, and the final state,
        are fitted at once; a fit still queued when a newer one is asked for is cancelled, so
        the final one never waits behind stale ones."""
        want = self.analysis.importance_key(s)
        current = self._importance
        if current is not None and current[1].done() and not current[1].cancelled():
            self._fit_ready = current  # ended: shown until the fit asked for now ends
        retry = current is not None and current[0] == want and self._retry_due(s, current[1])
        if current is None or retry or current[0] != want and self._refit_due(s, current):
            if current is not None:  # superseded: a fit not started never runs
                current[1].cancel()
            self._fit_retries = self._fit_retries + 1 if retry else 0
            future = _IMPORTANCE.submit(self._fit, s, want[0])
            self._importance = current = (want, future, s.time)
            self._fit_started, self._fit_now = time.monotonic(), False
            future.add_done_callback(_log_failure)
        if current[1].done() and not current[1].cancelled():
            self._fit_ready = current
        ready = self._fit_ready
        if ready is None:
            return None, None
        return ready[1], None if ready[0] == want else ready[2]

    def _retry_due(self, s: Snapshot, fit: Future[Any]) -> bool:
        """Whether the fit of the state the views show raised and is tried again
        (:data:`FIT_RETRIES` times at most): at once for the final state (the updates end
        once it is shown), else once its cost's share of the time has passed."""
        return (fit.done() and not fit.cancelled() and fit.exception() is not None
                and self._fit_retries < FIT_RETRIES
                and (s.done or time.monotonic() - self._fit_started
                     >= self._fit_cost / self._share))

    def _refit_due(self, s: Snapshot, current: tuple[Any, Future[Any], float]) -> bool:
        """Whether a change of what the importance depends on is fitted now (see
        :meth:`_importance_of`): the final state, or a person's pick of a budget or of the
        importance tab; else, while the tab is shown, a change after a fit that found too
        few trials to fit (it cost nothing), or once the last fit has ended and its cost
        over the time since it was asked for is within its half of ``max_overhead``."""
        if s.done or self._fit_now:
            return True
        if not self.importance_shown:
            return False  # fitted when a view shows it, and at the end
        last = current[1]
        if not last.done():
            return False
        if last.exception() is None and last.result() is None:
            return True
        return time.monotonic() - self._fit_started >= self._fit_cost / self._share

    @property
    def _share(self) -> float:
        """The share of the time the updates may take, and the live refits too: half of
        ``max_overhead`` each."""
        return self.max_overhead / 2

    def _fit(self, s: Snapshot, budget: float | None) -> dict[str, float] | None:
        """Fit the importance of ``s`` at ``budget`` (on the fitting thread), noting its cost."""
        t0 = time.thread_time()
        try:
            return importance(s, self.analysis.space, budget=budget)
        finally:
            self._fit_cost = time.thread_time() - t0

    @staticmethod
    def _fitted(fit: Future[Any] | None) -> dict[str, float] | None:
        """What an ended fit shows: its importance (None: not ended, not enough trials, or
        failed, which :func:`_log_failure` logged)."""
        return None if fit is None or fit.exception() is not None else fit.result()

    @staticmethod
    def _failure(fit: Future[Any] | None) -> str | None:
        """What an ended fit raised, as the importance view says it (None: it did not)."""
        exc = None if fit is None else fit.exception()
        return None if exc is None else f"{type(exc).__name__}: {exc}"

    def importance_settled(self, timeout: float | None = None) -> bool:
        """Wait until the importance fit the views asked for last has ended (True), or
        ``timeout`` seconds (False); the next :meth:`update` then shows it. (While the run
        goes, a change of the trials may wait before it is asked for: see
        :meth:`_importance_of`.)"""
        with self._lock:
            pending = None if self._importance is None else self._importance[1]
        if pending is None:
            return True
        try:
            pending.exception(timeout)
        except (TimeoutError, CancelledError):  # cancelled: a newer fit took its place
            return False
        return True

    @property
    def importance_shown(self) -> bool:
        """Whether the importance tab is the one shown (as the last view that changed tabs
        left it)."""
        return self.tabs.tabs[self.tabs.active] is self.analysis.importance_panel

    def _on_tab(self, attr: str, old: int, new: int) -> None:
        """A person picked a tab (the browser's change): the importance tab shows a fit of
        the current state, asked for at once (a live run refits it only while shown)."""
        if new == self._tab_seen:
            return  # already seen: jupyter_bokeh calls back twice for one change
        self._tab_seen = new
        if self.importance_shown and self.model is not None and not self.finished:
            self._fit_now = True
            self.update()

    def _on_budget(self, attr: str, old: str, new: str) -> None:
        """A person picked the budget the analysis views show (the browser's change)."""
        if new == self.analysis.shown:
            return  # the views' own render set it
        self.analysis.chosen = new
        self._fit_now = True
        if self.model is not None:
            self.update(force=False)
            if self._autostart and not self.settled:
                self.start()  # the run is over: the thread shows the new fit when it ends

    def _update_widgets(self, d: Snapshot) -> None:
        p = d.progress
        if p is not None and p.fraction is not None:
            self.progress.value = p.fraction
        text = [f"<b>{state_word(d)}</b>", f"t = {d.time:,.0f} s", *progress_parts(d)]
        if d.best is not None and d.best_value is not None:
            text.append(f"best {d.metric} {d.best_value:.4g} (trial {d.best})")
        self.status.value = " &middot; ".join(text)
        if d.done:
            self.progress.bar_style = "danger" if p is not None and p.failed else "success"
            for w in (self.stop_button, self.pause_button, self.concurrency, self.trial_box,
                      self.stop_trial_button):
                w.disabled = True

    # --------------------------------------------------------------- thread
    def start(self) -> None:
        """Start the background updates (no-op if running, or finished and settled)."""
        if self._thread is not None and self._thread.is_alive() or self.settled:
            return
        if self.experiment is None:
            raise RuntimeError("attach an experiment first: dashboard.attach(exp)")
        self._closed.clear()
        self._thread = threading.Thread(target=self._run, name=f"nbtune-dashboard-"
                                        f"{self.experiment.name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        delay = self.period
        while not self._closed.wait(delay):
            t0 = time.thread_time()
            try:
                self.update()
            except Exception as exc:  # keep the kernel alive; show what broke
                log.exception("nbtune dashboard update failed")
                self.message.value = f"<span style='color:#d62728'>dashboard stopped: {exc}</span>"
                return
            if self.settled:
                return
            if self.finished:  # only the final importance fit is left: show it once it ends
                while not self.importance_settled(self.period):
                    if self._closed.is_set():
                        return
                delay = 0.0
                continue
            # stretch the period so updates stay under their share of the time
            delay = max(self.period, (time.thread_time() - t0) / self._share)

    def stop(self) -> None:
        """Stop the background updates (the experiment keeps running)."""
        self._closed.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def close(self) -> None:
        """Stop updating, stop listening to the engine and close the widgets."""
        self.stop()
        if self.model is not None:
            self.model.close()
        for w in (self.plot, self.progress, self.status, self.message, self.stop_button,
                  self.pause_button, self.concurrency, self.trial_box, self.stop_trial_button,
                  self.controls, self.widget):
            w.close()
        doc = self.layout.document
        if doc is not None:  # else BokehModel.__del__ closes again and trips on the document
            doc.remove_root(self.layout)
        if self.experiment is not None and _DASHBOARDS.get(self.experiment) is self:
            del _DASHBOARDS[self.experiment]

    # -------------------------------------------------------------- display
    def _ipython_display_(self) -> None:
        from IPython.display import display

        load_bokehjs(force=True)  # the page showing this output may have no BokehJS yet
        if not self._view_seen:  # the page makes the first view from the widget's state
            self._bundles_until = time.monotonic() + FIRST_VIEW
        if self.model is not None and self.updates:
            if not self.finished and self.experiment.done:
                self.update()  # the run is over: its final state, not the thread's last frame
            # shown again (exp as a cell's last expression, exp.wait()): the new view starts
            # from the current document, and updates re-send everything while it renders
            self._resync_until = time.monotonic() + RESYNC
            self.plot.refresh()
        display(self.widget)


def dashboard_for(experiment: Experiment, **options: Any) -> Dashboard:
    """The experiment's dashboard, built on first use (every display shares its widgets)."""
    dash = _DASHBOARDS.get(experiment)
    if dash is None:
        dash = _DASHBOARDS[experiment] = Dashboard(experiment, **options)
    return dash


def show(experiment: Experiment, **options: Any) -> Dashboard | None:
    """Display the experiment's live dashboard in a notebook (its summary elsewhere)."""
    from IPython import get_ipython
    from IPython.display import display

    shell = get_ipython()
    if shell is None or getattr(shell, "kernel", None) is None:
        print(experiment.summary())  # a terminal cannot show widgets
        return None
    dash = dashboard_for(experiment, **options)
    display(dash)
    return dash
