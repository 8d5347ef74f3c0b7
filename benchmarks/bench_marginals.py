"""Benchmarks for the marginal algebra, OPT_M and DataCube (targets on a 2-core machine).

* OPT_M on the Adult 3D marginals (14 attributes, 2**14 weights), default
  restarts (5): under 60 s per run;
* RECONSTRUCT with a MarginalStrategy on the CPS domain (280,000 cells): under 5 s;
* error evaluation (RMSE, SVD bound, per-query variances) without n × n matrices.

Every figure is the best of ``--repeat`` runs (default 3); the RMSE next to
it (ε = 1, Gaussian δ = 1e-6) is the value checked against HDMM Tables 6-7
in ``tests/test_marginals.py``.  Run by hand::

    python benchmarks/bench_marginals.py
    python benchmarks/bench_marginals.py --repeat 1
    pytest benchmarks/bench_marginals.py --benchmark-only
"""

from __future__ import annotations

import argparse
import math
import os

import numpy as np
import pytest
from timing import best_of

import dpexplorer as dpx
from dpexplorer.core import error
from dpexplorer.queries import workloads
from dpexplorer.queries.matrix import Identity, Kronecker, Prefix
from dpexplorer.strategies import classic as strategies
from dpexplorer.strategies import marginals

CPS = (50, 100, 7, 4, 2)
ADULT = (100, 100, 100, 99, 85, 42, 16, 15, 9, 7, 6, 5, 2, 2)
NOISES = {"Laplace": dpx.Laplace(1.0), "Gaussian": dpx.Gaussian(1.0, 1e-6)}


def cps_all_marginals():
    return Kronecker([workloads.identity_total(n) for n in CPS])


def cps_prefix_marginals():
    return Kronecker([Prefix(50), Prefix(100)] + [workloads.identity_total(n) for n in CPS[2:]])


def adult_3d():
    return workloads.marginals(ADULT, [0, 1, 2, 3])


# ------------------------------------------------------------ pytest-benchmark
@pytest.mark.parametrize("noise", list(NOISES))
def test_opt_m_adult(benchmark, noise):
    W = adult_3d()
    res = benchmark.pedantic(marginals.opt_m, args=(W, NOISES[noise]), rounds=1, iterations=1)
    assert res.seconds < 60


def test_reconstruct_cps(benchmark):
    W = cps_all_marginals()
    A = marginals.opt_m(W, NOISES["Gaussian"]).strategy  # all 32 marginals
    y = np.random.default_rng(0).normal(size=A.m)
    rec = dpx.mechanism.Reconstructor(A)
    x_hat = benchmark(rec, y)
    assert x_hat.shape == (A.n,)


# ------------------------------------------------------------------- by hand
def main(repeat: int) -> None:
    print(f"cores: {os.cpu_count()}, best of {repeat}")
    print("\n== OPT_M (default restarts = 5, seed 0; includes the marginal approximation)")
    print(f"{'workload':<28} {'noise':<9} {'rmse':>10} {'seconds':>8} {'params':>7} {'marginals':>9}")
    cases = [("CPS All Marginals", cps_all_marginals), ("CPS All Prefix-Marginals", cps_prefix_marginals),
             ("Adult 3D Marginals", adult_3d)]
    for label, build in cases:
        for nname, noise in NOISES.items():
            res, secs = best_of(lambda build=build, noise=noise: marginals.opt_m(build(), noise), repeat)
            W = build()
            rmse = error.rmse(W, res.strategy, noise)
            print(f"{label:<28} {nname:<9} {rmse:>10.2f} {secs:>8.2f} {res.info['parameters']:>7} "
                  f"{res.info['marginals']:>9}")

    print("\n== DataCube (BMAX selection, HDMM's conventions)")
    for label, build in [("CPS All Marginals", cps_all_marginals), ("Adult 3D Marginals", adult_3d)]:
        W = build()
        A, secs = best_of(lambda W=W: marginals.datacube(W), repeat)
        values = "  ".join(f"{n} {error.rmse(W, A, noise):.2f}" for n, noise in NOISES.items())
        print(f"{label:<28} {len(A.marginals):>4} cuboids  {secs:>6.2f} s   rmse {values}")

    print("\n== MEASURE / RECONSTRUCT on the CPS domain (n = 280,000)")
    W = cps_all_marginals()
    x = np.random.default_rng(0).integers(0, 20, size=W.n).astype(float)
    for nname, noise in NOISES.items():
        A = marginals.opt_m(W, noise).strategy
        y, t_measure = best_of(lambda A=A: A.matvec(x), repeat)
        rec, t_setup = best_of(lambda A=A: dpx.mechanism.Reconstructor(A), repeat)
        x_hat, t_rec = best_of(lambda rec=rec, y=y: rec(y), repeat)
        r, t_release = best_of(lambda A=A, noise=noise: dpx.simulate(x, W, A, noise, seed=1), repeat)
        print(f"OPT_M {nname:<9} {len(A.marginals):>2} marginals, p = {A.m:>7,}: A x {t_measure:.3f} s, "
              f"reconstructor {t_setup:.4f} s, x̂ = A⁺y {t_rec:.3f} s "
              f"(max |x̂ − x| noiseless {np.abs(x_hat - x).max():.1e}), release {t_release:.3f} s")

    print("\n== Error evaluation")
    Wa = adult_3d()
    A = marginals.opt_m(Wa, NOISES["Laplace"]).strategy
    for nname, noise in NOISES.items():
        fresh = adult_3d()  # first call computes the marginal approximation (cached on W)
        v0, t0 = best_of(lambda fresh=fresh, noise=noise: error.rmse(fresh, A, noise), 1)
        v1, t1 = best_of(lambda noise=noise: error.rmse(Wa, A, noise), repeat)
        print(f"Adult 3D, {nname:<9} rmse(OPT_M-for-Laplace strategy) {v0:.2f}: first {t0:.2f} s, cached {t1:.4f} s")
        fresh = adult_3d()
        v, t = best_of(lambda fresh=fresh, noise=noise: error.svd_bound(fresh, noise), 1)
        print(f"Adult 3D, {nname:<9} SVD bound {v:.2f}: {t:.2f} s")
        v, t = best_of(lambda noise=noise: error.rmse(Wa, strategies.identity(ADULT), noise), repeat)
        print(f"Adult 3D, {nname:<9} Identity {v:.2f}: {t:.2f} s")
    Wc = cps_prefix_marginals()
    Ac = marginals.opt_m(Wc, NOISES["Laplace"]).strategy
    v, t = best_of(lambda: error.per_query_rmse(Wc, Ac, NOISES["Laplace"]), repeat)
    print(f"CPS Prefix-Marginals per-query RMSE of {v.size:,} queries (OPT_M, Laplace): {t:.3f} s, "
          f"root mean of their squares {math.sqrt(np.mean(v**2)):.2f}")
    v, t = best_of(lambda: error.rmse(Wc, Identity(Wc.n), NOISES["Laplace"]), repeat)
    print(f"CPS Prefix-Marginals Identity rmse {v:.2f} at n = {Wc.n:,}: {t:.4f} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    main(parser.parse_args().repeat)
