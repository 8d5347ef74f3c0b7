"""Releases of a count over time, step by step: ``release`` (OS CSPRNG) and ``simulate`` (seeded).

A plan of three operators, as every matrix-mechanism release: SELECT the
online strategy ``A`` from the registry (public, before any data), MEASURE
inside the privacy kernel (:class:`dpexplorer.privacy.PrivateStream`: the
whole stream's cost recorded first, then the counts read one per step),
and answer each step with the strategy's decoder ``B`` (``B A = W``):
the answer of step ``t`` is ``(W x)_t + (B z)_t``, published at step ``t``.
Each answer comes with its analytic standard deviation
(:func:`dpexplorer.core.error.per_query_rmse`) and an interval
(:func:`dpexplorer.core.confidence.confidence_half_widths`), which are public.

A mechanism that is not registered ``online`` is refused: least squares over
H2 or HB uses nodes that close after step ``t`` (see the Learn topic *Counts
over time*).  The noise is generated step by step, with memory independent
of ``T``, when the strategy offers a filter (``A.noise_filter(W)``, e.g. BLT
and banded factorisations); otherwise it is drawn whole before the first
step and decoded once (``O(T)`` memory, ``O(T log T)`` for Toeplitz
strategies).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from ..core import error, registry
from ..core.confidence import confidence_half_widths
from ..core.reconstruct import Reconstructor
from ..privacy import OS_CSPRNG, PrivacyLedger, PrivateStream
from ..privacy.noise import Gaussian, NoiseModel, check_noise
from ..queries import limits
from ..queries.matrix import Identity, Matrix
from . import workload
from .participation import Participation, max_participations

__all__ = ["StreamStep", "StreamRelease", "release", "simulate"]


@dataclass(frozen=True)
class StreamStep:
    """One published step of a stream release.

    Attributes
    ----------
    t : int
        The step (0-based).
    answer : float
        The noisy answer (counts): running total up to ``t``, or the count of ``t``.
    std : float
        Its analytic standard deviation (counts; public).
    low, high : float
        The interval ``answer ∓ half-width`` at the release's confidence level.
    """

    t: int
    answer: float
    std: float
    low: float
    high: float


@dataclass
class StreamRelease:
    """A stream opened for ``T`` steps: iterate it to read each step's :class:`StreamStep`.

    The ledger was charged for the whole stream when it was opened; reading it
    pulls one count per step from the data.  ``mode`` is ``"release"`` (OS
    CSPRNG, no seed) or ``"simulation"`` (``seed`` recorded, never a release).

    Attributes
    ----------
    mechanism : str
    T : int
    answers : {"running_total", "counts"}
    noise : NoiseModel
    mode : {"release", "simulation"}
    seed : int or None
    std : ndarray, shape (T,)
        Analytic standard deviation of every step's answer (counts), known before any data.
    half_width : ndarray, shape (T,)
        Interval half-widths (counts) at ``confidence``.
    interval_method : str
        How the intervals were made (exact for Gaussian noise; a bound for Laplace sums).
    noise_generation : {"step by step", "at once"}
        Whether the noise was generated with memory independent of ``T``.
    ledger : PrivacyLedger
    confidence : float
    participations, separation : int
        The privacy unit: a person's counts at up to ``participations`` steps,
        ``separation`` or more apart.
    sensitivity : float
        The strategy's sensitivity for that unit, in the noise's norm (what the noise is scaled to).
    steps : list of StreamStep
        The steps published so far.
    """

    mechanism: str
    T: int
    answers: str
    noise: NoiseModel
    mode: str
    seed: int | None
    std: np.ndarray
    half_width: np.ndarray
    interval_method: str
    noise_generation: str
    ledger: PrivacyLedger
    confidence: float
    participations: int
    separation: int
    sensitivity: float
    steps: list[StreamStep] = field(default_factory=list)
    _source: Iterator[float] | None = field(default=None, repr=False)

    def __iter__(self) -> Iterator[StreamStep]:
        return self

    def __next__(self) -> StreamStep:
        if self._source is None:
            raise StopIteration
        value = next(self._source)  # StopIteration at the end of the stream
        t = len(self.steps)
        h = float(self.half_width[t])
        step = StreamStep(t, value, float(self.std[t]), value - h, value + h)
        self.steps.append(step)
        return step

    def to_frame(self):
        """The steps published so far as a pandas DataFrame (``t, answer, std, low, high``)."""
        import pandas as pd

        return pd.DataFrame([s.__dict__ for s in self.steps], columns=["t", "answer", "std", "low", "high"])


def _decoder(A: Matrix, W: Matrix):
    """``z -> B z`` with ``B A = W``: the strategy's own answers, else ``W A⁺ z``."""
    own = getattr(A, "answer", None)
    if own is not None:
        return lambda z: own(W, z)
    rec = Reconstructor(A)
    return lambda z: W.matvec(rec(z))


