"""Benchmark: analytic RMSE and per-query RMSE of the classic strategies on range workloads.

Targets, on a 2-core machine with 1 BLAS thread:

* All Range RMSE under 5 s at n = 4096, strategy construction included;
* All Range RMSE of Identity, H2, HB, Privelet (wavelet) and GreedyH at
  ``n = 2**16`` under 10 s each without any ``n × n`` matrix (tree-form inverse Grams,
  :mod:`dpexplorer.queries.trees`; structured Gram products, :mod:`dpexplorer.queries.gram_ops`), and at
  ``n = 2048`` within 2× of one dense Cholesky solve (the dense floor: LAPACK
  ``potrf`` + ``potri`` of the strategy Gram, what :class:`dpexplorer.core.error.GramInverse`
  does).  Per-query RMSE is timed on Prefix at ``2**16`` and on All Range at ``2**12`` and
  ``2**13`` (``n(n+1)/2`` = 8.4 M and 33.6 M queries; at ``2**16`` the 2.1 G answers
  alone would take 17 GB).

Run by hand::

    python benchmarks/bench_error.py            # prints the tables
    pytest benchmarks/bench_error.py --benchmark-only
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
from threadpoolctl import threadpool_limits
from timing import best_of

import dpexplorer as dpx
from dpexplorer.core.error import GramInverse

STRATEGIES = ["identity", "h2", "hb", "wavelet", "greedy_h"]
SIZES = [2048, 4096, 2**16]
NOISE = dpx.Laplace(1.0)


def rmse_from_scratch(n: int, mechanism: str) -> float:
    """Build All Range(n) and the strategy, then compute the analytic RMSE (ε = 1, Laplace)."""
    W = dpx.workloads.all_range(n)
    A = dpx.registry.get(mechanism).strategy(W, NOISE)
    return dpx.rmse(W, A, NOISE)


def per_query_from_scratch(W, mechanism: str) -> np.ndarray:
    A = dpx.registry.get(mechanism).strategy(W, NOISE)
    return dpx.per_query_rmse(W, A, NOISE)


def dense_floor(n: int, mechanism: str = "h2") -> float:
    """Seconds of one dense Cholesky factorisation and inverse of the strategy Gram (n × n)."""
    A = dpx.registry.get(mechanism).strategy(dpx.workloads.all_range(n), NOISE)
    X = A.gram().dense()
    t0 = time.perf_counter()
    GramInverse(X)
    return time.perf_counter() - t0


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("mechanism", STRATEGIES)
def test_all_range_rmse(benchmark, n, mechanism):
    with threadpool_limits(1):
        value = benchmark.pedantic(rmse_from_scratch, args=(n, mechanism), rounds=3, iterations=1)
    assert value > 0


PER_QUERY_CASES = ([("prefix", 2**16, m, 3) for m in STRATEGIES]
                   + [("all_range", 2**12, m, 1) for m in ("h2", "greedy_h")])


@pytest.mark.parametrize("workload,n,mechanism,rounds", PER_QUERY_CASES)
def test_per_query_rmse(benchmark, workload, n, mechanism, rounds):
    W = getattr(dpx.workloads, workload)(n)
    with threadpool_limits(1):
        out = benchmark.pedantic(per_query_from_scratch, args=(W, mechanism), rounds=rounds,
                                 iterations=1)
    assert out.shape == (W.m,)


def test_dense_floor_2048(benchmark):
    with threadpool_limits(1):
        benchmark.pedantic(dense_floor, args=(2048,), rounds=3, iterations=1)


if __name__ == "__main__":
    print(f"cores: {os.cpu_count()}, load average {os.getloadavg()[0]:.2f}, BLAS threads: 1")
    with threadpool_limits(1):
        floor = min(dense_floor(2048) for _ in range(3))
        print(f"dense floor at n = 2048: one Cholesky factorisation + inverse of the H2 Gram "
              f"{floor:.3f} s")
        print("\nAll Range: strategy construction + analytic RMSE (Laplace ε = 1), best of 3")
        print(f"{'n':>6} {'mechanism':>10} {'rmse':>9} {'seconds':>9} {'/ floor':>8}")
        for n in SIZES:
            for mech in STRATEGIES:
                value, t = best_of(lambda n=n, mech=mech: rmse_from_scratch(n, mech))
                rel = f"{t / floor:8.3f}" if n == 2048 else ""
                print(f"{n:>6} {mech:>10} {value:>9.3f} {t:>9.3f} {rel}")
        print("\nPer-query RMSE (strategy construction included), best of 3")
        cases = [("Prefix", dpx.workloads.prefix(2**16)),
                 ("All Range", dpx.workloads.all_range(2**12)),
                 ("All Range", dpx.workloads.all_range(2**13))]
        for wname, W in cases:
            for mech in STRATEGIES:
                # All Range at 2**13 has 33.6 M queries, above the default `queries` limit
                # (dpx.limits): this machine has the memory (268 MB of answers), so raise it
                with dpx.limits.override(queries=max(W.m, dpx.limits.current().queries)):
                    out, t = best_of(lambda W=W, mech=mech: per_query_from_scratch(W, mech),
                                     3 if W.m < 10**7 else 1)
                print(f"  {wname:<9} n = {W.n:>6} ({W.m:>11,} queries) {mech:>10}: "
                      f"{t:7.2f} s  (max {out.max():.2f})")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
