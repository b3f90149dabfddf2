"""The REST endpoint behind the JupyterLab sidebar: ``GET <base_url>/nbtune/api/experiments``.

It sits behind Jupyter's own authentication (``APIHandler`` + ``@authenticated``:
a token or a logged-in cookie), so no store or kernel's experiment is ever
readable by anyone the Jupyter server would not let in. What it lists comes
from :class:`nbtune.server.sources.Sources`.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote

import tornado.web
from jupyter_server.base.handlers import APIHandler
from tornado.ioloop import IOLoop

from nbtune.server.sources import Sources
from nbtune.server.store_reader import StoreReader

__all__ = ["ExperimentsHandler", "ExperimentHandler", "ViewsHandler", "StoreReader"]


class _OneExperiment(APIHandler):
    """A request about one experiment by name, ``?source=<id>`` (an id from the list's
    ``sources``) picking the store or kernel when two hold the same name; without it the
    first one holding it. Answers the JSON a :class:`Sources` reader gives, or 404."""

    def initialize(self, sources: Sources) -> None:
        self.sources = sources

    async def answer(self, name: str, read: Any, *args: Any) -> None:
        """Run ``read(name, source, *args)`` off the event loop (SQLite reads block)."""
        name = unquote(name)
        source = self.get_query_argument("source", None) or None
        reply = await IOLoop.current().run_in_executor(None, read, name, source, *args)
        if reply is None:
            where = f"in {source}" if source else "in any store or running kernel"
            raise tornado.web.HTTPError(404, f"no experiment named {name!r} {where}")
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(reply))


class ExperimentHandler(_OneExperiment):
    """One experiment: summary, trials and curves (the sidebar's main-area panel)."""

    @tornado.web.authenticated
    async def get(self, name: str) -> None:
        await self.answer(name, self.sources.read_one)


class ViewsHandler(_OneExperiment):
    """One experiment's analysis views (``<name>/analysis``): history, parallel coordinates,
    slices and importance at a budget, and its trials with their configurations.

    ``?budget=<b>`` picks the budget (default: the highest enough trials reached).
    """

    @tornado.web.authenticated
    async def get(self, name: str) -> None:
        text = self.get_query_argument("budget", None)
        try:
            budget = float(text) if text not in (None, "") else None
        except ValueError:
            raise tornado.web.HTTPError(400, f"budget must be a number, got {text!r}") from None
        await self.answer(name, self.sources.read_views, budget)


class ExperimentsHandler(APIHandler):
    """Lists the experiments of every source (see :class:`~nbtune.server.sources.Sources`)."""

    def initialize(self, sources: Sources) -> None:
        self.sources = sources

    @tornado.web.authenticated
    async def get(self) -> None:
        # SQLite reads block: keep them off the server's event loop.
        reply = await IOLoop.current().run_in_executor(None, self.sources.read)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(reply))
