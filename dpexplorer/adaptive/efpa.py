"""EFPA: the enhanced Fourier perturbation algorithm (1D histograms).

Ács, Castelluccia, Chen, "Differentially private histogram publishing
through lossy compression", ICDM 2012 (EFPA, their improvement of Rastogi &
Nath's Fourier Perturbation Algorithm, SIGMOD 2010).  The histogram is
compressed to its ``k`` lowest-frequency DFT coefficients; ``k`` is chosen
privately with the exponential mechanism (half of ε), the kept coefficients
are perturbed with Laplace noise (the other half), and the inverse DFT gives
the estimate.

Conventions and derivations (written out here because they fix every noise
scale; the paper's own constants differ with its DFT normalisation):

* **Transform.**  Orthonormal real DFT, ``F = rfft(x, norm="ortho")``:
  ``F_f = n^{-1/2} Σ_j x_j e^{−2πi jf/n}`` for ``f = 0..K−1``,
  ``K = ⌊n/2⌋ + 1``.  ``x`` is real, so ``F_{n−f} = conj(F_f)`` and these
  ``K`` coefficients determine the spectrum.  ``F_0`` (and ``F_{n/2}`` for
  even ``n``) are real ("real-only"); the others are complex.  Parseval:
  ``‖x‖₂² = Σ_f w_f |F_f|²`` with ``w_f = 1`` for real-only and ``2`` for
  complex coefficients (each stands for itself and its mirror).
* **Candidates.**  Keep coefficients ``0..k−1``, ``k ∈ {1, ..., K}``
  (``k = K`` keeps everything: no compression error).  The released vector
  holds ``Re F_f`` for all kept ``f`` and ``Im F_f`` for the kept complex
  ones (the imaginary parts of real-only coefficients are 0 for every data
  set, so they are not released).
* **Perturbation sensitivity.**  Adding or removing one record changes one
  ``x_j`` by 1, hence every ``F_f`` by ``n^{-1/2} e^{−2πi jf/n}``: a real
  change of modulus ``n^{-1/2}`` for a real-only coefficient, and a complex
  change of modulus ``n^{-1/2}`` for the others, whose real and imaginary
  parts sum in absolute value to ``n^{-1/2}(|cos θ| + |sin θ|) ≤ √2·n^{-1/2}``.
  So the released vector's L1 sensitivity is at most
  ``Δ_k = (r_k + √2·c_k)/√n`` with ``r_k``/``c_k`` the numbers of kept
  real-only/complex coefficients.  (In the unnormalised DFT each coefficient
  moves by a unit-modulus number and the same bound reads ``r_k + √2·c_k``.)
  The bound is attained up to a factor ≤ √2 (cell ``j = 0`` gives
  ``k/√n``); correctness is what matters.  Each released number gets
  ``Laplace(λ_k)``, ``λ_k = Δ_k/ε₂`` (Laplace mechanism, Dwork et al. 2006).
* **Expected error of a candidate.**  Truncation error and noise are
  orthogonal (they live on disjoint frequencies), so
  ``E‖x̂ − x‖₂² = A_k² + N_k²`` with ``A_k² = Σ_{f≥k} w_f|F_f|²`` (dropped
  energy) and ``N_k² = λ_k²·Σ_{f<k} v_f`` where ``v_f = 2`` for real-only
  (one Laplace variance ``2λ²``) and ``v_f = 8`` for complex coefficients
  (two parts, each ``2λ²``, counted for ``f`` and its mirror).  This is the
  paper's score -- compression error plus perturbation error of keeping
  ``k`` coefficients -- with this module's sensitivities.
* **Selection sensitivity.**  The utility must have bounded sensitivity, so
  it uses norms, not squared norms: ``u(k) = −√(A_k² + N_k²)`` (default,
  ``score="rss"``) or ``u(k) = −(A_k + N_k)`` (``score="sum"``, the
  triangle-inequality form).  ``A_k = ‖(I − P_k)x‖₂`` with ``P_k`` the
  orthogonal projection on the kept frequencies, so a one-record change
  moves ``A_k`` by at most ``‖(I − P_k)e_j‖₂ ≤ 1``; ``N_k`` does not depend
  on the data and ``t ↦ √(t² + c²)`` is 1-Lipschitz.  Hence ``Δu = 1``.  The
  paper picks ``k`` with the exponential mechanism, probability
  ``∝ exp(ε₁ u(k) / 2)`` (McSherry & Talwar 2007); we pick it with
  report-noisy-max with ``Exponential(2/ε₁)`` noise, which is permute-and-flip
  (McKenna & Sheldon 2020, Thm 2): the same ε₁-DP guarantee, never less
  accurate, and the selection opendp samples in release mode.
* **Budget.**  ``ε₁ = selection_share·ε`` (default ½, as in the paper) for
  the selection and ``ε₂ = ε − ε₁`` for the perturbation; sequential
  composition gives ε for the run.

Both private steps go through :class:`~dpexplorer.privacy.PrivateData`
(``noisy_max`` and ``measure_function``), which records them.
"""

