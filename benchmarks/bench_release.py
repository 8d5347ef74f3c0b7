"""Benchmark: MEASURE in release mode (OS CSPRNG via opendp) against the numpy simulation path.

Times ``PrivateData.measure`` of ``p`` strategy answers (identity strategy on
``p`` cells of counts), for the four samplers a release can use -- continuous
and discrete (integer) Laplace and Gaussian -- next to the seeded numpy path a
simulation uses for the same distribution.  Reported, not asserted.
Run by hand::

    python benchmarks/bench_release.py            # prints a table (p = 1e4, 1e5, 1e6)
    pytest benchmarks/bench_release.py --benchmark-only
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

import dpexplorer as dpx
from dpexplorer.privacy import OS_CSPRNG, PrivacyLedger, PrivateData
from dpexplorer.queries.matrix import Weighted

SIZES = [10**4, 10**5, 10**6]
NOISES = {"laplace": dpx.Laplace(1.0), "gaussian": dpx.Gaussian(1.0, 1e-6, "zcdp")}


def _strategy(p: int, discrete: bool):
    """Identity on ``p`` cells; scaled by 1.5 (not whole entries) for the continuous samplers."""
    identity = dpx.workloads.identity(p)
    return identity if discrete else Weighted(identity, 1.5)


def measure(p: int, noise: str, discrete: bool, release: bool) -> float:
    """Seconds of one MEASURE of ``p`` answers (data, strategy and ledger built outside the timing)."""
    x = np.random.default_rng(0).integers(0, 1000, size=p)
    data = PrivateData(x, PrivacyLedger())
    A = _strategy(p, discrete)
    source = OS_CSPRNG if release else np.random.default_rng(1)
    t0 = time.perf_counter()
    y = data.measure(A, NOISES[noise], source)
    seconds = time.perf_counter() - t0
    assert y.shape == (p,) and (not discrete or np.all(y == np.round(y)))
    return seconds


@pytest.mark.parametrize("release", [True, False], ids=["release", "simulation"])
@pytest.mark.parametrize("discrete", [False, True], ids=["float", "integer"])
@pytest.mark.parametrize("noise", list(NOISES))
@pytest.mark.parametrize("p", SIZES[:2])
def test_measure(benchmark, p, noise, discrete, release):
    benchmark.pedantic(measure, args=(p, noise, discrete, release), rounds=3, iterations=1)


if __name__ == "__main__":
    print(f"cores: {os.cpu_count()}, load: {os.getloadavg()}")
    print(f"{'p':>9} {'noise':>9} {'sampler':>8} {'release (s)':>12} {'simulation (s)':>15} {'ratio':>7}")
    for p in SIZES:
        for noise in NOISES:
            for discrete in (False, True):
                rel = min(measure(p, noise, discrete, True) for _ in range(2 if p < 10**6 else 1))
                sim = min(measure(p, noise, discrete, False) for _ in range(3))
                kind = "integer" if discrete else "float"
                print(f"{p:>9,} {noise:>9} {kind:>8} {rel:>12.3f} {sim:>15.4f} {rel / sim:>7.0f}×")
