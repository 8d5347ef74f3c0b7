"""EFPA: the enhanced Fourier perturbation algorithm (1D histograms).

Ács, Castelluccia, Chen, "Differentially private histogram publishing
through lossy compression", ICDM 2012 (EFPA, their improvement of Rastogi &
Nath's Fourier Perturbation Algorithm, SIGMOD 2010).  The histogram is
compressed to its ``k`` lowest-frequency DFT coefficients; ``k`` is chosen
privately with the exponential mechanism (a share of ε), the kept
coefficients are perturbed with Laplace noise (the rest of ε), and the
inverse DFT gives the estimate.  :func:`efpa` is that algorithm with every
noise scale derived below; :func:`efpa_as_published` is the authors' own
code, which is **not** differentially private (last section).

Conventions and derivations (written out here because they fix every noise
scale; the paper's own constants differ with its DFT normalisation):

* **Transform.**  Orthonormal real DFT, ``F = rfft(x, norm="ortho")``:
  ``F_f = n^{-1/2} Σ_j x_j e^{−2πi jf/n}`` for ``f = 0..K−1``,
  ``K = ⌊n/2⌋ + 1``.  ``x`` is real, so ``F_{n−f} = conj(F_f)`` and these
  ``K`` coefficients determine the spectrum.  ``F_0`` (and ``F_{n/2}`` for
  even ``n``) are real ("real-only"); the others are complex.  Parseval:
  ``‖x‖₂² = Σ_f w_f |F_f|²`` with ``w_f = 1`` for real-only and ``2`` for
  complex coefficients (each stands for itself and its mirror).
* **Candidates.**  Keep coefficients ``0..k−1``; the paper tries every
  ``k ∈ {1, ..., K}`` (``candidates="all"``; ``k = K`` keeps everything: no
  compression error).  The default ``"geometric"`` tries ``k = 1..8`` and
  then every ``⌈8·1.5^i⌉`` up to ``K`` (:func:`candidate_counts`; 22
  candidates for ``n = 4096``): a public candidate set changes no proof,
  and fewer near-ties leave the noisy choice less room to go wrong.  The
  released vector holds ``Re F_f`` for all kept ``f`` and ``Im F_f`` for
  the kept complex ones (the imaginary parts of real-only coefficients are
  0 for every data set, so they are not released).
* **Workload weights.**  The error that matters is the workload's,
  ``‖W(x̂ − x)‖₂²``.  With ``φ_f = n^{-1/2}(e^{2πi jf/n})_j`` the workload's
  response to frequency ``f`` is ``d_f² = ‖W φ_f‖₂² = φ_f* WᵀW φ_f``
  (:func:`workload_weights`, scaled so that ``max_f d_f = 1`` and floored
  at :data:`WEIGHT_FLOOR`); for a real orthonormal basis vector of frequency
  ``f`` (``√(2/n)·cos`` or ``√(2/n)·sin``) the mean of the two diagonal
  entries of ``WᵀW`` is ``d_f²``.  Range workloads weigh low frequencies
  most (a range of length ``L`` sums a sinusoid of period ``n/f`` to at
  most ``min(L, n/(πf))``).  ``score="rss"``/``"sum"`` use ``d_f = 1``:
  the paper's workload-independent L2 error of ``x̂``.  Only ``W`` (public)
  enters the weights.
* **Perturbation and its exact sensitivity.**  Each released number of
  coefficient ``f`` is divided by a public ``a_f > 0`` before the noise is
  added and multiplied back after: the Laplace mechanism (Dwork, McSherry,
  Nissim & Smith, TCC 2006, Prop. 1) on the rescaled vector with noise
  ``Laplace(c_k/ε₂)``, i.e. scale ``b_f = a_f·c_k/ε₂`` on coefficient ``f``.
  Adding or removing one record changes one ``x_j`` by ±1, hence ``F_f`` by
  ``±n^{-1/2} e^{−iθ}``, ``θ = 2π (jf mod n)/n``, so the rescaled vector
  moves in L1 by ``Σ_{f<k} s_f(j)/a_f`` with ``s_f(j) = n^{-1/2}|cos θ|``
  (real-only; equal to ``n^{-1/2}``) or ``n^{-1/2}(|cos θ| + |sin θ|)``
  (complex).  Its L1 sensitivity is therefore exactly

      c_k = max_{0 ≤ j ≤ n/2} Σ_{f<k} s_f(j)/a_f

  (``s_f(n − j) = s_f(j)``, so half the cells suffice), computed by
  :func:`exact_sensitivity` and inflated by :data:`FLOAT_MARGIN` against
  rounding; the Laplace mechanism with scale ``c_k/ε₂`` is ε₂-DP for any
  public ``a``.  The earlier closed bound ``(r_k + √2·c_k)/√n`` for ``a = 1``
  (``r_k``/``c_k`` the numbers of kept real-only/complex coefficients,
  from ``|cos θ| + |sin θ| ≤ √2``; :func:`perturbation_sensitivity`) is at
  most 11 % larger at ``n = 4096`` (the mean of ``|cos θ| + |sin θ|`` over
  θ is ``4/π``); it is still used above :data:`EXACT_LIMIT` cells.
  Allocation: ``allocation="uniform"`` is ``a_f = 1`` (the paper's single
  scale); ``"workload"`` is ``a_f = d_f^{-2/3}``, the minimiser of the
  weighted noise ``Σ_f d_f² a_f²`` when ``Σ_f 1/a_f`` is held fixed
  (Lagrange: ``2 d_f² a_f = μ/a_f²``) -- low frequencies, which every long
  range sums, get less noise.
* **Expected error of a candidate.**  Truncation error and noise live on
  disjoint frequencies, and in the basis of ``φ_f`` the workload error is
  taken on the diagonal of ``WᵀW`` (exact for the noise, which is
  independent across coefficients; for the truncation error it drops the
  cross terms), so the score of keeping ``k`` coefficients is
  ``T_k² + N_k²`` with ``T_k² = Σ_{f≥k} d_f² w_f |F_f|²`` (weighted dropped
  energy) and ``N_k² = Σ_{f<k} d_f² v_f b_f²`` where ``v_f = 2`` for
  real-only (one Laplace variance ``2b²``) and ``v_f = 8`` for complex
  coefficients (two parts, each ``2b²``, counted for ``f`` and its mirror).
  With ``d = 1`` and ``a = 1`` this is the paper's score -- compression
  error plus perturbation error -- with this module's sensitivities.
* **Selection sensitivity.**  The utility uses norms, not squared norms:
  ``u(k) = −√(T_k² + N_k²)`` (``score="rss"`` or ``"workload"``) or
  ``u(k) = −(T_k + N_k)`` (``score="sum"``).  ``T_k = ‖M_k x‖₂`` for the
  linear map ``M_k x = (d_f √w_f F_f)_{f≥k}``, so a one-record change moves
  it by at most ``‖M_k e_j‖₂ = √(Σ_{f≥k} d_f² w_f / n)`` (``|F_f(e_j)|² =
  1/n`` for every ``j``); ``N_k`` does not depend on the data and ``t ↦
  √(t² + c²)`` is 1-Lipschitz.  Hence ``Δu = max_k √(Σ_{f≥k} d_f² w_f/n) =
  √(Σ_{f≥1} d_f² w_f / n)`` (:func:`selection_sensitivity`): ``√(1 − 1/n)``
  for the paper's score, about 0.016 for 2,000 random ranges over 4,096
  cells, where the weights fall off like ``1/f``.  The paper picks ``k``
  with the exponential mechanism, probability ``∝ exp(ε₁ u(k) / (2Δu))``
  (McSherry & Talwar, FOCS 2007, Thm 6); we pick it with report-noisy-max
  with ``Exponential(2Δu/ε₁)`` noise, which is permute-and-flip (McKenna &
  Sheldon, NeurIPS 2020, Thm 2): the same ε₁-DP guarantee, never less
  accurate, and the selection opendp samples in release mode.
* **Budget.**  ``ε₁ = selection_share·ε`` for the selection and ``ε₂ = ε −
  ε₁`` for the perturbation; sequential composition (Dwork et al. 2006)
  gives ε for the run.  The paper splits ε in halves.  The defaults
  (share :data:`DEFAULT_SELECTION_SHARE`, geometric candidates) were chosen
  on the eleven 4,096-cell DPBench histograms that are not among DAWA's
  seven (2,000 random ranges, ε = 0.01, 0.1, 1, ten runs each; within 8 % of
  the best setting tried on each on the geometric mean, where ½ was 1.5
  times worse) and on a flat and a smooth histogram, where a smaller share
  lets the choice of ``k`` wander (share 0.1: up to 9 times the error of
  0.3; share 0.2: at most twice).

Both private steps go through :class:`~dpexplorer.privacy.PrivateData`
(``noisy_max`` and ``measure_function``), which records them.

**Not private: ``efpa_as_published``.**  The authors' implementation,
distributed with DPBench (Hay et al., SIGMOD 2016, the ``Acs12`` code) and
run for the EFPA figures of the DAWA paper (Li, Hay, Miklau & Wang, PVLDB
2014, Sec. 5), differs in three ways, each breaking the ε-DP claim:

1. It perturbs only the **magnitude** of each kept coefficient and keeps
   its exact **phase**.  The phase moves with one record, so the output
   separates neighbours with certainty: on ``x₀ = (50, 0, 0)`` every
   coefficient is real (phase 0 or π after the noise), on ``x₁ = (50, 1,
   0)`` ``F_1 = 50 + e^{−2πi/3}`` has phase −0.0175 (mod π); any run that
   keeps ``F_1`` tells the two apart -- the privacy loss is infinite
   (:func:`dpexplorer.audit.audit` shows it: ``tests/test_efpa_published.py``).
2. It uses the **unnormalised** DFT (``F_f = Σ_j x_j e^{−2πi jf/n}``, one
   record moves every coefficient by modulus 1) with the noise scale
   ``√kept/ε₂`` of an orthonormal transform's L2 sensitivity 1
   (``kept = 2k − 1`` real numbers, Rastogi & Nath's L1 ≤ √kept·L2 bound).
   The ``k`` magnitudes have L1 sensitivity ``k`` (attained by a spike at
   cell 0, where every coefficient is real and positive), so even the
   magnitudes alone leak up to ``k/√(2k − 1)·ε₂`` -- about ``√(k/2)``
   times too little noise.
3. Its score, ``−(√(dropped energy) + √2·kept/ε₂)`` in unnormalised units,
   moves by up to ``√(n − 1)`` when one record changes (the dropped energy
   is ``n`` times the orthonormal one), but the exponential mechanism is
   run with sensitivity 1: up to ``√(n − 1)·ε₁`` for the choice of ``k``.

It is what reproduces the published EFPA accuracy, so it is registered for
study and audits -- labelled NOT PRIVATE, ``registry.Mechanism.private =
False`` -- and :func:`dpexplorer.release` refuses it.
"""

