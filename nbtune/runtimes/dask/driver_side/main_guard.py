"""Catch the script that starts a local cluster at module level, before it hangs.

A local Dask cluster starts its workers with Python's ``spawn`` start method:
each worker process imports the script being run again (as ``__mp_main__``).
A script that calls ``nbtune.tune`` at module level, outside
``if __name__ == "__main__":``, therefore starts a cluster inside every worker
while it starts — which hangs with no message or dies with multiprocessing's
bootstrapping ``RuntimeError``. This module finds that call (the script's
module-level frame on the stack, and whether its line sits inside a
``__name__ == "__main__"`` test) so the runtime can say what to write, at once.
Notebooks, ``python -c`` and the REPL have no script file and are never flagged.
"""

from __future__ import annotations

import ast
import os
import sys
from types import FrameType

__all__ = ["unguarded_main_call", "check_main_guard", "MainGuardError"]


class MainGuardError(RuntimeError):
    """The script starts a local cluster at module level; the message says what to write."""


def _is_main_test(node: ast.If) -> bool:
    t = node.test
    if not (isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], ast.Eq)):
        return False
    sides = [t.left, t.comparators[0]]
    names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
    consts = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
    return bool(names and consts)


def _script_frame(path: str, frame: FrameType | None) -> FrameType | None:
    while frame is not None:
        code = frame.f_code
        if (code.co_name == "<module>"
                and frame.f_globals.get("__name__") in ("__main__", "__mp_main__")
                and os.path.abspath(code.co_filename) == path):
            return frame
        frame = frame.f_back
    return None


def unguarded_main_call(frame: FrameType | None = None) -> tuple[str, int] | None:
    """``(script, line)`` of a module-level call outside ``if __name__ == "__main__":``, else None."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not path or not str(path).endswith(".py") or not os.path.exists(path):
        return None
    path = os.path.abspath(path)
    found = _script_frame(path, frame if frame is not None else sys._getframe(1))
    if found is None:
        return None
    line = found.f_lineno
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, ValueError):
        return None  # cannot read the script: say nothing rather than guess
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_main_test(node) and \
                node.lineno <= line <= (node.end_lineno or node.lineno):
            return None
    return path, line


def check_main_guard() -> None:
    """Raise :class:`MainGuardError` when a local cluster is started from unguarded module code."""
    hit = unguarded_main_call(sys._getframe(1))
    if hit is None:
        return
    path, line = hit
    raise MainGuardError(
        f"{os.path.basename(path)}, line {line}: this call starts a local Dask cluster at "
        "module level. Its worker processes import your script again, so each would start "
        "a cluster of its own and the run would hang. Put the code that runs the experiment "
        'under `if __name__ == "__main__":` (define train() above it), or connect to a '
        "cluster that is already running: DaskRuntime('tcp://scheduler:8786')."
    )
