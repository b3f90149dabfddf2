"""What identifies the model being tuned, for the profiler's job history: its code, not its hyperparameters."""

from __future__ import annotations

import hashlib
import inspect
from dataclasses import fields, is_dataclass
from typing import Any

__all__ = ["model_key"]


def model_key(trainable: Any) -> str:
    """What identifies the model being tuned: its code, not its hyperparameters.

    A training function: its qualified name and source. A workload model (the
    simulator's stand-in for code): its class and its fields. Hashed, short.
    """
    fn = getattr(trainable, "__wrapped__", trainable)
    if inspect.isfunction(fn) or inspect.ismethod(fn) or isinstance(fn, type):
        src = getattr(fn, "__nbtune_source__", None)  # a %%tune cell's body
        if src is None:
            try:
                src = inspect.getsource(fn)
            except Exception:  # no file (a REPL, exec'd code): the name alone
                src = ""
        desc = f"{fn.__module__}.{fn.__qualname__}:{src}"
    elif is_dataclass(trainable):
        desc = f"{type(trainable).__qualname__}:" + repr(
            [(f.name, getattr(trainable, f.name, None)) for f in fields(trainable)])
    else:  # a model object: its class and its parameters
        desc = f"{type(trainable).__module__}.{type(trainable).__qualname__}:" + repr(
            [(k, _plain(v)) for k, v in sorted(getattr(trainable, "__dict__", {}).items())
             if "cache" not in k])  # memos fill up as it runs
    return hashlib.sha1(desc.encode()).hexdigest()[:16]


def _plain(v: Any) -> str:
    """A parameter as text without memory addresses (a function by its name)."""
    if callable(v):
        return getattr(v, "__qualname__", type(v).__qualname__)
    text = repr(v)
    return type(v).__qualname__ if " at 0x" in text else text