from __future__ import annotations

import functools
import math
import weakref

import numpy as np

from ..core import registry
from ..privacy import PrivateData
from ..privacy.noise import Laplace, NoiseModel
from ..queries.matrix import DENSE_LIMIT, Matrix

__all__ = ["efpa", "efpa_as_published", "coefficient_layout", "perturbation_sensitivity",
           "exact_sensitivity", "workload_weights", "noise_shape", "noise_energy",
           "selection_sensitivity", "candidate_counts", "published_utilities",
           "SELECTION_SENSITIVITY", "DEFAULT_SELECTION_SHARE", "DEFAULT_CANDIDATES", "SCORES",
           "ALLOCATIONS", "CANDIDATES", "GRID_RATIO", "EXACT_LIMIT", "WEIGHT_FLOOR", "FLOAT_MARGIN"]

#: Upper bound on the sensitivity Δu of every selection utility here (``max_f d_f = 1``);
#: the run uses the exact :func:`selection_sensitivity`, which is smaller.
SELECTION_SENSITIVITY = 1.0
#: Default share of ε for choosing ``k`` (tuned on DPBench histograms outside DAWA's seven).
DEFAULT_SELECTION_SHARE = 0.2
#: Selection scores: workload-weighted (default) or the paper's L2 error of ``x̂`` (two forms).
SCORES = ("workload", "rss", "sum")
#: Noise allocations over the kept coefficients.
ALLOCATIONS = ("workload", "uniform")
#: Candidate sets of the selection.
CANDIDATES = ("all", "geometric")
#: Default candidate set.
DEFAULT_CANDIDATES = "geometric"
#: Ratio of successive candidates of the geometric set beyond k = 8.
GRID_RATIO = 1.5
#: Above this many cells the closed sensitivity bound replaces the exact maximum (O(n²) work).
EXACT_LIMIT = 2**14
#: Workload weights ``d_f²`` are floored at this fraction of the largest one.
WEIGHT_FLOOR = 1e-6
#: Relative margin added to computed sensitivities (floating-point rounding of the sums).
FLOAT_MARGIN = 1e-9

_WEIGHTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def coefficient_layout(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Which rfft coefficients of an ``n``-cell vector are real-only.

    Returns
    -------
    real_only : ndarray of bool, shape (K,)
        ``True`` for ``f = 0`` and, for even ``n``, ``f = n/2``.
    weight : ndarray of float, shape (K,)
        Parseval weight ``w_f``: 1 for real-only, 2 for complex coefficients.
    """
    K = n // 2 + 1
    real_only = np.zeros(K, dtype=bool)
    real_only[0] = True
    if n % 2 == 0:
        real_only[-1] = True
    return real_only, np.where(real_only, 1.0, 2.0)


def perturbation_sensitivity(n: int) -> np.ndarray:
    """Closed upper bound on the L1 sensitivity of the kept coefficients, ``k = 1..K`` (``a = 1``).

    Returns
    -------
    ndarray, shape (K,)
        Entry ``k−1`` is ``(r_k + √2·c_k)/√n`` (module docstring): at least
        :func:`exact_sensitivity`, at most √2 times it.
    """
    real_only, _ = coefficient_layout(n)
    return np.cumsum(np.where(real_only, 1.0, math.sqrt(2.0))) / math.sqrt(n)


def exact_sensitivity(n: int, shape: np.ndarray | None = None) -> np.ndarray:
    """L1 sensitivity ``c_k`` of the rescaled kept coefficients, for ``k = 1..K``.

    ``c_k = max_{0≤j≤n/2} Σ_{f<k} s_f(j)/a_f`` with ``s_f(j)`` the L1 change
    of coefficient ``f``'s released numbers when cell ``j`` gains or loses a
    record (module docstring), times ``1 + FLOAT_MARGIN``.  Above
    :data:`EXACT_LIMIT` cells: the closed bound ``Σ_{f<k} ρ_f/(√n a_f)``,
    ``ρ_f = 1`` (real-only) or ``√2``.

    Parameters
    ----------
    n : int
        Number of cells (≥ 1).
    shape : ndarray, shape (K,), optional
        Public positive divisors ``a_f`` (default 1).

    Returns
    -------
    ndarray, shape (K,)
        ``c_k`` in units of the rescaled coefficients (counts / ``a``).

    Raises
    ------
    ValueError
        If ``shape`` has the wrong length or entries that are not positive and finite.
    """
    real_only, _ = coefficient_layout(n)
    K = real_only.size
    a = np.ones(K) if shape is None else np.asarray(shape, dtype=float)
    if a.shape != (K,) or not np.all(np.isfinite(a) & (a > 0)):
        raise ValueError(f"shape must hold {K} positive finite numbers (one per rfft coefficient)")
    if n > EXACT_LIMIT:
        return np.cumsum(np.where(real_only, 1.0, math.sqrt(2.0)) / a) / math.sqrt(n) * (1 + FLOAT_MARGIN)
    return _exact_sensitivity(n, a.tobytes()).copy()


@functools.lru_cache(maxsize=8)
def _exact_sensitivity(n: int, a_bytes: bytes) -> np.ndarray:
    a = np.frombuffer(a_bytes, dtype=float)
    real_only, _ = coefficient_layout(n)
    K = real_only.size
    t = 2.0 * np.pi * np.arange(n) / n
    table = np.abs(np.cos(t)) + np.abs(np.sin(t))  # s_f(j)·√n at θ = 2π t/n, t = jf mod n
    f = np.arange(K)
    best = np.zeros(K)
    rows = max(1, 2**20 // K)  # ≈ 8 MB per block
    for start in range(0, n // 2 + 1, rows):
        j = np.arange(start, min(n // 2 + 1, start + rows))[:, None]
        s = table[(j * f[None, :]) % n]
        s[:, real_only] = 1.0  # |cos θ| = 1 at f = 0 and f = n/2
        best = np.maximum(best, np.cumsum(s / a[None, :], axis=1).max(axis=0))
    return best / math.sqrt(n) * (1 + FLOAT_MARGIN)


def workload_weights(W: Matrix) -> np.ndarray:
    """The workload's response to each frequency, ``d_f² = ‖W φ_f‖₂²`` scaled to max 1.

    ``φ_f = n^{-1/2}(e^{2πi jf/n})_j``.  Computed in closed form for range
    workloads (a row of length ``L`` contributes ``|1 − ω^L|²/(n|1 − ω|²)``,
    ``ω = e^{−2πi f/n}``: a geometric series), from the rows of
    ``W`` (``Σ_q |rfft(w_q)_f|²``, orthonormal rfft) when ``m·n`` is at most
    the dense limit, else from its Gram matrix ``G = WᵀW`` (``φ_f* G φ_f``),
    and floored at :data:`WEIGHT_FLOOR`.  Public: only ``W`` is read.

    Parameters
    ----------
    W : Matrix, shape (m, n)

    Returns
    -------
    ndarray, shape (K,)
        ``d_f²`` for ``f = 0..⌊n/2⌋``, in ``[WEIGHT_FLOOR, 1]``.

    Raises
    ------
    ValueError
        If ``W`` is zero.
    MatrixTooLargeError
        If ``W`` has too many rows for its rows and its Gram matrix is too large.
    """
    try:
        return _WEIGHTS[W]
    except (KeyError, TypeError):
        pass
    m, n = W.shape
    K = n // 2 + 1
    d2 = np.zeros(K)
    ranges = getattr(W, "ranges", None)
    if callable(ranges):
        # a row [lo, hi] of length L: |Σ_{j=lo}^{hi} ω^j|² = |1 − ω^L|²/|1 − ω|², ω = e^{−2πi f/n},
        # which depends on L alone: d_f² = Σ_L c_L (1 − cos 2πfL/n) / (n (1 − cos 2πf/n))
        lo, hi = (np.asarray(r, dtype=np.int64) for r in ranges())
        lengths = hi - lo + 1
        d2[0] = float(np.sum(lengths.astype(float) ** 2)) / n
        counts = np.bincount(lengths % n, minlength=n).astype(float)
        f = np.arange(1, K)
        d2[1:] = (lengths.size - np.real(np.fft.rfft(counts))[1:]) / (n * (1.0 - np.cos(2 * np.pi * f / n)))
    elif m * n <= DENSE_LIMIT:
        S = W.sparse()
        rows = max(1, 2**22 // n)
        for start in range(0, m, rows):
            block = np.asarray(S[start:start + rows].toarray(), dtype=float)
            d2 += np.sum(np.abs(np.fft.rfft(block, axis=1, norm="ortho")) ** 2, axis=0)
    else:
        G = W.gram().dense()
        rows = max(1, 2**22 // n)
        f = np.arange(K)
        for start in range(0, n, rows):
            a = np.arange(start, min(n, start + rows))
            R = np.fft.rfft(G[a], axis=1)  # Σ_b G_ab e^{−2πi bf/n}
            phase = np.exp(2j * np.pi * ((a[:, None] * f[None, :]) % n) / n)
            d2 += np.real(np.sum(phase * R, axis=0)) / n
    top = d2.max()
    if not (np.isfinite(top) and top > 0):
        raise ValueError("the workload is zero: EFPA's weights need a non-zero W")
    d2 = np.maximum(d2 / top, WEIGHT_FLOOR)
    try:
        _WEIGHTS[W] = d2
    except TypeError:  # pragma: no cover - a Matrix that cannot be weakly referenced
        pass
    return d2


def candidate_counts(n: int, candidates: str = "all") -> np.ndarray:
    """The numbers of kept coefficients ``k`` the selection chooses among (public), ascending.

    ``"all"``: ``1..K`` (the paper).  ``"geometric"``: ``1..8`` and then
    ``⌈8·r^i⌉`` for ``r =`` :data:`GRID_RATIO`, ending at ``K``.

    Returns
    -------
    ndarray of int, shape (c,)
        Candidate ``k`` values in ``[1, K]``, ``K = ⌊n/2⌋ + 1``, strictly increasing, ending at ``K``.
    """
    K = n // 2 + 1
    if candidates == "all" or K <= 8:
        return np.arange(1, K + 1)
    ks = [*range(1, 9)]
    v = 8.0
    while ks[-1] < K:
        v *= GRID_RATIO
        ks.append(min(K, max(ks[-1] + 1, math.ceil(v))))
    return np.asarray(ks, dtype=np.int64)


def noise_shape(d2: np.ndarray, allocation: str) -> np.ndarray:
    """The public divisors ``a_f`` of the kept coefficients (module docstring, allocation).

    Parameters
    ----------
    d2 : ndarray, shape (K,)
        Workload weights ``d_f²`` in ``(0, 1]`` (:func:`workload_weights`).
    allocation : {"workload", "uniform"}

    Returns
    -------
    ndarray, shape (K,)
        ``d_f^{-2/3}`` (``"workload"``: noise scale ``b_f ∝ a_f``) or 1 (``"uniform"``).
    """
    if allocation == "uniform":
        return np.ones_like(d2)
    return d2 ** (-1.0 / 3.0)


def noise_energy(n: int, epsilon2: float, sensitivity: np.ndarray | None = None,
                 d2: np.ndarray | None = None, shape: np.ndarray | None = None) -> np.ndarray:
    """Expected weighted noise energy ``N_k² = Σ_{f<k} d_f² v_f b_f²``, for ``k = 1..K``.

    Parameters
    ----------
    n : int
    epsilon2 : float
        ε of the perturbation.
    sensitivity : ndarray, shape (K,), optional
        ``c_k`` (default :func:`perturbation_sensitivity`, the closed bound for ``a = 1``).
    d2 : ndarray, shape (K,), optional
        Weights ``d_f²`` (default 1: the error of ``x̂`` itself).
    shape : ndarray, shape (K,), optional
        Divisors ``a_f`` (default 1).

    Returns
    -------
    ndarray, shape (K,)
        ``N_k²`` with ``b_f = a_f c_k/ε₂``, ``v_f = 2`` (real-only) or ``8``
        (complex), in squared counts (times ``d²``).
    """
    real_only, _ = coefficient_layout(n)
    c = perturbation_sensitivity(n) if sensitivity is None else np.asarray(sensitivity, dtype=float)
    d2 = np.ones(real_only.size) if d2 is None else np.asarray(d2, dtype=float)
    a = np.ones(real_only.size) if shape is None else np.asarray(shape, dtype=float)
    return (c / epsilon2) ** 2 * np.cumsum(d2 * np.where(real_only, 2.0, 8.0) * a**2)


def selection_sensitivity(n: int, d2: np.ndarray | None = None) -> float:
    """Sensitivity of the selection utility, ``Δu = √(Σ_{f≥1} d_f² w_f / n)`` (module docstring).

    Parameters
    ----------
    n : int
        Number of cells.
    d2 : ndarray, shape (K,), optional
        Weights ``d_f² ≤ 1`` (default 1, the paper's unweighted score).

    Returns
    -------
    float
        ``Δu`` in the utility's units (counts): ``√(1 − 1/n)`` for ``d = 1``;
        ``1.0`` for ``n = 1`` (one candidate, a constant utility: any bound holds).
    """
    _, w = coefficient_layout(n)
    d2 = np.ones(w.size) if d2 is None else np.asarray(d2, dtype=float)
    du = math.sqrt(float(np.sum((d2 * w)[1:])) / n)
    return du if du > 0 else 1.0


def _utilities(x: np.ndarray, n2: np.ndarray, score: str, d2: np.ndarray | None = None) -> np.ndarray:
    _, w = coefficient_layout(x.size)
    weight = w if d2 is None else w * d2
    energy = weight * np.abs(np.fft.rfft(x, norm="ortho")) ** 2
    dropped = np.concatenate([np.cumsum(energy[::-1])[::-1][1:], [0.0]])  # T_k², k = 1..K
    t = np.sqrt(np.maximum(dropped, 0.0))
    if score == "sum":
        return -(t + np.sqrt(n2))
    return -np.sqrt(t**2 + n2)


def _split(epsilon: float, share: float) -> tuple[float, float]:
    """``(ε₁, ε₂)``, ``ε₁ ≈ share·ε``, summing to ``ε`` exactly (the ledger's ``math.fsum``).

    The larger part is rounded, the smaller one is ``ε`` minus it, which is
    exact in floating point (Sterbenz: the larger part lies in ``[ε/2, ε]``).
    """
    big = epsilon * max(share, 1.0 - share)
    small = epsilon - big
    if not (small > 0 and math.fsum([big, small]) == epsilon):  # pragma: no cover - defensive
        raise ValueError(f"cannot split ε = {epsilon!r} at share {share!r} into two positive parts")
    return (small, big) if share <= 0.5 else (big, small)


def _check(data: PrivateData, W: Matrix, noise: NoiseModel, name: str) -> None:
    if not isinstance(noise, Laplace):
        raise registry.NotApplicableError(
            f"{name} uses the Laplace and exponential mechanisms (pure ε-DP); got "
            f"{type(noise).__name__} noise")
    if len(W.domain) != 1 or len(data.domain) != 1:
        raise registry.NotApplicableError(
            f"EFPA is defined for 1D histograms; the workload's domain is {W.domain} "
            f"and the data's shape is {data.domain}")
    if W.n != data.n:
        raise ValueError(f"the workload is over {W.n} cells but the data vector has {data.n}")


def efpa(data: PrivateData, W: Matrix, noise: NoiseModel, rng: np.random.Generator,
         selection_share: float = DEFAULT_SELECTION_SHARE, score: str = "workload",
         allocation: str = "workload", candidates: str = DEFAULT_CANDIDATES) -> registry.Estimate:
    """Run EFPA (Ács, Castelluccia, Chen, ICDM 2012) on a 1D histogram, ε-DP.

    Parameters
    ----------
    data : PrivateData
        Private data vector ``x: (n,)`` (counts) over a 1D domain.
    W : Matrix, shape (m, n)
        Workload: weighs the selection score and the noise allocation
        (``score="workload"``, ``allocation="workload"``); not read otherwise.
    noise : Laplace
        ``noise.epsilon`` is the ε of the whole run.
    rng : numpy.random.Generator or dpexplorer.privacy.OS_CSPRNG
        Source of all randomness: seeded Generator (simulation) or the OS CSPRNG (release).
    selection_share : float
        Fraction of ε for choosing ``k`` (default :data:`DEFAULT_SELECTION_SHARE`;
        the paper: 0.5).
    score : {"workload", "rss", "sum"}
        Utility of keeping ``k`` coefficients: ``−√(T_k² + N_k²)`` with the
        workload's weights (default) or unweighted (``"rss"``, the paper's
        L2 error), or ``−(T_k + N_k)`` unweighted (``"sum"``); module docstring.
    allocation : {"workload", "uniform"}
        Noise scale per kept coefficient: ``∝ d_f^{-2/3}`` (default) or one
        scale for all (the paper).
    candidates : {"geometric", "all"}
        The ``k`` the selection tries: ``1..8`` then ×1.5 steps up to ``K``
        (default) or every ``k`` (the paper); :func:`candidate_counts`.

    Returns
    -------
    Estimate
        ``x_hat``, shape ``(n,)``: the real inverse DFT of the noisy kept
        coefficients (counts; may be negative or fractional).  ``info``:
        ``k`` (kept rfft coefficients, 1..K), ``n_coefficients`` (K),
        ``epsilon_select`` (ε₁), ``epsilon_perturb`` (ε₂),
        ``selection_sensitivity`` (Δu), ``sensitivity`` (``c_k``, L1 of the
        rescaled release), ``noise_scale`` (largest ``b_f``, counts),
        ``noise_scales`` (``b_f`` of every kept coefficient, shape ``(k,)``),
        ``score``, ``allocation`` and ``released`` (number of noisy reals).

    Raises
    ------
    NotApplicableError
        If the workload's domain is not 1D, or the noise is not Laplace.
    ValueError
        For a bad ``selection_share``, ``score``, ``allocation`` or
        ``candidates``, a size mismatch, or a zero workload.
    BudgetExceededError
        If the ledger's budget would be exceeded.
    """
    _check(data, W, noise, "efpa")
    if not (isinstance(selection_share, int | float) and 0.0 < selection_share < 1.0):
        raise ValueError(f"selection_share must be a number in (0, 1), got {selection_share!r}")
    if score not in SCORES:
        raise ValueError(f"score must be one of {SCORES}, got {score!r}")
    if allocation not in ALLOCATIONS:
        raise ValueError(f"allocation must be one of {ALLOCATIONS}, got {allocation!r}")
    if candidates not in CANDIDATES:
        raise ValueError(f"candidates must be one of {CANDIDATES}, got {candidates!r}")

    n = data.n
    eps1, eps2 = _split(noise.epsilon, selection_share)
    weights = workload_weights(W) if "workload" in (score, allocation) else np.ones(n // 2 + 1)
    shape = noise_shape(weights, allocation)
    sens = exact_sensitivity(n, shape)
    d2 = weights if score == "workload" else None
    n2 = noise_energy(n, eps2, sens, d2, shape)
    du = selection_sensitivity(n, d2)
    grid = candidate_counts(n, candidates)
    idx = data.noisy_max(lambda x: _utilities(x, n2, score, d2)[grid - 1], du, eps1, rng,
                         label="efpa: choose the number of coefficients")
    k = int(grid[idx])
    real_only, _ = coefficient_layout(n)
    complex_kept = ~real_only[:k]
    a = shape[:k]
    c_k = float(sens[k - 1])

    def kept(x):
        F = np.fft.rfft(x, norm="ortho")[:k] / a
        return np.concatenate([F.real, F.imag[complex_kept]])

    noisy = data.measure_function(kept, c_k, eps2, rng,
                                  label=f"efpa: perturb {k} Fourier coefficients")
    G = np.zeros(n // 2 + 1, dtype=complex)
    coeffs = noisy[:k].astype(complex)
    coeffs[complex_kept] += 1j * noisy[k:]
    G[:k] = coeffs * a
    x_hat = np.fft.irfft(G, n=n, norm="ortho")
    scales = a * c_k / eps2
    info = {
        "k": int(k),
        "n_coefficients": int(n // 2 + 1),
        "epsilon_select": eps1,
        "epsilon_perturb": eps2,
        "selection_sensitivity": du,
        "sensitivity": c_k,
        "noise_scale": float(scales.max()),
        "noise_scales": scales,
        "score": score,
        "allocation": allocation,
        "released": int(noisy.size),
    }
    return registry.Estimate(x_hat, info)


# ------------------------------------------------------------------ as published (NOT PRIVATE)
#: Laplace scale the phases of :func:`efpa_as_published` pass through (the kernel needs a
#: positive scale; the authors' code adds none).
PUBLISHED_PHASE_SCALE = 1e-12


def published_utilities(x: np.ndarray, epsilon2: float) -> np.ndarray:
    """The authors' score of keeping ``k = 1..K`` coefficients (unnormalised DFT), shape (K,).

    ``−(√(E − E_k) + √2·kept_k/ε₂)`` with ``E = Σ_f w_f |F_f|²`` and ``E_k``
    its part on the kept coefficients, ``F = rfft(x)`` unnormalised and
    ``kept_k = 2k − 1`` real numbers (``n`` for ``k = K``, even ``n``).
    Not private with sensitivity 1 (module docstring, point 3).

    Parameters
    ----------
    x : ndarray, shape (n,)
        Counts.
    epsilon2 : float
        ε of the perturbation step.

    Returns
    -------
    ndarray, shape (K,)
        The score of ``k = 1..K`` (its dropped-energy term is ``√n`` times the orthonormal one).
    """
    n = x.size
    _, w = coefficient_layout(n)
    energy = w * np.abs(np.fft.rfft(x)) ** 2
    dropped = np.concatenate([np.cumsum(energy[::-1])[::-1][1:], [0.0]])
    return -(np.sqrt(np.maximum(dropped, 0.0)) + math.sqrt(2.0) * np.cumsum(w) / epsilon2)


def efpa_as_published(data: PrivateData, W: Matrix, noise: NoiseModel,
                      rng: np.random.Generator) -> registry.Estimate:
    """EFPA as the authors' code runs it -- NOT ε-differentially private.

    The DPBench / DAWA-experiments implementation (module docstring): ε in
    halves; ``k`` by the kernel's noisy max on :func:`published_utilities`
    with sensitivity 1 (the authors draw the exponential mechanism; the
    kernel's permute-and-flip has the same claimed guarantee); then
    ``Laplace(√kept/ε₂)`` on the **magnitude** of each kept unnormalised
    coefficient, its **phase** kept (passed through the kernel with noise of
    scale :data:`PUBLISHED_PHASE_SCALE`, i.e. exactly to float precision);
    ``x̂ = irfft``.  A negative noisy magnitude flips the phase by π, as in
    the authors' ``cmath.rect``.  The ledger records the ε the authors
    claim, which is what an audit (:func:`dpexplorer.audit.audit`) checks it
    against.  Kept only so that the published accuracy can be reproduced,
    compared and audited; the registered ``efpa_as_published`` is refused by
    :func:`dpexplorer.release`.

    Parameters
    ----------
    data, W, noise, rng
        As :func:`efpa` (``W`` is not read).

    Returns
    -------
    Estimate
        ``x_hat``, shape ``(n,)``; ``info``: ``k``, ``n_coefficients``,
        ``epsilon_select``, ``epsilon_perturb``, ``noise_scale`` (``√kept/ε₂``,
        unnormalised units) and ``kept`` (real numbers the authors count).

    Raises
    ------
    NotApplicableError
        If the domain is not 1D or the noise is not Laplace.
    ValueError
        For a size mismatch.
    """
    _check(data, W, noise, "efpa_as_published")
    n = data.n
    K = n // 2 + 1
    eps1, eps2 = _split(noise.epsilon, 0.5)
    idx = data.noisy_max(lambda x: published_utilities(x, eps2), 1.0, eps1, rng,
                         label="efpa_as_published: choose k with sensitivity 1, NOT ε₁-DP")
    k = idx + 1
    _, w = coefficient_layout(n)
    kept_reals = float(np.sum(w[:k]))
    lam = math.sqrt(kept_reals) / eps2

    def polar(x):
        F = np.fft.rfft(x)[:k]
        return np.concatenate([np.abs(F), np.angle(F)])

    scale = np.concatenate([np.full(k, lam), np.full(k, PUBLISHED_PHASE_SCALE)])

    def rebuild(noisy):
        G = np.zeros(K, dtype=complex)
        G[:k] = noisy[:k] * np.exp(1j * noisy[k:])
        return np.fft.irfft(G, n=n)

    x_hat = data.noisy_optimum(
        polar, scale, rebuild, eps2, rng,
        label=f"efpa_as_published: Laplace on {k} magnitudes, phases exact, NOT ε₂-DP",
        sensitivity=math.sqrt(kept_reals))
    info = {"k": int(k), "n_coefficients": int(K), "epsilon_select": eps1,
            "epsilon_perturb": eps2, "noise_scale": lam, "kept": int(kept_reals)}
    return registry.Estimate(x_hat, info)


def _runner(data, W, noise, rng, **params):
    return efpa(data, W, noise, rng, **params)


def _published_runner(data, W, noise, rng, **params):
    return efpa_as_published(data, W, noise, rng, **params)


if "efpa" not in registry.REGISTRY:
    registry.register(registry.Mechanism(
        "efpa", "EFPA", None,
        "Keep the k lowest DFT coefficients (k by the exponential mechanism on the workload's "
        "error), perturb them with Laplace noise at their exact sensitivity, invert (1D).",
        "Ács, Castelluccia, Chen, ICDM 2012 (EFPA)",
        params={"selection_share": DEFAULT_SELECTION_SHARE, "score": "workload",
                "allocation": "workload", "candidates": DEFAULT_CANDIDATES},
        data_dependent=True, runner=_runner, audit=registry.AuditSpec("efpa"),
    ))

if "efpa_as_published" not in registry.REGISTRY:
    registry.register(registry.Mechanism(
        "efpa_as_published", "EFPA as published (NOT PRIVATE)", None,
        "NOT PRIVATE, for study and audits only: EFPA as the authors' code runs it (noise on the "
        "magnitudes of the unnormalised DFT only, exact phases, selection with sensitivity 1), "
        "which reproduces the published accuracy but is not ε-DP.",
        "Ács, Castelluccia, Chen, ICDM 2012 (EFPA), as in the authors' code in DPBench",
        params={}, data_dependent=True, runner=_published_runner, private=False,
        audit=registry.AuditSpec("efpa"),
    ))
