"""MWEM against DAWA on the seven DAWA datasets: T = 10 and T = "auto", ratio of their errors.

DAWA's protocol (Li et al., PVLDB 2014, Sec. 5.1): n = 4096, 2000 uniform random ranges, mean
L1 error per query (counts), 5 workload instances × 3 trials = 15 runs per cell by default,
through :func:`dpexplorer.evaluate.evaluate` (seeded per run from ``--seed``).  Rows: dataset
and ε; columns: DAWA's error, the registered ``mwem`` (number of records measured with 5 % of ε)
at each ``--T``, the ratio MWEM / DAWA and MWEM's seconds per run.  ``T_auto(N)`` is the number of rounds
:func:`dpexplorer.adaptive.mwem.auto_rounds` gives at the *true* N (for reading only: a run
uses its noisy count).  The last lines give the worst ratio per ε.  For reference, the
authors' MWEM (their DPBench/DPComp code, 10 runs, T = 10, ε = 0.1, number of records public):
NETTRACE 72, SEARCHLOGS 1404.

Run by hand (about 2 minutes with 2 processes on 2 cores at load 6-8)::

    python benchmarks/bench_mwem.py                                # ε = 0.1 and 0.01, T = 10 and auto
    python benchmarks/bench_mwem.py --epsilon 0.1 --T 10 50 auto --workloads 2 --trials 1
    python benchmarks/bench_mwem.py --public-total                 # N given as public instead
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import pandas as pd

import dpexplorer as dpx
from dpexplorer.adaptive.mwem import auto_rounds
from dpexplorer.evaluate import evaluate, uniform_ranges

DPBENCH = Path(os.environ.get("DPEXPLORER_DPBENCH",
                              Path(__file__).resolve().parents[1].parent / "shared" / "data" / "dpbench"))
M = 2000  # ranges per workload instance (DAWA Sec. 5.1)


def _T(value: str) -> int | str:
    return value if value == "auto" else int(value)


def main(argv=None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--T", type=_T, nargs="+", default=[10, "auto"])
    ap.add_argument("--epsilon", type=float, nargs="+", default=[0.1, 0.01])
    ap.add_argument("--workloads", type=int, default=5)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=os.cpu_count())
    ap.add_argument("--public-total", action="store_true",
                    help="give MWEM the number of records as public (spends no ε on it)")
    args = ap.parse_args(argv)
    data = {d: dpx.datasets.load_dpbench(d, DPBENCH) for d in dpx.datasets.DAWA_DATASETS}
    runs = args.workloads * args.trials
    print(f"load {os.getloadavg()[0]:.2f}; {args.jobs} processes; ε = {args.epsilon}; "
          f"{args.workloads} workloads × {args.trials} trials = {runs} runs per cell; seed {args.seed}",
          flush=True)
    t0 = time.perf_counter()
    frames = []
    for d, x in data.items():
        mechs = [("DAWA", "dawa", {})]
        for T in args.T:
            p = {"T": T} | ({"total": float(x.sum())} if args.public_total else {})
            mechs.append((f"MWEM T={T}", "mwem", p))
        df = evaluate(mechs, {d: x}, [uniform_ranges(M)], args.epsilon, trials=args.trials,
                      seed=args.seed, n_jobs=args.jobs, workload_seeds=range(args.workloads),
                      progress=False)
        frames.append(df)
        print(f"{d:11s} done ({time.perf_counter() - t0:.0f} s, load {os.getloadavg()[0]:.2f})",
              flush=True)
    df = pd.concat(frames, ignore_index=True)
    tab = df.pivot_table(index=["epsilon", "dataset"], columns="mechanism", values="l1")
    mwems = [f"MWEM T={T}" for T in args.T]
    for c in mwems:
        tab[f"{c} / DAWA"] = tab[c] / tab["DAWA"]
    tab["T_auto(N)"] = [auto_rounds(float(data[d].sum()), e, data[d].size, M) for e, d in tab.index]
    secs = df.pivot_table(index=["epsilon", "dataset"], columns="mechanism", values="seconds")
    for c in mwems:
        tab[f"s/run {c[5:]}"] = secs[c]
    tab = tab[["DAWA", *mwems, *(f"{c} / DAWA" for c in mwems), "T_auto(N)",
               *(f"s/run {c[5:]}" for c in mwems)]]
    tab = tab.sort_index(ascending=[False, True])
    pd.set_option("display.width", 250)
    print(tab.round({c: 2 if c.startswith("s/run") else 1 for c in tab.columns}).to_string())
    for e in sorted(args.epsilon, reverse=True):
        worst = {c: f"{tab.loc[e, f'{c} / DAWA'].max():.1f} ({tab.loc[e, f'{c} / DAWA'].idxmax()})"
                 for c in mwems}
        print(f"worst MWEM / DAWA at ε = {e:g}: {worst}")
    print(f"{time.perf_counter() - t0:.0f} s, load {os.getloadavg()[0]:.2f}")
    return df


if __name__ == "__main__":
    main()
