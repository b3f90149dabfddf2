"""Where trial checkpoints live and how they are named: ``<dir>/trial-<id>/budget-<step>.pt``.

One file per (trial, budget) so a resumed, resized or PBT-cloned trial can pick
the newest checkpoint not past the budget the engine says it has used, and so
a persistent store can point at files that outlive the experiment. Writes go
to a temporary name first and are renamed into place: a trial killed
mid-write never leaves a torn checkpoint behind.
"""

from __future__ import annotations

import os
import pickle
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from nbtune.core.tolerance import EPS

__all__ = ["CheckpointLocationError", "checkpoint_path", "latest_checkpoint", "list_checkpoints", "save_state", "load_state",
           "adopt_checkpoint", "experiment_dir"]

_NAME = re.compile(r"^budget-(?P<step>[0-9.eE+-]+)\.pt$")


def experiment_dir(given: str | os.PathLike[str] | None) -> Path:
    """Where an experiment's checkpoints go: ``given`` (a store may pass a str), or a new
    temporary directory; made if missing."""
    path = Path(given) if given is not None else Path(tempfile.mkdtemp(prefix="nbtune-ckpt-"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def trial_dir(root: str | os.PathLike[str], trial_id: int) -> Path:
    return Path(root) / f"trial-{int(trial_id)}"


def checkpoint_path(root: str | os.PathLike[str], trial_id: int, step: float) -> Path:
    """The file holding ``trial_id``'s state after ``step`` cumulative budget units."""
    return trial_dir(root, trial_id) / f"budget-{float(step):.12g}.pt"


def list_checkpoints(root: str | os.PathLike[str], trial_id: int) -> list[tuple[float, Path]]:
    """Every finished checkpoint of a trial as ``(step, path)``, oldest first."""
    d = trial_dir(root, trial_id)
    if not d.is_dir():
        return []
    out = []
    for p in d.iterdir():
        m = _NAME.match(p.name)
        if m:
            try:
                out.append((float(m.group("step")), p))
            except ValueError:
                continue
    return sorted(out)


def latest_checkpoint(
    root: str | os.PathLike[str], trial_id: int, max_step: float | None = None
) -> tuple[float, Path] | None:
    """The newest checkpoint at or before ``max_step`` (any step when None), or None."""
    cands = [(s, p) for s, p in list_checkpoints(root, trial_id)
             if max_step is None or s <= max_step + EPS]
    return cands[-1] if cands else None


def adopt_checkpoint(src: str | os.PathLike[str], root: str | os.PathLike[str], trial_id: int,
                     step: float) -> Path:
    """File a copy of another trial's checkpoint as ``trial_id``'s at ``step`` (PBT's clone).

    The trial's own checkpoints past ``step`` belong to the state it had
    before the clone and are removed, so "newest not past the budget" always
    means "of the current lineage".
    """
    dst = checkpoint_path(root, trial_id, step)
    dst.parent.mkdir(parents=True, exist_ok=True)
    for s, p in list_checkpoints(root, trial_id):
        if s > step + EPS:
            p.unlink(missing_ok=True)
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)
    return dst


def save_state(state: Any, path: str | os.PathLike[str]) -> Path:
    """Write ``state`` atomically: torch.save when torch is loaded (tensors, modules), else pickle.

    torch is not imported for a plain state: on a small machine that import
    costs seconds, paid at the first checkpoint of every trial process.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    torch = sys.modules.get("torch")  # state holding tensors means torch is loaded already
    with open(tmp, "wb") as f:
        if torch is not None:
            torch.save(state, f)
        else:
            pickle.dump(state, f, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, path)
    return path


class CheckpointLocationError(ValueError):
    """A checkpoint outside the experiment's own checkpoint directory was to be loaded."""


def load_state(path: str | os.PathLike[str], root: str | os.PathLike[str] | None = None) -> Any:
    """Read a checkpoint written by :func:`save_state` (either format).

    Loading unpickles, which can run code: with ``root`` (what trials pass)
    only a file inside the experiment's own checkpoint directory is read,
    never a path that came from elsewhere. A torch checkpoint is read with
    ``weights_only=True`` (tensors, containers, numbers) where it fits; a
    state holding other objects (an optimizer's Python objects, a custom
    class) falls back to a full load, which the directory check bounds to
    files this experiment's trials wrote.
    """
    if root is not None:
        real, base = Path(path).resolve(), Path(root).resolve()
        if not real.is_relative_to(base):
            raise CheckpointLocationError(
                f"refusing to load checkpoint {str(path)!r}: it is not inside this "
                f"experiment's checkpoint directory {str(base)!r}")
    with open(path, "rb") as f:
        head = f.read(2)
        f.seek(0)
        if head == b"PK":  # torch's zip format
            import torch

            try:
                return torch.load(f, map_location="cpu", weights_only=True)
            except pickle.UnpicklingError:
                f.seek(0)
                return torch.load(f, map_location="cpu", weights_only=False)
        return pickle.load(f)
