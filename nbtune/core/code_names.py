"""The names a function's compiled code uses, followed into what it calls (read, never run).

Why: some choices must be made before a training function ever runs (does it write
checkpoints, so a trial may pause at a rung? does it build its model through the fusion
API, so trials may be fused?). Nested functions and the module-level functions it calls
by name (a wrapper around the real loop) are followed a few levels deep.
"""

from __future__ import annotations

import dis
import types
from collections.abc import Iterator
from typing import Any

__all__ = ["names_used", "modules_used"]


def _codes(fn: Any, depth: int) -> Iterator[tuple[Any, dict[str, Any]]]:
    """``(code, globals)`` of ``fn``, its nested functions and the functions it calls by name."""
    fn = getattr(fn, "__func__", fn)
    if getattr(fn, "__code__", None) is None and callable(fn):  # an object with __call__
        fn = type(fn).__call__
    seen: set[int] = set()
    todo = [(getattr(fn, "__code__", None), getattr(fn, "__globals__", {}), 0)]
    while todo:
        code, glb, level = todo.pop()
        if code is None or id(code) in seen:
            continue
        seen.add(id(code))
        yield code, glb
        todo.extend((k, glb, level) for k in code.co_consts if hasattr(k, "co_names"))
        if level < depth:
            for name in code.co_names:
                f = getattr(glb.get(name), "__code__", None)
                if f is not None:
                    todo.append((f, glb[name].__globals__, level + 1))


def names_used(fn: Any, depth: int = 3) -> set[str]:
    """Global and attribute names in ``fn``'s code and in the code it calls by name."""
    names: set[str] = set()
    for code, _ in _codes(fn, depth):
        names.update(code.co_names)
    return names


def modules_used(fn: Any, depth: int = 3) -> list[str]:
    """The modules ``fn`` needs, in first-use order: its own module (unless ``__main__``),
    the modules its code and the code it calls import or use as globals.

    A trial process that imports these before its first job does not pay them
    inside its first epoch (an import such as scikit-learn's can be a large part
    of a short first epoch). Imports in a branch that never runs are listed too.
    """
    out: dict[str, None] = {}
    fn = getattr(fn, "__func__", fn)
    own = getattr(fn, "__module__", None)
    if isinstance(own, str) and own != "__main__":
        out[own] = None
    for code, glb in _codes(fn, depth):
        for ins in dis.get_instructions(code):
            if ins.opname == "IMPORT_NAME" and isinstance(ins.argval, str):
                out[ins.argval] = None
        for name in code.co_names:
            mod = glb.get(name)
            if isinstance(mod, types.ModuleType) and mod.__name__ != "__main__":
                out[mod.__name__] = None
    return [m for m in out if m and not m.startswith(".")]
