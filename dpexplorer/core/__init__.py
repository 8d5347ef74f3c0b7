"""What every mechanism family builds on.

================  ============================================================
``registry``      the mechanism registry: :class:`Mechanism`, :class:`Estimate`,
                  ``register``/``get``/``names``, ``NotApplicableError``
``error``         the matrix mechanism's analytic error (TSE, RMSE, per query)
                  and the SVD lower bound
``spectra``       closed-form and structured spectra of range workloads: the
                  SVD bound without an ``n × n`` eigendecomposition
``reconstruct``   RECONSTRUCT: least squares ``x̂ = A⁺ y`` for any strategy
``inference``     the inference as a choice: least squares or non-negative
                  least squares, and the parametric bootstrap of the noise
``confidence``    interval half-widths of the answers from their analytic error
``optimization``  results and progress reporting of the strategy optimisers
``parallel``      BLAS thread limits for long numerical runs
================  ============================================================

Imports only :mod:`dpexplorer.queries` and :mod:`dpexplorer.privacy` (noise
models) below it; the families above import it.
"""

from . import confidence, error, optimization, parallel, reconstruct, registry, spectra  # spectra: SVD bound
from . import inference  # after reconstruct, which it builds on

__all__ = ["confidence", "error", "inference", "optimization", "parallel", "reconstruct", "registry",
           "spectra"]
