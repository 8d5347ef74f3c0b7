"""Audit every registered mechanism on its standard pair; check DAWA-as-published exactly.

For every registered mechanism and each of its standard cases
(:func:`dpexplorer.audit.cases`: the neighbouring pair where its privacy is
tightest, the whole output and, where a part has its own claim, that part)
prints the claimed ε, the audited lower bound, the event, the runs and the
seconds.  Then the authors' DAWA partition (``dawa_as_published``) on the
issue's pair: the exact all-singletons probabilities against a large
simulation at ε = 0.1, and the audit at ε = 4.

Run by hand (the machine's load and BLAS threads are printed with the figures)::

    python benchmarks/audit_all.py                       # 20,000 runs per dataset, ε = 1
    python benchmarks/audit_all.py --runs 5000 --jobs 2 --exact-runs 200000
"""

from __future__ import annotations

import argparse
import math
import os
import time

import pandas as pd

from dpexplorer import audit as aud
from dpexplorer.adaptive import dawa
from dpexplorer.core import registry

X0, X1 = (5, 5, 5, 5), (5, 6, 5, 5)


def _published_partition_size(data, rng):
    """The authors' partition stage alone at ε = 0.1, ratio 0.25: its number of buckets."""
    return dawa.published_partition(data, 0.025, 0.075, rng).k


def _private_partition_size(data, rng):
    """The paper's private partition stage (the registered default's noise) at ε = 0.1, ratio 0.25."""
    return dawa.private_partition(data, 0.025, 0.075, rng).k


def _blas_threads() -> str:
    try:
        from threadpoolctl import threadpool_info

        return ", ".join(f"{i['internal_api']} {i['num_threads']}" for i in threadpool_info()) or "none"
    except ImportError:  # pragma: no cover
        return "unknown"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--runs", type=int, default=20_000)
    ap.add_argument("--confidence", type=float, default=0.95)
    ap.add_argument("--jobs", type=int, default=os.cpu_count())
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--exact-runs", type=int, default=200_000)
    ap.add_argument("--only", nargs="*", default=None, help="audit only these mechanisms")
    args = ap.parse_args(argv)
    print(f"load {os.getloadavg()[0]:.2f}; {args.jobs} processes; BLAS threads in workers: 1 "
          f"(parent: {_blas_threads()}); ε = {args.epsilon:g}, {args.runs:,} runs per dataset "
          f"(+{max(100, args.runs // 4):,} to choose the event), confidence {args.confidence:g}")
    rows = []
    names = args.only or registry.names()
    for name in names:
        for case in aud.cases(name):
            eps = 4.0 if name == "dawa_as_published" else args.epsilon
            r = case.run(name, eps, runs=args.runs, confidence=args.confidence, seed=args.seed,
                         n_jobs=args.jobs, progress=False)
            rows.append({"mechanism": name, "audited": case.label, "epsilon": eps,
                         "claim": r.claim, "epsilon_lb": r.epsilon_lb, "violated": r.violated,
                         "statistic": r.statistic, "event": r.event.label, "runs": r.total_runs,
                         "seconds": r.seconds})
            print(f"{name:20s} {case.label[:34]:34s} claim {r.claim:6.3g}  ε ≥ {r.epsilon_lb:6.3f}  "
                  f"{'VIOLATION' if r.violated else 'ok':9s} {r.total_runs:7,} runs {r.seconds:7.1f} s",
                  flush=True)
    pd.set_option("display.width", 200)
    print(pd.DataFrame(rows).round(4).to_string(index=False))

    print(f"\nDAWA partition on x0 = {X0}, x1 = {X1}, ε = 0.1, ratio 0.25 (ε₁ = 0.025):")
    p0 = dawa.published_all_singletons_probability(X0, 0.1)
    p1 = dawa.published_all_singletons_probability(X1, 0.1)
    print(f"  exact, authors' noise: P0 = {p0:.6f}, P1 = {p1:.6f}, loss = {math.log(p1 / p0) / 0.025:.3f}·ε₁")
    for label, fn in (("authors' noise (simulated)", _published_partition_size),
                      ("private noise, the Remark's scale (simulated)", _private_partition_size)):
        t0 = time.perf_counter()
        r = aud.audit(fn, X0, X1, 0.025, event=aud.Event(">=", 4, numerator=1), runs=args.exact_runs,
                      confidence=args.confidence, seed=args.seed, n_jobs=args.jobs, progress=False)
        ratio = r.p1[0] / r.p0[0] if r.p0[0] else math.nan
        print(f"  {label}: P0 = {r.p0[0]:.5f} [{r.p0[1]:.5f}, {r.p0[2]:.5f}], "
              f"P1 = {r.p1[0]:.5f} [{r.p1[1]:.5f}, {r.p1[2]:.5f}], plug-in loss "
              f"{math.log(ratio) / 0.025:.2f}·ε₁, audited ε ≥ {r.epsilon_lb:.4f} (claim 0.025); "
              f"{2 * args.exact_runs:,} runs, {time.perf_counter() - t0:.0f} s")
    print(f"load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
