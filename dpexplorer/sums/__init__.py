"""Sum queries on numerical attributes (Wu et al. 2019).

``mechanisms``  sum workloads, truncation, SQM/Identity/Workload/TiMM/TaMM,
                isotonic post-processing, evaluation (re-exported here:
                ``dpx.sums.run``, ``dpx.sums.prefix_sums``, ...)
``thresholds``  the truncation threshold τ: given, none, or chosen privately
                with the sparse vector technique
``study``       a simulation study on one bucketed attribute: trials, τ curve,
                small/large query table (what the explorer's Sum queries page shows)

Imports the layers below (queries, privacy, core); strategies for TiMM/TaMM
come from the registry by name.
"""

from . import mechanisms, study, thresholds
from .mechanisms import *  # noqa: F403
from .mechanisms import __all__ as _mechanisms

__all__ = [*_mechanisms, "mechanisms", "study", "thresholds"]
