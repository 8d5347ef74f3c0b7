"""Benchmark: the Compare page's strategy rows computed by many threads at once, per BLAS thread count.

The served explorer computes every session's comparison on its own thread
(issue 14: eight concurrent sessions).  For each BLAS thread count given,
this runs ``--threads`` threads at once, each building the quick strategies'
rows of :func:`dpexplorer.compare` (identity, workload, H2, HB, wavelet,
GreedyH; a fresh strategy cache each, SVD bound included) for All Range at
``--n``, and prints the wall seconds and each row's seconds per thread,
after one thread alone.  ``dpexplorer.ui.server.one_blas_thread`` (called
by the served app) chose one BLAS thread from these figures.  Run by hand::

    python benchmarks/bench_threads.py --n 1024 --threads 8 --blas 2 1
"""

from __future__ import annotations

import argparse
import os
import threading
import time

from threadpoolctl import threadpool_limits

import dpexplorer as dpx
from dpexplorer.queries import workloads

NAMES = ("identity", "workload", "h2", "hb", "wavelet", "greedy_h")


def rows(W, noise, out: dict, lock: threading.Lock) -> None:
    """Build the SVD bound and every row of :data:`NAMES` in a fresh cache; add their seconds."""
    cache = dpx.StrategyCache()
    times = {}
    t0 = time.perf_counter()
    cache.svdb(W)
    times["svd bound"] = time.perf_counter() - t0
    for name in NAMES:
        t1 = time.perf_counter()
        dpx.compare(W, noise, [name], cache=cache)
        times[name] = time.perf_counter() - t1
    times["total"] = time.perf_counter() - t0
    with lock:
        for key, seconds in times.items():
            out.setdefault(key, []).append(seconds)


def run(n: int, threads: int, blas: int) -> tuple[float, dict]:
    """Wall seconds of ``threads`` threads building the rows at once, and each row's seconds."""
    W, noise = workloads.all_range(n), dpx.Laplace(1.0)
    out, lock = {}, threading.Lock()
    with threadpool_limits(limits=blas, user_api="blas"):
        pool = [threading.Thread(target=rows, args=(W, noise, out, lock)) for _ in range(threads)]
        t0 = time.perf_counter()
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()
        return time.perf_counter() - t0, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--blas", type=int, nargs="+", default=[2, 1])
    args = parser.parse_args()
    print(f"All Range n = {args.n}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
    for blas in args.blas:
        for threads in (1, args.threads):
            wall, out = run(args.n, threads, blas)
            spread = ", ".join(f"{k} {min(v):.2f}-{max(v):.2f}" for k, v in out.items())
            print(f"BLAS {blas}, {threads} thread(s): wall {wall:.2f} s; per thread: {spread}")


if __name__ == "__main__":
    main()
