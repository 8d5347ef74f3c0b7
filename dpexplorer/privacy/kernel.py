"""The privacy boundary: the one module that touches the private data vector.

:class:`PrivateData` holds ``x`` and never hands it out.  Its methods return
*noisy* answers (or a noisy choice) only; each checks the ledger's budget
**before** drawing any noise and then records what it spent in a
:class:`~dpexplorer.privacy.ledger.PrivacyLedger`.  Everything else in dpexplorer -- workloads,
strategies, reconstruction, plots -- works on public things.

Two modes, chosen by the source of randomness every method takes
(:mod:`dpexplorer.privacy.samplers`):

* **simulation**: a seeded ``numpy.random.Generator``; reproducible, for
  comparisons, bands, evaluations and tests; its spends are marked
  ``"simulation"`` and it is never a release;
* **release**: :data:`OS_CSPRNG`, the operating system's CSPRNG through
  opendp's vetted samplers; no seed exists.  Before drawing, the kernel asks
  opendp's own privacy map for the measurement's ε (or ρ) and refuses to draw
  if it exceeds what the ledger is about to record.

Accounting (:mod:`dpexplorer.privacy.accounting`): every spend carries ε, δ
and its zCDP cost ρ (``ε²/2`` for ε-DP steps, ``Δ₂²/(2σ²)`` for Gaussian
noise); the ledger (:mod:`dpexplorer.privacy.ledger`) composes them and checks
its budget.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import fractions
import math
import numbers
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal, TypeVar, cast

import numpy as np
import numpy.typing as npt

from ..queries import limits
from ..queries.matrix import Matrix, MatrixLike, as_matrix
from . import accounting, samplers
from .ledger import RELEASE, SIMULATION, PrivacyLedger, Spend
from .noise import Gaussian, Laplace, NoiseModel, check_noise
from .samplers import RandomSource

if TYPE_CHECKING:
    from .ledger import Reservation

_T = TypeVar("_T")

#: A function of the private data vector (1D float64) run inside the kernel.
_OfData = Callable[[npt.NDArray[np.float64]], npt.ArrayLike]

__all__ = ["PrivateData", "validate_counts", "check_shape", "noise_sampler", "variance_factor"]


def validate_counts(x: npt.ArrayLike, name: str = "x", *, counts: bool = True,
                    domain: Sequence[int] | None = None) -> npt.NDArray[np.float64]:
    """The one check of a data vector: numeric, non-empty, finite, at most 2**53 in size, and
    (with ``counts``) non-negative whole numbers; with ``domain``, of the workload's shape.

    The bound 2**53 is where float64 stops holding every whole number: above
    it adding or removing one record (a change of 1, the unit the noise is
    calibrated to) is not representable, and sums of such values overflow
    towards inf and NaN answers.  It applies to weights too.  Every check is
    made on the values as given, before any conversion to float64: a
    ``longdouble`` array in its own precision, an object array (Python
    ints, fractions, decimals) exactly, so a count above 2**53
    (or a fraction that float64 would round to a whole number) is refused,
    never rounded.

    Messages name ``name``, the number of offending entries and the index of
    the first (a cell of the public domain), never a value read from ``x``.

    Parameters
    ----------
    x : array_like, any shape
        Counts (int, or float with whole values), e.g. a histogram over the
        workload's domain; an object array of real numbers (``int``,
        ``Fraction``, ``Decimal``, numpy scalars) is read exactly.
    name : str
        Name used in error messages.
    counts : bool
        ``True`` (default): whole numbers >= 0.  ``False``: any finite real
        weights of magnitude at most 2**53 (fractional or signed data, as
        ``PrivateData(x, counts=False)`` and ``release(..., counts=False)``
        accept).
    domain : tuple of int, optional
        The workload's domain: ``x`` must have exactly this shape, or be its
        flattening (shape ``(prod(domain),)``, C order); see :func:`check_shape`.

    Returns
    -------
    ndarray, float64, same shape
        A copy of ``x``.

    Raises
    ------
    ValueError
        If ``x`` is not numeric, empty, has NaN/inf entries, entries above
        2**53 in magnitude, (with ``counts``) negative or fractional entries,
        or (with ``domain``) another shape.
    """
    a = np.asarray(x)
    if a.dtype.kind == "O":
        return _validate_objects(a, name, counts, domain)
    if a.dtype.kind not in "biuf":
        raise ValueError(f"{name} must hold numeric counts, got dtype {a.dtype}")
    if a.size == 0:
        raise ValueError(f"{name} is empty (shape {a.shape}); it needs at least one cell")
    if domain is not None:
        check_shape(a.shape, domain, name)
    if a.dtype.kind in "iu":  # exact in the integer type (np.abs would wrap int64's minimum)
        big = (a > samplers.MAX_EXACT_INTEGER) | (a < -samplers.MAX_EXACT_INTEGER)
        _refuse(big, name, "too large", "counts above 2**53 cannot be held exactly in float64"
                if counts else "weights must be at most 2**53 in magnitude")
    chk = a if a.dtype.kind == "f" else None  # floats checked in their own precision (longdouble)
    out = np.array(a, dtype=np.float64, copy=True)
    chk = out if chk is None else chk
    masks = [(~np.isfinite(chk), "NaN/inf", "entries must be finite")]
    if counts:
        masks += [(chk < 0, "negative", "counts must be >= 0"),
                  (np.isfinite(chk) & (chk != np.round(chk)), "non-integer", "counts must be whole numbers")]
    masks.append((np.abs(chk) > samplers.MAX_EXACT_INTEGER, "too large",
                  f"{'counts' if counts else 'weights'} must be at most 2**53 in magnitude"))
    for mask, what, allowed in masks:
        _refuse(mask, name, what, allowed)
    return out


def _refuse(mask: npt.NDArray[np.bool_], name: str, what: str, allowed: str) -> None:
    """ValueError naming how many entries ``mask`` flags and the first one's index, never a value."""
    if mask.any():
        n, first = int(mask.sum()), tuple(int(i) for i in np.argwhere(mask)[0])
        where = f"{name}[{', '.join(map(str, first))}]" if first else name
        raise ValueError(f"{name} has {n:,} {what} entr{'y' if n == 1 else 'ies'} (the first is "
                         f"{where}); {allowed}")


