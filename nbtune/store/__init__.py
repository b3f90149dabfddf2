"""The persistent store: experiments, their event log and results in SQLite or any SQLAlchemy DB.

``tune(..., store=...)`` records into it (:class:`Recorder`); :func:`nbtune.resume`
(in :mod:`nbtune.resumption`, beside ``tune``) continues an experiment after the
kernel died; :class:`Store` reads results back without running anything. See
:mod:`nbtune.store.store` for where a store lives by default and
:mod:`nbtune.store.resume` for how the replay works.
"""

from __future__ import annotations

from nbtune.store.profile_store import SqlProfileStore
from nbtune.store.recorder import Recorder
from nbtune.store.registration import start_recording
from nbtune.store.resume import (
    ExperimentFinishedError,
    RestartableEngine,
    ResumeError,
    rebuild_algorithm,
    rebuild_allocator,
    replay,
)
from nbtune.store.store import (
    DEFAULT_DIR,
    DEFAULT_FILE,
    ExperimentExistsError,
    Store,
    StoreOpenError,
    UnknownExperimentError,
    open_store,
)

__all__ = [
    "Store", "open_store", "Recorder", "start_recording", "replay",
    "rebuild_algorithm", "rebuild_allocator",
    "RestartableEngine", "SqlProfileStore", "ResumeError", "ExperimentFinishedError",
    "ExperimentExistsError", "StoreOpenError", "UnknownExperimentError", "DEFAULT_DIR", "DEFAULT_FILE",
]
