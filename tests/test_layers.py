"""The package's layers: a module imports only from its own layer or the layers below it.

queries < privacy < core < strategies < adaptive, sums, streaming < top level < ui, and ``ui/``
uses only the public API (no underscore-prefixed module or name).  Walks every
import statement of every module (module level and inside functions).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "dpexplorer"

#: Rank of every layer; a module may import a layer of lower or equal rank.
LAYERS = {"queries": 0, "privacy": 1, "core": 2, "strategies": 3, "adaptive": 4, "sums": 4,
          "streaming": 4, "": 5, "ui": 6}
#: Families of equal rank stay independent of each other.
INDEPENDENT = {frozenset({"adaptive", "sums"}), frozenset({"adaptive", "streaming"}),
               frozenset({"sums", "streaming"})}


def _layer(dotted: str) -> str:
    """Layer of a module given by its dotted name inside the package ('' = top level)."""
    head = dotted.split(".")[0] if dotted else ""
    return head if head in LAYERS and head != "" else ""


def _modules():
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).with_suffix("")
        parts = list(rel.parts)
        is_init = parts[-1] == "__init__"
        if is_init:
            parts = parts[:-1]
        yield path, ".".join(parts), is_init


def _imports(path: Path, dotted: str, is_init: bool):
    """(imported dotted module inside the package, imported names, line) of every import."""
    tree = ast.parse(path.read_text())
    pkg_parts = dotted.split(".") if dotted else []
    if not is_init:
        pkg_parts = pkg_parts[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg_parts[:len(pkg_parts) - (node.level - 1)]
                target = ".".join(base + (node.module.split(".") if node.module else []))
            elif node.module == "dpexplorer" or (node.module or "").startswith("dpexplorer."):
                target = node.module[len("dpexplorer."):] if node.module != "dpexplorer" else ""
            else:
                continue
            names = [a.name for a in node.names]
            # ``from pkg import module``: the imported thing is the submodule
            for name in names:
                sub = f"{target}.{name}" if target else name
                exists = (PKG / Path(*sub.split("."))).with_suffix(".py").exists() or \
                    (PKG / Path(*sub.split(".")) / "__init__.py").exists()
                yield (sub if exists else target), name, node.lineno
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("dpexplorer."):
                    yield alias.name[len("dpexplorer."):], alias.name, node.lineno


MODULES = list(_modules())


def _violations(path: Path, dotted: str, is_init: bool) -> list[str]:
    own = _layer(dotted)
    found = []
    for target, _name, line in _imports(path, dotted, is_init):
        other = _layer(target)
        if LAYERS[other] > LAYERS[own]:
            found.append(f"{path.name}:{line} ({own or 'top level'}) imports dpexplorer.{target} "
                         f"({other or 'top level'}), a higher layer")
        elif frozenset({own, other}) in INDEPENDENT:
            found.append(f"{path.name}:{line}: the {own} and {other} families stay independent")
    return found


@pytest.mark.parametrize("path,dotted,is_init", MODULES, ids=[m[1] or "dpexplorer" for m in MODULES])
def test_no_module_imports_a_higher_layer(path, dotted, is_init):
    if dotted == "":
        return  # the package itself gathers every layer
    assert _violations(path, dotted, is_init) == []


@pytest.mark.parametrize("path,dotted,is_init", [m for m in MODULES if m[1].startswith("ui")],
                         ids=[m[1] for m in MODULES if m[1].startswith("ui")])
def test_ui_uses_only_the_public_api(path, dotted, is_init):
    for target, name, line in _imports(path, dotted, is_init):
        if target.startswith("ui"):
            continue
        parts = target.split(".") + [name]
        assert not any(p.startswith("_") for p in parts if p), (
            f"{path.relative_to(PKG.parent)}:{line} imports a private name: {target}.{name}")
    private = re.findall(r"\bdpx\.(?:[a-z_]+\.)*_[a-z]\w*", path.read_text())
    assert not private, f"{path.relative_to(PKG.parent)} reaches into private names: {private}"


def test_the_walk_sees_every_layer(tmp_path):
    """The check has teeth: every layer exists, and upward or cross-family imports are found."""
    assert {_layer(d) for _, d, _ in MODULES} == set(LAYERS)
    dawa = PKG / "adaptive" / "dawa.py"
    targets = {t for t, _, _ in _imports(dawa, "adaptive.dawa", False)}
    assert {"privacy", "core.reconstruct", "strategies.classic"} <= targets
    bad = tmp_path / "fake.py"
    bad.write_text("import numpy\n\ndef f():\n    from ..mechanism import release\n"
                   "    from ..sums import thresholds\n")
    found = _violations(bad, "adaptive.fake", False)
    assert len(found) == 2 and "higher layer" in found[0] and "independent" in found[1]
    ui = tmp_path / "page.py"
    ui.write_text("from dpexplorer.evaluate import _blas_limit\n")
    assert [n for t, n, _ in _imports(ui, "ui.page", False)] == ["_blas_limit"]


def test_public_names_of_the_readme_still_work():
    import dpexplorer as dpx

    for name in ("matrix", "workloads", "spec", "noise", "error", "strategies", "registry", "privacy",
                 "accounting", "samplers", "mechanism", "datasets", "partition", "dawa", "mwem", "efpa",
                 "uniform", "optimization", "templates", "marginals", "hdmm", "eigen_design", "fourier",
                 "residual", "sums", "thresholds", "evaluate"):
        assert hasattr(dpx, name), name
    for call in ("compare", "release", "simulate", "reconstruct", "rmse", "svd_bound", "per_query_rmse"):
        assert callable(getattr(dpx, call))
    assert callable(dpx.strategies.h2) and callable(dpx.sums.run) and callable(dpx.dawa.dawa)
    assert dpx.privacy.PrivateData is dpx.PrivateData and dpx.thresholds.SVTParams
    from dpexplorer.evaluate import evaluate, uniform_ranges  # noqa: F401  (README)
    from dpexplorer.privacy import PrivateData  # noqa: F401  (README)
