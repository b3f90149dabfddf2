"""What the Dask runtime accepts as a training function, checked before anything starts."""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["check_signature", "pickled"]


def check_signature(fn: Any) -> None:
    """Raise TypeError unless ``fn`` can be called as ``train(config, trial)`` or ``train(config)``."""
    if not callable(fn):
        raise TypeError(f"the trainable must be a function train(config, trial), got {fn!r}")
    try:
        sig = inspect.signature(fn)
    except ValueError:  # builtins without a signature: let them try
        return
    for args in ((None, None), (None,)):  # train(config, trial), or Ray's train(config)
        try:
            sig.bind(*args)
            return
        except TypeError:
            continue
    raise TypeError(
        f"{getattr(fn, '__name__', fn)!r} must accept train(config, trial) or, reporting "
        "with nbtune.report(...), train(config)"
    )


def pickled(fn: Any) -> bytes:
    """``fn`` as the bytes sent to every trial process, or a TypeError saying what to change.

    A function that captures a lock, an open file, a socket or a database
    connection cannot cross processes; raised here, before any trial runs,
    instead of as a serialization trace from the first launch.
    """
    import cloudpickle

    try:
        return cloudpickle.dumps(fn)
    except Exception as exc:
        raise TypeError(
            f"the training function {getattr(fn, '__name__', fn)!r} cannot be pickled to send "
            f"to the trial processes ({type(exc).__name__}: {exc}): it refers to an object "
            "that cannot cross processes (a lock, an open file, a connection, a generator). "
            "Create that object inside the function, or pass its settings in the config"
        ) from exc
