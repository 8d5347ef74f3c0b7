"""Least squares against non-negative inference on the seven DAWA datasets: the winner per cell.

What it measures.  DAWA's protocol (Li, Hay, Miklau, Wang, PVLDB 2014, Sec. 5.1): the seven
DPBench histograms of the paper (ADULT, HEPTH, INCOME, MEDCOST, NETTRACE, PATENT, SEARCHLOGS)
at n = 4096, 2000 uniform random ranges, ε = 0.1 and 0.01, 5 workload instances × 3 trials
= 15 seeded runs per cell, through :func:`dpexplorer.evaluate.evaluate` with
``inferences=["least_squares", "nonnegative"]`` (:mod:`dpexplorer.core.inference`; the two
inferences of a mechanism see the same noise in every run, a paired comparison).  Mechanisms
(registry names): ``identity``, ``hb``, ``h2``, ``wavelet`` (Privelet), ``greedy_h`` and
``dawa`` (the private DAWA; ``dawa_as_published`` is not run).  The metric is DAWA's: the
mean over runs of the average L1 error per query ``(1/m) ‖W x − W x̂‖₁`` (Sec. 2 and 5.1;
counts, not scaled by the number of records), with the 95 % Student-t interval of that mean
over the runs (workload instances pooled, so it covers their variation too).

Output: one row per (dataset, ε, mechanism, inference) with ``l1``, ``ci95_low``,
``ci95_high`` and ``win`` (``*`` for the lowest mean of its (dataset, ε, inference); ``*!`` when
that mechanism is not also the winner under the other inference); then per (dataset, ε) the
winner under each inference, whether it changes, whether the winner's interval overlaps the
runner-up's (the ranking is then not resolved by these runs), and the best pair overall;
then private DAWA with non-negative inference against HB (with least squares, its usual
inference, and with non-negative inference): the ratio of mean errors and whether the
intervals overlap; last, per (dataset, ε, mechanism), the paired difference
``l1(nonnegative) − l1(least squares)`` over the same noise with its 95 % interval.  The summary
rows are :func:`~dpexplorer.evaluate.evaluate`'s own summary of its per-run rows (it is run with
``raw=True`` for the pairing).  ``--json FILE`` writes all of it (with the RMSE columns too).

Errors are deterministic given ``--seed``; the seconds and the running time depend on the
machine and its load (printed with them).  Measured: the six datasets other than PATENT,
15 runs per cell, in 138 s with 2 processes at load 4-5.5 on 2 cores.

Run by hand (niced on a shared machine)::

    python benchmarks/bench_inference.py --json inference.json
    python benchmarks/bench_inference.py --datasets NETTRACE --epsilon 0.1 --workloads 1 --trials 1
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path

import pandas as pd

import dpexplorer as dpx
from dpexplorer.evaluate import _mean_ci, _summarize, evaluate, uniform_ranges

DPBENCH = Path(os.environ.get("DPEXPLORER_DPBENCH",
                              Path(__file__).resolve().parents[1].parent / "shared" / "data" / "dpbench"))
M = 2000  # ranges per workload instance (DAWA Sec. 5.1)
MECHANISMS = ["identity", "hb", "h2", "wavelet", "greedy_h", "dawa"]
INFERENCES = ["least_squares", "nonnegative"]
SHORT = {"least_squares": "LS", "nonnegative": "NN"}


def _winners(df: pd.DataFrame) -> pd.DataFrame:
    """Per (dataset, ε): the winner under each inference, change flag, overlap with the runner-up."""
    rows = []
    for (d, e), g in df.groupby(["dataset", "epsilon"], sort=False):
        row = {"dataset": d, "epsilon": e}
        for inf in INFERENCES:
            gi = g[g["inference"] == inf].sort_values("l1")
            if gi.empty:
                continue
            best, second = gi.iloc[0], (gi.iloc[1] if len(gi) > 1 else None)
            row[f"winner_{SHORT[inf]}"] = best["mechanism"]
            row[f"l1_{SHORT[inf]}"] = best["l1"]
            row[f"runner_up_{SHORT[inf]}"] = None if second is None else second["mechanism"]
            row[f"overlap_{SHORT[inf]}"] = (
                None if second is None or pd.isna(best["l1_ci_high"]) or pd.isna(second["l1_ci_low"])
                else bool(best["l1_ci_high"] >= second["l1_ci_low"]))
        if "winner_LS" in row and "winner_NN" in row:
            row["changes"] = row["winner_LS"] != row["winner_NN"]
        top = g.sort_values("l1").iloc[0]
        row["best_overall"] = f"{top['mechanism']}/{SHORT.get(top['inference'], top['inference'])}"
        rows.append(row)
    return pd.DataFrame(rows)


def _dawa_vs_hb(df: pd.DataFrame) -> pd.DataFrame:
    """Private DAWA with non-negative inference against HB with each inference."""
    key = df.set_index(["dataset", "epsilon", "mechanism", "inference"])
    rows = []
    for (d, e), _ in df.groupby(["dataset", "epsilon"], sort=False):
        try:
            dawa = key.loc[(d, e, "dawa", "nonnegative")]
        except KeyError:
            continue
        row = {"dataset": d, "epsilon": e, "dawa_NN": dawa["l1"]}
        for inf in INFERENCES:
            try:
                hb = key.loc[(d, e, "hb", inf)]
            except KeyError:
                continue
            s = SHORT[inf]
            row[f"hb_{s}"] = hb["l1"]
            row[f"dawa_NN/hb_{s}"] = dawa["l1"] / hb["l1"]
            if pd.isna([dawa["l1_ci_low"], hb["l1_ci_low"]]).any():
                row[f"vs_hb_{s}"] = "no interval"  # a single run per cell
            elif dawa["l1_ci_high"] >= hb["l1_ci_low"] and hb["l1_ci_high"] >= dawa["l1_ci_low"]:
                row[f"vs_hb_{s}"] = "overlap"
            else:
                row[f"vs_hb_{s}"] = "DAWA better" if dawa["l1"] < hb["l1"] else "HB better"
        rows.append(row)
    return pd.DataFrame(rows)


def _paired(raw: pd.DataFrame) -> pd.DataFrame:
    """Per (dataset, ε, mechanism): mean over runs of l1(nonnegative) − l1(least squares), same noise."""
    keys = ["dataset", "epsilon", "mechanism", "workload_seed", "trial"]
    ok = raw[raw["note"].isna()]
    wide = ok.pivot_table(index=keys, columns="inference", values="l1").dropna()
    rows = []
    for (d, e, mech), g in wide.groupby(level=[0, 1, 2], sort=False):
        if not set(INFERENCES) <= set(g.columns):
            continue
        diff = (g["nonnegative"] - g["least_squares"]).to_numpy(float)
        mean, low, high = _mean_ci(diff, 0.95)
        verdict = ("no interval" if pd.isna(low) else "NN better" if high < 0
                   else "LS better" if low > 0 else "not resolved")
        rows.append({"dataset": d, "epsilon": e, "mechanism": mech, "runs": diff.size,
                     "NN-LS": mean, "ci95_low": low, "ci95_high": high,
                     "NN/LS": g["nonnegative"].mean() / g["least_squares"].mean(), "paired": verdict})
    return pd.DataFrame(rows)


def _show(frame: pd.DataFrame, digits: int) -> str:
    """The frame as text: ε as given (0.01, not 0.0), other floats with ``digits`` decimals."""
    return frame.to_string(index=False, formatters={"epsilon": lambda v: f"{v:g}"},
                           float_format=lambda v: f"{v:.{digits}f}")


def _records(df: pd.DataFrame) -> list[dict]:
    out = df.astype(object).where(df.notna(), None).to_dict(orient="records")
    return [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()}
            for r in out]


def main(argv=None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=list(dpx.datasets.DAWA_DATASETS),
                    help="paper names (default: the seven of DAWA Sec. 5.1)")
    ap.add_argument("--epsilon", type=float, nargs="+", default=[0.1, 0.01])
    ap.add_argument("--mechanisms", nargs="+", default=MECHANISMS, help="registry names")
    ap.add_argument("--workloads", type=int, default=5, help="workload instances (seeds 0..k-1)")
    ap.add_argument("--trials", type=int, default=3, help="runs per workload instance")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=os.cpu_count())
    ap.add_argument("--json", default="", help="also write the tables to this file")
    args = ap.parse_args(argv)
    unknown = sorted(set(args.datasets) - set(dpx.datasets.DAWA_DATASETS))
    if unknown:
        ap.error(f"unknown datasets {unknown}; allowed: {list(dpx.datasets.DAWA_DATASETS)}")
    data = {d: dpx.datasets.load_dpbench(d, DPBENCH) for d in args.datasets}
    runs = args.workloads * args.trials
    load0 = os.getloadavg()[0]
    print(f"load {load0:.2f}; {args.jobs} processes; ε = {args.epsilon}; {args.workloads} workloads × "
          f"{args.trials} trials = {runs} runs per cell; seed {args.seed}; metric: mean L1 error "
          f"per query (counts), 95 % interval of the mean over the runs", flush=True)
    t0 = time.perf_counter()
    raws = []
    for d, x in data.items():
        raws.append(evaluate(args.mechanisms, {d: x}, [uniform_ranges(M)], args.epsilon,
                             trials=args.trials, seed=args.seed, n_jobs=args.jobs,
                             workload_seeds=range(args.workloads), progress=False,
                             inferences=INFERENCES, raw=True))
        print(f"{d:11s} n = {x.size}, N = {x.sum():.0f} done ({time.perf_counter() - t0:.0f} s, "
              f"load {os.getloadavg()[0]:.2f})", flush=True)
    raw = pd.concat(raws, ignore_index=True)
    df = _summarize(raw, 0.95)  # evaluate's own summary of the runs (its raw=False output)
    bad = df[df["note"].notna() | (df["runs"] < runs)]
    if not bad.empty:
        print("missing runs:\n" + bad[["dataset", "epsilon", "mechanism", "inference", "runs",
                                       "note"]].to_string(index=False))
    order = {m: i for i, m in enumerate(args.mechanisms)}
    df = df.assign(_e=-df["epsilon"], _d=df["dataset"].map({d: i for i, d in enumerate(data)}),
                   _m=df["mechanism"].map(order), _i=df["inference"].map({k: i for i, k in enumerate(INFERENCES)}))
    df = df.sort_values(["_e", "_d", "_m", "_i"]).drop(columns=["_e", "_d", "_m", "_i"])
    df = df.reset_index(drop=True)

    win = _winners(df)
    mark = []
    for _, r in df.iterrows():
        w = win[(win["dataset"] == r["dataset"]) & (win["epsilon"] == r["epsilon"])].iloc[0]
        s = SHORT.get(r["inference"])
        if s and w.get(f"winner_{s}") == r["mechanism"]:
            mark.append("*!" if bool(w.get("changes", False)) else "*")
        else:
            mark.append("")
    df["win"] = mark
    table = df[["dataset", "epsilon", "mechanism", "inference", "l1", "l1_ci_low", "l1_ci_high",
                "win"]].rename(columns={"l1_ci_low": "ci95_low", "l1_ci_high": "ci95_high"})
    pd.set_option("display.width", 250)
    pd.set_option("display.max_rows", 1000)
    print(_show(table, 1))
    print("\nwinner per (dataset, ε) under each inference (overlap: the winner's interval meets "
          "the runner-up's):")
    print(_show(win, 1))
    if "changes" in win:
        ch = win[win["changes"]]
        print(f"winner changes in {len(ch)} of {len(win)} (dataset, ε): "
              + ", ".join(f"{r.dataset} ε={r.epsilon:g} ({r.winner_LS} -> {r.winner_NN})"
                          for r in ch.itertuples()))
    vs = _dawa_vs_hb(df)
    if not vs.empty:
        print("\nprivate DAWA with non-negative inference against HB:")
        print(_show(vs, 2))
    pair = _paired(raw)
    if not pair.empty:
        rank = {tuple(k): i for i, k in enumerate(
            df[["dataset", "epsilon", "mechanism"]].drop_duplicates().itertuples(index=False))}
        pair = pair.assign(_r=[rank[k] for k in zip(pair["dataset"], pair["epsilon"], pair["mechanism"])])
        pair = pair.sort_values("_r").drop(columns="_r").reset_index(drop=True)
        print("\nnon-negative minus least squares per mechanism, paired over the same noise "
              "(mean L1 per query, 95 % interval of the mean difference):")
        print(_show(pair, 1))
    secs = time.perf_counter() - t0
    print(f"\n{secs:.0f} s, load {load0:.2f} at start, {os.getloadavg()[0]:.2f} at end "
          f"(times depend on the machine and its load; the errors only on --seed)")
    if args.json:
        out = {"protocol": {"datasets": list(data), "n": {d: int(x.size) for d, x in data.items()},
                            "m": M, "workload": "uniform_ranges", "epsilon": args.epsilon,
                            "mechanisms": args.mechanisms, "inferences": INFERENCES,
                            "workloads": args.workloads, "trials": args.trials, "seed": args.seed,
                            "metric": "mean over runs of the average L1 error per query "
                                      "(Li et al. PVLDB 2014 Sec. 5.1), counts",
                            "interval": "95 % Student-t interval of the mean over the runs"},
               "machine": {"jobs": args.jobs, "load_start": load0, "load_end": os.getloadavg()[0],
                           "seconds": secs},
               "rows": _records(df), "winners": _records(win), "dawa_nonnegative_vs_hb": _records(vs),
               "paired_nonnegative_minus_least_squares": _records(pair)}
        Path(args.json).write_text(json.dumps(out, indent=1))
        print(f"wrote {args.json}")
    return df


if __name__ == "__main__":
    main()
