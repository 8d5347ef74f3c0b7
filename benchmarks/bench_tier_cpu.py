"""Where a test tier's processor time goes: seconds of CPU by kind of process.

Runs a command (default: the browser tier) and, once a second, reads the CPU time of every
process on the machine with psutil; at the end prints the wall time and the CPU seconds each
kind of process used while the command ran: Chromium, served explorers (``panel serve``),
optimiser and audit workers (loky, multiprocessing), notebook kernels, pytest and its xdist
workers, Playwright's driver, the rest.  A tier whose CPU seconds are about twice its wall
time is bound by the 2 cores: only less work makes it faster, not more workers.

Run by hand (report ``uptime``, the commit and ``OPENBLAS_NUM_THREADS`` with the figures)::

    python benchmarks/bench_tier_cpu.py                                   # the browser tier
    python benchmarks/bench_tier_cpu.py -- python -m pytest -n 2 -m "not browser" -q

Measured 2026-11-27 (2 cores, quiet): the browser tier's first-contact module alone took
137 s of wall time and 178 s of CPU, 119 s of it Chromium's and 41 s the served explorer's;
the whole browser tier (``-n 2``) ran Chromium for about 410 s of CPU beside 157 s for the
served explorers and 50 s for their optimiser workers.  Profiled in Chromium (DevTools CPU
profile of a tab switch), most of a page's time is Bokeh reading computed CSS
(``getComputedStyle(...).getPropertyValue``) for each glyph's colours on every paint.
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import time

KINDS = (("chromium", ("chromium", "chrome")), ("served explorer", ("panel serve",)),
         ("optimiser/audit workers", ("loky", "multiprocessing", "forkserver")),
         ("notebook kernels", ("ipykernel",)), ("playwright driver", ("playwright", "node ")),
         ("pytest and its workers", ("pytest", "exec(eval(sys.stdin")))


def kind(cmdline: str) -> str:
    """The kind of a process from its command line (see :data:`KINDS`)."""
    for name, marks in KINDS:
        if any(m in cmdline for m in marks):
            return name
    return "other"


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the command, print and return CPU seconds by kind (plus ``"wall"``)."""
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil comes with the test extras (ipykernel)
        sys.exit("bench_tier_cpu needs psutil: pip install psutil")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between readings")
    ap.add_argument("command", nargs="*",
                    default=[sys.executable, "-m", "pytest", "-n", "2", "-m", "browser", "-q"])
    args = ap.parse_args(argv)
    last: dict[int, tuple[str, float]] = {}

    def read() -> None:
        # a process that ends between two readings loses its last interval's CPU
        for p in psutil.process_iter(["pid", "cmdline", "cpu_times"]):
            t = p.info["cpu_times"]
            if t is not None:
                last[p.info["pid"]] = (" ".join(p.info["cmdline"] or []), t.user + t.system)

    read()
    start = {pid: cpu for pid, (_, cpu) in last.items()}  # already running: what they add only
    t0 = time.perf_counter()
    proc = subprocess.Popen(args.command)
    while proc.poll() is None:
        read()
        time.sleep(args.interval)
    read()
    wall = time.perf_counter() - t0
    used: collections.Counter[str] = collections.Counter()
    for pid, (cmd, cpu) in last.items():
        used[kind(cmd)] += cpu - start.get(pid, 0.0)
    print(f"command: {' '.join(args.command)} (exit {proc.returncode})")
    print(f"{'wall':>24s} {wall:8.1f} s")
    for name, seconds in used.most_common():
        print(f"{name:>24s} {seconds:8.1f} s of CPU")
    print(f"{'all CPU':>24s} {sum(used.values()):8.1f} s ({sum(used.values()) / wall:.2f} cores)")
    return {"wall": wall, **used}


if __name__ == "__main__":
    main()
