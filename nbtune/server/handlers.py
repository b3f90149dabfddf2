"""The REST endpoint behind the JupyterLab sidebar: ``GET <base_url>/nbtune/api/experiments``.

It sits behind Jupyter's own authentication (``APIHandler`` + ``@authenticated``:
a token or a logged-in cookie), so the store is never readable by anyone the
Jupyter server would not let in.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import tornado.web
from jupyter_server.base.handlers import APIHandler
from tornado.ioloop import IOLoop

from nbtune.server.summary import detail, empty_reply, summarize
from nbtune.store import Store

__all__ = ["ExperimentsHandler", "ExperimentHandler", "StoreReader"]


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


    def read_one(self, name: str) -> dict[str, Any] | None:
        """One experiment's detail, or None if the store or the name is not there."""
        store = self._open()
        if store is None:
            return None
        with self._lock:
            try:
                return detail(store, name)
            except KeyError:
                return None


class ExperimentHandler(APIHandler):
    """One experiment: summary, trials and curves (the sidebar's main-area panel)."""

    def initialize(self, reader: StoreReader) -> None:
        self.reader = reader

    @tornado.web.authenticated
    async def get(self, name: str) -> None:
        from urllib.parse import unquote

        name = unquote(name)
        reply = await IOLoop.current().run_in_executor(None, self.reader.read_one, name)
        if reply is None:
            raise tornado.web.HTTPError(404, f"no experiment named {name!r} in the store at "
                                             f"{self.reader.location}")
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(reply))


class ExperimentsHandler(APIHandler):
    """Lists the store's experiments (see :func:`nbtune.server.summary.summarize`)."""

    def initialize(self, reader: StoreReader) -> None:
        self.reader = reader

    @tornado.web.authenticated
    async def get(self) -> None:
        # SQLite reads block: keep them off the server's event loop.
        try:
            reply = await IOLoop.current().run_in_executor(None, self.reader.read)
        except Exception as exc:  # a corrupt or foreign DB: say which, don't 500 silently
            self.log.exception("nbtune: cannot read the store at %s", self.reader.location)
            # the reply's "message" (shown in the sidebar) is the first line of the cause;
            # tornado %-formats log messages, so no stray % may reach it
            first = (str(exc).splitlines() or [type(exc).__name__])[0].replace("%", "")
            raise tornado.web.HTTPError(
                500, f"nbtune cannot read the store at {self.reader.location}: {first}"
            ) from exc
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(reply))
