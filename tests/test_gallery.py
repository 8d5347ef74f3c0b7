"""The gallery notebooks ``apps/gallery/*.ipynb`` (one per page of the app) run top to bottom.

Each embeds the page's own Panel component around a ``Session``, checks it against the engine,
and exports a figure (CSV always; PNG where a browser driver is installed).  Executed with
nbclient in a kernel of this interpreter importing this checkout (``kernel_name`` in conftest).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import execute_notebook, notebook_external_loads

ROOT = Path(__file__).resolve().parents[1]
GALLERY = ROOT / "apps" / "gallery"
PAGES = ("workload", "compare", "strategy", "dawa", "release", "sums")
CELL_TIMEOUT = 300   # seconds per cell
BUDGET = 180         # seconds per notebook, kernel start included; generous under load

nbformat = pytest.importorskip("nbformat")


def test_one_notebook_per_page_committed_cleared():
    assert sorted(p.stem for p in GALLERY.glob("*.ipynb")) == sorted(PAGES)
    for page in PAGES:
        nb = nbformat.read(GALLERY / f"{page}.ipynb", as_version=4)
        nbformat.validate(nb)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert code and all(c.outputs == [] and c.execution_count is None for c in code), page
        source = "\n".join(c.source for c in code)
        assert "dpexplorer.ui." in source and ".panel()" in source      # the page's component
        assert "dpx.figures.export_figure(" in source                     # a figure exported
        assert f'print("GALLERY {page} OK")' in source
        assert nb.cells[0].cell_type == "markdown" and nb.cells[-1].cell_type == "markdown"


def test_the_readme_points_at_the_gallery():
    readme = (ROOT / "README.md").read_text()
    assert "apps/gallery/" in readme and "apps/explorer.ipynb" in readme


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES)
def test_gallery_notebook_runs(page, kernel_name):
    nb, elapsed = execute_notebook(GALLERY / f"{page}.ipynb", kernel_name, CELL_TIMEOUT)
    assert elapsed < BUDGET, f"{page}.ipynb took {elapsed:.0f} s"
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "\n".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert f"GALLERY {page} OK" in text
    assert "rows of numbers in" in text                                   # the CSV export ran
    shown = [o for o in outputs if o.output_type in ("display_data", "execute_result")]
    assert any("application/vnd.holoviews_exec.v0+json" in o.get("data", {}) for o in shown), \
        "the page's component was not displayed"
    # offline: Panel's notebook loader inlines every JS/CSS file (pn.extension(..., inline=True))
    assert notebook_external_loads(nb) == []
