"""Data-independent strategies: SELECT of the matrix mechanism.

================  ============================================================
``classic``       identity, workload, hierarchical/H2, HB, Haar wavelet, GreedyH
``templates``     HDMM's OPT0 (p-Identity), OPT⊗ and OPT+ (``kron_stack``)
``hdmm``          the HDMM meta-optimiser
``marginals``     implicit marginal algebra, ``MarginalStrategy``, OPT_M, DataCube
``eigen_design``  Eigen-Design (Li & Miklau 2012)
``fourier``       the Fourier strategy for marginals
``residual``      ResidualPlanner (optimal Gaussian marginals)
================  ============================================================

Every module registers its mechanisms in :mod:`dpexplorer.core.registry` when
imported.  The classic builders are re-exported here (``strategies.h2(n)``).
Imports only the layers below: queries, privacy, core.
"""

# registration order = the order pages list and run them (optimisers: cheapest first)
from . import classic, kron_stack, templates, marginals, hdmm, eigen_design, fourier, residual  # noqa: I001
from .classic import *  # noqa: F403  (identity, hierarchical, h2, hb, wavelet, greedy_h, ...)
from .classic import __all__ as _classic

__all__ = [*_classic, "classic", "templates", "kron_stack", "hdmm", "marginals", "eigen_design",
           "fourier", "residual"]
