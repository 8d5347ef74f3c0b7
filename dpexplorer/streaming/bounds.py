"""Lower bounds on the error of continual counting.

The matrix mechanism answers the running total ``L: (T, T)`` through a
factorisation ``L = B A`` (``B = L A⁺`` under least squares, or the
strategy's own decoder); the answer at step ``t`` has variance ``v ·
Δ(A)² · ‖b_t‖²`` with ``b_t`` row ``t`` of ``B``.  The largest of these,
minimised over every factorisation, is ``v · γ₂(L)²`` with ``γ₂(L) = min_{L
= BA} max_t ‖b_t‖₂ · max_s ‖a_s‖₂`` the factorisation norm of ``L``.

Matoušek, Nikolov & Talwar ("Factorization norms and hereditary
discrepancy", IMRN 2020) prove ``γ₂(L) ≥ (2 + ln((2T + 1)/3)) / π ≈ 0.507 +
ln(T)/π`` for every ``T``: the closed form used here.  Henzinger, Kalinin &
Upadhyay ("Normalized square root: sharper matrix factorization bounds for
differentially private continual counting", 2025) sharpen the constant to
``0.701 + ln(T)/π + o(1)`` with an ``o(1)`` that has no explicit form, so it
is not used.  The square-root factorisation (:func:`dpexplorer.streaming.toeplitz_sqrt`)
is within an additive constant of this bound, ``Σ_{j<T} f_j² = ln(T)/π +
O(1)`` (Fichtenberger, Henzinger & Upadhyay, ICML 2023).

Under Laplace noise (L1 sensitivity, ``v = 2/ε²``) the bound holds with the
same ``v``: ``Δ₁(A) ≥ Δ₂(A)``.  The SVD bound (:func:`dpexplorer.svd_bound`)
bounds the *mean* squared error instead; both are shown by the explorer.
"""

from __future__ import annotations

import math

from ..privacy.noise import NoiseModel, check_noise
from ..queries.matrix import _check_cells

__all__ = ["gamma2_lower_bound", "max_std_lower_bound"]


def gamma2_lower_bound(T: int) -> float:
    """``(2 + ln((2T + 1)/3)) / π ≤ γ₂(L)`` for the ``T × T`` running-total matrix ``L``.

    Source: Matoušek, Nikolov & Talwar, IMRN 2020.  Unitless (standard
    deviations per unit of noise and sensitivity).

    Raises
    ------
    ValueError
        If ``T`` is not a positive whole number within the ``cells`` limit.
    """
    T = _check_cells(T, "T (the number of steps)")
    return (2.0 + math.log((2 * T + 1) / 3)) / math.pi


def max_std_lower_bound(T: int, noise: NoiseModel) -> float:
    """Lower bound on the largest per-step standard deviation of any factorisation, in counts.

    ``sqrt(v) · γ₂-bound(T)`` (:func:`gamma2_lower_bound`) for the running
    total over ``T`` steps under ``noise`` (``v`` its variance per unit
    sensitivity): no strategy of the matrix mechanism, online or not, has a
    smaller worst-step error.

    Raises
    ------
    TypeError
        If ``noise`` is not a noise model.
    ValueError
        If ``T`` is not a positive whole number within the ``cells`` limit.
    """
    check_noise(noise)
    return math.sqrt(noise.variance_per_unit) * gamma2_lower_bound(T)
