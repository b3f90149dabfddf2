"""The layers point down only, and no module imports itself round a cycle.

Every ``import`` in every module counts, lazy ones inside functions and
``TYPE_CHECKING`` blocks included: a lazy import still makes the lower layer
depend on the upper one, it only hides it from a reader. There is no
exceptions list; an arrow that needs one is in the wrong place (see
docs/architecture.md for where each kind of code goes).
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import nbtune

ROOT = Path(nbtune.__file__).parent

#: lowest first; a unit (``nbtune.<name>``) may import only units of a lower layer, or itself
LAYERS: list[set[str]] = [
    {"core", "version", "fusion"},
    {"algorithms", "allocators", "workloads", "progress", "waiting", "examples"},
    {"engine", "surrogate"},
    {"runtimes"},
    {"bubbles"},
    {"experiment", "store", "planner", "kernels"},
    {"build"},
    {"api", "resumption", "replay"},
    {"demo"},
    {"ui", "cli", "server"},
    {"__main__", ""},  # "" is the package facade nbtune/__init__.py
]
LAYER = {unit: i for i, units in enumerate(LAYERS) for unit in units}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_module(name: str) -> bool:
    rel = Path(*name.split("."))
    return (ROOT.parent / rel.with_suffix(".py")).exists() or (ROOT.parent / rel / "__init__.py").exists()


def imports_of(path: Path, mod: str | None = None) -> set[str]:
    """Every nbtune module ``path`` imports, resolved to the module (not the package) it names."""
    mod = mod or module_name(path)
    package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), package) \
                if node.level else node.module or ""
            names = [f"{base}.{a.name}" if is_module(f"{base}.{a.name}") else base
                     for a in node.names]
        else:
            continue
        out.update(n for n in names if n == "nbtune" or n.startswith("nbtune."))
    return out


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p) for p in sorted(ROOT.rglob("*.py"))}


def unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_unit_has_a_layer():
    missing = {unit(m) for m in graph()} - set(LAYER)
    assert not missing, f"give these a layer in LAYERS and docs/architecture.md: {missing}"


def test_imports_point_down():
    upward = [
        f"{m} -> {dep}  ({unit(m) or 'nbtune'} is layer {LAYER[unit(m)]}, "
        f"{unit(dep) or 'nbtune'} layer {LAYER[unit(dep)]})"
        for m, deps in graph().items() for dep in sorted(deps)
        if unit(dep) != unit(m) and LAYER[unit(dep)] >= LAYER[unit(m)]
    ]
    assert not upward, "imports that run back up (or sideways):\n" + "\n".join(upward)


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in g.get(v, ()):
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    found = cycles(graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_walker_sees_lazy_imports_and_cycles(tmp_path):
    # the test itself can fail: a lazy import inside a function is an arrow, so is a
    # TYPE_CHECKING one and a relative one, and a loop is a cycle
    src = tmp_path / "probe.py"
    src.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from nbtune.ui.model import Delta\n"
        "def f():\n    from nbtune.engine.engine import Engine\n    import nbtune.api\n"
        "from . import base\n"
    )
    found = imports_of(src, "nbtune.allocators.probe")
    assert found == {"nbtune.ui.model", "nbtune.engine.engine", "nbtune.api",
                     "nbtune.allocators.base"}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
