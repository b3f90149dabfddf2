"""Where the notebook UI is plugged in, below everything that uses it.

The package facade (``nbtune/__init__.py``) plugs the UI in at ``import nbtune``;
:class:`nbtune.experiment.Experiment` asks for it when it is displayed. The
registry lives here, in the lowest layer, so that the facade can fill it without
importing the experiment (pandas, the engine): ``import nbtune`` stays light for
the processes that only need a runtime's worker side (Dask workers unpickling
nbtune's plugins, the fork server). It holds any object; the
experiment states what it asks of it (``nbtune.experiment.Frontend``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["frontend", "set_frontend"]

_frontend: Any = None


def set_frontend(value: Any) -> None:
    """Plug the UI in (None: unplug it); the experiment never imports it."""
    global _frontend
    _frontend = value


def frontend() -> Any:
    """The UI plugged in, or None."""
    return _frontend
