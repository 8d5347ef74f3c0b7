"""Benchmark: analytic RMSE of All Range for Identity, H2 and GreedyH.

Target (issue 2): under 5 s each at n = 4096 on a 2-core machine, strategy
construction included.  Run by hand::

    python benchmarks/bench_error.py            # prints a table
    pytest benchmarks/bench_error.py --benchmark-only
"""

from __future__ import annotations

import time

import pytest

import dpexplorer as dpx

STRATEGIES = ["identity", "h2", "greedy_h"]
SIZES = [1024, 4096]


def rmse_from_scratch(n: int, mechanism: str) -> float:
    """Build All Range(n) and the strategy, then compute the analytic RMSE (ε = 1, Laplace)."""
    W = dpx.workloads.all_range(n)
    noise = dpx.Laplace(1.0)
    A = dpx.registry.get(mechanism).strategy(W, noise)
    return dpx.rmse(W, A, noise)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("mechanism", STRATEGIES)
def test_all_range_rmse(benchmark, n, mechanism):
    value = benchmark.pedantic(rmse_from_scratch, args=(n, mechanism), rounds=3, iterations=1)
    assert value > 0


if __name__ == "__main__":
    import os

    print(f"cores: {os.cpu_count()}")
    print(f"{'n':>6} {'mechanism':>10} {'rmse':>8} {'best of 3 (s)':>14}")
    for n in SIZES:
        for mech in STRATEGIES:
            times = []
            for _ in range(3):
                t0 = time.perf_counter()
                value = rmse_from_scratch(n, mech)
                times.append(time.perf_counter() - t0)
            print(f"{n:>6} {mech:>10} {value:>8.2f} {min(times):>14.2f}")
