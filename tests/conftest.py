from pathlib import Path

import pytest

DPBENCH = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "dpbench"


@pytest.fixture(scope="session")
def dpbench_dir():
    """The DPBench folder, read through ``fetch_dpbench``: every checksum is verified, and since
    every file is present nothing is downloaded (the suite stays offline)."""
    if not DPBENCH.is_dir():
        pytest.skip(f"DPBench data not found at {DPBENCH}")
    from dpexplorer.datasets import fetch_dpbench

    return fetch_dpbench(DPBENCH)
