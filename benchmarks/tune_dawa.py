"""Choose DAWA's private default on DPBench histograms that are NOT the paper's seven datasets.

Every variant is provably ε-DP (Li et al. PVLDB 2014, Thm 2 with the Remark's per-bucket
noise on every candidate; a public per-bucket offset, another public candidate set or
another budget split leave the proof unchanged; stage 2 is the Laplace mechanism).  The
grid: the partition's share of ε (``ratio``), the bucket penalty (a public offset in units
of each bucket's noise scale), the candidate buckets (``pow2`` at every start, or only
``dyadic`` aligned ones), and the stage-2 strategy (GreedyH as in Alg. 2, or HB's tree over
the buckets).

Tuning set: the 11 other 1D histograms of DPBench (MDSALARY ×2, LC-REQ ×3, LC-DTIR ×3,
BIDS ×3).  Protocol (DAWA Sec. 5.1): 2000 uniform random ranges, ``--workloads`` workload
instances × ``--trials`` runs, mean L1 error per query, at each ε.  Score of a variant: the
mean over datasets and ε of ``ln(error / error of HB)`` (a geometric mean of the ratio to HB,
which weighs easy and hard histograms alike); the report also gives the worst ratio.

Held out: ``--heldout`` evaluates the chosen variant, HB and the paper's settings on the
seven DAWA datasets (ADULT, HEPTH, INCOME, MEDCOST, NETTRACE, PATENT, SEARCHLOGS) once,
after the choice.

Run by hand (about 10 min on 2 cores)::

    python benchmarks/tune_dawa.py                     # the grid on the tuning set
    python benchmarks/tune_dawa.py --heldout           # the seven datasets, chosen default vs HB
"""

from __future__ import annotations

import argparse
import itertools
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd

import dpexplorer as dpx
from dpexplorer.evaluate import evaluate, uniform_ranges

DPBENCH = Path(os.environ.get("DPEXPLORER_DPBENCH",
                              Path(__file__).resolve().parents[1].parent / "shared" / "data" / "dpbench"))
TUNING = ["GrossCompenMDSalary1", "GrossCompenMDSalary2_filtered", "RejectStats_0_4096_no_outliers",
          "RejectStats_0_4096_no_outliers_filter_7_1", "RejectStats_0_4096_no_outliers_filter_7_2",
          "RejectStats_4_4096_no_outliers", "RejectStats_4_4096_no_outliers_filter_7_1",
          "RejectStats_4_4096_no_outliers_filter_7_2", "bids", "bids_j", "bids_m"]
HELDOUT = list(dpx.datasets.DAWA_DATASETS)
assert not set(TUNING) & ({f"{d}.n4096" for d in HELDOUT} | set(HELDOUT))


def grid(args) -> list:
    mechs = [("hb", "hb", {})]
    for cand, scaling, ratio, pen in itertools.product(args.candidates, args.scalings, args.ratios,
                                                       args.penalties):
        mechs.append((f"{cand} {scaling} r{ratio:g} p{pen:g}", "dawa",
                      {"candidates": cand, "scaling": scaling, "ratio": ratio, "penalty": pen}))
    return mechs


def score(df: pd.DataFrame) -> pd.DataFrame:
    """Per variant: mean and max of ln(error/HB error) over datasets and ε (HB = 0)."""
    piv = df.pivot_table(index=["dataset", "epsilon"], columns="mechanism", values="l1")
    lr = np.log(piv.div(piv["hb"], axis=0))
    out = pd.DataFrame({"mean_log_ratio": lr.mean(), "max_log_ratio": lr.max(),
                        "geo_mean_ratio": np.exp(lr.mean()), "worst_ratio": np.exp(lr.max())})
    return out.sort_values("mean_log_ratio")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heldout", action="store_true", help="evaluate the seven DAWA datasets instead")
    ap.add_argument("--epsilons", type=float, nargs="+", default=[0.01, 0.1, 1.0])
    ap.add_argument("--ratios", type=float, nargs="+", default=[0.05, 0.1, 0.15, 0.2, 0.25])
    ap.add_argument("--penalties", type=float, nargs="+", default=[0.5, 0.75, 1.0, 1.25, 1.5, 2.0])
    ap.add_argument("--candidates", nargs="+", default=["dyadic", "pow2"])
    ap.add_argument("--scalings", nargs="+", default=["hb"])
    ap.add_argument("--workloads", type=int, default=5)
    ap.add_argument("--trials", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=os.cpu_count())
    ap.add_argument("--out", default=None, help="write the per-cell table to this CSV")
    args = ap.parse_args(argv)
    if args.heldout:
        mechs = [("identity", "identity", {}), ("hb", "hb", {}), ("dawa (default)", "dawa", {}),
                 ("dawa (paper: ratio 0.25, penalty 0)", "dawa",
                  {"ratio": 0.25, "penalty": 0.0, "candidates": "pow2", "scaling": "greedy"}),
                 ("dawa_as_published (NOT PRIVATE)", "dawa_as_published", {})]
        datasets = HELDOUT
    else:
        mechs = grid(args)
        datasets = TUNING
    print(f"{len(mechs)} mechanisms × {len(datasets)} datasets × ε {args.epsilons} × "
          f"{args.workloads} workloads × {args.trials} trials; {args.jobs} processes, 1 BLAS thread; "
          f"load {os.getloadavg()[0]:.2f}")
    t0 = time.perf_counter()
    df = evaluate(mechs, datasets, [uniform_ranges(2000)], epsilons=args.epsilons, trials=args.trials,
                  seed=args.seed, n_jobs=args.jobs, workload_seeds=range(args.workloads),
                  directory=DPBENCH, progress=False)
    seconds = time.perf_counter() - t0
    if args.out:
        df.to_csv(args.out, index=False)
    pd.set_option("display.width", 250)
    if args.heldout:
        for eps, g in df.groupby("epsilon"):
            print(f"\nε = {eps:g}: mean L1 error per query (counts)")
            tab = g.pivot(index="dataset", columns="mechanism", values="l1").round(2)
            print(tab.to_string())
            ratio = tab["identity"].to_frame("identity").join(
                tab.drop(columns=["identity"]).rdiv(tab["identity"], axis=0).add_prefix("identity / "))
            print(f"ε = {eps:g}: Identity's error over each mechanism's (the paper's Table 2 ratio)")
            print(ratio.drop(columns=["identity"]).round(2).to_string())
    else:
        print(score(df).round(3).head(25).to_string())
    print(f"\n{seconds:.0f} s, load {os.getloadavg()[0]:.2f}")
    return df


if __name__ == "__main__":
    main()
