"""MWEM on the seven DAWA datasets at T = 10 and 50, next to the authors' figures.

DAWA's protocol (Sec. 5.1): n = 4096, 2000 uniform random ranges, ε = 0.1, mean L1 error
per query (counts).  Rows: the registered ``mwem`` (100 multiplicative-weights passes over
all measurements per round, last iterate -- DPComp's ``mwemND_engine``) with the number of
records public (as DPComp assumes) and measured with 5 % of ε (our default), and
Algorithm 1 as printed (one update per round, average of the iterates).  The
reference figures (authors' DPBench/DPComp code compiled from source, 10 runs, T = 10):
NETTRACE 72, SEARCHLOGS 1404.

Run by hand::

    python benchmarks/bench_mwem.py                      # 5 workloads × 2 trials
    python benchmarks/bench_mwem.py --workloads 5 --trials 2 --T 10 50
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd

import dpexplorer as dpx
from dpexplorer.evaluate import evaluate, uniform_ranges

DPBENCH = Path(os.environ.get("DPEXPLORER_DPBENCH",
                              Path(__file__).resolve().parents[1].parent / "shared" / "data" / "dpbench"))
#: The authors' MWEM at T = 10 (measured once by running their public code on the same data).
AUTHORS_T10 = {"NETTRACE": 72.0, "SEARCHLOGS": 1404.0}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--T", type=int, nargs="+", default=[10, 50])
    ap.add_argument("--epsilon", type=float, default=0.1)
    ap.add_argument("--workloads", type=int, default=5)
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=os.cpu_count())
    ap.add_argument("--no-alg1", action="store_true", help="skip Algorithm 1 as printed")
    args = ap.parse_args(argv)
    datasets = list(dpx.datasets.DAWA_DATASETS)
    totals = {d: float(dpx.datasets.load_dpbench(d, DPBENCH).sum()) for d in datasets}
    print(f"load {os.getloadavg()[0]:.2f}; {args.jobs} processes, 1 BLAS thread each; ε = "
          f"{args.epsilon:g}; {args.workloads} workloads × {args.trials} trials")
    frames = []
    t0 = time.perf_counter()
    for T in args.T:
        variants = {f"T={T} public total": {"T": T, "total": "public"},
                    f"T={T} measured total (5 %)": {"T": T}}
        if not args.no_alg1:
            variants[f"T={T} Alg. 1 (1 update, average), public total"] = {
                "T": T, "total": "public", "updates_per_round": 1, "average": True}
        for label, params in variants.items():
            for d in datasets:
                p = dict(params)
                if p.get("total") == "public":
                    p["total"] = totals[d]
                df = evaluate([(label, "mwem", p)], {d: dpx.datasets.load_dpbench(d, DPBENCH)},
                              [uniform_ranges(2000)], [args.epsilon], trials=args.trials,
                              seed=args.seed, n_jobs=args.jobs,
                              workload_seeds=range(args.workloads), progress=False)
                frames.append(df)
                print(f"{label:45s} {d:11s} {df['l1'].iloc[0]:10.1f}  ({df['seconds'].iloc[0]:.2f} s/run)",
                      flush=True)
    df = pd.concat(frames, ignore_index=True)
    tab = df.pivot(index="dataset", columns="mechanism", values="l1").round(1)
    tab["authors T=10"] = [AUTHORS_T10.get(d, np.nan) for d in tab.index]
    pd.set_option("display.width", 250)
    print(tab.to_string())
    print(f"{time.perf_counter() - t0:.0f} s, load {os.getloadavg()[0]:.2f}")
    return df


if __name__ == "__main__":
    main()
