"""A toy strategy optimiser added the way a user adds a mechanism: one module, one registry entry.

``build`` is a module-level function, so a worker process of the explorer can
import it (:func:`dpexplorer.ui.workers.in_worker`).  Unlike a user's module,
this one does not register :data:`TOY` at import: the tests register it for
one test and remove it, so that it never shows in the other tests' comparisons.
"""

from __future__ import annotations

import os

import numpy as np

import dpexplorer as dpx
from dpexplorer.core import optimization, registry


def build(W, noise, iters: int = 3):
    """The Identity strategy ``(n, n)``, "found" in ``iters`` reported steps; ``info`` has the pid."""
    A = dpx.strategies.identity(W.domain)
    value = dpx.error.unit_tse(W, A, noise.norm)
    trace = value * (1 + 1.0 / np.arange(1, iters + 1))
    for i in range(iters):
        optimization.report("toy_opt", i + 1, iters, float(trace[i]))
    return optimization.attach(optimization.OptimizationResult(
        A, value, trace, np.asarray([value]), 0.0, None, "toy_opt", {"pid": os.getpid()}))


TOY = registry.Mechanism(
    "toy_opt", "Toy OPT", build, "Identity, reported as an optimiser's result (a test mechanism).",
    "dpexplorer tests", params={"iters": 3}, optimizer=True)