def _ratio(v: object) -> tuple[int, int] | None | Literal[False]:
    """``v`` exactly as ``(numerator, denominator)`` of Python ints; ``None`` for inf/NaN; ``False``
    for something that is not a real number."""
    if isinstance(v, bool | np.bool_):
        return int(v), 1
    if not isinstance(v, numbers.Real | decimal.Decimal | np.integer | np.floating):
        return False
    try:
        if isinstance(v, numbers.Integral | np.integer):
            return int(v), 1
        if hasattr(v, "as_integer_ratio"):
            return cast("tuple[int, int]", v.as_integer_ratio())
        r = cast(numbers.Rational, v)  # a Real without as_integer_ratio: a Rational (else the except)
        return cast("tuple[int, int]", (r.numerator, r.denominator))  # Integral: Python ints in practice
    except (OverflowError, ValueError):  # inf or NaN (float, numpy or Decimal)
        return None


def _validate_objects(a: npt.NDArray[np.object_], name: str, counts: bool,
                      domain: Sequence[int] | None) -> npt.NDArray[np.float64]:
    """:func:`validate_counts` for an object array, each entry read exactly as a ratio of Python ints."""
    if a.size == 0:
        raise ValueError(f"{name} is empty (shape {a.shape}); it needs at least one cell")
    if domain is not None:
        check_shape(a.shape, domain, name)
    limits.check("cells", a.size, f"{name}: cells")
    big_ = samplers.MAX_EXACT_INTEGER
    if set(map(type, a.flat)) <= {int, bool}:  # Python ints (e.g. above int64): compared at C speed
        _refuse(((a > big_) | (a < -big_)).astype(bool), name, "too large",
                f"{'counts' if counts else 'weights'} must be at most 2**53 in magnitude")
        if counts:
            _refuse((a < 0).astype(bool), name, "negative", "counts must be >= 0")
        return a.astype(np.float64)  # exact: whole numbers of magnitude <= 2**53
    ratios = np.frompyfunc(_ratio, 1, 1)(a)
    bad_type = np.frompyfunc(lambda r: r is False, 1, 1)(ratios).astype(bool)
    if bad_type.any():
        first = tuple(int(k) for k in np.argwhere(bad_type)[0])
        kind = type(a[first]).__name__
        raise ValueError(f"{name} must hold numeric counts: {int(bad_type.sum()):,} entr"
                         f"{'y is' if bad_type.sum() == 1 else 'ies are'} not a real number (the first, "
                         f"{name}[{', '.join(map(str, first))}], is a {kind})")
    _refuse(np.frompyfunc(lambda r: r is None, 1, 1)(ratios).astype(bool), name, "NaN/inf",
            "entries must be finite")
    num = np.frompyfunc(lambda r: r[0], 1, 1)(ratios)
    den = np.frompyfunc(lambda r: r[1], 1, 1)(ratios)
    if counts:
        _refuse((num < 0).astype(bool), name, "negative", "counts must be >= 0")
        _refuse((den != 1).astype(bool), name, "non-integer", "counts must be whole numbers")
    big = np.frompyfunc(lambda p, q: abs(p) > big_ * q, 2, 1)(num, den).astype(bool)
    _refuse(big, name, "too large", f"{'counts' if counts else 'weights'} must be at most 2**53 in magnitude")
    out: npt.NDArray[np.float64] = np.frompyfunc(lambda p, q: float(fractions.Fraction(p, q)), 2, 1)(
        num, den).astype(np.float64)
    return out


