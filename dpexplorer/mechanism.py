"""Releases with the matrix mechanism: SELECT, MEASURE, RECONSTRUCT, answer.

``release(x, W, "h2", Laplace(1.0), seed=7)`` selects the strategy ``A``
(from the registry, or a given matrix), MEASUREs ``y = A x + noise`` through
the privacy boundary (:class:`~dpexplorer.privacy.PrivateData`, which records
the spend), RECONSTRUCTs ``x̂ = A⁺ y`` by least squares, and answers
``W x̂`` (HDMM Sec. 10; Li et al. 2010 "matrix mechanism").  Only MEASURE
sees ``x``; reconstruction and answers are post-processing of ``y``.
"""

from __future__ import annotations

import datetime as _dt
import inspect
import json
import math
import secrets
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import scipy.sparse.linalg

from . import error, registry
from .error import GramInverse
from .matrix import Dense, Identity, Kronecker, Matrix, Sparse, as_matrix
from .noise import NoiseModel
from .privacy import PrivacyLedger, PrivateData

__all__ = ["Reconstructor", "reconstruct", "run", "Release", "release", "DENSE_RECONSTRUCT_LIMIT"]

#: Largest number of cells reconstructed through a dense Gram pseudo-inverse;
#: larger non-Kronecker strategies use scipy's lsmr.
DENSE_RECONSTRUCT_LIMIT = 4096


class Reconstructor:
    """Least squares ``x̂ = A⁺ y`` for one strategy, factorised once (RECONSTRUCT).

    Parameters
    ----------
    A : Matrix or array, shape (p, n)
        The strategy.
    method : {"auto", "kron", "dense", "lsmr"}
        ``kron``: ``(⊗A_i)⁺ = ⊗A_i⁺`` applied factor by factor (HDMM Thm 14);
        ``dense``: ``(AᵀA)⁺ Aᵀ y``; ``lsmr``: scipy.sparse.linalg.lsmr from 0,
        which converges to the minimum-norm least-squares solution.
        ``custom``: the strategy's own ``A.reconstructor()`` (implicit
        marginal or stacked strategies).
        ``auto`` picks custom when the strategy has one, kron for Kronecker strategies, lsmr for sparse ones
        (tree strategies: a few ms even when badly conditioned) and above
        :data:`DENSE_RECONSTRUCT_LIMIT` cells, dense otherwise.
    atol, btol : float
        lsmr stopping tolerances.

    Raises
    ------
    ValueError
        If the method is unknown, or ``kron`` is asked for a non-Kronecker strategy.
    """

    def __init__(self, A, method: str = "auto", atol: float = 1e-10, btol: float = 1e-10):
        A = as_matrix(A)
        if method not in ("auto", "kron", "dense", "lsmr", "custom"):
            raise ValueError(f"method must be 'auto', 'kron', 'dense' or 'lsmr', got {method!r}")
        if method == "auto" and hasattr(A, "reconstructor"):
            method = "custom"  # implicit strategies bring their own least squares
        if method == "auto":
            if isinstance(A, Identity):
                method = "identity"
            elif isinstance(A, Kronecker):
                method = "kron"
            elif A.n <= DENSE_RECONSTRUCT_LIMIT and not isinstance(A, Sparse):
                method = "dense"
            else:
                method = "lsmr"
        if method == "kron" and not isinstance(A, Kronecker):
            raise ValueError("method='kron' needs a Kronecker strategy")
        self.A, self.method, self.atol, self.btol = A, method, atol, btol
        if method == "custom":
            self._op = A.reconstructor()
        elif method == "kron":
            self._op = Kronecker([_factor_pinv(f) for f in A.factors])
        elif method == "dense":
            self._op = GramInverse(A.gram().dense()).pinv

    def __call__(self, y) -> np.ndarray:
        """``x̂`` (shape ``(n,)``, counts) for noisy answers ``y: (p,)``.

        Raises
        ------
        ValueError
            If ``y`` has the wrong length.
        """
        A = self.A
        y = np.asarray(y, dtype=float)
        if y.shape != (A.m,):
            raise ValueError(f"y must have shape ({A.m},) to match the strategy, got {y.shape}")
        if self.method == "identity":
            return y.copy()
        if self.method == "custom":
            return np.asarray(self._op(y), dtype=float)
        if self.method == "kron":
            return self._op.matvec(y)
        if self.method == "dense":
            return self._op @ A.rmatvec(y)
        result = scipy.sparse.linalg.lsmr(A.as_linear_operator(), y, atol=self.atol, btol=self.btol,
                                          maxiter=max(10 * A.n, 1000))
        return result[0]


