"""dpexplorer: answer batches of linear counting queries under differential privacy.

The engine (pure numpy/scipy/pandas) behind the dpexplorer app::

    import dpexplorer as dpx

    W = dpx.workloads.all_range(256)
    print(dpx.compare(W, dpx.Laplace(1.0)))

Layers, lowest first; a module imports only from its own layer or below
(``tests/test_layers.py`` checks it):

==================  ==========================================================
``queries/``        query matrices, workload builders, specs
``privacy/``        the kernel (the only holder of ``x``), noise models,
                    samplers, accounting, the ledger
``core/``           the mechanism registry, analytic error and SVD bound,
                    RECONSTRUCT, optimisation results
``strategies/``     data-independent strategies (classic, HDMM, marginals,
                    Eigen-Design, Fourier, ResidualPlanner)
``adaptive/``       data-dependent mechanisms (DAWA, MWEM, EFPA, Uniform)
``sums/``           sum queries on numerical attributes
``streaming/``      continual counting: running totals released step by
                    step (matrix factorisations, online trees)
top level           ``mechanism`` (release, simulate, run), ``compare``,
                    ``accuracy`` (ε for an error target), ``evaluate``,
                    ``datasets``, ``audit`` (lower bounds on ε), ``lessons``
                    (the numbers of the guided lessons)
``ui/``             the Panel app (imports only this public API)
==================  ==========================================================

Importing the package registers every mechanism.  The modules are also
reachable by their short names (``dpx.matrix``, ``dpx.dawa``, ``dpx.marginals``,
``dpx.thresholds``, ...).
"""

# the layers, lowest first (importing them registers every mechanism), then the top level
from . import queries, privacy, core, strategies, adaptive, sums, streaming  # noqa: I001
from . import datasets, evaluate, mechanism
from . import accuracy, docs, figures, lessons
from . import audit  # noqa: I001  (after evaluate and mechanism, which it runs)
from .accuracy import accuracy_sentence, describe_privacy, epsilon_for, epsilon_table
from .adaptive import dawa, efpa, hilbert, mwem, partition, uniform
from .compare import StrategyCache, compare
from .core import error, inference, optimization, registry, spectra
from .core.error import UnsupportedWorkloadError, per_query_rmse, rmse, svd_bound
from .mechanism import Release, inferences, reconstruct, release, simulate
from .privacy import (OS_CSPRNG, Budget, BudgetExceededError, Gaussian, Laplace, PrivacyLedger,
                      PrivateData, accounting, discover_domain, noise, samplers)
from .queries import (Attribute, Domain, Table, domain, gram_ops, intervals, limits, matrix, spec,
                      trees, workloads)
from .queries.limits import LimitExceededError
from .queries.matrix import MatrixTooLargeError
from .strategies import eigen_design, fourier, hdmm, kron_stack, marginals, residual, templates
from .sums import thresholds

__version__ = "0.1.0"

__all__ = [
    # layers
    "queries", "privacy", "core", "strategies", "adaptive", "sums", "streaming",
    # modules by their short names
    "limits", "matrix", "spec", "workloads", "gram_ops", "intervals", "trees", "accounting", "noise",
    "samplers", "error", "spectra", "inference", "optimization", "registry", "templates", "kron_stack",
    "hdmm", "marginals", "eigen_design", "fourier",
    "residual", "dawa", "partition", "hilbert", "mwem", "efpa", "uniform", "thresholds",
    "datasets", "evaluate", "mechanism", "accuracy", "docs", "figures", "lessons", "audit",
    # the everyday API
    "compare", "StrategyCache", "rmse", "per_query_rmse", "svd_bound", "UnsupportedWorkloadError",
    "MatrixTooLargeError", "LimitExceededError", "Release", "release", "simulate", "reconstruct",
    "inferences",
    "Laplace", "Gaussian", "PrivacyLedger", "PrivateData", "BudgetExceededError", "Budget", "OS_CSPRNG",
    "domain", "Attribute", "Domain", "Table", "discover_domain",
    # accuracy first
    "epsilon_for", "epsilon_table", "describe_privacy", "accuracy_sentence",
]
