"""The layers point down only, and no module imports itself round a cycle.

Every ``import`` in every module counts, lazy ones inside functions and
``TYPE_CHECKING`` blocks included: a lazy import still makes the lower layer
depend on the upper one, it only hides it from a reader. There is no
exceptions list; an arrow that needs one is in the wrong place (see
docs/architecture.md for where each kind of code goes).

And no module reaches into another object's private state (``other._x``): the code
that does belongs to that object, or the object offers it publicly (the rule and what
it allows are with :func:`private_reaches`).
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
    {"algorithms", "allocators", "workloads", "console", "examples"},
    {"engine", "surrogate"},
    {"runtimes"},
    {"bubbles"},
    {"experiment", "store", "planner", "kernels"},
    {"build"},
    {"api", "resumption", "replay", "model_sampler"},
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
        "if TYPE_CHECKING:\n    from nbtune.ui.dashboard_model import Delta\n"
        "def f():\n    from nbtune.engine.engine import Engine\n    import nbtune.api\n"
        "from . import allocator_protocol\n"
    )
    found = imports_of(src, "nbtune.allocators.probe")
    assert found == {"nbtune.ui.dashboard_model", "nbtune.engine.engine", "nbtune.api",
                     "nbtune.allocators.allocator_protocol"}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


# ------------------------------------------------------------ one name, one meaning
# A module's file name and a class's name say what they hold, so the same name in two
# packages (two ``model.py``, two ``TrialGroup``) would mean two things to a reader who
# meets it in an import, a traceback or the docs. Dunder files (``__init__``,
# ``__main__``) are exempt: their name is Python's, not a concept's. An alias kept for
# an old public name is an assignment, not a class, so it does not count.


def basename_clashes(paths: list[Path]) -> dict[str, list[str]]:
    """Module basenames (dunder files aside) that more than one of ``paths`` has."""
    where: dict[str, list[str]] = {}
    for path in paths:
        if not (path.stem.startswith("__") and path.stem.endswith("__")):
            where.setdefault(path.stem, []).append(path.as_posix())
    return {name: sorted(found) for name, found in sorted(where.items()) if len(found) > 1}


def class_name_clashes(sources: dict[str, str]) -> dict[str, list[str]]:
    """Top-level class names that more than one module (``{module: source}``) defines."""
    where: dict[str, list[str]] = {}
    for module, source in sources.items():
        for node in ast.parse(source, module).body:
            if isinstance(node, ast.ClassDef):
                where.setdefault(node.name, []).append(module)
    return {name: sorted(found) for name, found in sorted(where.items()) if len(found) > 1}


def test_module_basenames_are_unique():
    clashes = basename_clashes([p.relative_to(ROOT.parent) for p in sorted(ROOT.rglob("*.py"))])
    assert not clashes, (
        "modules that share a file name (rename one so its name says what it holds):\n"
        + "\n".join(f"{name}: {', '.join(paths)}" for name, paths in clashes.items()))


def test_the_basename_check_can_fail():
    paths = [Path(p) for p in ("nbtune/ui/model.py", "nbtune/fusion/model.py",
                               "nbtune/a/__init__.py", "nbtune/b/__init__.py",
                               "nbtune/__main__.py", "nbtune/c/__main__.py", "nbtune/c/own.py")]
    assert basename_clashes(paths) == {"model": ["nbtune/fusion/model.py", "nbtune/ui/model.py"]}


def test_top_level_class_names_are_unique():
    clashes = class_name_clashes({module_name(p): p.read_text() for p in sorted(ROOT.rglob("*.py"))})
    assert not clashes, (
        "classes that share a name (rename one so its name says what it is; keep a public "
        "old name as an alias):\n"
        + "\n".join(f"{name}: {', '.join(mods)}" for name, mods in clashes.items()))


def test_the_class_name_check_can_fail():
    sources = {
        "nbtune.a": "class Allocation:\n    class Inner: ...\n",
        "nbtune.b": "class Allocation: ...\nclass Inner: ...\n",
        "nbtune.c": "from nbtune.b import Allocation\nOld = Allocation\n"
                    "def f():\n    class Allocation: ...\n",
    }
    # top-level classes only: nested ones, imports, aliases and local classes do not count
    assert class_name_clashes(sources) == {"Allocation": ["nbtune.a", "nbtune.b"]}


# ------------------------------------------------------------ private state stays private
# A module is one concept, whatever its length. Code that reaches into another object's
# ``_private`` state (``other._x``) is that object's code living elsewhere: it goes back
# to the owner as a method, or the owner offers a public method or property for it. The
# check is by rule, with no list of places: ``X._name`` (one leading underscore, not a
# dunder; ``getattr(X, "_name")`` and its kin alike) is allowed only where ``X`` is
#
#: * the object the code belongs to: ``self``/``cls`` as the first parameter of a function
#:   defined in a class body (and closures inside it). A module-level ``def f(self)`` is
#:   a method moved out of its class, so its ``self`` is somebody else's;
#: * ``super()`` (the class's own inherited state);
#: * a standard-library module whose private-looking name is its documented API:
STDLIB_IDIOMS: dict[tuple[str, str], str] = {
    ("os", "_exit"): "end a forked child at once, without running the parent's exit handlers",
    ("sys", "_getframe"): "the caller's frame, documented in sys",
}
#: * a namedtuple's documented methods and fields (underscored only so fields cannot clash);
NAMEDTUPLE_API = frozenset({"_replace", "_asdict", "_fields", "_field_defaults", "_make"})
#: * a third-party library's internal where it offers no public API, keyed by the
#:   attribute, with the library the module must import and why. Nothing of nbtune's own
#:   belongs here: give the owner an accessor instead. (Not even a module's private
#:   names through the module object: a helper another module needs is public.)
THIRD_PARTY_INTERNALS: dict[str, tuple[str, str]] = {}

_ATTR_FUNCS = {"getattr", "setattr", "hasattr", "delattr"}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _top_imports(tree: ast.Module) -> set[str]:
    """Top-level package names a module imports (anywhere in it)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module.split(".")[0])
    return out