def reconstruct(A, y, method: str = "auto", atol: float = 1e-10, btol: float = 1e-10) -> np.ndarray:
    """Least-squares estimate ``x̂ = A⁺ y`` (RECONSTRUCT); see :class:`Reconstructor`.

    Parameters
    ----------
    A : Matrix or array, shape (p, n)
    y : ndarray, shape (p,)
    method : {"auto", "kron", "dense", "lsmr"}

    Returns
    -------
    ndarray, shape (n,)
        ``x̂``, in counts.

    Raises
    ------
    ValueError
        If ``y`` has the wrong length or the method is unknown.
    """
    return Reconstructor(A, method, atol, btol)(y)


def _factor_pinv(f: Matrix) -> Matrix:
    if isinstance(f, Identity):
        return f
    return Dense(GramInverse(f.gram().dense()).pinv @ f.dense().T)


#: Strategies and their factorisations kept for repeated runs (evaluate's trials).
_PLANS: OrderedDict = OrderedDict()
_PLAN_CACHE_SIZE = 8


def _plan(mech: registry.Mechanism, W: Matrix, noise: NoiseModel, params: dict):
    """``(A, Reconstructor)`` for a data-independent mechanism, built once per key."""
    try:
        key = (mech.name, W, noise.norm, tuple(sorted(params.items())))
        hash(key)
    except TypeError:  # unhashable parameter values: no caching
        A = mech.strategy(W, noise, **params)
        return A, Reconstructor(A)
    if key in _PLANS:
        _PLANS.move_to_end(key)
        return _PLANS[key]
    A = mech.strategy(W, noise, **params)
    _PLANS[key] = (A, Reconstructor(A))
    while len(_PLANS) > _PLAN_CACHE_SIZE:
        _PLANS.popitem(last=False)
    return _PLANS[key]


def _json_safe(value):
    """``value`` with numpy arrays/scalars and dataclasses made JSON-serialisable."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if hasattr(value, "edges") and isinstance(getattr(value, "edges"), np.ndarray):
        return {"edges": value.edges.tolist()}  # a Partition
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return repr(value)


def _takes_seed(fn) -> bool:
    """Whether a runner accepts ``seed=`` (explicitly or through ``**kwargs``)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "seed" or p.kind is p.VAR_KEYWORD for p in params)


def run(mechanism: str, data: PrivateData, W, noise: NoiseModel, rng: np.random.Generator,
        seed: int | None = None, **params) -> registry.Estimate:
    """Run any registered mechanism on private data: the uniform entry point.

    Data-independent mechanisms build their strategy ``A``, MEASURE it
    through ``data`` (which records the spend) and RECONSTRUCT ``x̂ = A⁺y``;
    data-dependent ones call their registered ``runner``.

    Parameters
    ----------
    mechanism : str
        Registry name.
    data : PrivateData
        The private data vector behind the privacy boundary.
    W : Matrix, shape (m, n)
        Workload (public).
    noise : NoiseModel
        Privacy parameters (ε, and δ for Gaussian noise) of the whole run.
    rng : numpy.random.Generator
        Seeded source of randomness.
    seed : int, optional
        The seed of ``rng``, recorded with every ledger entry of the run.
    **params
        Overrides of the mechanism's default parameters.

    Returns
    -------
    Estimate
        ``x_hat`` (shape ``(n,)``) and public ``info``; ``answers`` (shape
        ``(m,)``) when the strategy answers the workload itself (OPT+'s local
        least squares, ``A.answer(W, y)``), else ``None`` (the answers are ``W x̂``).

    Raises
    ------
    KeyError
        Unknown mechanism.
    NotApplicableError
        If the mechanism cannot handle this workload or noise model.
    """
    W = as_matrix(W)
    mech = registry.get(mechanism)
    unknown = sorted(set(params) - set(mech.params)) if mech.params or params else []
    if unknown and mech.runner is not None:
        raise ValueError(f"unknown parameter(s) {unknown} for {mechanism!r}; "
                         f"its parameters are {sorted(mech.params)}")
    if mech.runner is not None:
        kwargs = {**mech.params, **params}
        if _takes_seed(mech.runner):
            kwargs["seed"] = seed
        return mech.runner(data, W, noise, rng, **kwargs)
    A, recon = _plan(mech, W, noise, params)  # public work, cached across trials
    y = data.measure(A, noise, rng, label=f"{mechanism}: measure {A.m} strategy queries", seed=seed)
    return registry.Estimate(recon(y), {"strategy": A}, answers=_strategy_answers(A, W, y))