from __future__ import annotations

import math

import numpy as np

from ..core import registry
from ..privacy import PrivateData
from ..privacy.noise import Laplace, NoiseModel
from ..queries.matrix import Matrix
from .mwem import split_epsilon

__all__ = ["efpa", "coefficient_layout", "perturbation_sensitivity", "noise_energy",
           "SELECTION_SENSITIVITY"]

#: Sensitivity Δu of the selection utility ``−√(A_k² + N_k²)`` (module docstring).
SELECTION_SENSITIVITY = 1.0


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
    """L1 sensitivity ``Δ_k`` of the kept coefficients, for ``k = 1..K`` (module docstring).

    Returns
    -------
    ndarray, shape (K,)
        Entry ``k−1`` is ``(r_k + √2·c_k)/√n``.
    """
    real_only, _ = coefficient_layout(n)
    return np.cumsum(np.where(real_only, 1.0, math.sqrt(2.0))) / math.sqrt(n)


def noise_energy(n: int, epsilon2: float) -> np.ndarray:
    """Expected ``‖x̂ − P_k x‖₂²`` from the Laplace noise, ``N_k²``, for ``k = 1..K``.

    Returns
    -------
    ndarray, shape (K,)
        ``λ_k² Σ_{f<k} v_f`` with ``λ_k = Δ_k/ε₂``, ``v_f = 2`` (real-only)
        or ``8`` (complex), in squared counts.
    """
    real_only, _ = coefficient_layout(n)
    lam = perturbation_sensitivity(n) / epsilon2
    return lam**2 * np.cumsum(np.where(real_only, 2.0, 8.0))


def _utilities(x: np.ndarray, n2: np.ndarray, score: str) -> np.ndarray:
    _, w = coefficient_layout(x.size)
    energy = w * np.abs(np.fft.rfft(x, norm="ortho")) ** 2
    dropped = np.concatenate([np.cumsum(energy[::-1])[::-1][1:], [0.0]])  # A_k², k = 1..K
    a = np.sqrt(np.maximum(dropped, 0.0))
    if score == "rss":
        return -np.sqrt(a**2 + n2)
    return -(a + np.sqrt(n2))


