"""The documentation site (``docs/``, Sphinx with the PyData theme) builds with warnings as errors,
has a page for every Learn topic, gallery notebook and engine module, and loads nothing from the
network (it is read offline from ``docs/_build/html``).

The build takes 1-2 minutes on 2 cores, so that test is ``slow``; it is skipped (with the reason)
when the ``docs`` tools are not installed (``pip install -e ".[test]"`` installs them).
"""

from __future__ import annotations

import html
import importlib.util
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from dpexplorer import docs

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

#: the engine modules the API reference documents (one page each, subpackages with their modules)
API_MODULES = ("queries", "privacy", "core", "strategies", "adaptive", "sums", "streaming", "compare",
               "accuracy", "mechanism", "evaluate", "audit", "figures", "datasets", "lessons", "sums.study")

_MISSING = [name for name in ("sphinx", "pydata_sphinx_theme", "myst_nb", "numpydoc")
            if importlib.util.find_spec(name) is None]


# ------------------------------------------------------------------ what counts as an external load
#: an address on another host: http(s)://... or protocol-relative //host/...
_EXTERNAL = re.compile(r"^\s*(?:https?:)?//", re.IGNORECASE)
#: CSS that fetches: @import "..." / @import url(...) and url(...) (data: URIs are inline, not loads)
_CSS_LOADS = re.compile(r"""@import\s+(?:url\()?\s*['"]?([^'")\s;]+)|url\(\s*['"]?([^'")\s]+)""",
                        re.IGNORECASE)
#: tag -> the attributes whose value the browser fetches when the page loads
_FETCHING = {"script": ("src",), "link": ("href",), "img": ("src", "srcset"), "iframe": ("src",),
             "source": ("src", "srcset"), "video": ("src", "poster"), "audio": ("src",),
             "embed": ("src",), "object": ("data",)}


class _Loads(HTMLParser):
    """Collect the addresses an HTML page loads: fetching attributes and CSS in ``<style>``/style=."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.loads: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is None:
                continue
            if name in _FETCHING.get(tag, ()):
                # srcset is "url width, url width"; a <link> is a load whatever its rel
                self.loads += [part.split()[0] for part in value.split(",") if part.strip()] \
                    if name == "srcset" else [value]
            elif name == "style":
                self.loads += css_loads(value)
        self._in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.loads += css_loads(data)


def css_loads(css: str) -> list[str]:
    """The addresses a stylesheet fetches (``@import`` and ``url(...)``), data: URIs left out."""
    found = [a or b for a, b in _CSS_LOADS.findall(css)]
    return [u for u in found if not u.lower().startswith("data:")]


def external_loads(path: Path) -> list[str]:
    """The external addresses a built ``.html`` or ``.css`` file loads (empty when offline)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".css":
        loads = css_loads(text)
    else:
        parser = _Loads()
        parser.feed(text)
        loads = parser.loads
    return [u for u in loads if _EXTERNAL.match(html.unescape(u))]


def test_the_external_load_check_finds_loads_and_ignores_anchors(tmp_path):
    """The offline check below would catch a CDN script, stylesheet, font or image (and not an <a>)."""
    page = tmp_path / "page.html"
    page.write_text(
        '<html><head><script src="https://cdn.example.org/x.js"></script>'
        '<link rel="stylesheet" href="//fonts.example.org/css">'
        '<style>@import url("https://example.org/a.css"); .a {background: url(http://e.org/b.png)}'
        ' .b {background: url("data:image/svg+xml,%3csvg xmlns=\'http://www.w3.org/2000/svg\'")}</style>'
        '<script src="_static/local.js"></script></head>'
        '<body><a href="https://doi.org/10.1145/1807085.1807104">paper</a>'
        '<img srcset="img/a.png 1x, https://e.org/b.png 2x"></body></html>', encoding="utf-8")
    assert external_loads(page) == ["https://cdn.example.org/x.js", "//fonts.example.org/css",
                                    "https://example.org/a.css", "http://e.org/b.png",
                                    "https://e.org/b.png"]
    sheet = tmp_path / "s.css"
    sheet.write_text('@import "https://e.org/font.css"; .x{src: url(fonts/local.woff2)}', encoding="utf-8")
    assert external_loads(sheet) == ["https://e.org/font.css"]


# ------------------------------------------------------------------------------------ the build
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_site_builds_offline_with_every_page(tmp_path):
    """One build (1-2 min; one test, so parallel workers never build it twice) and its checks."""
    if _MISSING:
        pytest.skip(f"the documentation tools are not installed ({', '.join(_MISSING)}); "
                    'pip install -e ".[docs]"')
    site = build(tmp_path)
    check_learn_pages(site)
    check_gallery_pages(site)
    check_api_reference(site)
    check_offline(site)


def build(out: Path) -> Path:
    """Build the site into ``out/html``, warnings as errors (the README's command)."""
    html_dir, doctrees = out / "html", out / "doctrees"
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         "-d", str(doctrees), str(DOCS), str(html_dir)],
        cwd=ROOT, capture_output=True, text=True, timeout=840)
    assert proc.returncode == 0, f"sphinx-build failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
    assert (html_dir / "index.html").is_file()
    return html_dir


def check_learn_pages(site: Path) -> None:
    files = sorted(p.stem for p in (ROOT / "dpexplorer" / "docs").glob("*.md"))
    assert files and sorted(docs.TOPICS) == files
    for name in files:
        page = site / "learn" / f"{name}.html"
        assert page.is_file(), (f"no site page for dpexplorer/docs/{name}.md: add docs/learn/{name}.md "
                                "(an include of that file) and list it in docs/learn/index.md")
        text = page.read_text(encoding="utf-8")
        # the page shows the topic's own text: its title, and the last names of its last paragraph
        assert html.escape(docs.title(name), quote=False) in text
        last_words = re.findall(r"[A-Za-z_][\w./]{3,}", docs.topic(name))[-3:]
        assert len(last_words) == 3 and all(w in text for w in last_words), (name, last_words)


def check_gallery_pages(site: Path) -> None:
    notebooks = sorted((ROOT / "apps" / "gallery").glob("*.ipynb"))
    assert notebooks
    for nb in notebooks:
        assert (site / "gallery" / f"{nb.stem}.html").is_file(), nb.name


def check_api_reference(site: Path) -> None:
    compare = (site / "api" / "compare.html").read_text(encoding="utf-8")
    assert 'id="dpexplorer.compare.compare"' in compare
    assert 'id="dpexplorer.compare.StrategyCache"' in compare
    pages = {p.name: p.read_text(encoding="utf-8") for p in (site / "api").glob("*.html")}
    for module in API_MODULES:
        assert any(f'id="module-dpexplorer.{module}"' in t for t in pages.values()), module
    # a numpydoc section rendered as one (not as plain text)
    assert "Parameters" in compare and 'class="field-list' in compare


def check_offline(site: Path) -> None:
    files = [p for p in site.rglob("*") if p.suffix in (".html", ".css")]
    assert len(files) > 30
    offenders = {str(p.relative_to(site)): loads for p in files if (loads := external_loads(p))}
    shown = dict(list(offenders.items())[:5])
    assert not offenders, (f"{len(offenders)} built files load external resources (the site must work "
                           f"offline), e.g. {shown}")
