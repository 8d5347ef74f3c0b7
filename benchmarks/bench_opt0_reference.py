"""Benchmark: OPT0 (Laplace, p-Identity) beside the HDMM reference implementation.

The reference is the public HDMM code of McKenna et al. (``hdmm`` package,
``templates.PIdentity``), which is not part of this project: point
``HDMM_REFERENCE`` at a directory that contains its ``hdmm`` package (e.g. a
checkout's ``src``) to run it here.  Both run on All Range with ``p = n/16``,
one restart each, with 1 BLAS thread, interleaved (ours, reference, ours,
...); both strategies are scored by :func:`dpexplorer.rmse` (Laplace ε = 1).
The reference stops L-BFGS-B at ``ftol = 1e-4`` and builds the dense Gram
(``O(p n²)`` per iteration); ours stops on a relative improvement below 1e-3
over 50 iterations and uses the structured Gram (``O(p² n)``).  Run by hand::

    HDMM_REFERENCE=/path/to/hdmm/src python benchmarks/bench_opt0_reference.py 1024 2048
    HDMM_REFERENCE=... pytest benchmarks/bench_opt0_reference.py --benchmark-only
"""

from __future__ import annotations

import importlib
import os
import sys

import numpy as np
import pytest
from threadpoolctl import threadpool_limits
from timing import timed

import dpexplorer as dpx
from dpexplorer.queries import workloads
from dpexplorer.queries.matrix import Dense
from dpexplorer.strategies import templates

LAPLACE = dpx.Laplace(1.0)


def reference():
    """The reference ``hdmm`` package from ``HDMM_REFERENCE``, or None."""
    path = os.environ.get("HDMM_REFERENCE")
    if not path:
        return None
    if path not in sys.path:
        sys.path.insert(0, path)
    try:
        return importlib.import_module("hdmm.templates"), importlib.import_module("hdmm.workload")
    except ImportError:
        return None


def ours(n: int, seed: int):
    """One restart of our OPT0; returns (RMSE, wall, CPU, iterations)."""
    W = workloads.all_range(n)
    res, wall, cpu = timed(lambda: templates.opt0(W, LAPLACE, restarts=1, seed=seed, threads=1))
    return dpx.rmse(W, res.strategy, LAPLACE), wall, cpu, res.info.get("iterations")


def theirs(n: int, seed: int):
    """One run of the reference ``PIdentity(n // 16, n).optimize``; returns (RMSE, wall, CPU)."""
    ref_templates, ref_workload = reference()
    W = workloads.all_range(n)

    def run():
        pid = ref_templates.PIdentity(max(1, n // 16), n, seed=seed)
        pid.optimize(ref_workload.AllRange(n))
        return pid

    with threadpool_limits(1):
        pid, wall, cpu = timed(run)
    A = np.asarray(pid.strategy().dense_matrix())
    return dpx.rmse(W, Dense(A), LAPLACE), wall, cpu


needs_reference = pytest.mark.skipif(reference() is None,
                                     reason="set HDMM_REFERENCE to the reference hdmm package")


@pytest.mark.parametrize("n", [1024])
def test_ours(benchmark, n):
    out = benchmark.pedantic(ours, args=(n, 0), rounds=1, iterations=1)
    assert out[0] > 0


@needs_reference
@pytest.mark.parametrize("n", [1024])
def test_reference(benchmark, n):
    out = benchmark.pedantic(theirs, args=(n, 0), rounds=1, iterations=1)
    assert out[0] > 0


if __name__ == "__main__":
    sizes = [int(a) for a in sys.argv[1:]] or [1024, 2048]
    have_ref = reference() is not None
    print(f"cores: {os.cpu_count()}, load average {os.getloadavg()[0]:.2f}, BLAS threads: 1 each"
          + ("" if have_ref else "  (HDMM_REFERENCE not set: ours only)"))
    print(f"{'n':>6} {'who':>10} {'rmse':>9} {'wall s':>9} {'cpu s':>9} {'iterations':>10}")
    for n in sizes:
        r, wall, cpu, it = ours(n, 0)
        print(f"{n:>6} {'ours':>10} {r:>9.3f} {wall:>9.1f} {cpu:>9.1f} {it:>10}", flush=True)
        if have_ref:
            r, wall, cpu = theirs(n, 0)
            print(f"{n:>6} {'reference':>10} {r:>9.3f} {wall:>9.1f} {cpu:>9.1f}", flush=True)
        print(f"       load average {os.getloadavg()[0]:.2f}", flush=True)
