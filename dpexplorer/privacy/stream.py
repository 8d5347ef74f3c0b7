"""The privacy boundary for a stream: counts that arrive one step at a time.

:class:`PrivateStream` holds an iterator of counts ``x_0, x_1, …`` (one per
step, e.g. the new cases of each day) and releases, at step ``t`` and from the
counts up to ``t`` only, the noisy answer of a causal workload ``W`` (the
running total ``Σ_{s≤t} x_s``, or the count ``x_t``) of the matrix mechanism
with an online strategy ``A``:

    answer = B (A x + z) = W x + B z,        B A = W,

``B`` being the strategy's decoder (``W A⁻¹`` for a square invertible
``A``).  Only ``A x + z`` needs privacy; the kernel never forms it: it adds
the public correlated noise ``B z`` to the exact answer, which gives the
same numbers.  The cost of the whole stream -- one measurement of ``A`` over
``T`` steps, ``Δ(A)`` its largest column norm (one record adds 1 to one
step's count) -- is recorded in the ledger, budget checked, before the first
draw (the matrix mechanism as a streaming release: Denisov, McMahan, Rush,
Smith & Thakurta, NeurIPS 2022; Fichtenberger, Henzinger & Upadhyay, ICML
2023).  Denisov et al. prove the Gaussian guarantee also for counts chosen
*adaptively* from earlier answers; under Laplace noise the guarantee here is
for a stream fixed in advance.

The noise ``B z`` comes either from a **filter** -- a public object with
``step(z_t) -> (B z)_t`` that keeps a few numbers of state, for strategies
whose noise can be generated step by step (one ``z_t`` per step: memory
independent of ``T``) -- or, for any other strategy, from the whole ``z``
drawn at the start and decoded once (memory ``O(T)``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

from ..queries import limits
from ..queries.matrix import Matrix, as_matrix
from . import samplers
from .kernel import _Boundary, validate_counts
from .ledger import PrivacyLedger
from .noise import Laplace, NoiseModel, check_noise
from .samplers import RandomSource

__all__ = ["PrivateStream", "NoiseFilter", "ANSWERS", "NOISE_CHUNK"]

#: i.i.d. noise values a filtered stream draws at a time (one opendp call per chunk, not per
#: step: a call costs ~0.1 ms); the memory stays independent of ``T``.
NOISE_CHUNK = 4096

#: What a stream release answers at step ``t``: the running total ``Σ_{s≤t} x_s`` or the count ``x_t``.
ANSWERS = ("running_total", "counts")


class NoiseFilter(Protocol):
    """A public, causal linear filter: ``step(z_t)`` returns ``(B z)_t`` from ``z_0..z_t``."""

    def step(self, z: float) -> float:
        """The correlated noise of step ``t`` given the i.i.d. noise ``z_t`` of that step."""
        ...  # pragma: no cover - a protocol


class PrivateStream(_Boundary):
    """A stream of counts behind the privacy boundary, read one step at a time.

    Parameters
    ----------
    counts : iterable
        The counts of steps ``0, 1, …`` (non-negative whole numbers with
        ``counts=True``).  Read lazily, one per released step.
    steps : int
        ``T``: the number of steps the stream is released for (the strategy's size).
    ledger : PrivacyLedger, optional
        Where the stream's cost is recorded (a new, uncapped one by default).
    counts_only : bool
        ``True`` (default): every value must be a non-negative whole number;
        ``False``: any finite real value of magnitude at most 2**53.

    Raises
    ------
    ValueError
        If ``steps`` is not a positive whole number within the ``cells`` limit.
    TypeError
        If ``counts`` is not iterable or ``ledger`` not a PrivacyLedger.
    """

    def __init__(self, counts: Iterable[object], steps: int, ledger: PrivacyLedger | None = None, *,
                 counts_only: bool = True) -> None:
        self.steps = limits.whole_number(steps, "stream: steps", limit="cells")
        try:
            self._counts: Iterator[object] = iter(counts)
        except TypeError:
            raise TypeError(f"counts must be an iterable of per-step counts, got {type(counts).__name__}") from None
        if ledger is not None and not isinstance(ledger, PrivacyLedger):
            raise TypeError(f"ledger must be a dpexplorer.PrivacyLedger, got {type(ledger).__name__}")
        self.ledger = ledger if ledger is not None else PrivacyLedger()
        self.counts_only = bool(counts_only)
        self._opened = False

    def release(self, A: Matrix, noise: NoiseModel, source: RandomSource, *,
                answers: Literal["running_total", "counts"] = "running_total",
                noise_filter: NoiseFilter | None = None,
                decode: Callable[[npt.NDArray[np.float64]], npt.ArrayLike] | None = None,
                label: str = "stream") -> Iterator[float]:
        """Charge the whole stream, then yield one noisy answer per step as the counts arrive.

        Parameters
        ----------
        A : Matrix, shape (p, T)
            The online strategy (public).  Its sensitivity scales the noise:
            Laplace ``b = Δ₁(A)/ε`` or Gaussian ``σ = Δ₂(A)·c(ε, δ)`` (as
            :meth:`PrivateData.measure <dpexplorer.privacy.PrivateData.measure>`).
        noise : NoiseModel
            ``Laplace(ε)`` or ``Gaussian(ε, δ)`` (``calibration="zcdp"`` for a release).
        source : numpy.random.Generator or OS_CSPRNG
            Simulation (seeded) or release randomness.
        answers : {"running_total", "counts"}
            ``W``: the running total (Prefix) or each step's count (Identity).
        noise_filter : NoiseFilter, optional
            For a square ``A`` whose decoder can run step by step: ``z_t`` is
            drawn by step ``t`` (in chunks of :data:`NOISE_CHUNK`) and ``(B z)_t =
            noise_filter.step(z_t)``.
        decode : callable, optional
            Otherwise: ``decode(z) -> B z`` (shape ``(T,)``) for the whole
            ``z: (p,)``, drawn before the first step.  Exactly one of
            ``noise_filter`` and ``decode`` is given.
        label : str
            Recorded in the ledger.

        Yields
        ------
        float
            The noisy answer of step ``t`` (counts), ``t = 0 … T−1``; fewer if
            the counts run out (the whole stream was charged all the same).

        Raises
        ------
        RuntimeError
            If this stream was released already (each stream is released once).
        ValueError
            If ``A`` does not have ``T`` columns, both or neither of
            ``noise_filter``/``decode`` are given, ``answers`` is unknown, a
            filter is given for a strategy that is not square, ``decode``
            returns the wrong shape; or, when reading, a count is not valid
            or the stream has more than ``T`` counts (after ``T`` answers).
        BudgetExceededError
            If the ledger's budget would be exceeded (nothing is drawn).
        """
        A = as_matrix(A)
        check_noise(noise)
        if A.n != self.steps:
            raise ValueError(f"the strategy has {A.n} columns but the stream has {self.steps} steps")
        if answers not in ANSWERS:
            raise ValueError(f"answers must be one of {ANSWERS}, got {answers!r}")
        if (noise_filter is None) == (decode is None):
            raise ValueError("give exactly one of noise_filter (noise step by step) and decode (noise at once)")
        if noise_filter is not None and A.m != self.steps:
            raise ValueError(f"a noise filter draws one noise value per step: the strategy must be "
                             f"square, got {A.m} rows for {self.steps} steps")
        if self._opened:
            raise RuntimeError("this stream was released already: a stream is released once")
        self._opened = True
        # the whole stream's cost, checked against the budget and recorded before any draw
        scale = self._charge(A, noise, source, label, discrete=False)
        draw = samplers.laplace if isinstance(noise, Laplace) else samplers.gaussian
        if decode is not None:
            correlated = np.asarray(decode(draw(np.zeros(A.m), scale, source)), dtype=float)
            if correlated.shape != (self.steps,):
                raise ValueError(f"decode returned noise of shape {correlated.shape}, expected ({self.steps},)")
        return self._steps(answers, scale, source, draw, noise_filter,
                           None if decode is None else correlated)

    def _steps(self, answers: Literal["running_total", "counts"], scale: float, source: RandomSource,
               draw: Callable[..., npt.NDArray[np.float64]], noise_filter: NoiseFilter | None,
               correlated: npt.NDArray[np.float64] | None) -> Iterator[float]:
        total = 0.0
        chunk = np.zeros(0)
        for t in range(self.steps):
            try:
                value = next(self._counts)
            except StopIteration:
                return
            if (type(value) is int or isinstance(value, np.integer)) and \
                    0 <= value <= samplers.MAX_EXACT_INTEGER:
                x_t = float(value)  # a whole count in range: what validate_counts would accept
            else:  # every other value through the one check (exact, messages without values)
                x_t = float(validate_counts(np.array([value], dtype=object), f"the count of step {t}",
                                            counts=self.counts_only)[0])
            total = total + x_t if answers == "running_total" else x_t
            if noise_filter is not None:
                if t % NOISE_CHUNK == 0:  # the next chunk of i.i.d. noise (memory independent of T)
                    chunk = draw(np.zeros(min(NOISE_CHUNK, self.steps - t)), scale, source)
                n_t = float(noise_filter.step(float(chunk[t % NOISE_CHUNK])))
            else:
                assert correlated is not None
                n_t = float(correlated[t])
            yield total + n_t
        if next(self._counts, _END) is not _END:
            raise ValueError(f"the stream was released for {self.steps} steps and has more counts; "
                             f"open a new stream (with its own budget) for the steps after")

    def __repr__(self) -> str:
        return f"PrivateStream(<{self.steps} steps hidden>, ledger={self.ledger!r})"


_END = object()
