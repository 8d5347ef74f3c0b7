"""The walkthrough notebook ``apps/explorer.ipynb`` runs top to bottom, offline, without errors.

Executed with nbclient in a Jupyter kernel of *this* interpreter (a temporary kernelspec
pointing at ``sys.executable``), each cell under a 120 s timeout.  Skipped cleanly when
nbformat, nbclient or ipykernel is not installed or the kernel cannot start.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import execute_notebook, notebook_external_loads

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "apps" / "explorer.ipynb"
CELL_TIMEOUT = 120  # seconds per cell
TOTAL_BUDGET = 300  # seconds for the whole run (kernel start included); generous under load

nbformat = pytest.importorskip("nbformat")


def test_committed_notebook_is_valid_and_cleared():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code, "the notebook has no code cells"
    for cell in code:
        assert cell.outputs == [] and cell.execution_count is None, "commit the notebook with outputs cleared"
    source = "\n".join(c.source for c in code)
    for needle in ("dpx.compare(", "dpx.svd_bound(", "dpx.release(", '"dawa"', "pn.extension(",
                   "LearnView(", "ExplorerApp("):
        assert needle in source


@pytest.mark.slow
def test_notebook_runs_top_to_bottom(kernel_name):
    nb, elapsed = execute_notebook(NOTEBOOK, kernel_name, CELL_TIMEOUT)
    assert elapsed < TOTAL_BUDGET, f"the notebook took {elapsed:.0f} s"

    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    errors = [o for o in outputs if o.output_type == "error"]
    assert not errors, errors
    text = "\n".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "SVD bound for all_range" in text
    assert "DAWA:" in text and "buckets" in text
    assert "analytic RMSE" in text
    # the Learn page and the app were displayed (Panel mimebundles, or their repr)
    shown = [o for o in outputs if o.output_type in ("display_data", "execute_result")]
    assert any("LearnView" in json.dumps(o.get("data", {})) or
               "application/vnd.holoviews_exec.v0+json" in o.get("data", {}) for o in shown)
    assert nb.cells[-1].cell_type == "markdown"
    # offline (a classroom, an air-gapped analyst): nothing is fetched from another host
    assert notebook_external_loads(nb) == []
