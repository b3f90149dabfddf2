"""``Experiment.wait`` in a script: a status line every few seconds, and what Ctrl-C leaves.

A notebook shows the dashboard; a terminal shows nothing unless asked, and a
long ``exp.wait()`` that prints nothing looks hung (Ray Tune prints a status
table, Optuna a progress bar). :func:`wait_with_progress` prints one
self-contained line at most every ``every`` seconds (no carriage returns, so
logs read the same) from a read-only look at the engine, and on Ctrl-C says
what happens next before the interrupt goes on: the experiment keeps running
in the background (``exp.stop()`` ends it), and a stored run that dies with
its process continues with ``nbtune resume``.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from nbtune.core.best import best_index
from nbtune.core.trial import TrialState, ended_of_total

__all__ = ["wait_with_progress", "status_line", "progress_default"]


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


def status_line(exp: Any, elapsed: float) -> str:
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


def wait_with_progress(exp: Any, timeout: float | None, every: float,
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
