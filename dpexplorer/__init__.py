"""dpexplorer: answer batches of linear counting queries under differential privacy.

The engine (pure numpy/scipy/pandas) behind the dpexplorer app::

    import dpexplorer as dpx

    W = dpx.workloads.all_range(256)
    print(dpx.compare(W, dpx.Laplace(1.0)))

Modules
-------
matrix      implicit query matrices (Identity, Prefix, AllRange, Kronecker, ...)
workloads   workload builders (ranges, prefixes, marginals, unions, products)
spec        declarative workload specs (JSON/YAML)
noise       Laplace and Gaussian noise models
error       analytic TSE/RMSE of the matrix mechanism, SVD bound
strategies  classic strategies (identity, H2, HB, wavelet, GreedyH)
registry    the mechanism registry
compare     side-by-side analytic comparison
privacy     the privacy boundary: private data, the ledger and its budget
accounting  zCDP ρ, pure ε and (ε, δ) composition and conversions; budgets
samplers    simulation (seeded numpy) and release (OS CSPRNG via opendp) noise
mechanism   releases and simulations: MEASURE, RECONSTRUCT, answers, intervals
datasets    DPBench, CSV/.npy and bundled bokeh-sampledata histograms
partition   bucket costs, least-cost partitions, uniform expansion (DAWA Sec. 3)
dawa        DAWA and its Partition+X variants (data-dependent)
mwem, efpa, uniform   data-dependent competitors
evaluate    empirical evaluation over datasets, workloads, ε and trials
optimization  OptimizationResult and progress reporting of the strategy optimisers
templates   HDMM OPT0, OPT⊗, OPT+ (kron_stack: the stacked OPT+ strategy)
marginals   implicit marginal algebra, MarginalStrategy, SVD bound of marginals, OPT_M, DataCube
hdmm        the HDMM meta-optimiser
eigen_design, fourier   Eigen-Design (Li & Miklau 2012) and the Fourier strategy
residual    ResidualPlanner (Xiao et al. 2023): optimal Gaussian noise for marginals, max-variance objective
sums, thresholds        sum queries: truncation, SVT thresholds, SQM/Identity/Workload/TiMM/TaMM
"""

from .privacy import accounting, samplers
from . import datasets, mechanism
from .strategies import classic as strategies
from .core import error, registry
from .privacy import noise, kernel as privacy
from .queries import matrix, spec, workloads
from .adaptive import dawa, efpa, hilbert, mwem, partition, uniform  # noqa: F401  (register mechanisms)
from .core import optimization
from .strategies import templates, marginals, hdmm, eigen_design, fourier  # noqa: F401
from .sums import mechanisms as sums  # noqa: F401
from .strategies import residual  # noqa: F401  (registers residual_planner)
from .compare import StrategyCache, compare
from .core.error import UnsupportedWorkloadError, per_query_rmse, rmse, svd_bound
from .queries.matrix import MatrixTooLargeError
from .privacy.accounting import Budget
from .mechanism import Release, reconstruct, release, simulate
from .privacy.noise import Gaussian, Laplace
from .privacy.kernel import OS_CSPRNG, BudgetExceededError, PrivacyLedger, PrivateData

__version__ = "0.1.0"

__all__ = [
    "datasets", "error", "matrix", "mechanism", "noise", "privacy", "registry", "spec",
    "strategies", "workloads", "residual", "compare", "StrategyCache", "rmse", "per_query_rmse",
    "svd_bound", "UnsupportedWorkloadError", "MatrixTooLargeError", "Release", "release",
    "reconstruct", "Laplace", "Gaussian", "PrivacyLedger", "PrivateData", "BudgetExceededError",
    "simulate", "Budget", "OS_CSPRNG", "accounting", "samplers",
]

