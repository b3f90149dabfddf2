"""Plain-text live progress for scripts and CI logs: one line per trial event.

No curses, no carriage returns: every line stands alone, so the output reads
the same in a terminal, a pipe and a CI log. :class:`ProgressPrinter` is an
engine subscriber (``engine.subscribe``); it runs on the runtime's driver
thread right after each ``Engine.handle`` call, when the engine's state is
consistent, and only reads it.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from nbtune.core import events as ev
from nbtune.core.commands import Command, Launch, Stop
from nbtune.core.tolerance import EPS
from nbtune.core.trial import TrialState

__all__ = ["ProgressPrinter"]


class ProgressPrinter:
    """Prints launches, rung results and ends with a status tail (running, done, best, elapsed).

    ``total`` is the number of trials the algorithm will start (for the
    ``done k/total`` counter; None prints ``done k``). ``catch_up`` prints the
    trials already running when it subscribes; a resumed engine's "running"
    trials are the dead run's, about to be relaunched, so resume turns it off.
    ``clock`` gives the time printed at the start of each line (default: wall
    seconds since the printer started; the simulator's own clock reads better).
    """

    def __init__(self, engine: Any, *, total: int | None = None, out: TextIO | None = None,
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
