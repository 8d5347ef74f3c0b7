"""Paper-style comparison of the five sum mechanisms (Wu et al. 2019, Sec. 4, Figs. 2-4).

Superstore Sales (9994 orders, bokeh-sampledata) in 2304 buckets of 10 USD
over [0, 23040] (upper-edge bucket values), the P100 prefix-sum workload
(thresholds 230, 460, ..., 23040 USD), ε = 1, τ chosen by SVT with the
defaults of :class:`dpexplorer.sums.thresholds.SVTParams` and shared by the four
batch mechanisms in each trial (paper Alg. 9), 100 trials.  Prints the
relative error ``|ŷ − y| / max(y, γ)`` of small and large queries (median and
5-95 % band over trials and queries), with and without isotonic regression,
the winner of each group, the timings, and the error of every mechanism split
into truncation bias and noise, with and without truncation on the same seeds
(:func:`dpexplorer.sums.study.error_split`; the paper's NoTrunc baseline, Sec. 4).

Run by hand::

    python benchmarks/bench_sums.py                 # the comparison of the report
    python benchmarks/bench_sums.py --trials 20 --rho 0.95 --bins 512
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from dpexplorer import datasets
from dpexplorer.sums import mechanisms as sums
from dpexplorer.sums import study
from dpexplorer.sums.thresholds import SVTParams


def main(argv=None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--bins", type=int, default=2304, help="equal-width buckets over [0, 23040] USD")
    ap.add_argument("--queries", type=int, default=100, help="prefix queries (P_m)")
    ap.add_argument("--spacing", default="linear", choices=["linear", "geometric"],
                    help="thresholds evenly or log spaced over the buckets")
    ap.add_argument("--alpha", type=float, default=SVTParams().alpha)
    ap.add_argument("--rho", type=float, default=SVTParams().rho)
    ap.add_argument("--r", type=float, default=SVTParams().r)
    ap.add_argument("--strategy", default="greedy_h")
    ap.add_argument("--gamma", type=float, default=1.0)
    ap.add_argument("--fraction", type=float, default=0.2, help="share of queries called small / large")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    attr = datasets.superstore_sales(bins=args.bins)
    S = sums.prefix_sums(attr.bucket_values(), m=args.queries, spacing=args.spacing)
    svt = SVTParams(alpha=args.alpha, rho=args.rho, r=args.r)
    print(f"{attr.name}: {attr.n_records:,} records, {attr.n} buckets of "
          f"{attr.edges[1] - attr.edges[0]:g} USD; {S.name} (thresholds {S.thresholds[0]:g} .. "
          f"{S.thresholds[-1]:g} USD); ε = {args.epsilon:g}; SVT α = {svt.alpha:g}, ρ = {svt.rho:g}, "
          f"r = {svt.r:g}; {args.strategy}; {args.trials} trials; γ = {args.gamma:g}")
    t0 = time.perf_counter()
    df = sums.evaluate(attr.x, S, args.epsilon, trials=args.trials, seed=args.seed, svt=svt,
                       strategy=args.strategy, gamma=args.gamma)
    seconds = time.perf_counter() - t0
    taus = df[df.mechanism == "tamm"].groupby("trial")["tau"].first()
    print(f"evaluation: {seconds:.1f} s; shared SVT τ over trials: median {taus.median():g} USD, "
          f"5-95 % {taus.quantile(0.05):g} .. {taus.quantile(0.95):g}")

    table = sums.compare_sizes(df, args.fraction)
    table["label"] = table["mechanism"].map(sums.LABELS)
    pd.set_option("display.width", 160)
    for iso in (False, True):
        sub = table[table["isotonic"] == iso]
        wide = sub.pivot(index="label", columns="size", values=["median", "q05", "q95", "mean"])
        wide = wide.reindex([sums.LABELS[m] for m in sums.MECHANISMS])
        out = pd.DataFrame({
            f"{size}: {name}": wide[(col, size)] for size in ("small", "large")
            for name, col in (("median", "median"), ("5%", "q05"), ("95%", "q95"), ("mean", "mean"))})
        print(f"\nRelative error, {'with' if iso else 'without'} isotonic regression "
              f"(small = {int(sub['queries'].iloc[0])} smallest true answers, large = largest):")
        print(out.to_string(float_format=lambda v: f"{v:.4f}"))
        for size in ("small", "large"):
            best = sub[sub["size"] == size].sort_values("median").iloc[0]
            print(f"  {size} queries: {sums.LABELS[best['mechanism']]} wins "
                  f"(median {best['median']:.4f})")
    large = df[(df.mechanism == "tamm") & ~df.isotonic & (df["query"] == df["query"].max())]
    share = (-large["bias"] / large["truth"]).median()
    print(f"\ntruncation bias of the largest query at the trials' τ: median {100 * share:.1f} % of its "
          "true answer (it bounds every batch mechanism's relative error on large queries from below, "
          "up to noise that happens to offset it)")
    summ = sums.summarize(df)
    ratio = summ[~summ.isotonic].groupby("mechanism").apply(
        lambda g: float(np.mean(g["empirical_mse"]) / np.mean(g["analytic_mse"])), include_groups=False)
    print("\nempirical / analytic MSE (no isotonic; analytic = variance + bias² given each trial's τ):")
    print(ratio.rename(index=sums.LABELS).to_string(float_format=lambda v: f"{v:.3f}"))

    t0 = time.perf_counter()
    full = sums.evaluate(attr.x, S, args.epsilon, trials=args.trials, seed=args.seed, threshold="none",
                         strategy=args.strategy, gamma=args.gamma)
    split = pd.concat([study.error_split(df, truncated=True), study.error_split(full, truncated=False)],
                      ignore_index=True)
    print(f"\nError split, with (SVT τ) and without truncation, same seeds ({time.perf_counter() - t0:.1f} s "
          "for the untruncated trials); RMSE in USD over trials and queries, raw answers:")
    print(study.split_table(split).to_string(index=False))
    print(study.split_text(split, "USD").replace("**", "").replace("*", ""))
    return table


if __name__ == "__main__":
    main()
