"""Benchmark: a release of all 2-way marginals of the Superstore orders table, end to end.

ResidualPlanner (Gaussian, ε = 1, δ = 1e-6, zCDP calibration) on the bundled
table (8 attributes, about 9.2·10⁷ cells, never formed): workload build,
strategy, group-by counts in the kernel, OS-CSPRNG noise, reconstruction of
the 28 marginals.  Seconds and peak traced memory (numpy allocations
included), for the pandas records and for a dask DataFrame (4 partitions,
local scheduler).  Run by hand::

    python benchmarks/bench_tables.py
    pytest benchmarks/bench_tables.py --benchmark-only
"""

from __future__ import annotations

import os
import time
import tracemalloc

import pytest

import dpexplorer as dpx
from dpexplorer import datasets

NOISE = dpx.Gaussian(1.0, 1e-6, "zcdp")


def release_two_way(dask_partitions: int | None = None):
    """Build the table and the workload, release, return the release (what is timed)."""
    table = datasets.superstore_table(dask_partitions)
    W = dpx.workloads.marginals(table.shape, [2])
    return dpx.release(table, W, "residual_planner", NOISE)


def _timed(partitions):
    t0 = time.perf_counter()
    release_two_way(partitions)
    return time.perf_counter() - t0


@pytest.mark.parametrize("partitions", [None, 4], ids=["pandas", "dask"])
def test_release_two_way(benchmark, partitions):
    r = benchmark.pedantic(release_two_way, args=(partitions,), rounds=3, iterations=1)
    assert len(r.marginals()) == 28


if __name__ == "__main__":
    print(f"cores: {os.cpu_count()}, load: {os.getloadavg()}")
    for partitions in (None, 4):
        tracemalloc.start()
        t0 = time.perf_counter()
        r = release_two_way(partitions)
        seconds = time.perf_counter() - t0
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        best = min(_timed(partitions) for _ in range(3))
        kind = "pandas" if partitions is None else f"dask ({partitions} partitions)"
        print(f"{kind:>22}: {r.answers.size:,} answers in 28 marginals over "
              f"{r.table.domain.cells:,} cells; first run {seconds:.2f} s, best of 3 {best:.2f} s, "
              f"peak traced memory {peak / 2**20:.1f} MiB; analytic RMSE {r.analytic_rmse:.2f}")
