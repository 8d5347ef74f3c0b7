"""Continual counting: running totals released step by step, and the factorisations behind them.

==================  ============================================================
``workload``        the continual-counting workload (running total over ``T``
                    steps), the causal-workload scope of every streaming
                    mechanism
``factorisations``  ``toeplitz_sqrt``: the square root of the prefix matrix
``lt_opt``          ``lt_opt.lt_opt``: the optimal lower-triangular factorisation
                    of a causal workload (total or worst-step error, Gaussian
                    noise), by the convex dual (L-BFGS-B)
``blt``             ``blt.blt``: Buffered Linear Toeplitz factorisations with
                    ``d`` buffers, optimised; ``BLT``, ``StreamingNoise`` (the
                    release's noise step by step in O(d) memory)
``banded``          ``banded.banded``: a few-band Toeplitz strategy optimised
                    for the running total (L-BFGS-B)
``trees``           ``tree_online`` (binary tree, Honaker's online estimator) and
                    ``kary_tree`` (k-ary tree with subtraction, pure ε)
``participation``   sensitivity when one person contributes at up to ``k``
                    steps at least ``b`` apart (``participation_sensitivity``,
                    the ``Participation`` wrapper of a strategy)
``bounds``          the factorisation lower bound on the worst step's error
``analysis``        per-step errors of several strategies (what the explorer draws)
``releases``        ``release`` / ``simulate`` of a stream, step by step
                    (through :class:`dpexplorer.privacy.PrivateStream`)
==================  ============================================================

Every mechanism here is registered (:mod:`dpexplorer.core.registry`) with
``online=True`` and compared, audited and released like every other; see
``dpexplorer/docs/continual.md``.  Imports the layers below (queries,
privacy, core, strategies).
"""

# registration order (the order of the comparison's rows): √L, LT-Opt, BLT, banded, the trees
from . import workload, factorisations, lt_opt, blt, banded, trees  # noqa: I001
from . import analysis, bounds, participation, releases
from .blt import BLT, StreamingNoise
from .factorisations import toeplitz_sqrt
from .participation import Participation, participation_sensitivity
from .releases import StreamRelease, StreamStep, release, simulate
from .trees import kary_tree, tree_online
from .workload import continual, is_causal

__all__ = [
    # modules
    "workload", "factorisations", "lt_opt", "blt", "banded", "trees", "participation", "bounds",
    "analysis", "releases",
    # the everyday names
    "continual", "is_causal", "toeplitz_sqrt", "tree_online", "kary_tree", "BLT", "StreamingNoise",
    "Participation", "participation_sensitivity", "release", "simulate", "StreamRelease", "StreamStep",
]
