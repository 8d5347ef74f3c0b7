import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

DPBENCH = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "dpbench"


@pytest.fixture(scope="session")
def dpbench_dir():
    """The DPBench folder, read through ``fetch_dpbench``: every checksum is verified, and since
    every file is present nothing is downloaded (the suite stays offline)."""
    if not DPBENCH.is_dir():
        pytest.skip(f"DPBench data not found at {DPBENCH}")
    from dpexplorer.datasets import fetch_dpbench

    return fetch_dpbench(DPBENCH)


@pytest.fixture
def kernel_name(tmp_path, monkeypatch):
    """A Jupyter kernelspec running ipykernel in this interpreter, found through JUPYTER_PATH.

    The kernel imports this checkout's ``dpexplorer`` (``PYTHONPATH`` = the repository root),
    whatever copy is installed.  Skips when ipykernel or nbclient is missing.
    """
    pytest.importorskip("ipykernel")
    pytest.importorskip("nbclient")
    name = "dpexplorer-test"
    spec = tmp_path / "kernels" / name
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "dpexplorer tests", "language": "python",
        "env": {"PYTHONPATH": str(ROOT), "PYDEVD_DISABLE_FILE_VALIDATION": "1"}}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    monkeypatch.setenv("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    return name
