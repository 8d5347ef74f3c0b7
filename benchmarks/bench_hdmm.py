"""Benchmark: HDMM's optimisers (OPT0, OPT⊗, OPT+, HDMM) -- speed and accuracy.

Targets, on a 2-core machine:

* OPT0 Laplace, one restart, All Range n = 1024 under 10 s (n = 4096 reported);
* OPT0 Laplace on a structured Gram (All Range: O(p² n) per iteration instead
  of O(p n²)), one restart at n = 4096 under 30 s, n = 16384 reported (per iteration);
  the dense-Gram path (the Gram passed as an array) beside it at n ≤ 2048, and the HDMM
  reference code beside both in ``benchmarks/bench_opt0_reference.py``;
* OPT0 Gaussian n = 1024 reported;
* OPT⊗ on the two CPS workloads (50 × 100 × 7 × 4 × 2 = 280,000 cells) under 30 s;
* RECONSTRUCT on the CPS domain with an OPT⊗ Kronecker strategy under 5 s.

With ``--tables`` it also prints every OPT0 cell of HDMM Tables 4-5 and the
multi-dimensional cells of Tables 6-7 (CPS, Adult) beside the paper's values
(ε = 1; Gaussian δ = 1e-6).  Run by hand::

    python benchmarks/bench_hdmm.py              # speed figures
    python benchmarks/bench_hdmm.py --tables     # + accuracy tables (several minutes)
    pytest benchmarks/bench_hdmm.py --benchmark-only
"""

from __future__ import annotations

import argparse
import math
import os
import time

import numpy as np
import pytest

import dpexplorer as dpx
from dpexplorer import mechanism
from dpexplorer.queries import workloads
from dpexplorer.strategies import hdmm, templates

LAPLACE = dpx.Laplace(1.0)
GAUSSIAN = dpx.Gaussian(1.0, 1e-6)
CPS = (50, 100, 7, 4, 2)
ADULT = (100, 100, 100, 99, 85, 42, 16, 15, 9, 7, 6, 5, 2, 2)


def cps_workloads():
    return {
        "All Marginals": workloads.kron([workloads.identity_total(n) for n in CPS]),
        "All Prefix-Marginals": workloads.kron(
            [workloads.prefix(50), workloads.prefix(100)]
            + [workloads.identity_total(n) for n in CPS[2:]]),
    }


def timed(fn, *args, **kwargs):
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0, time.process_time() - c0


def opt0_structured_speed():
    """OPT0 Laplace, one restart: structured Gram (default for All Range) and dense Gram."""
    for n, dense in [(1024, True), (1024, False), (2048, True), (2048, False), (4096, False)]:
        W = workloads.all_range(n)
        arg = W.gram().dense() if dense else W
        res, wall, cpu = timed(templates.opt0, arg, LAPLACE, restarts=1)
        it = res.info.get("iterations")
        label = f"OPT0 Laplace All Range n={n} {'dense' if dense else 'structured'} ({it} it)"
        print(f"{label:<52} {dpx.rmse(W, res.strategy, LAPLACE):>9.2f} {wall:>8.1f} {cpu:>8.1f}")
    n, iters = 16384, 5
    W = workloads.all_range(n)
    res, wall, cpu = timed(templates.opt0, W, LAPLACE, restarts=1, maxiter=iters)
    label = f"OPT0 Laplace All Range n={n} structured, {res.info['iterations']} it"
    print(f"{label:<52} {'':>9} {wall:>8.1f} {cpu:>8.1f}   "
          f"({cpu / max(res.info['iterations'], 1):.1f} s CPU per iteration incl. setup)")


def speed():
    print(f"cores: {os.cpu_count()}, load average {os.getloadavg()[0]:.2f}  (wall and CPU "
          f"seconds; other work on the machine inflates wall time; BLAS threads 1 in OPT0)")
    print(f"{'what':<52} {'rmse':>9} {'wall s':>8} {'cpu s':>8}")
    opt0_structured_speed()
    for n, nz, kw in [(1024, GAUSSIAN, {})]:
        W = workloads.all_range(n)
        res, wall, cpu = timed(templates.opt0, W, nz, **kw)
        label = f"OPT0 {type(nz).__name__} All Range n={n} ({res.info.get('iterations')} it)"
        print(f"{label:<52} {dpx.rmse(W, res.strategy, nz):>9.2f} {wall:>8.1f} {cpu:>8.1f}")
    for wname, W in cps_workloads().items():
        for nz in (LAPLACE, GAUSSIAN):
            res, wall, cpu = timed(templates.opt_kron, W, nz)
            label = f"OPT⊗ {type(nz).__name__} CPS {wname}"
            print(f"{label:<52} {dpx.rmse(W, res.strategy, nz):>9.2f} {wall:>8.1f} {cpu:>8.1f}")
    W = cps_workloads()["All Marginals"]
    A = templates.opt_kron(W, LAPLACE).strategy
    x = np.random.default_rng(0).poisson(3.0, size=W.n).astype(float)
    y = A.matvec(x)
    _, wall, cpu = timed(mechanism.reconstruct, A, y)
    print(f"{'RECONSTRUCT CPS 280,000 cells (OPT⊗ Kronecker)':<52} {'':>9} {wall:>8.2f} {cpu:>8.2f}")
    r, wall, cpu = timed(dpx.simulate, x, W, A, LAPLACE, seed=1)
    label = "simulate CPS (MEASURE + RECONSTRUCT + answers)"
    print(f"{label:<52} {r.analytic_rmse:>9.2f} {wall:>8.2f} {cpu:>8.2f}")