def check_shape(shape: Sequence[int], domain: Sequence[int], name: str = "x") -> None:
    """``shape`` must be the workload's ``domain`` exactly, or its flattening ``(prod(domain),)``.

    A 1D domain ``(n,)`` takes only ``(n,)``; a grid ``(n1, n2)`` takes
    ``(n1, n2)`` or ``(n1·n2,)`` (C order), never another shape with as many
    cells such as ``(n2, n1)``.

    Raises
    ------
    ValueError
        Naming both shapes and the number of cells.
    """
    shape, domain = tuple(int(v) for v in shape), tuple(int(v) for v in domain)
    if shape == domain or shape == (math.prod(domain),):
        return
    raise ValueError(f"{name} has shape {shape} ({math.prod(shape):,} cells) but the workload's domain "
                     f"is {domain} ({math.prod(domain):,} cells): give x of shape {domain}"
                     + (f" or flattened, ({math.prod(domain)},)" if len(domain) > 1 else ""))


def noise_sampler(A: MatrixLike, noise: NoiseModel, counts: bool = True) -> str:
    """``"discrete"`` or ``"continuous"``: which sampler MEASURE uses for strategy ``A``.

    Public (depends only on ``A``, the noise model and whether the data are
    counts): the discrete Laplace / discrete Gaussian on ℤ when every strategy
    answer is a whole number -- ``A`` has whole-number entries
    (:attr:`Matrix.integral`) and ``x`` holds counts -- else the continuous
    one (Canonne, Kamath & Steinke 2020; Ghosh et al. 2009).
    """
    A = as_matrix(A)
    return "discrete" if counts and getattr(A, "integral", False) else "continuous"


