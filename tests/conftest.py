from pathlib import Path

import pytest

DPBENCH = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "dpbench"


@pytest.fixture(scope="session")
def dpbench_dir():
    if not DPBENCH.is_dir():
        pytest.skip(f"DPBench data not found at {DPBENCH}")
    return DPBENCH
