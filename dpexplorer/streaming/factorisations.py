"""Lower-triangular Toeplitz factorisations of the running total, registered as strategies.

A factorisation ``L = B C`` of the prefix matrix with ``B`` and ``C``
lower-triangular gives a streaming release: measure ``C x`` with noise, one
row per step, and publish ``B (C x + z)`` -- row ``t`` of ``B`` uses the
measurements up to ``t`` only.  As a strategy of the matrix mechanism ``A =
C`` is square and invertible, so least squares *is* ``B y`` with ``B = L
C⁻¹``: the registry's analytic error (``dpexplorer/docs/matrix_mechanism.md``)
is the streaming error, and the mechanism is *online*.

``toeplitz_sqrt``: ``B = C = L^{1/2}``, first column ``f_k = binom(2k, k) /
4^k`` (Fichtenberger, Henzinger & Upadhyay, "Constant matters: fine-grained
error bound on differentially private continual observation", ICML 2023;
Henzinger, Upadhyay & Upadhyay, "Almost tight error bounds on
differentially private continual counting", SODA 2023).  Under
Gaussian noise its per-step variance is ``σ² · Σ_{j≤t} f_j² · Σ_{j<T}
f_j²`` (``Δ₂(C)² = Σ_{j<T} f_j²``, the norm of the first column); its
largest per-step variance grows as ``((ln T)/π)²`` in units of σ², as the
best factorisation's does (:mod:`dpexplorer.streaming.bounds`).
"""

from __future__ import annotations

from ..core import registry
from ..privacy.noise import NoiseModel
from ..queries.matrix import Matrix
from ..queries.toeplitz import LowerToeplitz, sqrt_prefix_column
from . import workload

__all__ = ["toeplitz_sqrt"]


def toeplitz_sqrt(T: int) -> LowerToeplitz:
    """The square root ``C = L^{1/2}`` of the ``T × T`` prefix matrix, shape ``(T, T)``.

    Lower-triangular Toeplitz with first column ``f_k = binom(2k, k) / 4^k``
    (:func:`dpexplorer.queries.toeplitz.sqrt_prefix_column`); ``C C = L``.
    Source: Fichtenberger, Henzinger & Upadhyay, ICML 2023.

    Raises
    ------
    ValueError
        If ``T`` is not a positive whole number (or is above the ``cells`` limit).
    """
    return LowerToeplitz(sqrt_prefix_column(T), name="toeplitz_sqrt")


def _build_toeplitz_sqrt(W: Matrix, noise: NoiseModel) -> Matrix:
    return toeplitz_sqrt(workload.steps(W))


registry.register(registry.Mechanism(
    "toeplitz_sqrt", "√L (Toeplitz)", _build_toeplitz_sqrt,
    "Square root of the running-total matrix: L = C·C, both lower-triangular Toeplitz (online).",
    "Fichtenberger, Henzinger & Upadhyay, ICML 2023; Henzinger, Upadhyay & Upadhyay, "
    "SODA 2023; docs: continual",
    scope=workload.scope, structured_1d=True, online=True,
    audit=registry.AuditSpec(workload="prefix", cells=8, noise="gaussian")))
