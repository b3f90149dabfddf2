"""The names a function's compiled code uses, followed into what it calls (read, never run).

Why: some choices must be made before a training function ever runs (does it write
checkpoints, so a trial may pause at a rung? does it build its model through the fusion
API, so trials may be fused?). Nested functions and the module-level functions it calls
by name (a wrapper around the real loop) are followed a few levels deep.
"""

from __future__ import annotations

from typing import Any

__all__ = ["names_used"]


def names_used(fn: Any, depth: int = 3) -> set[str]:
    """Global and attribute names in ``fn``'s code and in the code it calls by name."""
    fn = getattr(fn, "__func__", fn)
    if getattr(fn, "__code__", None) is None and callable(fn):  # an object with __call__
        fn = type(fn).__call__
    seen: set[int] = set()
    names: set[str] = set()
    todo = [(getattr(fn, "__code__", None), getattr(fn, "__globals__", {}), 0)]
    while todo:
        code, glb, level = todo.pop()
        if code is None or id(code) in seen:
            continue
        seen.add(id(code))
        names.update(code.co_names)
        todo.extend((k, glb, level) for k in code.co_consts if hasattr(k, "co_names"))
        if level < depth:
            for name in code.co_names:
                f = getattr(glb.get(name), "__code__", None)
                if f is not None:
                    todo.append((f, glb[name].__globals__, level + 1))
    return names