def efpa(data: PrivateData, W: Matrix, noise: NoiseModel, rng: np.random.Generator,
         selection_share: float = 0.5, score: str = "rss") -> registry.Estimate:
    """Run EFPA (Ács, Castelluccia, Chen, ICDM 2012) on a 1D histogram.

    Parameters
    ----------
    data : PrivateData
        Private data vector ``x: (n,)`` (counts) over a 1D domain.
    W : Matrix, shape (m, n)
        Workload; only its domain is used (EFPA is workload-independent).
    noise : Laplace
        ``noise.epsilon`` is the ε of the whole run.
    rng : numpy.random.Generator or dpexplorer.privacy.OS_CSPRNG
        Source of all randomness: seeded Generator (simulation) or the OS CSPRNG (release).
    selection_share : float
        Fraction of ε for choosing ``k`` (default 0.5: ``ε₁ = ε₂ = ε/2``).
    score : {"rss", "sum"}
        Utility of keeping ``k`` coefficients: ``−√(A_k² + N_k²)`` (default)
        or ``−(A_k + N_k)``; both have sensitivity 1 (module docstring).

    Returns
    -------
    Estimate
        ``x_hat``, shape ``(n,)``: the real inverse DFT of the noisy kept
        coefficients (counts; may be negative or fractional).  ``info``:
        ``k`` (kept rfft coefficients, 1..K), ``n_coefficients`` (K),
        ``epsilon_select`` (ε₁), ``epsilon_perturb`` (ε₂), ``sensitivity``
        (Δ_k), ``noise_scale`` (λ_k = Δ_k/ε₂) and ``released`` (number of
        noisy reals).

    Raises
    ------
    NotApplicableError
        If the workload's domain is not 1D, or the noise is not Laplace.
    ValueError
        For a bad ``selection_share`` or ``score``, or a size mismatch.
    BudgetExceededError
        If the ledger's budget would be exceeded.
    """
    if not isinstance(noise, Laplace):
        raise registry.NotApplicableError(
            f"efpa uses the Laplace and exponential mechanisms (pure ε-DP); got "
            f"{type(noise).__name__} noise")
    if len(W.domain) != 1 or len(data.domain) != 1:
        raise registry.NotApplicableError(
            f"EFPA is defined for 1D histograms; the workload's domain is {W.domain} "
            f"and the data's shape is {data.domain}")
    if W.n != data.n:
        raise ValueError(f"the workload is over {W.n} cells but the data vector has {data.n}")
    if not (0.0 < selection_share < 1.0):
        raise ValueError(f"selection_share must be in (0, 1), got {selection_share!r}")
    if score not in ("rss", "sum"):
        raise ValueError(f"score must be 'rss' or 'sum', got {score!r}")

    n = data.n
    eps1, eps2 = split_epsilon(noise.epsilon, [selection_share, 1.0 - selection_share])
    n2 = noise_energy(n, eps2)
    idx = data.noisy_max(lambda x: _utilities(x, n2, score), SELECTION_SENSITIVITY,
                         eps1, rng, label="efpa: choose the number of coefficients")
    k = idx + 1
    real_only, _ = coefficient_layout(n)
    complex_kept = ~real_only[:k]
    sens = float(perturbation_sensitivity(n)[k - 1])

    def kept(x):
        F = np.fft.rfft(x, norm="ortho")[:k]
        return np.concatenate([F.real, F.imag[complex_kept]])

    noisy = data.measure_function(kept, sens, eps2, rng,
                                  label=f"efpa: perturb {k} Fourier coefficients")
    G = np.zeros(n // 2 + 1, dtype=complex)
    coeffs = noisy[:k].astype(complex)
    coeffs[complex_kept] += 1j * noisy[k:]
    G[:k] = coeffs
    x_hat = np.fft.irfft(G, n=n, norm="ortho")
    info = {
        "k": int(k),
        "n_coefficients": int(n // 2 + 1),
        "epsilon_select": eps1,
        "epsilon_perturb": eps2,
        "sensitivity": sens,
        "noise_scale": sens / eps2,
        "released": int(noisy.size),
    }
    return registry.Estimate(x_hat, info)


def _runner(data, W, noise, rng, **params):
    return efpa(data, W, noise, rng, **params)


if "efpa" not in registry.REGISTRY:
    registry.register(registry.Mechanism(
        "efpa", "EFPA", None,
        "Keep the k lowest DFT coefficients (k by the exponential mechanism), perturb them "
        "with Laplace noise, invert (1D).",
        "Ács, Castelluccia, Chen, ICDM 2012 (EFPA)",
        params={"selection_share": 0.5, "score": "rss"},
        data_dependent=True, runner=_runner, audit=registry.AuditSpec("efpa"),
    ))
