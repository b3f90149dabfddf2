"""nbtune's Jupyter server extension: the REST endpoint the JupyterLab sidebar polls.

Enabled by ``jupyter-config/jupyter_server_config.d/nbtune.json`` (installed with
the package). Where the listed experiments come from
(:mod:`nbtune.server.sources`):

* the configured store: ``c.NbtuneServer.store = ...`` in a Jupyter config
  file, or the ``NBTUNE_STORE`` environment variable (a path, a directory or
  an SQLAlchemy URL); by default ``nbtune-store/nbtune.db`` under the
  server's root directory, where ``tune(store=True)`` writes when a notebook
  runs there;
* every store a running notebook kernel uses, wherever it is (a temporary
  folder, ``store=True`` from a sub-folder, a database server), still listed
  after the kernel ends while the store is there;
* the experiments a running kernel keeps in memory only (``tune()`` without a
  store), until the kernel ends.

A kernel announces its experiments in a file in Jupyter's runtime dir
(:mod:`nbtune.kernels`); the server reads those files at every poll.
"""

from __future__ import annotations

import os
from typing import Any

from jupyter_server.utils import url_path_join
from traitlets import Unicode, default
from traitlets.config import LoggingConfigurable

from nbtune.server.rest_handlers import ExperimentHandler, ExperimentsHandler, ViewsHandler
from nbtune.server.sources import Sources
from nbtune.server.summary import display_location, resolve_location

__all__ = ["NbtuneServer", "API_PATH", "_jupyter_server_extension_points",
           "_load_jupyter_server_extension"]

API_PATH = "nbtune/api/experiments"


class NbtuneServer(LoggingConfigurable):
    """Settings of the nbtune server extension."""

    store = Unicode(
        help="Where the nbtune store is: a SQLite file, a directory holding nbtune.db, or an "
        "SQLAlchemy URL. Relative paths are taken from the server's root_dir. "
        "Default: $NBTUNE_STORE, else nbtune-store/nbtune.db.",
    ).tag(config=True)

    @default("store")
    def _default_store(self) -> str:
        return os.environ.get("NBTUNE_STORE", "")


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "nbtune.server"}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    """Register the handlers; the sources are built once so store handles are reused across polls."""
    settings = NbtuneServer(parent=serverapp)
    location = resolve_location(settings.store, serverapp.root_dir)
    sources = Sources(location, serverapp.runtime_dir, serverapp.root_dir, log=serverapp.log)
    web_app = serverapp.web_app
    route = url_path_join(web_app.settings["base_url"], API_PATH)
    web_app.add_handlers(".*$", [(route, ExperimentsHandler, {"sources": sources}),
                                 (route + "/([^/]+)/analysis", ViewsHandler,
                                  {"sources": sources}),
                                 (route + "/([^/]+)", ExperimentHandler, {"sources": sources})])
    serverapp.log.info("nbtune: serving %s from the store at %s and the running kernels "
                       "(files in %s)", route, display_location(location), serverapp.runtime_dir)
