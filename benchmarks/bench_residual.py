"""Benchmarks for ResidualPlanner (targets on a 2-core machine).

* all 0–3-way marginals of the Adult schema (14 attributes, 470 marginals):
  plan under 5 s (sum and max objectives);
* all 0–3-way marginals of 100 binary attributes (166,751 marginals): plan
  under 120 s (sum and max objectives), from the list of marginals (no
  workload matrix);
* ResidualPlanner (sum, max) against OPT_M and the SVD bound on CPS (All
  Marginals) and Adult (0–3-way marginals): RMSE and the largest per-query
  standard deviation, Gaussian ε = 1, δ = 1e-6.

Every timing is the best of ``--repeat`` runs (default 3) with BLAS limited
to ``--threads`` threads (default 1); the machine's load average is printed
with them.  Run by hand::

    python benchmarks/bench_residual.py
    python benchmarks/bench_residual.py --repeat 1
    pytest benchmarks/bench_residual.py --benchmark-only
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import time

import pytest
from threadpoolctl import threadpool_info, threadpool_limits

import dpexplorer as dpx
from dpexplorer.core import error, registry
from dpexplorer.queries import workloads
from dpexplorer.queries.matrix import Kronecker
from dpexplorer.strategies import residual

CPS = (50, 100, 7, 4, 2)
ADULT = (100, 100, 100, 99, 85, 42, 16, 15, 9, 7, 6, 5, 2, 2)
BINARY = (2,) * 100
NOISE = dpx.Gaussian(1.0, 1e-6)


def up_to_3_way(d: int) -> list[tuple[int, ...]]:
    """All 0-, 1-, 2- and 3-way attribute sets of ``d`` attributes."""
    return [c for k in range(4) for c in itertools.combinations(range(d), k)]


def cps_all_marginals():
    return Kronecker([workloads.identity_total(n) for n in CPS])


def adult_3way():
    return workloads.marginals(ADULT, [0, 1, 2, 3])


def best_of(fn, repeat, setup=None):
    """``(value, best seconds)`` of ``repeat`` calls of ``fn`` (of ``fn(setup())``: a fresh, untimed setup each)."""
    times = []
    for _ in range(repeat):
        args = () if setup is None else (setup(),)
        t0 = time.perf_counter()
        value = fn(*args)
        times.append(time.perf_counter() - t0)
    return value, min(times)


# ------------------------------------------------------------ pytest-benchmark
@pytest.mark.parametrize("objective", residual.OBJECTIVES)
def test_plan_adult_3way(benchmark, objective):
    sets = up_to_3_way(len(ADULT))
    plan = benchmark.pedantic(residual.plan_marginals, args=(ADULT, sets), kwargs={"objective": objective},
                              rounds=3, iterations=1)
    assert plan.info["seconds"] < 5


@pytest.mark.parametrize("objective", residual.OBJECTIVES)
def test_plan_100_binary_3way(benchmark, objective):
    sets = up_to_3_way(len(BINARY))
    t0 = time.perf_counter()
    benchmark.pedantic(residual.plan_marginals, args=(BINARY, sets), kwargs={"objective": objective},
                       rounds=1, iterations=1)
    assert time.perf_counter() - t0 < 120


# ------------------------------------------------------------------- by hand
def main(repeat: int, threads: int) -> None:
    blas = {i["internal_api"]: i["num_threads"] for i in threadpool_info()}
    print(f"cores: {os.cpu_count()}, load average {os.getloadavg()[0]:.2f}, best of {repeat}, "
          f"BLAS threads limited to {threads} (default pools: {blas})")
    with threadpool_limits(limits=threads, user_api="blas"):
        print("\n== planning time (residual sets, seconds; 'from W' includes parsing the workload matrix)")
        for label, domain in [("Adult 0-3-way", ADULT), ("100 binary 0-3-way", BINARY)]:
            sets = up_to_3_way(len(domain))
            for objective in residual.OBJECTIVES:
                reps = repeat if len(domain) < 20 else 1
                plan, secs = best_of(
                    lambda d=domain, s=sets, o=objective: residual.plan_marginals(d, s, objective=o), reps)
                extra = f", duality gap {plan.info['gap']:.1e}" if objective == "max" else ""
                print(f"{label:<20} {objective:<4} {len(sets):>7,} marginals, {len(plan.residuals):>7,} "
                      f"residual sets: {secs:7.3f} s (load {os.getloadavg()[0]:.2f}){extra}")
        for objective in residual.OBJECTIVES:  # a fresh W each run: its parse is cached on it
            _, secs = best_of(lambda W, o=objective: registry.get("residual_planner").strategy(
                W, NOISE, objective=o), repeat, setup=adult_3way)
            print(f"{'Adult 0-3-way from W':<20} {objective:<4} registry strategy from the workload matrix: "
                  f"{secs:.3f} s")
        _, secs = best_of(adult_3way, repeat)
        print(f"{'':<20} building the Adult workload matrix itself: {secs:.3f} s")

        print("\n== ResidualPlanner vs OPT_M vs SVD bound (Gaussian ε = 1, δ = 1e-6; counts)")
        print(f"{'workload':<22} {'mechanism':<22} {'rmse':>9} {'max std':>9} {'seconds':>8}"
              "  (seconds: building the strategy)")
        for label, build in [("CPS All Marginals", cps_all_marginals), ("Adult 0-3-way", adult_3way)]:
            W = build()
            for name, params in [("residual_planner", {"objective": "sum"}),
                                 ("residual_planner", {"objective": "max"}), ("opt_m", {})]:
                A, secs = best_of(lambda V, n=name, p=params: registry.get(n).strategy(V, NOISE, **p),
                                  repeat if name != "opt_m" else 1, setup=build)
                r = dpx.rmse(W, A, NOISE)
                worst = math.sqrt(error.per_query_variance(W, A, NOISE).max())
                tag = name + (f" ({params['objective']})" if params else "")
                print(f"{label:<22} {tag:<22} {r:>9.3f} {worst:>9.3f} {secs:>8.3f}")
            print(f"{label:<22} {'SVD bound (RMSE)':<22} {dpx.svd_bound(W, NOISE):>9.3f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    main(args.repeat, args.threads)
