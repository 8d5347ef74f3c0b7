"""What every strategy optimiser returns, and how it reports progress.

The optimisers (HDMM's OPT0, OPT⊗, OPT+, OPT_M in :mod:`dpexplorer.strategies.templates`,
:mod:`dpexplorer.strategies.marginals` and :mod:`dpexplorer.strategies.hdmm`; Eigen-Design in
:mod:`dpexplorer.strategies.eigen_design`) all return an :class:`OptimizationResult`:
the strategy, its objective (the unit-noise TSE ``Δ_p(A)² · tr(WᵀW (AᵀA)⁺)``,
HDMM Prop. 4), the objective trace for a convergence plot, and the per-restart
values.  Strategy builders registered in the registry attach that result to
the strategy they return as ``A.optimization``.

Progress: an optimiser calls :func:`report` as it goes.  Whoever runs it (the
app's worker thread, a notebook) installs a callback for the current thread
with :func:`progress`; without one, :func:`report` does nothing.  Notebooks
can use :func:`tqdm_progress`.  Optimisation works on public things only
(workloads, strategies), never on data.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from ..queries.matrix import Matrix

__all__ = ["OptimizationResult", "progress", "report", "current", "tqdm_progress", "attach"]


@dataclass
class OptimizationResult:
    """A strategy found by an optimiser, with how it got there.

    Attributes
    ----------
    strategy : Matrix, shape (p, n)
        The best strategy found (normalised to sensitivity 1 in the
        optimiser's norm unless stated in ``info``).
    objective : float
        Its unit-noise TSE ``Δ_p(A)² · tr(WᵀW (AᵀA)⁺)`` (multiply by the noise
        model's ``variance_per_unit`` for the TSE in squared counts).
    trace : ndarray, shape (k,)
        Objective value after every iteration of the best restart (for a
        convergence plot).
    restarts : ndarray, shape (r,)
        Final objective of every restart, in the order they ran.
    seconds : float
        Wall-clock time of the whole optimisation.
    seed : int or None
        Seed of the ``numpy.random.Generator`` that drew the initialisations.
    method : str
        Short name of the optimiser (``"opt0"``, ``"opt_kron"``, ...).
    info : dict
        Optimiser-specific public details (parameters such as ``p``, the
        chosen sub-optimiser of HDMM, per-factor results, ...).
    """

    strategy: Matrix
    objective: float
    trace: np.ndarray = field(default_factory=lambda: np.zeros(0))
    restarts: np.ndarray = field(default_factory=lambda: np.zeros(0))
    seconds: float = 0.0
    seed: int | None = None
    method: str = ""
    info: dict = field(default_factory=dict)


def attach(result: OptimizationResult) -> Matrix:
    """Return ``result.strategy`` with ``result`` attached as ``strategy.optimization``."""
    result.strategy.optimization = result
    return result.strategy


_local = threading.local()

#: Signature of a progress callback: ``callback(stage, done, total, objective)``.
#: ``stage`` is a short text ("opt0 restart 2/5"), ``done``/``total`` count
#: units of work (iterations or restarts; ``total`` may be 0 if unknown),
#: ``objective`` is the current unit TSE (NaN if none yet).
ProgressCallback = Callable[[str, int, int, float], None]


@contextlib.contextmanager
def progress(callback: ProgressCallback | None) -> Iterator[None]:
    """Install ``callback`` for optimisers running in this thread (nests; restores the old one)."""
    old = getattr(_local, "callback", None)
    _local.callback = callback
    try:
        yield
    finally:
        _local.callback = old


def current() -> ProgressCallback | None:
    """The progress callback installed for this thread (None if none).

    For code that runs an optimiser elsewhere (another process) and relays its
    reports: it can ask the callback whether to stop between reports.
    """
    return getattr(_local, "callback", None)


def report(stage: str, done: int, total: int, objective: float = float("nan")) -> None:
    """Tell the current thread's progress callback (if any) how far an optimiser got.

    A callback that raises stops the optimisation: that is how a caller cancels.
    """
    cb = getattr(_local, "callback", None)
    if cb is not None:
        cb(stage, int(done), int(total), float(objective))


@contextlib.contextmanager
def tqdm_progress(**tqdm_kwargs) -> Iterator[None]:
    """Show optimiser progress with a tqdm bar (notebooks, scripts).

    ::

        with dpx.optimization.tqdm_progress():
            A = dpx.registry.get("hdmm").strategy(W, dpx.Laplace(1.0))
    """
    from tqdm.auto import tqdm

    bar = tqdm(**{"total": 0, "leave": False, **tqdm_kwargs})

    def callback(stage, done, total, objective):
        if total and bar.total != total:
            bar.reset(total=total)
        bar.set_description(stage, refresh=False)
        if objective == objective:  # not NaN
            bar.set_postfix(objective=f"{objective:.4g}", refresh=False)
        bar.n = done
        bar.refresh()

    try:
        with progress(callback):
            yield
    finally:
        bar.close()