def variance_factor(A: MatrixLike, noise: NoiseModel, counts: bool = True) -> float:
    """Ratio of MEASURE's actual per-answer noise variance to ``noise.variance(Δ)``.

    1 with the continuous samplers; with the discrete ones (:func:`noise_sampler`)
    the discrete Laplace's ``2q/(1−q)²`` (``q = e^{−1/b}``) or the discrete
    Gaussian's variance over the continuous ``2b²`` / ``σ²`` -- slightly below 1
    (about ``1 − 1/(12b²)`` for Laplace).  Multiply any analytic variance of
    the matrix mechanism by it to get the exact variance of a run.
    """
    A = as_matrix(A)
    if noise_sampler(A, noise, counts) != "discrete":
        return 1.0
    sens = A.sensitivity(noise.norm)
    return noise.discrete_variance(sens) / noise.variance(sens)


class _Boundary:
    """What every holder of private data shares: its ledger, and adding noise to exact answers.

    Subclasses hold the data and compute exact answers; :meth:`_noisy` checks
    the noise and the source, asks opendp's privacy map (release mode),
    records the spend -- checking the budget first -- and only then draws.
    """

    ledger: PrivacyLedger

    @staticmethod
    def _mode(source: object) -> str:
        samplers.check_source(source)
        return RELEASE if samplers.is_release(source) else SIMULATION

    def _record(self, label: str, source: RandomSource, epsilon: float, delta: float, rho: float,
                noise_text: str, queries: int, sensitivity: float) -> None:
        self.ledger.record(Spend(
            label=label, mode=self._mode(source), epsilon=float(epsilon), delta=float(delta),
            rho=float(rho), noise=noise_text, queries=int(queries), sensitivity=float(sensitivity),
            time=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")))

    def reserve(self, epsilon: float, delta: float = 0.0, rho: float | None = None, *,
                label: str = "reservation", source: RandomSource | None = None) -> Reservation:
        """Reserve the whole cost of a multi-stage mechanism before its first draw.

        ``with data.reserve(ε, δ, ρ, label=...):`` checks the whole cost
        against the ledger's budget and records it atomically
        (:meth:`PrivacyLedger.reserve`, committed for a stored ledger), so a
        refusal comes before any stage draws.  Inside the block every
        measurement of this ledger (same thread or task) is a stage charged
        against the reservation -- one that would exceed it is refused with
        ``RuntimeError`` before drawing -- and listed as part of it; the
        totals count the reservation, not its stages twice.  On a normal exit
        the reservation is settled down to its stages' (ε, δ, ρ); after an
        exception it stays spent unless nothing was drawn
        (:class:`~dpexplorer.privacy.ledger.Reservation`).  A reserve inside a
        reservation is charged against the outer one.

        Parameters
        ----------
        epsilon, delta : float
            (ε, δ) of the whole mechanism (sequential composition, Dwork & Roth 2014, Thm 3.16).
        rho : float, optional
            Its zCDP cost (default ``ε²/2``, Bun & Steinke 2016, Prop. 1.4).
        label : str
            Recorded in the ledger.
        source : numpy.random.Generator or OS_CSPRNG, optional
            Sets the mode recorded ("simulation" or "release"; release if omitted).

        Returns
        -------
        Reservation
            A context manager.

        Raises
        ------
        BudgetExceededError
            If the whole cost does not fit the budget (nothing recorded, nothing drawn).
        """
        mode = RELEASE if source is None else self._mode(source)
        return self.ledger.reserve(epsilon, delta, rho, label=label, mode=mode)

    @staticmethod
    def _crosscheck(source: RandomSource, claimed: float, opendp_value: Callable[[], float],
                    what: str) -> None:
        """In release mode, opendp's privacy map must not exceed what the kernel records."""
        if samplers.is_release(source):
            value = opendp_value()
            if value > claimed * (1 + 1e-9) + 1e-15:
                raise RuntimeError(f"opendp's privacy map gives {what} = {value:.6g} where the kernel "
                                   f"would record {claimed:.6g}; nothing was drawn")

    def _noisy(self, A: Matrix, noise: NoiseModel, source: RandomSource, label: str, discrete: bool,
               exact_fn: Callable[[], npt.ArrayLike]) -> npt.NDArray[np.float64]:
        """``exact_fn() + z`` for strategy ``A`` (its sensitivity scales ``z``); see :meth:`PrivateData.measure`."""
        scale = self._charge(A, noise, source, label, discrete)
        exact = exact_fn()
        if isinstance(noise, Laplace):
            return samplers.laplace(exact, scale, source, discrete)
        return samplers.gaussian(exact, scale, source, discrete)

    def _charge(self, A: Matrix, noise: NoiseModel, source: RandomSource, label: str,
                discrete: bool) -> float:
        """Check and record the cost of measuring ``A`` with ``noise``; return the noise scale.

        Everything :meth:`_noisy` does before it draws: the noise, source and
        size checks, opendp's privacy map (release mode), the spend recorded
        against the budget.  The caller draws ``A.m`` noise values of this
        scale, and no more.
        """
        check_noise(noise)
        samplers.check_source(source)
        limits.check("strategy_rows", A.m, f"measure: rows of strategy {A.name!r}")
        if (samplers.is_release(source) and isinstance(noise, Gaussian)
                and noise.calibration != "zcdp"):
            raise ValueError(
                f"a release with Gaussian noise is accounted in zCDP: use "
                f"dpx.Gaussian({noise.epsilon:g}, {noise.delta:g}, calibration='zcdp') (the "
                f"{noise.calibration!r} calibration's (ε, δ) is proved for the ideal continuous "
                "Gaussian only)")
        sens = A.sensitivity(noise.norm)
        if not (math.isfinite(sens) and sens > 0):
            raise ValueError(f"strategy {A.name!r} has sensitivity {sens}: it measures nothing")
        scale = noise.scale(sens)
        kind = "discrete " if discrete else ""
        if isinstance(noise, Laplace):
            rho = noise.rho_per_unit
            self._crosscheck(source, noise.epsilon,
                             lambda: samplers.opendp_laplace_epsilon(scale, sens, discrete), "ε")
            text = f"{kind}Laplace(b = {scale:.4g}), ε = {noise.epsilon:g}"
        else:
            rho = accounting.rho_gaussian(sens, scale)
            self._crosscheck(source, rho, lambda: samplers.opendp_gaussian_rho(scale, sens, discrete),
                             "ρ")
            text = f"{kind}Gaussian(σ = {scale:.4g}), {cast(Gaussian, noise).calibration} calibration"
        self._record(label, source, noise.epsilon, noise.delta, rho, text, A.m, sens)
        return float(scale)


class PrivateData(_Boundary):
    """The private data vector ``x`` behind the privacy boundary.

    Parameters
    ----------
    x : array_like, shape (n,) or a d-dimensional grid
        Counts (flattened in C order).
    ledger : PrivacyLedger, optional
        Where spends are recorded (a new, uncapped one by default).
    counts : bool
        ``True`` (default): ``x`` must hold non-negative whole counts
        (:func:`validate_counts`); strategy answers with whole-number entries
        are then measured with the discrete samplers.  ``False``: any finite
        real weights of magnitude at most 2**53 are accepted (e.g. fractional
        or signed data a study needs), always with the continuous samplers.

    Raises
    ------
    ValueError
        If ``x`` is empty, not finite, above 2**53 in magnitude, or (with
        ``counts``) not non-negative whole numbers.
    """

    def __init__(self, x: npt.ArrayLike, ledger: PrivacyLedger | None = None, *, counts: bool = True):
        arr = validate_counts(x, counts=counts)
        if ledger is not None and not isinstance(ledger, PrivacyLedger):
            raise TypeError(f"ledger must be a dpexplorer.PrivacyLedger, got {type(ledger).__name__}")
        self._x = arr.ravel()
        self.domain = arr.shape
        self.counts = bool(counts)
        self.ledger = ledger if ledger is not None else PrivacyLedger()

    @property
    def n(self) -> int:
        """Number of cells."""
        return self._x.size

    # ---------------------------------------------------------- primitives
    def measure(self, A: MatrixLike, noise: NoiseModel, source: RandomSource,
                label: str = "measure") -> npt.NDArray[np.float64]:
        """Noisy strategy answers ``y = A x + z`` (MEASURE of the matrix mechanism).

        ``z`` is i.i.d. Laplace with scale ``b = Δ₁(A)/ε`` (ε-DP; HDMM Def. 10,
        Prop. 4) or Gaussian with ``σ = Δ₂(A)·c(ε, δ)`` (ρ = Δ₂²/(2σ²)-zCDP,
        Bun & Steinke 2016 Prop. 1.6), ``Δ`` the sensitivity of ``A`` under
        add/remove-one-record (HDMM Def. 7-8; ``dpexplorer/docs/noise.md``).  Discrete
        samplers on ℤ are used when every answer is a whole number
        (:func:`noise_sampler`); their privacy is the same (Ghosh et al. 2009;
        Canonne, Kamath & Steinke 2020, Thm 14).

        Parameters
        ----------
        A : Matrix or array, shape (p, n)
            Strategy queries.
        noise : NoiseModel
            ``Laplace(ε)`` or ``Gaussian(ε, δ)``; in release mode a Gaussian
            must use ``calibration="zcdp"``.
        source : numpy.random.Generator or OS_CSPRNG
            Simulation (seeded) or release randomness.
        label : str
            Recorded in the ledger.

        Returns
        -------
        ndarray, shape (p,)
            Noisy answers, in counts.

        Raises
        ------
        ValueError
            If ``A`` does not have ``n`` columns, has zero sensitivity, or a
            release is asked with a Gaussian calibration other than ``"zcdp"``.
        TypeError
            If ``noise`` is not a noise model or ``source`` not a source of randomness.
        LimitExceededError
            If ``A`` has more rows than the ``strategy_rows`` limit (nothing is drawn).
        BudgetExceededError
            If the ledger's budget would be exceeded (nothing is drawn).
        """
        A = as_matrix(A)
        if A.n != self.n:
            raise ValueError(f"strategy has {A.n} columns but the data vector has {self.n} cells")
        check_noise(noise)
        discrete = noise_sampler(A, noise, self.counts) == "discrete"
        return self._noisy(A, noise, source, label, discrete, lambda: A.matvec(self._x))

    def measure_function(self, f: _OfData, sensitivity: float, epsilon: float, source: RandomSource,
                         label: str) -> npt.NDArray[np.float64]:
        """Laplace mechanism on any vector-valued ``f(x)`` with known L1 sensitivity.

        Returns ``f(x) + Laplace(sensitivity/ε)`` per entry (Dwork et al.
        2006), ε-DP, continuous sampler.  Used by data-dependent mechanisms for
        their non-linear statistics (e.g. EFPA's retained Fourier coefficients).

        Raises
        ------
        ValueError
            If ``sensitivity`` is not positive or ``f(x)`` is not finite.
        BudgetExceededError
            If the ledger's budget would be exceeded.
        """
        if not (math.isfinite(float(sensitivity)) and sensitivity > 0):
            raise ValueError(f"sensitivity must be a positive finite number, got {sensitivity}")
        noise = Laplace(epsilon)
        values = np.asarray(f(self._x.copy()), dtype=float)
        if not np.all(np.isfinite(values)):
            raise ValueError("the measured statistic has NaN or infinite values")
        scale = sensitivity / noise.epsilon
        self._crosscheck(source, noise.epsilon,
                         lambda: samplers.opendp_laplace_epsilon(scale, sensitivity), "ε")
        self._record(label, source, noise.epsilon, 0.0, noise.rho_per_unit,
                     f"Laplace(b = {scale:.4g}), ε = {noise.epsilon:g}", values.size, sensitivity)
        return samplers.laplace(values, scale, source).reshape(values.shape)

    def noisy_max(self, scores_fn: _OfData, sensitivity: float, epsilon: float, source: RandomSource,
                  label: str) -> int:
        """ε-DP selection: the index of the largest ``u_i + Exponential(2Δu/ε)``, ``u = scores_fn(x)``.

        Report-noisy-max with exponential noise, equal in distribution to
        permute-and-flip (McKenna & Sheldon, NeurIPS 2020, Thm 2): ε-DP for
        utilities whose every entry changes by at most Δu between neighbours,
        like the exponential mechanism (McSherry & Talwar, FOCS 2007, Thm 6)
        and never less accurate.  Only the index leaves the boundary.

        Returns
        -------
        int
            The selected index.

        Raises
        ------
        ValueError
            If ``sensitivity`` is not positive or the utilities are empty or not finite.
        BudgetExceededError
            If the ledger's budget would be exceeded.
        """
        if not (math.isfinite(float(sensitivity)) and sensitivity > 0):
            raise ValueError(f"sensitivity must be a positive finite number, got {sensitivity}")
        noise = Laplace(epsilon)  # validates ε; ε-DP selection
        u = np.asarray(scores_fn(self._x.copy()), dtype=float).ravel()
        if u.size == 0 or not np.all(np.isfinite(u)):
            raise ValueError("noisy max needs a non-empty vector of finite utilities")
        scale = 2.0 * sensitivity / noise.epsilon
        self._crosscheck(source, noise.epsilon,
                         lambda: samplers.opendp_noisy_max_epsilon(scale, sensitivity), "ε")
        self._record(label + " (report noisy max)", source, noise.epsilon, 0.0, noise.rho_per_unit,
                     f"report-noisy-max over {u.size} candidates, Exponential({scale:.4g})", 1,
                     sensitivity)
        return samplers.noisy_max(u, scale, source)

    def noisy_optimum(self, costs_fn: _OfData, scale: npt.ArrayLike,
                      select_fn: Callable[[npt.NDArray[np.float64]], _T], epsilon: float,
                      source: RandomSource, label: str, sensitivity: float = float("nan")) -> _T:
        """Release only ``select_fn(costs_fn(x) + Z)``, ``Z_i`` independent Laplace(``scale_i``).

        The noisy costs never leave this method; only what ``select_fn`` makes
        of them (e.g. the least-cost partition) does.  The caller states the
        theorem that makes this ``epsilon``-DP for its scales and passes the
        scales itself.  DAWA's private partition (Li et al. PVLDB 2014, Alg. 1,
        Thm 2) passes, by default, the per-bucket scales of the Remark after
        Thm 2, ``(Δbcost + Δ_b)/ε₁`` with ``Δbcost = 2`` and ``Δ_b = 2 − 2/L``
        for a bucket of length ``L`` (so ``2/ε₁`` for a single cell up to
        ``4/ε₁``); Alg. 1's uniform ``2·Δbcost/ε₁ = 4/ε₁`` is its
        ``refined=False`` option (:func:`dpexplorer.adaptive.dawa.noise_scales`).
        This method checks only that the scales are positive: the guarantee
        is the caller's theorem, and an audit
        (:func:`dpexplorer.audit.audit`) is how a wrong one is caught.
        Noise with different scales is drawn as ``scale_i · (c_i/scale_i +
        Laplace(1))``: one vetted draw of unit-scale noise in release mode.

        Parameters
        ----------
        costs_fn : callable
            ``x -> costs`` (ndarray).
        scale : float or ndarray
            Laplace scale of the noise on every cost (one per cost, or one for all).
        select_fn : callable
            ``noisy_costs -> output``; must not return the noisy costs themselves.
        epsilon : float
            Privacy cost of the release, per the caller's theorem.
        source : numpy.random.Generator or OS_CSPRNG
        label : str
        sensitivity : float
            Sensitivity of one cost (recorded in the ledger).

        Raises
        ------
        ValueError
            If ``scale`` is not positive or the costs are not finite.
        BudgetExceededError
            If the ledger's budget would be exceeded.
        """
        scale = np.asarray(scale, dtype=float)
        if scale.size == 0 or not np.all(np.isfinite(scale) & (scale > 0)):
            raise ValueError("noise scales must be positive finite numbers")
        noise = Laplace(epsilon)
        costs = np.asarray(costs_fn(self._x.copy()), dtype=float)
        if not np.all(np.isfinite(costs)):
            raise ValueError("the costs have NaN or infinite values")
        scales = np.broadcast_to(scale, costs.shape)
        self._record(label, source, noise.epsilon, 0.0, noise.rho_per_unit,
                     f"Laplace(scale ≤ {scale.max():.4g}) on {costs.size} costs, argmin released", 1,
                     sensitivity)
        unit = samplers.laplace((costs / scales).ravel(), 1.0, source).reshape(costs.shape)
        return select_fn(scales * unit)

    def above_threshold(self, queries_fn: _OfData, threshold: float, sensitivity: float, epsilon: float,
                        source: RandomSource, label: str) -> int | None:
        """Sparse vector technique, AboveThreshold: the first query whose noisy answer reaches a noisy threshold.

        With ``q = queries_fn(x)`` (every entry changing by at most
        ``sensitivity`` = Δ between neighbouring data vectors), draws
        ``T̂ = threshold + Lap(2Δ/ε)`` and ``ν_i ~ Lap(4Δ/ε)`` and returns the
        first ``i`` with ``q_i + ν_i ≥ T̂`` (``None`` if there is none).  Only
        that index leaves the boundary; it is ε-DP however many queries there
        are (Dwork & Roth 2014, Alg. 1 "AboveThreshold", Thm 3.23).  The
        threshold must be public (data-independent).  Records ε.

        Parameters
        ----------
        queries_fn : callable
            ``x -> q``, a 1D array of query answers in the order they are asked.
        threshold : float
            Public threshold ``T``.
        sensitivity : float
            Δ > 0: bound on ``|q_i(x) − q_i(x')|`` for neighbours ``x, x'``.
        epsilon : float
            ε spent.
        source : numpy.random.Generator or OS_CSPRNG
        label : str
            Recorded in the ledger.

        Returns
        -------
        int or None
            Index of the first query above the threshold, or ``None``.

        Raises
        ------
        ValueError
            If ``sensitivity`` is not a positive finite number, ``threshold`` is not finite, or
            the queries are empty or not finite.
        BudgetExceededError
            If the ledger's budget would be exceeded.
        """
        try:
            delta = float(sensitivity)
        except (TypeError, ValueError):
            raise ValueError(f"the sensitivity Δ must be a positive finite number, got {sensitivity!r}") from None
        if not (math.isfinite(delta) and delta > 0):
            raise ValueError(f"the sensitivity Δ must be a positive finite number (0 < Δ < ∞), got "
                             f"{sensitivity!r}")
        if not math.isfinite(float(threshold)):
            raise ValueError(f"the threshold must be a finite number, got {threshold!r}")
        noise = Laplace(epsilon)  # validates ε
        q = np.asarray(queries_fn(self._x.copy()), dtype=float).ravel()
        if q.size == 0 or not np.all(np.isfinite(q)):
            raise ValueError("AboveThreshold needs a non-empty vector of finite query answers")
        b_t, b_q = 2.0 * delta / noise.epsilon, 4.0 * delta / noise.epsilon
        self._record(label + " (sparse vector, AboveThreshold)", source, noise.epsilon, 0.0,
                     noise.rho_per_unit,
                     f"AboveThreshold over {q.size} queries: Laplace({b_t:.4g}) on the threshold, "
                     f"Laplace({b_q:.4g}) per query", 1, delta)
        t_hat = float(samplers.laplace([float(threshold)], b_t, source)[0])
        above = np.flatnonzero(samplers.laplace(q, b_q, source) >= t_hat)
        return int(above[0]) if above.size else None

    def __repr__(self) -> str:
        return f"<PrivateData n={self.n} (hidden); {self.ledger!r}>"
