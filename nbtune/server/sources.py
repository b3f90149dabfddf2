"""Where the sidebar's experiments come from: stores and the running kernels.

:class:`Sources` answers the REST endpoint with the union of

* the configured store (``c.NbtuneServer.store``, ``$NBTUNE_STORE`` or
  ``<root_dir>/nbtune-store/nbtune.db``), listed even while it has no file yet;
* every store a live notebook kernel uses (its kernel file,
  :mod:`nbtune.kernels`), and after that kernel ends, as long as the store is
  still there (a stored run outlives its kernel; at most :data:`REMEMBER`);
* the experiments a live kernel keeps in memory only (no store), as the
  kernel wrote them; they go when the kernel goes.

Each source has an ``id`` (``store:<location>``, ``kernel:<pid>``) that every
experiment of it carries, so two stores may hold the same name. A store is
read by one cached :class:`~nbtune.server.store_reader.StoreReader` per location.
A store that cannot be read is reported on its own source (``error``), not as
a failure of the whole list.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from nbtune.kernels import read_kernel_files
from nbtune.server.store_reader import StoreReader
from nbtune.server.summary import display_location, empty_reply, totals
from nbtune.server.views_data import ViewsCache, ViewsInput, kernel_input

__all__ = ["Sources", "REMEMBER", "store_id", "kernel_id"]

#: stores of ended kernels still listed (oldest forgotten first)
REMEMBER = 32


def store_id(location: str) -> str:
    return f"store:{display_location(location)}"


def kernel_id(pid: int) -> str:
    return f"kernel:{pid}"


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0].replace("%", "")


class Sources:
    """Every source of experiments the server lists; see the module docstring."""

    def __init__(self, configured: str, runtime_dir: str | os.PathLike[str] | None,
                 root_dir: str | os.PathLike[str] = ".", log: Any = None) -> None:
        self.configured = configured
        self.runtime_dir = runtime_dir
        self.root_dir = Path(root_dir).expanduser().resolve()
        self.log = log
        self._lock = threading.Lock()
        self._readers: OrderedDict[str, StoreReader] = OrderedDict()
        self._readers[configured] = StoreReader(configured)
        #: the analysis views computed, by experiment and change (shared by every poll)
        self.views = ViewsCache()

    @property
    def location(self) -> str:  # what the handlers name in their messages
        return self.configured

    def _reader(self, location: str) -> StoreReader:
        with self._lock:
            reader = self._readers.get(location)
            if reader is None:
                reader = self._readers[location] = StoreReader(location)
            self._readers.move_to_end(location)
            self._readers.move_to_end(self.configured, last=False)
            while len(self._readers) > REMEMBER + 1:
                oldest = next(k for k in self._readers if k != self.configured)
                self._readers.pop(oldest).close()
            return reader

    def _shown(self, path: str | None) -> str | None:
        """A path (a kernel's notebook, a store's file) relative to the server's root when
        under it: what the sidebar shows (its header lines are narrow)."""
        if not path or "://" in path:
            return path
        try:
            return str(Path(path).resolve().relative_to(self.root_dir))
        except ValueError:
            return path

    def read(self) -> dict[str, Any]:
        """The whole reply of ``GET nbtune/api/experiments``."""
        kernels = read_kernel_files(self.runtime_dir)
        users: dict[str, list[str]] = {}
        for k in kernels:
            for loc in k.get("stores") or []:
                self._reader(loc)  # a store in use is listed from now on
                users.setdefault(loc, []).append(self._shown(k.get("notebook"))
                                                 or f"kernel {k['pid']}")
        with self._lock:
            readers = list(self._readers.values())
        reply = empty_reply(self.configured, available=False)
        sources, experiments = [], []
        for reader in readers:
            configured = reader.location == self.configured
            source: dict[str, Any] = {
                "id": store_id(reader.location), "kind": "store", "configured": configured,
                "location": display_location(reader.location),
                "shown": self._shown(display_location(reader.location)), "available": False,
                "error": None, "used_by": users.get(reader.location, [])}
            try:
                listed = reader.read()
            except Exception as exc:  # a corrupt or foreign DB: say which on its own line
                if self.log is not None:
                    self.log.warning("nbtune: cannot read the store at %s: %s",
                                     display_location(reader.location), _first_line(exc))
                source["error"] = (f"nbtune cannot read the store at "
                                   f"{display_location(reader.location)}: {_first_line(exc)}")
                listed = None
            if listed is not None:
                source["available"] = listed["available"]
            if configured:
                reply["available"] = source["available"]
            elif not source["available"] and not users.get(reader.location) and not source["error"]:
                self._forget(reader.location)  # an ended kernel's store that went away
                continue
            sources.append(source)
            for e in (listed or {}).get("experiments", []):
                experiments.append({**e, "source": source["id"]})
        for k in kernels:
            memory = [e for e in k.get("experiments") or []
                      if e.get("store") is None and isinstance(e.get("summary"), dict)]
            if not memory:
                continue
            source = {"id": kernel_id(k["pid"]), "kind": "kernel", "pid": k["pid"],
                      "notebook": self._shown(k.get("notebook")), "kernel": k.get("kernel"),
                      "location": k.get("notebook") or f"kernel {k['pid']}",
                      "shown": self._shown(k.get("notebook")) or f"kernel {k['pid']}",
                      "available": True, "error": None}
            sources.append(source)
            experiments.extend({**e["summary"], "source": source["id"]} for e in memory)
        reply["sources"] = sources
        reply["experiments"] = experiments
        reply["totals"] = totals(experiments)
        return reply

    def _forget(self, location: str) -> None:
        with self._lock:
            reader = self._readers.pop(location, None)
        if reader is not None:
            reader.close()

    def read_one(self, name: str, source: str | None = None) -> dict[str, Any] | None:
        """One experiment's detail from ``source`` (an id), or from the first source holding
        ``name`` when none is given; None when there is no such experiment."""
        found = self._find(name, source)
        if found is None:
            return None
        where, reader, detail = found
        if reader is not None:
            detail = reader.read_one(name)
            if detail is None:
                return None
        detail = dict(detail)
        detail["summary"] = {**detail["summary"], "source": where}
        return detail

    def read_views(self, name: str, source: str | None = None,
                   budget: float | None = None) -> dict[str, Any] | None:
        """One experiment's analysis views at ``budget`` (:mod:`nbtune.server.views_data`),
        from the same source :meth:`read_one` reads; computed once per change of it."""
        found = self._find(name, source)
        if found is None:
            return None
        where, reader, detail = found
        inp: ViewsInput | None = (reader.read_views(name) if reader is not None
                                  else kernel_input(detail))
        if inp is None:
            return None
        return {**self.views.reply((where, name), inp, budget), "source": where}

    def _find(self, name: str, source: str | None) -> tuple[str, Any, Any] | None:
        """``(source id, its store reader or None, the kernel's detail or None)`` of the
        first source (or ``source``) holding ``name``."""
        if source is None or source.startswith("store:"):
            with self._lock:
                readers = list(self._readers.values())
            for reader in readers:
                if source is not None and store_id(reader.location) != source:
                    continue
                if reader.holds(name):
                    return store_id(reader.location), reader, None
            if source is not None:
                return None
        for k in read_kernel_files(self.runtime_dir):
            if source is not None and source != kernel_id(k["pid"]):
                continue
            for e in k.get("experiments") or []:
                if e.get("name") == name and e.get("store") is None and e.get("detail"):
                    return kernel_id(k["pid"]), None, e["detail"]
        return None
