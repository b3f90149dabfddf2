"""nbtune's Jupyter server extension: the REST endpoint the JupyterLab sidebar polls.

Enabled by ``jupyter-config/jupyter_server_config.d/nbtune.json`` (installed with
the package); configure where the store is with ``c.NbtuneServer.store = ...``
in a Jupyter config file, or the ``NBTUNE_STORE`` environment variable
(a path, a directory or an SQLAlchemy URL). The default is
``nbtune-store/nbtune.db`` under the server's root directory, which is where
``tune(store=True)`` writes when a notebook runs there.
"""

from __future__ import annotations

import os
from typing import Any

from jupyter_server.utils import url_path_join
from traitlets import Unicode, default
from traitlets.config import LoggingConfigurable

from nbtune.server.handlers import ExperimentHandler, ExperimentsHandler, StoreReader
from nbtune.server.summary import resolve_location

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
    """Register the handler; the reader is built once so a store handle is reused across polls."""
    settings = NbtuneServer(parent=serverapp)
    location = resolve_location(settings.store, serverapp.root_dir)
    reader = StoreReader(location)
    web_app = serverapp.web_app
    route = url_path_join(web_app.settings["base_url"], API_PATH)
    web_app.add_handlers(".*$", [(route, ExperimentsHandler, {"reader": reader}),
                                 (route + "/([^/]+)", ExperimentHandler, {"reader": reader})])
    serverapp.log.info("nbtune: serving %s from the store at %s", route, location)