TABLE4 = {"all_range": (5.55, 8.07, 11.08), "prefix": (5.32, 7.35, 9.58),
          "width32": (5.88, 6.34, 6.41), "permuted": (5.55, 8.06, 11.08)}
TABLE5 = {"all_range": (9.73, 12.26, 14.85), "prefix": (8.87, 10.66, 12.49),
          "width32": (8.74, 9.93, 10.08), "permuted": (9.73, 12.26, 14.85)}
BUILD = {"all_range": workloads.all_range, "prefix": workloads.prefix,
         "width32": lambda n: workloads.width_range(n, 32),
         "permuted": lambda n: workloads.permuted(workloads.all_range(n), seed=0)}


def tables():
    print("\nOPT0, HDMM Tables 4 (Laplace) and 5 (Gaussian), default parameters")
    print(f"{'noise':<9} {'workload':<10} {'n':>5} {'ours':>8} {'paper':>8} {'ratio':>7} {'s':>6}")
    for nz, table in ((LAPLACE, TABLE4), (GAUSSIAN, TABLE5)):
        for wname, values in table.items():
            for n, paper in zip((64, 256, 1024), values, strict=True):
                W = BUILD[wname](n)
                res, wall, _ = timed(templates.opt0, W, nz)
                ours = dpx.rmse(W, res.strategy, nz)
                print(f"{type(nz).__name__:<9} {wname:<10} {n:>5} {ours:>8.2f} {paper:>8.2f} "
                      f"{ours / paper:>7.3f} {wall:>6.1f}")
    print("\nMulti-dimensional, HDMM Tables 6-7 (CPS required within 1%; Adult reported)")
    paper = {("All Marginals", 1): (4.85, 4.85, 4.84), ("All Prefix-Marginals", 1): (40.59, 40.59, 40.59),
             ("All Marginals", 2): (7.85, 7.85, 7.85), ("All Prefix-Marginals", 2): (29.48, 29.49, 29.48)}
    print(f"{'noise':<9} {'workload':<22} {'OPT⊗':>16} {'OPT+':>16} {'HDMM':>16}   (ours / paper)")
    for nz in (LAPLACE, GAUSSIAN):
        for wname, W in cps_workloads().items():
            ours = [dpx.rmse(W, f(W, nz).strategy, nz)
                    for f in (templates.opt_kron, templates.opt_plus, hdmm.hdmm)]
            ref = paper[wname, nz.norm]
            cells = " ".join(f"{o:>7.2f} / {r:<6.2f}" for o, r in zip(ours, ref, strict=True))
            print(f"{type(nz).__name__:<9} {wname:<22} {cells}")
    W = workloads.marginals(ADULT, [0, 1, 2, 3])
    adult_paper = {1: (872.58, 306.33, 225.35), 2: (82.42, 899.04, 46.44)}
    for nz in (LAPLACE, GAUSSIAN):
        out = []
        for f in (templates.opt_kron, templates.opt_plus, hdmm.hdmm):
            res, wall, _ = timed(f, W, nz)
            out.append((math.sqrt(nz.variance_per_unit * res.objective / W.m), wall))
        ref = adult_paper[nz.norm]
        cells = " ".join(f"{o:>7.2f} / {r:<6.2f}" for (o, _), r in zip(out, ref, strict=True))
        secs = ", ".join(f"{s:.1f}" for _, s in out)
        print(f"{type(nz).__name__:<9} {'Adult 0-3-way marg.':<22} {cells}   ({secs} s)")


# ------------------------------------------------------------- pytest-benchmark
def test_opt0_laplace_1024(benchmark):
    W = workloads.all_range(1024)
    res = benchmark.pedantic(templates.opt0, args=(W, LAPLACE), kwargs={"restarts": 1},
                             rounds=1, iterations=1)
    assert dpx.rmse(W, res.strategy, LAPLACE) <= 11.08 * 1.02


@pytest.mark.parametrize("n", [2048, 4096])
def test_opt0_laplace_structured(benchmark, n):
    W = workloads.all_range(n)
    res = benchmark.pedantic(templates.opt0, args=(W, LAPLACE), kwargs={"restarts": 1},
                             rounds=1, iterations=1)
    assert res.info["gram"] == "structured"
    assert dpx.rmse(W, res.strategy, LAPLACE) < dpx.rmse(W, dpx.strategies.hb(n), LAPLACE)


@pytest.mark.parametrize("wname", ["All Marginals", "All Prefix-Marginals"])
def test_opt_kron_cps(benchmark, wname):
    W = cps_workloads()[wname]
    res = benchmark.pedantic(templates.opt_kron, args=(W, LAPLACE), rounds=1, iterations=1)
    assert res.objective > 0


def test_reconstruct_cps(benchmark):
    W = cps_workloads()["All Marginals"]
    A = templates.opt_kron(W, LAPLACE).strategy
    y = A.matvec(np.ones(W.n))
    x_hat = benchmark.pedantic(mechanism.reconstruct, args=(A, y), rounds=3, iterations=1)
    np.testing.assert_allclose(x_hat, 1.0, atol=1e-8)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", action="store_true", help="also print the accuracy tables")
    args = parser.parse_args()
    speed()
    if args.tables:
        tables()
