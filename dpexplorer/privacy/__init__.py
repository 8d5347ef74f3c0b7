"""The privacy layer: the only code that touches private data, and what it spends.

==============  ===============================================================
``kernel``      :class:`PrivateData`, the only holder of ``x``: MEASURE, noisy
                statistics, report-noisy-max, sparse vector, noisy optimum
``ledger``      :class:`Spend`, :class:`PrivacyLedger` (ε, δ, ρ; budget checked
                before drawing), :class:`BudgetExceededError`
``accounting``  zCDP ρ of Laplace and Gaussian steps, the ρ → (ε, δ) conversion,
                :class:`Budget`
``noise``       the noise models ``Laplace(ε)`` and ``Gaussian(ε, δ)``
``samplers``    seeded numpy (simulation) or OS CSPRNG via opendp (release)
``tables``      :class:`PrivateTable`: record tables, marginals counted by group-by
``stream``      :class:`PrivateStream`: counts arriving one step at a time, released
                as they come (continual counting)
``discovery``   :func:`discover_domain`: a table's public domain found privately
==============  ===============================================================

Imports only :mod:`dpexplorer.queries` below it.
"""

from . import accounting, discovery, kernel, ledger, noise, samplers, stream, tables
from .accounting import Budget
from .discovery import discover_domain
from .kernel import PrivateData, check_shape, noise_sampler, validate_counts, variance_factor
from .ledger import RELEASE, SIMULATION, BudgetExceededError, PrivacyLedger, Spend
from .noise import Gaussian, Laplace, NoiseModel, check_noise
from .samplers import CSPRNG, OS_CSPRNG
from .stream import PrivateStream
from .tables import PrivateTable

__all__ = ["PrivateData", "PrivateTable", "PrivateStream", "stream", "tables", "discovery", "discover_domain", "PrivacyLedger", "Spend", "BudgetExceededError", "Budget", "Laplace",
           "Gaussian", "NoiseModel", "OS_CSPRNG", "CSPRNG", "SIMULATION", "RELEASE",
           "validate_counts", "check_shape", "check_noise", "noise_sampler", "variance_factor", "accounting", "kernel", "ledger",
           "noise", "samplers"]
