"""Compare page: time to the first comparison table and to the last optimiser row.

Run by hand (figures depend on the machine and its load)::

    python benchmarks/bench_ui_compare.py            # default workload: All Range, n = 256
    python benchmarks/bench_ui_compare.py --preset cps_all_marginals --noise Gaussian

Each repetition runs in a fresh process (the optimisers memoise their results
per process).  Printed per repetition: seconds until the page shows its first
table (every mechanism but the optimisers, which come later), seconds until
every optimiser's row is in, and the build time of each optimiser as the
table reports it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, sys, time
t_import = time.perf_counter()
import dpexplorer as dpx
from dpexplorer.ui.session import Session
from dpexplorer.ui import workers
from dpexplorer.ui.compare_view import ComparePage
args = json.loads(sys.argv[1])
session = Session(noise=args["noise"])
if args["preset"]:
    from dpexplorer.ui.builder import WorkloadBuilder
    WorkloadBuilder(session).load_preset(args["preset"])
marks = {}
t0 = time.perf_counter()
page = ComparePage(session, auto_optimize=not args["manual"])
page.param.watch(lambda e: marks.setdefault("first", time.perf_counter() - t0), "table")
page.wait(3600)
marks["all"] = time.perf_counter() - t0
df = page.table.set_index("mechanism")
opt = {n: float(df.loc[n, "seconds"]) for n in workers.optimizers() if n in df.index}
print(json.dumps({"first": marks.get("first"), "all": marks["all"], "optimizers": opt,
                  "rmse": {n: float(df.loc[n, "rmse"]) for n in opt}}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--preset", default="", help="a key of dpexplorer.ui.builder.PRESETS")
    ap.add_argument("--noise", default="Laplace", choices=["Laplace", "Gaussian"])
    ap.add_argument("--manual", action="store_true", help="auto_optimize=False")
    args = ap.parse_args()
    runs = []
    for _ in range(args.repeat):
        out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(vars(args))],
                             capture_output=True, text=True, check=True, env=os.environ)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        r = runs[-1]
        print(f"first table {r['first']:.2f} s, all rows {r['all']:.2f} s, optimisers "
              + ", ".join(f"{k} {v:.2f} s" for k, v in r["optimizers"].items()))
    print(f"median: first table {statistics.median(r['first'] for r in runs):.2f} s, "
          f"all rows {statistics.median(r['all'] for r in runs):.2f} s "
          f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
