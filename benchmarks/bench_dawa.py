"""Benchmarks for DAWA (targets on a 2-core machine).

* private partition, n = 4096: under 0.2 s with power-of-two candidates, under 10 s with all intervals
* DAWA end to end, n = 4096, 2000 random ranges: under 1 s
* 2D DAWA on a 1024 × 1024 grid (n = 2²⁰), 2000 random rectangles: under 60 s

Run by hand (DPBench data from the development checkout's folder ``DPBENCH`` below; the
data-dependent benchmarks skip without it)::

    python benchmarks/bench_dawa.py
    pytest benchmarks/bench_dawa.py --benchmark-only
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

import dpexplorer as dpx
from dpexplorer.adaptive import dawa
from dpexplorer.privacy import PrivateData
from dpexplorer.queries import workloads

DPBENCH = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "dpbench"


def _x1d():
    return dpx.datasets.load_dpbench("NETTRACE", DPBENCH)


def _x2d():
    grid = dpx.datasets.load_dpbench("checkin_256_256", DPBENCH)
    return np.kron(grid, np.ones((4, 4)))  # 1024 × 1024, same shape of data


def partition(x, candidates):
    data = PrivateData(x)
    return dawa.private_partition(data, 0.025, 0.075, np.random.default_rng(0), candidates)


def end_to_end(x, W):
    return dawa.dawa(PrivateData(x), W, 0.1, np.random.default_rng(0))


@pytest.fixture(scope="module")
def x1d():
    if not DPBENCH.is_dir():
        pytest.skip("DPBench data not found")
    x = _x1d()
    partition(x, "pow2")  # compile the numba kernels outside the timings
    return x


@pytest.mark.parametrize("candidates", ["pow2", "all"])
def test_private_partition(benchmark, x1d, candidates):
    p = benchmark.pedantic(partition, args=(x1d, candidates), rounds=3, iterations=1)
    assert p.n == 4096


def test_dawa_end_to_end(benchmark, x1d):
    W = workloads.random_ranges(4096, 2000, seed=0)
    res = benchmark.pedantic(end_to_end, args=(x1d, W), rounds=3, iterations=1)
    assert res.x_hat.shape == (4096,)


def test_dawa_2d_1024(benchmark):
    if not DPBENCH.is_dir():
        pytest.skip("DPBench data not found")
    x = _x2d()
    W = workloads.random_rectangles(x.shape, 2000, seed=0)
    res = benchmark.pedantic(end_to_end, args=(x, W), rounds=1, iterations=1)
    assert res.x_hat.shape == (x.size,)


def _best(f, *args, rounds=3):
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        out = f(*args)
        times.append(time.perf_counter() - t0)
    return min(times), out


if __name__ == "__main__":
    import os

    print(f"cores: {os.cpu_count()}")
    x = _x1d()
    partition(x, "pow2")  # numba compilation
    dawa.dawa(PrivateData(x[:64]), workloads.random_rectangles((8, 8), 5), 1.0, np.random.default_rng(0))
    for cand, target in [("pow2", 0.2), ("all", 10.0)]:
        t, p = _best(partition, x, cand)
        print(f"private partition n=4096 {cand:>4}: {t:6.3f} s (target < {target} s), {p.k} buckets")
    W = workloads.random_ranges(4096, 2000, seed=0)
    t, _ = _best(end_to_end, x, W)
    print(f"DAWA end to end n=4096, 2000 ranges: {t:6.3f} s (target < 1 s)")
    x2 = _x2d()
    W2 = workloads.random_rectangles(x2.shape, 2000, seed=0)
    t, res = _best(end_to_end, x2, W2, rounds=1)
    print(f"2D DAWA 1024x1024, 2000 rectangles: {t:6.1f} s (target < 60 s), {res.partition.k} buckets")
