"""Audit every registered mechanism on its standard pair; check DAWA-as-published exactly.

For every registered mechanism and each of its standard cases
(:func:`dpexplorer.audit.cases`: the neighbouring pair where its privacy is
tightest, the whole output and, where a part has its own claim, that part)
prints the claimed ε, the audited lower bound, the event, the runs and the
seconds.  Then the authors' DAWA partition (``dawa_as_published``) on the
teaching pair (a flat 4-cell histogram and the same with one more record): the exact
all-singletons probabilities against a large simulation at ε = 0.1, and the audit at ε = 4.

Run by hand (the machine's load and BLAS threads are printed with the figures)::

    python benchmarks/audit_all.py                       # 20,000 runs per dataset, ε = 1
    python benchmarks/audit_all.py --runs 5000 --jobs 2 --exact-runs 200000
    python benchmarks/audit_all.py --planted --runs 2000 --confidence 0.9999

With ``--planted`` it audits broken variants instead (the auditor's power):
every private mechanism's cases with all its noise halved
(:meth:`dpexplorer.audit.AuditCase.run_weakened`; a quarter of σ for the
Gaussian-only mechanisms, audited at δ = 10⁻⁶), and DAWA's partition
stage with a quarter of its noise at ε₁ = 1, next to the correct mechanism;
the ``event`` column shows which kind of event (statistic, feature
coordinate, logistic or likelihood-ratio score) won on the first batch.
These run inline (the quarter-noise partition is a patch of this process).
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


def _planted(args) -> None:
    """The auditor's power: broken variants of every private mechanism (inline runs)."""
    rows = []

    def show(name, what, r):
        rows.append({"mechanism": name, "variant": what, "claim": r.claim, "epsilon_lb": r.epsilon_lb,
                     "violated": r.violated, "event": r.event.label, "runs": r.total_runs,
                     "seconds": r.seconds})
        print(f"{name:20s} {what:34s} claim {r.claim:6.3g}  ε ≥ {r.epsilon_lb:6.3f}  "
              f"{'VIOLATION' if r.violated else 'ok':9s} {r.total_runs:7,} runs {r.seconds:7.1f} s  "
              f"{r.event.label}", flush=True)

    kw = dict(runs=args.runs, confidence=args.confidence, seed=args.seed, n_jobs=1, progress=False)
    for name in args.only or registry.names(private=True):
        for i, case in enumerate(aud.cases(name)):
            if case.statistic != "buckets":
                factor = 4.0 if case.delta > 0 else 2.0  # Gaussian: see test_audit's power tests
                show(name, f"case {i}: correct", case.run(name, args.epsilon, **kw))
                show(name, f"case {i}: 1/{factor:g} of the noise",
                     case.run_weakened(name, args.epsilon, factor, **kw))
                continue
            # DAWA's partition at ε₁ = 1: the correct scale, then a quarter of it
            scales = dawa.noise_scales
            eps = 1.0 / case.claim_share
            show(name, f"partition, ε = {eps:g}: correct", case.run(name, eps, **kw))
            try:
                dawa.noise_scales = lambda *a, _s=scales, **k: _s(*a, **k) / 4
                show(name, f"partition, ε = {eps:g}: 1/4 of the noise", case.run(name, eps, **kw))
            finally:
                dawa.noise_scales = scales
    pd.set_option("display.width", 200)
    print(pd.DataFrame(rows).round(4).to_string(index=False))
    print(f"load {os.getloadavg()[0]:.2f}")


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
    ap.add_argument("--planted", action="store_true",
                    help="audit broken variants of every private mechanism (power) instead")
    args = ap.parse_args(argv)
    if args.planted:
        return _planted(args)
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
                         "statistic": r.statistic, "event": r.event.label,
                         "features": r.features, "runs": r.total_runs,
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
