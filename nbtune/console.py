"""The console printers: what a script or a CI log sees of a run, in plain text.

Two printers, for the two ways a script watches an experiment; neither uses curses
or carriage returns, so every line stands alone and reads the same in a terminal,
a pipe and a CI log.

* :class:`ProgressPrinter`, one line per trial event (``nbtune demo``, ``nbtune
  resume``). It is an engine subscriber (``engine.subscribe``); it runs on the
  runtime's driver thread right after each ``Engine.handle`` call, when the
  engine's state is consistent, and only reads it.
* :func:`wait_with_progress`, ``Experiment.wait`` in a script: a status line every
  few seconds, and what Ctrl-C leaves. A notebook shows the dashboard; a terminal
  shows nothing unless asked, and a long ``exp.wait()`` that prints nothing looks
  hung (Ray Tune prints a status table, Optuna a progress bar). It prints one
  self-contained line at most every ``every`` seconds from a read-only look at the
  engine, and on Ctrl-C says what happens next before the interrupt goes on: the
  experiment keeps running in the background (``exp.stop()`` ends it), and a stored
  run that dies with its process continues with ``nbtune resume``.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import TextIO

from nbtune.core import events as ev
from nbtune.core.best import best_index
from nbtune.core.commands import Command, Launch, Stop
from nbtune.core.handles import EngineView, ExperimentView
from nbtune.core.tolerance import EPS
from nbtune.core.trial import TrialState, ended_of_total

__all__ = ["ProgressPrinter", "wait_with_progress", "status_line", "progress_default"]


class ProgressPrinter:
    """Prints launches, rung results and ends with a status tail (running, done, best, elapsed).

    ``total`` is the number of trials the algorithm will start (for the
    ``done k/total`` counter; None prints ``done k``). ``catch_up`` prints the
    trials already running when it subscribes; a resumed engine's "running"
    trials are the dead run's, about to be relaunched, so resume turns it off.
    ``clock`` gives the time printed at the start of each line (default: wall
    seconds since the printer started; the simulator's own clock reads better).
    """

    def __init__(self, engine: EngineView, *, total: int | None = None, out: TextIO | None = None,
                 unit: str = "slot", catch_up: bool = True,
                 clock: Callable[[], float] | None = None) -> None:
        self.engine = engine
        self.total = total
        self.out = out if out is not None else sys.stdout
        self.unit = unit
        self.lines = 0
        self._t0 = time.monotonic()
        self._clock = clock
        self._lock = threading.Lock()
        self._unsubscribe = engine.subscribe(self)
        if catch_up:
            self._catch_up()

    def _catch_up(self) -> None:
        """Print the trials launched before this printer subscribed (the first handle call).

        The runtime's thread may be handling events right now: the reads are
        copies, retried if a dict changed under them.
        """
        for _ in range(3):
            try:
                running = sorted(dict(self.engine.running).items())
                break
            except RuntimeError:
                continue
        else:
            return
        if not running:
            return
        try:
            tail = self.status()
        except RuntimeError:  # a trial was added while we counted
            tail = ""
        with self._lock:
            for tid, placement in running:
                where = ", ".join(f"{self.unit} {g}" + (f" ({s:.0%})" if s < 1 - EPS else "")
                                  for g, s in placement)
                print(f"[{self.elapsed():7.1f}s] {f'trial {tid:>3} running on {where}':<44} | "
                      f"{tail}", file=self.out, flush=True)
                self.lines += 1

    def close(self) -> None:
        self._unsubscribe()

    def __call__(self, events: Sequence[ev.Event], commands: Sequence[Command]) -> None:
        msgs: list[str] = []
        for e in events:
            if isinstance(e, ev.TrialReported) and self._segment_end(e):
                value = e.metrics.get(self.engine.metric)
                shown = "-" if value is None else f"{float(value):.4f}"
                msgs.append(f"trial {e.trial_id:>3} reached {e.budget:g}: "
                            f"{self.engine.metric} {shown}")
            elif isinstance(e, ev.TrialFailed):
                first = (e.error or "failed").strip().splitlines()[-1:] or ["failed"]
                msgs.append(f"trial {e.trial_id:>3} failed: {first[0][:80]}")
        for c in commands:
            if isinstance(c, Launch):
                where = ", ".join(f"{self.unit} {g}" + (f" ({s:.0%})" if s < 1 - EPS else "")
                                  for g, s in c.placement)
                what = "start" if c.start_budget <= 0 else "promote"
                msgs.append(f"trial {c.trial_id:>3} {what} {c.start_budget:g} -> {c.budget:g} "
                            f"on {where}")
            elif isinstance(c, Stop):
                msgs.append(f"trial {c.trial_id:>3} stopped")
        if not msgs:
            return
        tail = self.status()
        with self._lock:
            for m in msgs:
                print(f"[{self.elapsed():7.1f}s] {m:<44} | {tail}", file=self.out, flush=True)
                self.lines += 1

    def _segment_end(self, e: ev.TrialReported) -> bool:
        """True when this report ends the trial's segment (a rung or its final budget)."""
        t = self.engine.trials.get(e.trial_id)
        return t is not None and t.state is not TrialState.RUNNING

    def elapsed(self) -> float:
        return self._clock() if self._clock is not None else time.monotonic() - self._t0

    def status(self) -> str:
        """``running r, started s/total, done d, best <metric> (trial t)`` from the engine.

        Paused trials (waiting at a rung for a promotion) count as started, not done.
        """
        trials = list(self.engine.trials.values())
        running = sum(t.state is TrialState.RUNNING for t in trials)
        started = sum(t.state is not TrialState.PENDING for t in trials)
        done = sum(t.state.is_terminal for t in trials)
        total = f"/{self.total}" if self.total else ""
        scored = [t for t in trials if t.best is not None]
        best = ""
        if scored:
            pick = max if self.engine.mode == "max" else min
            b = pick(scored, key=lambda t: t.best)
            best = f", best {b.best:.4f} (trial {b.trial_id})"
        return f"running {running}, started {started}{total}, done {done}{best}"


def progress_default() -> bool:
    """Print progress by default in a terminal, never in a notebook (it has the dashboard).

    A kernel has IPython loaded; a script that has not is not in one, and is
    not made to import it here: ``exp.wait()`` blocks at once, so that a
    Ctrl-C finds it waiting instead of inside an import.
    """
    get_ipython = getattr(sys.modules.get("IPython"), "get_ipython", None)
    if get_ipython is not None and getattr(get_ipython(), "kernel", None) is not None:
        return False
    return bool(getattr(sys.stderr, "isatty", lambda: False)())


def status_line(exp: ExperimentView, elapsed: float) -> str:
    """``[  12s] name: running, 14/64 ended, 2 running, 1 in error, best loss 0.123 (trial 7)``."""
    eng = exp.engine
    trials = list(eng.trials.values())  # a copy: the driver thread may add trials meanwhile
    states = [t.state for t in trials]
    total = getattr(eng.algorithm, "num_trials", None)
    parts = [f"[{elapsed:6.0f}s] {exp.name}: {exp.state}",
             f"{ended_of_total(states, total, eng.done)} ended",
             f"{sum(s is TrialState.RUNNING for s in states)} running"]
    errors = sum(s is TrialState.ERROR for s in states)
    if errors:
        parts.append(f"{errors} in error")
    i = best_index([(t.best, t.budget_used) for t in trials], eng.mode)
    if i is not None:
        parts.append(f"best {eng.metric} {trials[i].best:.4g} (trial {trials[i].trial_id})")
    return ", ".join(parts)


def wait_with_progress(exp: ExperimentView, timeout: float | None, every: float,
                       out: TextIO | None = None) -> bool:
    """Wait for ``exp`` (or ``timeout`` s), printing :func:`status_line` every ``every`` s.

    Returns whether the runtime finished. A KeyboardInterrupt is passed on
    after one line saying that the experiment goes on.
    """
    out = out or sys.stderr
    t0 = time.monotonic()
    deadline = None if timeout is None else t0 + timeout
    try:
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            step = every if left is None else max(min(every, left), 0.0)
            if exp.runtime.wait(step):
                print(status_line(exp, time.monotonic() - t0), file=out, flush=True)
                return True
            if left is not None and left <= step:
                return False
            print(status_line(exp, time.monotonic() - t0), file=out, flush=True)
    except KeyboardInterrupt:
        print(f"nbtune: interrupted the wait; {exp.name!r} goes on in the background "
              "(exp.stop() stops it; a stored run whose process ends continues with "
              "`nbtune resume`)", file=out, flush=True)
        raise