def _open(counts: Iterable[Any], T: int, mechanism: str, noise: NoiseModel | None, source, seed,
          ledger: PrivacyLedger | None, params: dict | None, answers: Literal["running_total", "counts"],
          confidence: float, counts_only: bool, participations: int,
          separation: int) -> StreamRelease:
    if noise is None:
        raise ValueError("a stream release needs a noise model: noise=dpx.Laplace(ε) or "
                         "dpx.Gaussian(ε, δ, calibration='zcdp')")
    check_noise(noise)
    T = limits.whole_number(T, "stream: T (the number of steps)", limit="cells")
    if answers not in ("running_total", "counts"):
        raise ValueError(f"answers must be 'running_total' or 'counts', got {answers!r}")
    W = workload.continual(T) if answers == "running_total" else Identity(T)
    mech = registry.get(mechanism)
    if not mech.online:
        online = ", ".join(registry.names(online=True))
        raise ValueError(f"{mech.label} ({mechanism!r}) is not online: its answer at a step would use "
                         f"measurements taken later, so it cannot release a stream step by step; "
                         f"online mechanisms: {online}")
    if not mech.private:
        raise ValueError(f"{mechanism!r} is a non-private variant kept for study; it is not released")
    A = mech.strategy(W, noise, **(params or {}))  # public: SELECT before any data is read
    if max_participations(T, participations, separation) > 1:
        # the neighbouring relation: one person's counts at up to k steps >= b apart; the kernel
        # scales the noise to the participation sensitivity of A (exact, or a safe upper bound)
        A = Participation(A, participations, separation)
    std = error.per_query_rmse(W, A, noise)
    half, method = confidence_half_widths(W, A, noise, "continuous", confidence)
    make_filter = getattr(A, "noise_filter", None)
    noise_filter = make_filter(W) if make_filter is not None else None
    data = PrivateStream(counts, T, ledger, counts_only=counts_only)
    who = f", up to {participations} steps {separation} apart" if isinstance(A, Participation) else ""
    label = f"stream {mechanism} ({answers.replace('_', ' ')}, {T} steps{who})"
    if noise_filter is not None:
        source_iter = data.release(A, noise, source, answers=answers, noise_filter=noise_filter, label=label)
    else:
        source_iter = data.release(A, noise, source, answers=answers, decode=_decoder(A, W), label=label)
    return StreamRelease(mechanism, T, answers, noise, "simulation" if seed is not None else "release",
                         seed, std, half, str(method[0]) if len(set(method)) == 1 else "mixed",
                         "step by step" if noise_filter is not None else "at once", data.ledger,
                         float(confidence), participations, separation,
                         A.sensitivity(noise.norm), _source=source_iter)


def release(counts: Iterable[Any], T: int, mechanism: str = "toeplitz_sqrt",
            noise: NoiseModel | None = None, *, ledger: PrivacyLedger | None = None,
            params: dict | None = None,
            answers: Literal["running_total", "counts"] = "running_total", confidence: float = 0.95,
            counts_only: bool = True, participations: int = 1, separation: int = 1) -> StreamRelease:
    """Open a **release** of a count over ``T`` steps; iterate it to publish each step.

    Parameters
    ----------
    counts : iterable
        The count of each step (a list, an array, or a generator that yields
        each day's count as it becomes known); read one per published step.
    T : int
        Number of steps the stream is released for (what the budget pays for).
    mechanism : str
        A registered mechanism with ``online=True`` (``toeplitz_sqrt``, ...).
    noise : NoiseModel
        ``Laplace(ε)`` or ``Gaussian(ε, δ, calibration="zcdp")``: ε for the
        whole stream (each record counted at one step).
    ledger : PrivacyLedger, optional
        The dataset's ledger; the whole stream is charged to it at once, here.
    params : dict, optional
        The mechanism's parameters.
    answers : {"running_total", "counts"}
        Publish the running total (default) or each step's count.
    confidence : float
        Interval coverage in (2/3, 1).
    counts_only : bool
        Refuse counts that are not non-negative whole numbers (default).
    participations, separation : int
        The privacy unit: one person may add 1 to the counts of up to
        ``participations`` steps, any two at least ``separation`` steps apart
        (default 1, 1: one step).  The noise is scaled to the strategy's
        sensitivity over every such pattern
        (:func:`dpexplorer.streaming.participation_sensitivity`: exact for the
        Toeplitz and banded strategies, a safe upper bound otherwise;
        Choquette-Choo et al., NeurIPS 2023, Sec. 2).

    Returns
    -------
    StreamRelease
        ``mode = "release"``; OS CSPRNG through opendp's samplers, no seed.

    Raises
    ------
    ValueError
        If the mechanism is not online or not private, the noise is missing, ``T``
        or ``answers`` is invalid, ``participations`` or ``separation`` is below 1,
        or the mechanism's scope refuses the workload.
    TypeError
        If ``participations`` or ``separation`` is not a whole number.
    KeyError
        If no mechanism has that name.
    BudgetExceededError
        If the ledger cannot pay for the whole stream (nothing is drawn).
    """
    if isinstance(noise, Gaussian) and noise.calibration != "zcdp":
        raise ValueError(f"a release with Gaussian noise is accounted in zCDP: use "
                         f"dpx.Gaussian({noise.epsilon:g}, {noise.delta:g}, calibration='zcdp')")
    return _open(counts, T, mechanism, noise, OS_CSPRNG, None, ledger, params, answers, confidence,
                 counts_only, participations, separation)


def simulate(counts: Iterable[Any], T: int, mechanism: str = "toeplitz_sqrt",
             noise: NoiseModel | None = None, *, seed: int | None = None,
             ledger: PrivacyLedger | None = None, params: dict | None = None,
             answers: Literal["running_total", "counts"] = "running_total", confidence: float = 0.95,
             counts_only: bool = True, participations: int = 1, separation: int = 1) -> StreamRelease:
    """A **simulation** of :func:`release`: the same stream with a seeded numpy Generator.

    Reproducible from ``seed`` (recorded), ``mode = "simulation"``: for
    teaching, bands and tests, never for publication.  Parameters as
    :func:`release`; any Gaussian calibration is allowed.

    Raises
    ------
    ValueError
        If ``seed`` is missing or not a whole number >= 0, or as :func:`release`.
    """
    if seed is None:
        raise ValueError("a simulation needs an explicit seed, a whole number >= 0 (seed=0, 1, ...)")
    seed = limits.whole_number(seed, "stream simulate: seed", minimum=0)
    return _open(counts, T, mechanism, noise, np.random.default_rng(seed), seed, ledger, params,
                 answers, confidence, counts_only, participations, separation)
