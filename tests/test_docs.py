"""The project's own documentation (dpexplorer.docs): every topic renders, the Learn page shows
it, and no user-facing text points at files a user does not have (the development notes and
the folder beside the repository; ``tests/test_citations.py`` checks every tracked file)."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import pytest

import dpexplorer as dpx
from dpexplorer import docs

ROOT = Path(__file__).resolve().parents[1]
#: What a user does not have: the development machine's shared folder and its notes.
FORBIDDEN = re.compile("MATH" r"\.md|\.\./" "shared|" "shared/" "(?:notes|papers|data)")


@pytest.mark.parametrize("name", docs.TOPICS)
def test_every_topic_renders(name):
    markdown_it = pytest.importorskip("markdown_it")
    text = docs.topic(name)
    assert text.startswith("# ") and docs.title(name) in text.splitlines()[0]
    html = markdown_it.MarkdownIt("commonmark").enable("table").render(text)
    assert html.count("<h1>") == 1 and len(html) > 500
    if "\n|---" in text:                                  # every Markdown table is a table
        assert "<table>" in html
    assert "In the code:" in text                         # each topic says where the code is


def test_topics_cover_what_the_code_relies_on():
    names = set(docs.TOPICS)
    for needed in ("noise", "matrix_mechanism", "svd_bound", "strategies", "dawa", "hdmm",
                   "eigen_design", "sums", "accounting", "intervals", "residual_planner",
                   "accuracy", "data"):
        assert needed in names
    assert [n for n, _ in docs.topics()] == list(docs.TOPICS)
    assert len({t for _, t in docs.topics()}) == len(docs.TOPICS)
    assert sorted(p.stem for p in (ROOT / "dpexplorer" / "docs").glob("*.md")) == sorted(docs.TOPICS)
    with pytest.raises(KeyError, match="topics"):
        docs.topic("nope")


def _user_facing_texts():
    """(where, text) of everything a user reads: README, docs, notebooks, app code and texts."""
    yield "README.md", (ROOT / "README.md").read_text()
    for name in docs.TOPICS:
        yield f"docs/{name}.md", docs.topic(name)
    for nb in sorted((ROOT / "apps").rglob("*.ipynb")):
        cells = json.loads(nb.read_text())["cells"]
        yield str(nb.relative_to(ROOT)), "\n".join("".join(c["source"]) for c in cells)
    for py in sorted((ROOT / "apps").glob("*.py")):
        yield str(py.relative_to(ROOT)), py.read_text()
    for py in sorted((ROOT / "dpexplorer" / "ui").glob("*.py")):   # page texts and their docstrings
        yield str(py.relative_to(ROOT)), py.read_text()
    for name in dpx.registry.names():                             # shown in the comparison tables
        m = dpx.registry.get(name)
        yield f"registry {name}", " ".join([m.label, m.description, m.source])
    for f in dpx.datasets.DPBENCH_FILES:
        yield f"dpbench {f.path}", f"{f.description} {f.source}"
    yield "bundled sources", " ".join(dpx.datasets.BUNDLED_SOURCES.values())
    yield "interval methods", " ".join(dpx.Release.CI_METHODS.values())
    for name in dpx.__all__:                                      # the everyday API's docstrings
        obj = getattr(dpx, name)
        if not inspect.ismodule(obj):
            yield f"dpx.{name}", inspect.getdoc(obj) or ""


def test_no_user_facing_text_points_at_the_shared_folder():
    hits = [(where, m.group(0)) for where, text in _user_facing_texts()
            for m in FORBIDDEN.finditer(text)]
    assert hits == []


def test_the_check_has_teeth():
    assert FORBIDDEN.search("see ../" "shared/" "notes/" "MATH" ".md")
    assert FORBIDDEN.search("MATH" '.md "Sum queries"')
    assert not FORBIDDEN.search("the app's shared session")


def test_presets_cite_papers_not_notes():
    from dpexplorer.queries.terms import PRESETS

    for key, preset in PRESETS.items():
        assert not FORBIDDEN.search(f"{preset.label} {preset.source}"), key


def test_the_learn_page_renders_every_topic(monkeypatch):
    pytest.importorskip("panel")
    from dpexplorer.ui.learn import LearnView, docs_panel
    from dpexplorer.ui.session import Session

    monkeypatch.delenv("DPEXPLORER_DPBENCH", raising=False)
    view = LearnView(Session())
    select, text = view.docs.objects
    assert select.value == "overview" and text.object == docs.topic("overview")
    for name in docs.TOPICS:
        select.value = name
        assert text.object == docs.topic(name)
    assert set(select.options.values()) == set(docs.TOPICS)
    assert docs_panel("accuracy").objects[1].object.startswith("# Accuracy first")
