"""Benchmark: continual counting at scale -- per-step errors, sensitivity and releases of T steps.

Targets (2 cores, 1 BLAS thread): the per-step standard deviations of every online strategy
of the running total at ``T = 2**20`` under a second each without a ``T × T`` matrix
(Toeplitz strategies by FFT in O(T log T), BLT in O(T·d), trees in O(T log T)), the
participation sensitivity of √L in O(T), the γ₂ bound in O(1); a stream release of
``2**16`` steps (kernel, OS CSPRNG through opendp).  Baseline of the same run: the classic H2
strategy's per-query error on the same workload (tree-form inverse Gram), so that the ratio
carries across machines.

Run by hand::

    python benchmarks/bench_continual.py            # prints the table
    pytest benchmarks/bench_continual.py --benchmark-only
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from threadpoolctl import threadpool_limits
from timing import best_of

import dpexplorer as dpx

NOISE = dpx.Gaussian(1.0, 1e-6)
MECHANISMS = ["h2", "toeplitz_sqrt", "blt", "banded", "tree_online", "kary_tree"]
SIZES = [2**16, 2**20]


def per_step_std(T: int, mechanism: str, params: dict | None = None) -> np.ndarray:
    """Strategy construction (optimisers: their run too) and every step's analytic std."""
    W = dpx.streaming.continual(T)
    A = dpx.registry.get(mechanism).strategy(W, NOISE, **(params or {}))
    return dpx.per_query_rmse(W, A, NOISE)


def stream_release(T: int, mechanism: str = "toeplitz_sqrt") -> float:
    counts = np.ones(T, dtype=np.int64)
    noise = dpx.Gaussian(1.0, 1e-6, calibration="zcdp")
    stream = dpx.streaming.release(counts, T, mechanism, noise)
    return sum(s.answer for s in stream)


@pytest.mark.parametrize("T", SIZES)
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_per_step_std(benchmark, T, mechanism):
    with threadpool_limits(1):
        out = benchmark.pedantic(per_step_std, args=(T, mechanism), rounds=3, iterations=1)
    assert out.shape == (T,)


if __name__ == "__main__":
    print(f"cores: {os.cpu_count()}, load average {os.getloadavg()[0]:.2f}, BLAS threads: 1")
    with threadpool_limits(1):
        print("\nRunning total: strategy + every step's std (Gaussian ε = 1, δ = 1e-6), best of 3")
        print(f"{'T':>9} {'mechanism':>14} {'max std':>9} {'seconds':>8} {'/ h2':>6}")
        for T in SIZES:
            base = None
            for mech in MECHANISMS:
                out, t = best_of(lambda T=T, mech=mech: per_step_std(T, mech))
                base = t if mech == "h2" else base
                print(f"{T:>9} {mech:>14} {out.max():>9.3f} {t:>8.3f} {t / base:>6.2f}")
        T = 2**20
        A = dpx.streaming.toeplitz_sqrt(T)
        sens, t = best_of(lambda: dpx.streaming.participation_sensitivity(A, 4, T // 4))
        print(f"\nparticipation sensitivity of √L, k = 4 at separation T/4, T = 2**20: "
              f"{sens:.4f} in {t:.3f} s")
        print(f"γ₂ lower bound at T = 2**20: {dpx.streaming.bounds.gamma2_lower_bound(T):.4f}")
        for mech, how in (("toeplitz_sqrt", "noise drawn at once"), ("blt", "noise step by step")):
            total, t = best_of(lambda mech=mech: stream_release(2**16, mech), 1)
            print(f"stream release of 2**16 steps ({mech}, {how}, OS CSPRNG via opendp): {t:.2f} s "
                  f"({t / 2**16 * 1e6:.1f} µs per step)")
        dpx.streaming.blt.blt.cache_clear() if hasattr(dpx.streaming.blt.blt, "cache_clear") else None
        _, t = best_of(lambda: dpx.streaming.blt.blt(2**20, 4, "max"), 1)
        print(f"BLT optimisation, 4 buffers, T = 2**20 (first build, not cached): {t:.1f} s")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
