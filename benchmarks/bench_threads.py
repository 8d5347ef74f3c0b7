"""Benchmark: the Compare page's strategy rows computed by many threads at once, per BLAS thread count.

The served explorer computes every session's comparison on its own thread
(the load test opens eight concurrent sessions: ``python benchmarks/bench_browser.py``).  For each
BLAS thread count given,
this runs ``--threads`` threads at once, each building the quick strategies'
rows of :func:`dpexplorer.compare` (identity, workload, H2, HB, wavelet,
GreedyH; a fresh strategy cache each, SVD bound included) for All Range at
``--n``, and prints the wall seconds and each row's seconds per thread,
after one thread alone.  ``dpexplorer.ui.server.one_blas_thread`` (called
by the served app) chose one BLAS thread from these figures.  Meanwhile a
heartbeat thread naps 5 ms over and over: by how much its naps overrun is
how long a thread that wants the interpreter lock (the server's event loop)
waits while the comparisons compute.  Run by hand::

    python benchmarks/bench_threads.py --n 1024 --threads 8 --blas 2 1
"""

from __future__ import annotations

import argparse
import os
import threading
import time

import numpy as np
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


#: The heartbeat's nap (s): a thread that sleeps this long, then wants the interpreter lock
HEARTBEAT = 0.005


def heartbeat(stop: threading.Event, lags: list) -> None:
    """Nap :data:`HEARTBEAT` seconds over and over; record by how much each nap overran.

    The overrun is how long a thread that wants the interpreter lock (the server's event
    loop, between two websocket messages) waits while the others compute.
    """
    while not stop.is_set():
        t0 = time.perf_counter()
        time.sleep(HEARTBEAT)
        lags.append(time.perf_counter() - t0 - HEARTBEAT)


def run(n: int, threads: int, blas: int) -> tuple[float, dict]:
    """Wall seconds of ``threads`` threads building the rows at once, and each row's seconds.

    The dict also holds ``"lock wait"``: the heartbeat's overruns (:func:`heartbeat`) meanwhile.
    """
    W, noise = workloads.all_range(n), dpx.Laplace(1.0)
    out, lock = {}, threading.Lock()
    stop, lags = threading.Event(), []
    with threadpool_limits(limits=blas, user_api="blas"):
        pool = [threading.Thread(target=rows, args=(W, noise, out, lock)) for _ in range(threads)]
        beat = threading.Thread(target=heartbeat, args=(stop, lags))
        beat.start()
        t0 = time.perf_counter()
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()
        wall = time.perf_counter() - t0
        stop.set()
        beat.join()
        out["lock wait"] = lags
        return wall, out


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
            lags = np.asarray(out.pop("lock wait"))
            spread = ", ".join(f"{k} {min(v):.2f}-{max(v):.2f}" for k, v in out.items())
            print(f"BLAS {blas}, {threads} thread(s): wall {wall:.2f} s; per thread: {spread}")
            print(f"    a {HEARTBEAT * 1e3:g} ms nap overran by: median {np.median(lags) * 1e3:.1f} ms, "
                  f"p99 {np.quantile(lags, 0.99) * 1e3:.1f} ms, max {lags.max() * 1e3:.1f} ms "
                  f"({lags.size} naps)")


if __name__ == "__main__":
    main()
