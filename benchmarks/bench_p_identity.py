"""Benchmark: a simulated release with a p-Identity strategy on a big 1D domain (2-core machine).

Times ``dpx.simulate(x, Prefix(n), A, Laplace(1), seed=0)`` for a p-Identity
strategy ``A = [I; Θ]·D`` (:class:`dpexplorer.strategies.templates.PIdentity`)
with a random sparse ``Θ`` (``p`` rows, 5 % non-zero entries uniform in
``[0, 1)``, seeded) -- the shape of the strategies OPT0 returns, without
running OPT0 (an hour at 16384 cells) -- and then the release's per-query
standard deviations (``Release.per_query_std``: the matrix mechanism's
``diag(W (AᵀA)⁻¹ Wᵀ)``, :meth:`PIdentity.workload_row_variances`).

Every case runs in a fresh process so that its peak memory is its own: the
figures are wall and CPU seconds, the resident set before the call and the
process's peak resident set after it (``ru_maxrss``, which includes LAPACK's
workspace), with the BLAS threads and the machine's load.  Reported, never
asserted.  Run by hand from the repository root::

    PYTHONPATH=. python benchmarks/bench_p_identity.py                 # n = 16384, p = 1024
    PYTHONPATH=. python benchmarks/bench_p_identity.py --sizes 4096:256 16384:1024
    pytest benchmarks/bench_p_identity.py --benchmark-only
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import os
import resource
import time

import numpy as np
import pytest
from bench_opt0 import load
from threadpoolctl import threadpool_info, threadpool_limits

import dpexplorer as dpx
from dpexplorer.strategies import templates

DENSITY = 0.05
NOISE = dpx.Laplace(1.0)


def strategy(n: int, p: int, seed: int = 0):
    """A p-Identity strategy with ``Θ: (p, n)``, ``DENSITY`` of its entries non-zero (seeded)."""
    rng = np.random.default_rng(seed)
    theta = np.where(rng.random((p, n)) < DENSITY, rng.random((p, n)), 0.0)
    return templates.p_identity(theta)


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _case(n: int, p: int, threads: int) -> dict:
    """In a fresh process: build the case, then time ``simulate`` and ``per_query_std``."""
    with threadpool_limits(threads, user_api="blas"):
        blas = sorted({i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"})
        A = strategy(n, p)
        W = dpx.workloads.prefix(n)
        x = np.random.default_rng(1).integers(0, 100, n)
        out = {"n": n, "p": A.Theta.shape[0], "blas": blas, "rss_before": _rss_mib()}
        t0, c0 = time.perf_counter(), time.process_time()
        r = dpx.simulate(x, W, A, NOISE, seed=0)
        out["simulate"] = (time.perf_counter() - t0, time.process_time() - c0)
        out["peak_simulate"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        out["rmse"] = r.analytic_rmse
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            std = r.per_query_std()
            out["per_query"] = (time.perf_counter() - t0, time.process_time() - c0)
            out["rmse_per_query"] = float(np.sqrt(np.mean(std**2)))
        except (ValueError, MemoryError) as exc:  # the dense path refuses above its limit
            out["per_query"] = f"refused: {str(exc)[:100]}"
        out["peak_total"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def run_case(n: int, p: int, threads: int = 1) -> dict:
    """:func:`_case` in a fresh (spawned) process."""
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx) as pool:
        return pool.submit(_case, n, p, threads).result()


@pytest.mark.parametrize("n,p", [(4096, 256), (16384, 1024)])
def test_simulate_prefix_p_identity(benchmark, n, p):
    A, W = strategy(n, p), dpx.workloads.prefix(n)
    x = np.random.default_rng(1).integers(0, 100, n)
    with threadpool_limits(1, user_api="blas"):
        r = benchmark.pedantic(dpx.simulate, args=(x, W, A, NOISE), kwargs={"seed": 0}, rounds=1,
                               iterations=1)
        assert r.per_query_std().shape == (n,)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["16384:1024"], help="n:p pairs")
    parser.add_argument("--threads", type=int, default=1, help="BLAS threads")
    args = parser.parse_args(argv)
    print(f"cores: {os.cpu_count()}, load before: {load()}, Θ {DENSITY:.0%} non-zero, Laplace ε = 1")
    for pair in args.sizes:
        n, p = (int(v) for v in pair.split(":"))
        f = run_case(n, p, args.threads)
        print(f"Prefix({f['n']}), p = {f['p']}, BLAS threads {f['blas']}: RSS before {f['rss_before']:.0f} MiB")
        w, c = f["simulate"]
        print(f"  simulate:      {w:7.2f} s wall, {c:7.2f} s CPU, peak RSS {f['peak_simulate']:.0f} MiB, "
              f"analytic RMSE {f['rmse']:.2f}")
        if isinstance(f["per_query"], str):
            print(f"  per_query_std: {f['per_query']}")
        else:
            w, c = f["per_query"]
            print(f"  per_query_std: {w:7.2f} s wall, {c:7.2f} s CPU, peak RSS {f['peak_total']:.0f} MiB, "
                  f"RMSE over the queries {f['rmse_per_query']:.2f}")
    print(f"load after: {load()}")


if __name__ == "__main__":
    main()
