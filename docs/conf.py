"""Sphinx configuration of the dpexplorer documentation site.

Build (from the repository root; the site loads nothing from the network)::

    python -m sphinx -W --keep-going -b html docs docs/_build/html

then open ``docs/_build/html/index.html``.  Sources, all read in place:

* ``learn/<topic>.md`` includes ``dpexplorer/docs/<topic>.md``, the files the
  app's Learn page renders (one page per topic of ``dpexplorer.docs.TOPICS``);
* ``gallery/`` holds copies of ``apps/gallery/*.ipynb`` made here at build
  time (Sphinx reads sources only below this folder; the copies are
  git-ignored), rendered without executing them;
* ``api/`` documents the engine from its numpydoc docstrings (autodoc +
  numpydoc).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))  # document this checkout, not an installed copy

import dpexplorer  # noqa: E402

project = "dpexplorer"
copyright = "dpexplorer authors"
release = version = dpexplorer.__version__

extensions = [
    "myst_nb",                # Markdown (MyST) and notebooks
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "numpydoc",               # numpydoc docstring sections
    "sphinx.ext.viewcode",
]

exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "**.ipynb_checkpoints"]
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}

# --- the gallery notebooks: copied from apps/gallery, never executed -------------------------------
GALLERY_SRC = ROOT / "apps" / "gallery"
GALLERY_DST = HERE / "gallery"


def _copy_gallery() -> None:
    """Copy ``apps/gallery/*.ipynb`` into ``docs/gallery/`` (only files that changed)."""
    GALLERY_DST.mkdir(exist_ok=True)
    wanted = {p.name for p in GALLERY_SRC.glob("*.ipynb")}
    for stale in GALLERY_DST.glob("*.ipynb"):
        if stale.name not in wanted:
            stale.unlink()
    for src in sorted(GALLERY_SRC.glob("*.ipynb")):
        dst = GALLERY_DST / src.name
        if not dst.exists() or dst.read_bytes() != src.read_bytes():
            shutil.copyfile(src, dst)


_copy_gallery()
nb_execution_mode = "off"     # the notebooks are shown as stored (the suite runs them elsewhere)
nb_merge_streams = True

# --- MyST --------------------------------------------------------------------------------------------
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# --- API reference: autodoc + numpydoc -------------------------------------------------------------
autodoc_default_options = {"members": True, "member-order": "bysource"}
autodoc_typehints = "signature"
autodoc_member_order = "bysource"
autosummary_generate = False
numpydoc_show_class_members = False   # members are documented by autodoc below each class
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

# --- HTML: PyData theme, nothing loaded from the network ----------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"dpexplorer {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "icon_links": [],          # no icon links (they would need an icon font or CDN)
    "analytics": {},           # no analytics scripts
    "use_edit_page_button": False,
    "navbar_end": ["theme-switcher", "navbar-icon-links"],
}
html_static_path: list[str] = []
# No page uses math markup: Sphinx would then add MathJax from a CDN (tests/test_docs_site.py fails
# on it).  Math in the Learn topics is written in Unicode (ε, Σ, ⊗), as the app's Learn page shows it.
html_show_sourcelink = False
