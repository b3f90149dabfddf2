"""The persistent store: experiments, their event log and results in SQLite or any SQLAlchemy DB.

``tune(..., store=...)`` records into it (:class:`Recorder`); :func:`resume`
continues an experiment after the kernel died; :class:`Store` reads results
back without running anything. See :mod:`nbtune.store.store` for where a
store lives by default and :mod:`nbtune.store.resume` for how resume works.
"""

from __future__ import annotations

from nbtune.store.profiles import SqlProfileStore
from nbtune.store.recorder import Recorder, start_recording
from nbtune.store.resume import (
    ExperimentFinishedError,
    RestartableEngine,
    ResumeError,
    Resumption,
    prepare_resume,
    rebuild_algorithm,
    rebuild_allocator,
    replay,
    resume,
)
from nbtune.store.store import (
    DEFAULT_DIR,
    DEFAULT_FILE,
    ExperimentExistsError,
    Store,
    UnknownExperimentError,
    open_store,
)

__all__ = [
    "Store", "open_store", "Recorder", "start_recording", "resume", "prepare_resume",
    "Resumption", "replay",
    "rebuild_algorithm", "rebuild_allocator",
    "RestartableEngine", "SqlProfileStore", "ResumeError", "ExperimentFinishedError",
    "ExperimentExistsError", "UnknownExperimentError", "DEFAULT_DIR", "DEFAULT_FILE",
]
