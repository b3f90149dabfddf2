"""The pure layers stay pure: no I/O, clock, Dask or UI imports (the architecture's first rule).

``core`` is pure data; the policies (``algorithms``, ``allocators``), the
workload models and the ``engine`` are pure functions of what they are fed,
so the simulator and a real run drive the very same code. Only the runtimes
read time. Lazy imports inside functions count too (``ast.walk`` sees them).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import nbtune

FORBIDDEN = {"dask", "distributed", "time", "datetime", "asyncio", "ipywidgets", "bokeh",
             "IPython", "threading", "socket", "sqlalchemy", "os", "subprocess"}
PURE = ["core", "algorithms", "allocators", "workloads", "engine"]
ROOT = Path(nbtune.__file__).parent


def impure_imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return [n for n in names if n.split(".")[0] in FORBIDDEN]


@pytest.mark.parametrize("package", PURE)
def test_pure_layers_import_nothing_impure(package):
    offenders = [f"{path.relative_to(ROOT)}: {n}"
                 for path in sorted((ROOT / package).rglob("*.py")) for n in impure_imports(path)]
    assert offenders == []


def test_the_check_sees_a_clock_read_inside_a_function(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("def f():\n    from time import perf_counter\n    return perf_counter()\n")
    assert impure_imports(src) == ["time"]
