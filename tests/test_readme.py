"""Every Python example of the README and of the documentation pages runs, in order, as a reader
would paste it; a doctest block (``>>>``) also checks what it prints.

Examples are parsed and run by Sybil (its Markdown parsers): one test per example, the examples of a
document sharing one namespace, as in a reader's session.  An example that needs what the suite
does not have (the network, the reader's own files) carries a visible
``<!-- skip: next "reason" -->`` marker and is reported as skipped with that reason.
"""

from __future__ import annotations

from pathlib import Path

import pytest

sybil = pytest.importorskip("sybil")
from sybil.parsers.markdown import PythonCodeBlockParser, SkipParser  # noqa: E402

# a document's examples share one namespace, so under pytest-xdist they run in one worker
# (``--dist loadgroup``: tests/conftest.py), in order
pytestmark = pytest.mark.xdist_group("readme")

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "dpexplorer" / "docs").glob("*.md"))]
_SYBIL = sybil.Sybil(parsers=[SkipParser(), PythonCodeBlockParser()])
_PARSED: dict[Path, object] = {}


def _document(path: Path):
    """The parsed document (once per run: its namespace carries over from one example to the next)."""
    if path not in _PARSED:
        _PARSED[path] = _SYBIL.parse(path)
    return _PARSED[path]


def _examples():
    for path in DOCUMENTS:
        for index, example in enumerate(_document(path)):
            yield pytest.param(path, index, id=f"{path.relative_to(ROOT)}:{example.line}")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """One working folder for the whole run, as a reader's: files an example writes
    (``ledgers.sqlite``) are there for the next example."""
    return tmp_path_factory.mktemp("readme")


@pytest.mark.slow
@pytest.mark.parametrize("path, index", list(_examples()))
def test_example_runs(path, index, workdir, monkeypatch):
    monkeypatch.chdir(workdir)
    example = list(_document(path))[index]
    example.evaluate()  # unittest.SkipTest for a marked example: pytest reports it as skipped


def test_every_document_has_its_examples_found():
    """The parser sees the README's examples (a change of fence style must not silently empty the test)."""
    readme = list(_document(ROOT / "README.md"))
    assert len([e for e in readme if "skip" not in type(e.region.evaluator).__name__.lower()]) >= 15
