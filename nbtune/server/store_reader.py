"""Reads one store for the sidebar, keeping its handle and finished summaries across polls."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from nbtune.server.summary import detail, empty_reply, summarize
from nbtune.server.views_data import ViewsInput, store_input
from nbtune.store import Store

__all__ = ["StoreReader"]


class StoreReader:
    """Opens the store once it exists and keeps the handle for later polls.

    A :class:`Store` creates its file and tables when opened, so a SQLite store
    is opened only once the file is there: merely starting JupyterLab must not
    leave an empty ``nbtune-store/`` in every directory it is started from.
    """

    def __init__(self, location: str) -> None:
        self.location = location
        self._store: Store | None = None
        self._lock = threading.Lock()
        self._cache: dict[tuple[Any, ...], dict[str, Any]] = {}

    def _open(self) -> Store | None:
        with self._lock:
            if "://" not in self.location and not Path(self.location).is_file():
                # no store yet, or it was deleted: drop any handle on the old file, else
                # the next pooled connection would re-create it empty
                if self._store is not None:
                    self._store.close()
                    self._store = None
                self._cache.clear()
                return None
            if self._store is None:
                self._store = Store(self.location)
            return self._store

    def read(self) -> dict[str, Any]:
        store = self._open()
        if store is None:
            return empty_reply(self.location, available=False)
        with self._lock:  # the cache is shared by concurrent polls (one per browser tab)
            return summarize(store, self.location, self._cache)

    def holds(self, name: str) -> bool:
        """Whether the store is there and holds an experiment named ``name``."""
        store = self._open()
        if store is None:
            return False
        with self._lock:
            return name in store.names()

    def read_one(self, name: str) -> dict[str, Any] | None:
        """One experiment's detail, or None if the store or the name is not there."""
        store = self._open()
        if store is None:
            return None
        with self._lock:
            try:
                return detail(store, name, self._cache)
            except KeyError:
                return None

    def read_views(self, name: str) -> ViewsInput | None:
        """The analysis views' input of one experiment, or None if the store or the name
        is not there."""
        store = self._open()
        if store is None:
            return None
        with self._lock:
            try:
                return store_input(store, name)
            except LookupError:
                return None

    def close(self) -> None:
        """Let the handle go (a store no longer listed)."""
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None
            self._cache.clear()
