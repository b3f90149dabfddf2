"""The kernel files: one JSON file per notebook kernel that runs nbtune experiments.

A kernel writes ``<Jupyter runtime dir>/nbtune-kernel-<pid>.json`` (where
Jupyter keeps its kernels' connection files, private to the user) and the
server extension reads every such file to list the experiments of the
running kernels. The format, version 1::

    {"version": 1, "pid": 4242, "started": <process start time, s since epoch>,
     "started_since_boot": <the same, s since boot (Linux)> or null (absent before it),
     "notebook": "/abs/path/of/the.ipynb" or null, "kernel": "kernel-<id>" or null,
     "updated": <time of the write>,
     "stores": ["<location>", ...],
     "experiments": [{"name": "...", "store": "<location>" or null,
                      "summary": {...} or null, "detail": {...} or null}, ...]}

A store's ``location`` is what :func:`nbtune.server.summary.resolve_location`
gives: an absolute SQLite path, or a database URL *with* its password (the
server must open it; the file is mode 0600 like Jupyter's connection files,
and the server only ever shows the URL with the password hidden). An
experiment kept in memory only has ``store`` null and carries its own
``summary`` and ``detail`` (:mod:`nbtune.core.listing`'s shapes).

``started_since_boot`` (else ``started``) tells a live kernel from a dead one whose pid
was reused.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["PREFIX", "VERSION", "EPOCH_SLACK", "runtime_dir", "kernel_file", "write_json",
           "process_started", "process_started_since_boot", "alive", "read_kernel_files"]

PREFIX = "nbtune-kernel-"
VERSION = 1


def runtime_dir() -> Path:
    """Jupyter's runtime dir (``$JUPYTER_RUNTIME_DIR`` or the platform's default)."""
    from jupyter_core.paths import jupyter_runtime_dir

    return Path(jupyter_runtime_dir())


def kernel_file(pid: int, directory: str | os.PathLike[str] | None = None) -> Path:
    return Path(directory if directory is not None else runtime_dir()) / f"{PREFIX}{pid}.json"


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` whole or not at all (a temporary file, then ``os.replace``), mode 0600.

    A reader polling every few seconds never sees half a file.
    """
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # as Jupyter makes it
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # mode 0600
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, separators=(",", ":"), allow_nan=False)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def process_started(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch), None if there is none."""
    import psutil

    try:
        return float(psutil.Process(pid).create_time())
    except (psutil.Error, OSError):
        return None


def process_started_since_boot(pid: int) -> float | None:
    """When process ``pid`` started, in seconds since the machine booted (Linux), else None.

    What tells a process from a later one given its pid. The epoch time of
    :func:`process_started` is the boot time plus this, and Linux recomputes its
    boot time (``/proc/stat``'s ``btime``, whole seconds) from the wall clock at
    every read: two processes reading it a moment apart can see start times a
    second apart. This reading is the kernel's own tick count, which nothing moves.
    """
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:
            stat = f.read()
        # after "pid (comm) ", whose comm may hold spaces and parentheses: field 22, starttime
        return int(stat[stat.rindex(b")") + 2:].split()[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


#: epoch start times of one process read by two processes differ by up to this (``btime``)
EPOCH_SLACK = 2.0


def alive(pid: int, started: float | None, started_since_boot: float | None = None) -> bool:
    """Process ``pid`` runs and is the one that wrote the file (not a reuse of its pid).

    ``started_since_boot`` (what the writer read of itself, when it could) is compared
    exactly (to a clock tick); else ``started`` within :data:`EPOCH_SLACK`.
    """
    if started_since_boot is not None:
        now = process_started_since_boot(pid)
        if now is not None:
            return abs(now - float(started_since_boot)) < 0.05
    now = process_started(pid)
    if now is None:
        return False
    return started is None or abs(now - float(started)) < EPOCH_SLACK


def read_kernel_files(directory: str | os.PathLike[str] | None = None, *,
                      remove_dead: bool = True) -> list[dict[str, Any]]:
    """The files of live kernels, oldest kernel first; a dead kernel's file is removed.

    A kernel killed without running its exit hooks (SIGKILL, a crash) leaves
    its file behind: its experiments are gone with it, so the file goes too.
    An unreadable or foreign file is skipped, never fatal.
    """
    folder = Path(directory if directory is not None else runtime_dir())
    out = []
    for path in sorted(folder.glob(f"{PREFIX}*.json")):
        try:
            data = json.loads(path.read_text())
            pid = int(data["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # removed meanwhile, or not ours
        if not isinstance(data, dict) or data.get("version") != VERSION:
            continue
        if not alive(pid, data.get("started"), data.get("started_since_boot")):
            if remove_dead:
                with contextlib.suppress(OSError):
                    path.unlink()
            continue
        out.append(data)
    return sorted(out, key=lambda d: (d.get("started") or 0.0, d["pid"]))