def _strategy_answers(A: Matrix, W: Matrix, y: np.ndarray) -> np.ndarray | None:
    """The strategy's own workload answers (``A.answer(W, y)``), or ``None`` for ``W x̂``.

    Stacked OPT+ strategies answer every workload term from its own block
    (local least squares, HDMM Sec. 10 item 3): unbiased, with the analytic
    error of :func:`dpexplorer.error.expected_tse`, which ``W x̂`` would not have.
    """
    hook = getattr(A, "answer", None)
    if hook is None:
        return None
    answers = np.asarray(hook(W, y), dtype=float)
    if answers.shape != (W.m,):
        raise ValueError(f"strategy {A.name!r} returned answers of shape {answers.shape}, "
                         f"expected ({W.m},)")
    return answers


@dataclass
class Release:
    """A differentially private release of workload answers.

    Attributes
    ----------
    mechanism : str
        Registry name (or the strategy's name).
    workload : Matrix
        ``W: (m, n)``.
    strategy : Matrix or None
        ``A: (p, n)``; ``None`` for data-dependent mechanisms.
    noise : NoiseModel
    seed : int
        Seed of the ``numpy.random.Generator`` that drew the noise.
    y : ndarray, shape (p,), or None
        Noisy strategy answers (``None`` for data-dependent mechanisms).
    x_hat : ndarray, shape (n,)
        Least-squares estimate of the data vector (for a stacked OPT+
        strategy: the global least-squares estimate ``A⁺y`` of the whole stack).
    answers : ndarray, shape (m,)
        The noisy workload answers, in counts: ``W x̂``, or the strategy's own
        ``A.answer(W, y)`` when it has one (OPT+ answers every workload term
        from its own block by local least squares, HDMM Sec. 10 item 3, so
        ``answers`` then differs from ``W x̂`` and has the analytic error).
    epsilon, delta : float
        What this release spent.
    analytic_rmse : float
        Expected RMSE of the answers (HDMM Prop. 4); NaN for data-dependent mechanisms.
    info : dict
        Public by-products of a data-dependent mechanism (e.g. DAWA's partition).
    """

    mechanism: str
    workload: Matrix
    strategy: Matrix | None
    noise: NoiseModel
    seed: int
    y: np.ndarray | None
    x_hat: np.ndarray
    answers: np.ndarray
    epsilon: float
    delta: float
    analytic_rmse: float
    info: dict = field(default_factory=dict)
    created: str = field(default_factory=lambda: _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"))

    @property
    def data_dependent(self) -> bool:
        """Whether a data-dependent mechanism made the release (no analytic error)."""
        return self.strategy is None

    def per_query_std(self) -> np.ndarray:
        """Analytic standard error of every answer, shape ``(m,)`` (counts).

        Raises
        ------
        ValueError
            For a data-dependent release, whose error depends on the data.
        """
        if self.strategy is None:
            raise ValueError(f"{self.mechanism!r} is data-dependent: its answers have no analytic error")
        return error.per_query_rmse(self.workload, self.strategy, self.noise)

    def metadata(self) -> dict:
        """JSON-ready description: mechanism, ε, δ, noise model, seed, workload spec, sizes."""
        from . import spec as _spec

        try:
            wspec = _spec.to_spec(self.workload)
        except ValueError:
            wspec = None
        return {
            "mechanism": self.mechanism,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "noise": type(self.noise).__name__,
            "noise_label": self.noise.label,
            "calibration": getattr(self.noise, "calibration", None),
            "seed": self.seed,
            "workload": self.workload.name,
            "workload_spec": wspec,
            "m": self.workload.m,
            "n": self.workload.n,
            "domain": list(self.workload.domain),
            "data_dependent": self.data_dependent,
            "strategy_rows": None if self.strategy is None else self.strategy.m,
            "strategy_sensitivity": (None if self.strategy is None
                                     else self.strategy.sensitivity(self.noise.norm)),
            "analytic_rmse": None if math.isnan(self.analytic_rmse) else self.analytic_rmse,
            "info": _json_safe(self.info),
            "created": self.created,
        }

    def to_frame(self, with_std: bool = True) -> pd.DataFrame:
        """Answers as a table: ``query`` index, ``answer`` and (optionally) analytic ``std``."""
        df = pd.DataFrame({"query": np.arange(self.answers.size), "answer": self.answers})
        if with_std and self.strategy is not None:
            df["std"] = self.per_query_std()
        return df

    def to_json(self) -> str:
        """Metadata and answers as a JSON document."""
        return json.dumps({**self.metadata(), "answers": self.answers.tolist()})


def release(x, W, mechanism="identity", noise: NoiseModel | None = None, seed: int | None = None,
            ledger: PrivacyLedger | None = None, params: dict | None = None) -> Release:
    """Run the matrix mechanism on data ``x`` for workload ``W``.

    Parameters
    ----------
    x : array_like, shape (n,) or the workload's domain shape
        Private counts.
    W : Matrix or array, shape (m, n)
        Workload.
    mechanism : str or Matrix
        A registry name (``identity``, ``h2``, ``hb``, ``wavelet``,
        ``greedy_h``, ...; data-dependent ones such as ``dawa`` run through
        :func:`run`) or a strategy matrix ``A: (p, n)``.
    noise : NoiseModel
        ``Laplace(ε)`` or ``Gaussian(ε, δ)``.
    seed : int, optional
        Seed of the noise Generator; a fresh one is drawn (and recorded) if omitted.
    ledger : PrivacyLedger, optional
        Ledger to record the spend in (a session's ledger).
    params : dict, optional
        Parameters for the registered mechanism's builder.

    Returns
    -------
    Release

    Raises
    ------
    ValueError
        If ``x`` does not match the workload's domain, or no noise model is given.
    UnsupportedWorkloadError
        If the strategy does not support the workload.
    BudgetExceededError
        If the ledger's budget would be exceeded.
    """
    if noise is None:
        raise ValueError("a release needs a noise model, e.g. dpx.Laplace(1.0)")
    W = as_matrix(W)
    data = PrivateData(x, ledger)
    if data.n != W.n:
        raise ValueError(f"the data has {data.n} cells but the workload is over {W.n} cells")
    if seed is None:
        seed = secrets.randbits(63)
    if isinstance(mechanism, str) and registry.get(mechanism).data_dependent:
        if ledger is not None:
            ledger.check(noise.epsilon, noise.delta)  # refuse before any stage measures
        est = run(mechanism, data, W, noise, np.random.default_rng(seed), seed=seed, **(params or {}))
        x_hat = np.asarray(est.x_hat, dtype=float)
        answers = W.matvec(x_hat) if est.answers is None else np.asarray(est.answers, dtype=float)
        return Release(
            mechanism=mechanism, workload=W, strategy=None, noise=noise, seed=int(seed), y=None,
            x_hat=x_hat, answers=answers, epsilon=noise.epsilon, delta=noise.delta,
            analytic_rmse=math.nan, info={k: v for k, v in est.info.items() if k != "strategy"})
    if isinstance(mechanism, str):
        name = mechanism
        A = registry.get(name).strategy(W, noise, **(params or {}))
    else:
        A = as_matrix(mechanism)
        name = A.name
    tse = error.expected_tse(W, A, noise)  # raises if A does not support W
    rng = np.random.default_rng(seed)
    y = data.measure(A, noise, rng, label=f"{name}: measure {A.m} strategy queries", seed=seed)
    x_hat = reconstruct(A, y)
    answers = _strategy_answers(A, W, y)
    return Release(
        mechanism=name, workload=W, strategy=A, noise=noise, seed=int(seed), y=y, x_hat=x_hat,
        answers=W.matvec(x_hat) if answers is None else answers,
        epsilon=noise.epsilon, delta=noise.delta,
        analytic_rmse=math.sqrt(tse / W.m),
    )