def private_reaches(source: str, filename: str = "<src>") -> list[str]:
    """``line: expression`` for every reach into another object's private state."""
    tree = ast.parse(source, filename)
    imported = _top_imports(tree)
    found: list[str] = []

    def allowed(value: ast.expr, attr: str, owners: frozenset[str]) -> bool:
        if isinstance(value, ast.Name) and value.id in owners:
            return True
        if (isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
                and value.func.id == "super"):
            return True
        if isinstance(value, ast.Name) and (value.id, attr) in STDLIB_IDIOMS:
            return True
        if attr in NAMEDTUPLE_API:
            return True
        lib = THIRD_PARTY_INTERNALS.get(attr)
        return lib is not None and lib[0] in imported

    def visit(node: ast.AST, owners: frozenset[str], in_class: bool) -> None:
        if isinstance(node, ast.Attribute) and _private(node.attr) \
                and not allowed(node.value, node.attr, owners):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in _ATTR_FUNCS and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
                and _private(node.args[1].value)
                and not allowed(node.args[0], node.args[1].value, owners)):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
        if isinstance(node, ast.ClassDef):
            for child in ast.iter_child_nodes(node):
                visit(child, owners, True)
            return
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            params = [a.arg for a in node.args.posonlyargs + node.args.args]
            if in_class:  # a method: its first parameter is the class's own object
                owners = frozenset(params[:1]) & {"self", "cls"}
            for child in ast.iter_child_nodes(node):
                visit(child, owners, False)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, owners, in_class)

    visit(tree, frozenset(), False)
    return found


def test_no_module_reaches_into_another_objects_private_state():
    reaches = [f"{path.relative_to(ROOT.parent)}:{hit}"
               for path in sorted(ROOT.rglob("*.py"))
               for hit in private_reaches(path.read_text(), str(path))]
    assert not reaches, (
        "private state read or written from outside its object (move the code to its "
        "owner, or give the owner a public method or property):\n" + "\n".join(reaches))


def test_the_private_state_walker_can_fail(monkeypatch):
    monkeypatch.setitem(THIRD_PARTY_INTERNALS, "_reversed_padding_repeated_twice",
                        ("torch", "an internal named here only to test the rule"))
    src = (
        "import os, sys, torch\n"
        "class A:\n"
        "    def m(self, other):\n"
        "        self._x = other._y\n"                      # 4: other's
        "        f = lambda: self._x\n"
        "        def inner():\n            return self._x, other._z\n"  # 7: other's
        "        return super()._m(), os._exit, sys._getframe, other._replace()\n"
        "    @classmethod\n    def c(cls):\n        return cls._k\n"
        "    def conv(self, c):\n        return c._reversed_padding_repeated_twice\n"
        "def moved(self):\n    return self._x\n"            # 15: a method moved out
        "def g(obj):\n    return getattr(obj, '_w', None), getattr(obj, 'w')\n"  # 17
        "os._private\n"                                     # 18: not an idiom
    )
    assert private_reaches(src) == [
        "4: other._y", "7: other._z", "15: self._x", "17: getattr(obj, '_w', None)",
        "18: os._private"]
    # a third-party internal counts only where that library is imported
    assert private_reaches("def f(c):\n    return c._reversed_padding_repeated_twice\n") \
        == ["2: c._reversed_padding_repeated_twice"]
