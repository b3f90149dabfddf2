"""What the Dask runtime accepts as a training function, checked before anything starts."""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["check_signature"]


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
