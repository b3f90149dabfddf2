"""Which trial the calling code runs: ``nbtune.report(...)`` from a ``train(config)`` function.

In a trial process (``execution="process"``) one trial runs at a time, so
the process remembers it (``_CURRENT``), and a thread the training function
starts finds it too. In thread mode (:mod:`.threads`) several trials can run
in one worker process, each in its own thread: the trial is remembered per
thread, which is looked at first.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

Trial = Any  # a trial_api.Trial (not imported: trial_api imports this module)

__all__ = ["get_trial", "report", "should_stop", "running"]

_CURRENT: list[Trial] = []  # the trial this trial process is running (one at a time)
_LOCAL = threading.local()  # thread mode: the trial of this thread


@contextmanager
def running(trial: Trial, *, in_thread: bool) -> Iterator[None]:
    """While the training function runs: ``trial`` is the one :func:`get_trial` returns."""
    if in_thread:
        _LOCAL.trial = trial
    else:
        _CURRENT.append(trial)
    try:
        yield
    finally:
        if in_thread:
            _LOCAL.trial = None
        else:
            _CURRENT.clear()


def get_trial() -> Trial:
    """The trial this training function runs (for Ray-style ``train(config)`` functions)."""
    mine = getattr(_LOCAL, "trial", None)
    if mine is not None:
        return mine
    if not _CURRENT:
        raise RuntimeError("nbtune.report() is only available inside a training function "
                           "run by nbtune (runtime='dask' or 'auto')")
    return _CURRENT[-1]


def report(*args: Any, **kwargs: Any) -> bool:
    """``nbtune.report(...)``: :meth:`Trial.report` of the running trial (``ray.train.report``)."""
    return get_trial().report(*args, **kwargs)


def should_stop() -> bool:
    """``nbtune.should_stop()``: :meth:`Trial.should_stop` of the running trial."""
    return get_trial().should_stop()
