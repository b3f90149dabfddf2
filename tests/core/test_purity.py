"""nbtune.core stays pure: no I/O, clock, Dask or UI imports (the architecture's first rule)."""

from __future__ import annotations

import ast
from pathlib import Path

import nbtune.core

FORBIDDEN = {"dask", "distributed", "time", "asyncio", "ipywidgets", "bokeh", "IPython",
             "threading", "socket", "sqlalchemy", "os", "subprocess"}


def test_core_imports_nothing_impure():
    root = Path(nbtune.core.__file__).parent
    offenders = []
    for path in root.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in FORBIDDEN]
    assert offenders == []
