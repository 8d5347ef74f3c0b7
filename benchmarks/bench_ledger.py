"""Benchmark: the SQLite ledger store -- throughput of open + record, and what it adds to a release.

Two figures (``dpexplorer/docs/accounting.md``, "The persistent ledger"):

1. **open + record**: ``--processes`` processes at once (default 2), each opening
   ``PrivacyLedger.open(path, dataset)`` on one shared file and recording
   ``--records`` spends (default 1,000), each one ``BEGIN IMMEDIATE`` transaction
   (read the dataset's totals, check the budget, insert, commit with
   ``synchronous=FULL``).  Prints each process's seconds for its open and its
   records, and the records per second of all processes together (wall clock
   from the first start to the last end).
2. **release overhead**: ``dpx.release(x, identity, "identity", Laplace(1))`` on
   ``--cells`` cells (default 256) with an in-memory ledger and with a stored
   one, median of ``--repeats`` runs each, and the difference.

Run by hand (prints ``uptime`` first: the load the figures were taken under)::

    python benchmarks/bench_ledger.py --records 1000 --processes 2 --cells 256
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

import dpexplorer as dpx
from dpexplorer.privacy import Spend


def _writer(path: str, records: int, start, out) -> None:
    """One process: open the shared ledger, wait for the start, record ``records`` spends."""
    t0 = time.perf_counter()
    led = dpx.PrivacyLedger.open(path, "bench")
    t_open = time.perf_counter() - t0
    start.wait()
    begin = time.time()
    t1 = time.perf_counter()
    for _ in range(records):
        led.record(Spend("bench step", "release", 1e-4, 0.0, 5e-9, "", 1, 1.0, "t"))
    out.put((os.getpid(), t_open, time.perf_counter() - t1, begin, time.time()))


def throughput(path: Path, records: int, processes: int) -> None:
    """Figure 1: ``processes`` processes recording ``records`` spends each on one file."""
    dpx.PrivacyLedger.open(path, "bench", budget=dpx.Budget.pure(1e6))
    ctx = mp.get_context("spawn")
    start, out = ctx.Barrier(processes), ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(str(path), records, start, out)) for _ in range(processes)]
    for p in procs:
        p.start()
    results = [out.get() for _ in procs]
    for p in procs:
        p.join()
    wall = max(r[4] for r in results) - min(r[3] for r in results)
    for pid, t_open, t_rec, _, _ in results:
        print(f"  process {pid}: open {1e3 * t_open:.1f} ms, {records} records {t_rec:.2f} s "
              f"({1e3 * t_rec / records:.2f} ms per record)")
    total = processes * records
    led = dpx.PrivacyLedger.open(path, "bench")
    assert len(led) == total, (len(led), total)
    print(f"  all {processes} processes: {total} records in {wall:.2f} s wall = {total / wall:.0f} "
          f"records/s (ledger holds {len(led)})")


def overhead(path: Path, cells: int, repeats: int) -> None:
    """Figure 2: one identity release with an in-memory vs a stored ledger (median seconds)."""
    x = np.random.default_rng(0).integers(0, 100, size=cells)
    W = dpx.workloads.identity(cells)
    noise = dpx.Laplace(1.0)
    stored = dpx.PrivacyLedger.open(path, "release bench")

    def timed(make):
        out = []
        for _ in range(repeats):
            led = make()
            t0 = time.perf_counter()
            dpx.release(x, W, "identity", noise, ledger=led)
            out.append(time.perf_counter() - t0)
        return statistics.median(out)

    timed(dpx.PrivacyLedger)  # warm-up (imports, opendp)
    mem = timed(dpx.PrivacyLedger)
    sto = timed(lambda: stored)
    print(f"  identity release on {cells} cells, median of {repeats}: in-memory ledger "
          f"{1e3 * mem:.2f} ms, stored ledger {1e3 * sto:.2f} ms (+{1e3 * (sto - mem):.2f} ms, "
          f"ledger then holds {len(stored)} entries)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=1000)
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--cells", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=50)
    args = ap.parse_args()
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    with tempfile.TemporaryDirectory() as folder:
        print(f"open + record, {args.processes} processes, {args.records} records each:")
        throughput(Path(folder) / "throughput.sqlite", args.records, args.processes)
        print("release overhead:")
        overhead(Path(folder) / "release.sqlite", args.cells, args.repeats)


if __name__ == "__main__":
    main()
