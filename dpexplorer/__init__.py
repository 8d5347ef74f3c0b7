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
spectra     closed-form and structured spectra of range workloads (fast SVD bounds)
strategies  classic strategies (identity, H2, HB, wavelet, GreedyH)
registry    the mechanism registry
compare     side-by-side analytic comparison
privacy     the privacy boundary: private data and the budget ledger
mechanism   releases: MEASURE, RECONSTRUCT, answers
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
sums, thresholds        sum queries: truncation, SVT thresholds, SQM/Identity/Workload/TiMM/TaMM
"""

from . import datasets, error, matrix, mechanism, noise, privacy, registry, spec, strategies, workloads
from . import dawa, efpa, hilbert, mwem, partition, uniform  # noqa: F401  (register mechanisms)
from . import optimization, templates, marginals, hdmm, eigen_design, fourier  # noqa: F401
from . import sums  # noqa: F401
from . import spectra  # noqa: F401  (structured SVD bounds)
from .compare import StrategyCache, compare
from .error import UnsupportedWorkloadError, per_query_rmse, rmse, svd_bound
from .matrix import MatrixTooLargeError
from .mechanism import Release, reconstruct, release
from .noise import Gaussian, Laplace
from .privacy import BudgetExceededError, PrivacyLedger, PrivateData

__version__ = "0.1.0"

__all__ = [
    "datasets", "error", "matrix", "mechanism", "noise", "privacy", "registry", "spec",
    "strategies", "workloads", "compare", "StrategyCache", "rmse", "per_query_rmse",
    "svd_bound", "UnsupportedWorkloadError", "MatrixTooLargeError", "Release", "release",
    "reconstruct", "Laplace", "Gaussian", "PrivacyLedger", "PrivateData", "BudgetExceededError",
]

