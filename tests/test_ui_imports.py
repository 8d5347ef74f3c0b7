"""The explorer's modules import each other without cycles, and the engine never imports them.

The import graph is read from the source (``ast``): module-level and
function-level ``from .x import ...``, ``from . import x``,
``from dpexplorer.ui.x import ...`` and ``import dpexplorer.ui.x``.  An import
inside a function hides a cycle from Python at import time but not from a
reader: it counts here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import dpexplorer

PACKAGE = Path(dpexplorer.__file__).parent
UI = PACKAGE / "ui"


def _ui_modules() -> dict[str, Path]:
    return {p.stem: p for p in sorted(UI.glob("*.py")) if p.stem != "__init__"}


def _imported_ui_modules(path: Path, names: set[str]) -> set[str]:
    """The modules of ``dpexplorer/ui`` that ``path`` (a module of it) imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:  # from .x import y / from . import x
                base = node.module
            elif node.level == 0 and node.module and node.module.startswith("dpexplorer.ui"):
                base = node.module[len("dpexplorer.ui"):].lstrip(".") or None
            else:
                continue
            if base is None:  # from . import x, y: the names are modules
                found.update(a.name for a in node.names if a.name in names)
            else:
                found.add(base.split(".")[0])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("dpexplorer.ui."):
                    found.add(alias.name.split(".")[2])
    return found & names


def import_graph() -> dict[str, set[str]]:
    """``{module: modules of dpexplorer/ui it imports}`` for every module of ``dpexplorer/ui``."""
    modules = _ui_modules()
    names = set(modules)
    return {name: _imported_ui_modules(path, names) - {name} for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as ``[a, b, ..., a]``, or None (depth-first search)."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def test_find_cycle_finds_a_cycle_and_only_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"b"}}) == ["b", "b"]


def test_the_graph_sees_function_level_and_absolute_imports(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("from . import workers\nimport dpexplorer.ui.learn\n"
                   "def f():\n    from .tasks import Task\n    from dpexplorer.ui.serving import REDRAWS\n")
    assert _imported_ui_modules(src, set(_ui_modules())) == {"workers", "learn", "tasks", "serving"}


def test_no_import_cycle_in_ui():
    graph = import_graph()
    assert {"compare_view", "session", "tasks", "accuracy_view"} <= set(graph)
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle in dpexplorer/ui: " + " -> ".join(cycle)


def test_the_engine_never_imports_the_ui():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if UI in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ImportFrom):
                module = node.module or ""
                if node.level:  # relative: resolve against the module's package
                    package = path.relative_to(PACKAGE.parent).with_suffix("").parts[:-node.level]
                    module = ".".join([*package, *([module] if module else [])])
                names = [module] + [f"{module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            if any(n == "dpexplorer.ui" or n.startswith("dpexplorer.ui.") for n in names):
                offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not offenders, f"engine modules importing dpexplorer.ui: {offenders}"
