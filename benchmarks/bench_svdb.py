"""Benchmark: the SVD bound from structured spectra, beside the dense floor.

Targets, on a 2-core machine with 1 BLAS thread:

* SVD bound of All Range, Prefix, Width-32 (and their permuted forms, unions
  with Identity and Kronecker products / unions over 1024 × 1024) at
  ``n = 2**20`` under 1 s each (:mod:`dpexplorer.core.spectra`);
* explicit dense workloads within 1.5× of ``scipy.linalg.eigvalsh`` on the Gram.

For an explicit ``m × n`` workload the SVD bound has to form the Gram ``WᵀW``
(``m·n²`` flops, one symmetric product) before its eigenvalues; with ``m ≥ n``
that product alone costs about half (``m = n``) to as much as (``m = 2n``) the
eigenvalues, so the ratio to ``eigvalsh`` on a given Gram is at least 1.5
(square) and about 1.8 (``m = 2n``) for any method that starts from ``W``.
The table prints it, and the ratio to the whole dense route from ``W``
(``scipy.linalg.eigvalsh(W.T @ W)``).

The dense floor of the structured cases is ``scipy.linalg.eigvalsh`` on the
``n × n`` Gram, printed for ``n = 2048`` and ``4096`` (at ``2**20`` cells that
Gram would take 8 TiB).  Run by hand::

    python benchmarks/bench_svdb.py
    pytest benchmarks/bench_svdb.py --benchmark-only
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import scipy.linalg
from threadpoolctl import threadpool_limits
from timing import best_of

from dpexplorer.core import error
from dpexplorer.queries import workloads
from dpexplorer.queries.matrix import Dense

N = 2**20


def structured_cases(n: int = N):
    k = math.isqrt(n)
    ar, pr, I = workloads.all_range, workloads.prefix, workloads.identity
    return {
        "All Range": lambda: ar(n),
        "Prefix": lambda: pr(n),
        "Width 32": lambda: workloads.width_range(n, 32),
        "Width 2": lambda: workloads.width_range(n, 2),
        "Permuted All Range": lambda: workloads.permuted(ar(n), seed=0),
        "All Range ∪ Identity": lambda: workloads.union([ar(n), I(n)]),
        "Width 32 ∪ Identity": lambda: workloads.union([workloads.width_range(n, 32), I(n)]),
        f"All Range ⊗ Prefix ({k}²)": lambda: workloads.kron([ar(k), pr(k)]),
        f"(AR ⊗ I) ∪ (I ⊗ AR) ({k}²)": lambda: workloads.union(
            [workloads.kron([ar(k), I(k)]), workloads.kron([I(k), ar(k)])]),
        f"(W32 ⊗ I) ∪ (I ⊗ P) ({k}²)": lambda: workloads.union(
            [workloads.kron([workloads.width_range(k, 32), I(k)]),
             workloads.kron([I(k), pr(k)])]),
    }


def dense_ratio(n: int, m: int, seed: int = 0):
    """``(t_svdb, t_eigvalsh, t_route)`` for a random explicit ``m × n`` workload.

    ``t_eigvalsh``: ``scipy.linalg.eigvalsh`` on the Gram, given; ``t_route``: the same
    with the Gram formed first (``A.T @ A``), what a dense computation from ``W`` costs.
    """
    A = np.random.default_rng(seed).random((m, n))
    G = A.T @ A
    _, t_floor = best_of(lambda: scipy.linalg.eigvalsh(G))
    _, t_route = best_of(lambda: scipy.linalg.eigvalsh(A.T @ A))
    _, t_ours = best_of(lambda: error.svdb(Dense(A)))
    return t_ours, t_floor, t_route


@pytest.mark.parametrize("name", list(structured_cases()))
def test_svdb_structured(benchmark, name):
    W = structured_cases()[name]()
    with threadpool_limits(1):
        value = benchmark.pedantic(error.svdb, args=(W,), rounds=3, iterations=1)
    assert np.isfinite(value) and value > 0


@pytest.mark.parametrize("n,m", [(1024, 1024), (2048, 2048)])
def test_svdb_dense_vs_eigvalsh(benchmark, n, m):
    A = np.random.default_rng(0).random((m, n))
    with threadpool_limits(1):
        value = benchmark.pedantic(error.svdb, args=(Dense(A),), rounds=3, iterations=1)
    assert value > 0


if __name__ == "__main__":
    print(f"cores: {os.cpu_count()}, load average {os.getloadavg()[0]:.2f}, BLAS threads: 1")
    with threadpool_limits(1):
        print(f"\nSVD bound, n = {N:,} cells (best of 3, seconds)")
        for name, build in structured_cases().items():
            W = build()
            value, t = best_of(lambda W=W: error.svdb(W))
            print(f"  {name:<32} SVDB {value:>16.6g}   {t:8.3f} s")
        print("\nDense floor: scipy.linalg.eigvalsh of the All Range Gram (seconds)")
        for n in (2048, 4096):
            G = workloads.all_range(n).gram().dense()
            _, t = best_of(lambda G=G: scipy.linalg.eigvalsh(G), 1)
            print(f"  n = {n:>5}: {t:8.2f} s")
        print("\nExplicit dense workloads: svdb vs scipy.linalg.eigvalsh on the Gram, given or "
              "formed from W (best of 3)")
        for n, m in [(1024, 1024), (2048, 2048), (2048, 512), (2048, 4096)]:
            t_ours, t_floor, t_route = dense_ratio(n, m)
            print(f"  W {m:>5} × {n:<5} svdb {t_ours:7.3f} s   eigvalsh {t_floor:7.3f} s   "
                  f"ratio {t_ours / t_floor:5.2f}   with the Gram {t_route:7.3f} s   "
                  f"ratio {t_ours / t_route:5.2f}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
