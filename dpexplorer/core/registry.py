"""The mechanism registry: every mechanism the explorer can compare or run.

A :class:`Mechanism` maps a short lowercase name from the papers (``identity``,
``h2``, ``hb``, ``wavelet``, ``greedy_h``, ...) to a builder, its default
parameters, a one-line description and its source.  Data-independent
mechanisms of the matrix-mechanism family build a strategy ``A`` from the
workload ``W`` (and the noise model, whose norm some optimisers need); the
comparison and the app list whatever is registered, without special cases.
Every family registers its own mechanisms when it is imported (the classic
strategies in :mod:`dpexplorer.strategies.classic`, DAWA and its competitors in
:mod:`dpexplorer.adaptive`, ...); this module only defines the registry.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from ..privacy.noise import NoiseModel, check_noise
from ..queries.matrix import Matrix, Weighted

__all__ = ["Mechanism", "AuditSpec", "Estimate", "REGISTRY", "register", "get", "names",
           "NotApplicableError", "AUDIT_WORKLOADS", "AUDIT_NOISES"]


class NotApplicableError(ValueError):
    """The mechanism cannot be used for this workload (e.g. a 1D-only method on 2D)."""


#: Workloads a standard audit case may run a data-independent mechanism on (:class:`AuditSpec`).
AUDIT_WORKLOADS = ("ranges", "marginals", "prefix")
#: Noise a standard audit case may run a mechanism under (:class:`AuditSpec`).
AUDIT_NOISES = ("laplace", "gaussian")


@dataclass(frozen=True)
class AuditSpec:
    """How :func:`dpexplorer.audit.cases` builds a mechanism's standard audit cases.

    Plain data (no audit code here: the audit module sits above the
    registry); :func:`dpexplorer.audit.cases` reads it.

    Attributes
    ----------
    case : str or None
        The kind of hand-picked neighbouring pair, a key of
        :data:`dpexplorer.audit.CASE_KINDS`: ``"one_cell"`` (data-independent
        strategies: one record added to the cell whose strategy column has
        the largest norm, event on the privacy loss of the noisy answers),
        ``"one_record"`` (a data-dependent mechanism without a case of its
        own: one record on a tiny domain), ``"dawa"`` (DAWA's flat histogram,
        whole run and partition alone), ``"mwem"``, ``"efpa"``.  ``None``:
        ``"one_record"`` for a data-dependent mechanism, ``"one_cell"``
        otherwise.
    workload : {"ranges", "marginals", "prefix"}
        Workload of a ``"one_cell"`` case: All Range over :attr:`cells`
        cells, the 1-way marginal of a 2 × 2 table (mechanisms whose scope
        is marginal workloads: DataCube, Fourier, OPT_M, ResidualPlanner),
        or the prefix workload over :attr:`cells` steps (continual counting).
    cells : int
        Domain size of a ``"ranges"`` or ``"prefix"`` case (trees need 8
        cells to have more than one level of inner nodes).
    noise : {"laplace", "gaussian"}
        Noise of a ``"one_cell"`` case: ``"gaussian"`` (at δ =
        :data:`dpexplorer.audit.CASE_DELTA`) for (ε,δ)-only mechanisms.
    """

    case: str | None = None
    workload: str = "ranges"
    cells: int = 4
    noise: str = "laplace"

    def __post_init__(self) -> None:
        if self.case is not None and (not isinstance(self.case, str) or not self.case):
            raise ValueError(f"AuditSpec.case must be a case kind's name or None, got {self.case!r}")
        if self.workload not in AUDIT_WORKLOADS:
            raise ValueError(f"AuditSpec.workload must be one of {AUDIT_WORKLOADS}, got {self.workload!r}")
        if self.noise not in AUDIT_NOISES:
            raise ValueError(f"AuditSpec.noise must be one of {AUDIT_NOISES}, got {self.noise!r}")
        if isinstance(self.cells, bool) or not isinstance(self.cells, int) or self.cells < 2:
            raise ValueError(f"AuditSpec.cells must be an integer >= 2, got {self.cells!r}")


@dataclass(frozen=True)
class Mechanism:
    """A registered mechanism.

    Attributes
    ----------
    name : str
        Short lowercase identifier from the papers.
    label : str
        Display name.
    build : callable or None
        ``build(W, noise, **params) -> A``: the strategy (shape ``(p, n)``)
        for workload ``W: (m, n)`` of a data-independent mechanism.  Raises
        :class:`NotApplicableError` when the workload is out of scope.
    description : str
        One line: what it does.
    source : str
        Paper, section, equation.
    params : dict
        Default parameters passed to ``build``.
    data_dependent : bool
        Whether the mechanism looks at the data (no analytic error then).
    runner : callable or None
        For data-dependent mechanisms: ``runner(data, W, noise, rng, **params)
        -> Estimate`` with ``data`` a :class:`~dpexplorer.privacy.PrivateData`
        (the only way to touch ``x``) and ``rng`` the source of randomness it
        passes on to the kernel: a seeded ``numpy.random.Generator``
        (simulation) or :data:`dpexplorer.privacy.OS_CSPRNG` (release).  Run
        any mechanism with :func:`dpexplorer.mechanism.run`.
    scope : callable or None
        ``scope(W, noise)``: a cheap check, run before any build, that raises
        :class:`NotApplicableError` when the mechanism cannot be used for
        ``W`` under ``noise`` (e.g. an (ε,δ)-only optimiser under Laplace
        noise).  :meth:`not_applicable` calls it, so that a page can say so at
        once instead of starting an optimiser that would end in the same
        error.  ``None``: no check before the build (the builder may still
        raise).
    private : bool
        Whether the mechanism is differentially private as registered
        (default ``True``).  ``False`` marks a variant kept only for study
        (e.g. ``dawa_as_published``, the authors' partition noise, which an
        audit shows is not ε₁-DP): :func:`dpexplorer.release` refuses it;
        simulations, comparisons and :func:`dpexplorer.audit.audit` may run it.
    optimizer : bool
        Whether the builder is a strategy optimiser: it computes for seconds
        to minutes, reports progress through
        :func:`dpexplorer.core.optimization.report` and returns a strategy
        carrying its ``optimization`` record
        (:func:`dpexplorer.core.optimization.attach`).  The served explorer
        builds it in a worker process (:func:`dpexplorer.ui.workers.in_worker`:
        when the builder is importable by module and qualified name), and the
        Compare page builds it last, or on request.
    structured_1d : bool or callable
        Whether the strategy and its error are built without an ``n × n``
        matrix for the 1D workloads of intervals in its scope (All Range,
        Prefix, Width-k, ranges, with Identity and Total; streaming
        mechanisms: Prefix and Identity; see
        :func:`dpexplorer.gram_ops.gram_operator`), so that the pages compare
        it up to 2**16 cells.  A callable ``why_not(n) -> str | None`` says
        it for a domain of ``n`` cells (None: it is; else why not, in plain
        words), e.g. Privelet's fast path needs a power of two.  Read it with
        :meth:`structured_reason`.
    tables : bool
        Whether it releases from a record table
        (:class:`~dpexplorer.datasets.Table`): its strategy measures marginal
        counts (``A.marginal_measure`` and ``A.answer``), so
        :func:`dpexplorer.release` needs no data vector over every cell of the
        table's domain.  Only such mechanisms are offered for tables.
    audit : AuditSpec or None
        How the standard audit cases are built (:func:`dpexplorer.audit.cases`);
        None: the defaults (:meth:`audit_spec`).
    online : bool
        Whether the mechanism releases a count over time step by step: on a
        causal workload (square, lower-triangular ``W``, one answer per step)
        answer ``t`` is computed from the measurements taken up to step ``t``
        -- its decoder ``B`` (``B A = W``) uses no strategy row that closes
        after ``t`` (a factorisation ``W = B A`` with ``B`` and ``A``
        lower-triangular; a tree with Honaker's online estimator).  That is
        what a release whose later counts may depend on earlier answers needs
        (Denisov, McMahan, Rush, Smith & Thakurta, NeurIPS 2022).  Least
        squares over a tree (H2, HB) and the k-ary tree with subtraction are
        not online: their answer at ``t`` uses nodes that close later.  See
        ``dpexplorer/docs/continual.md``.
    """

    name: str
    label: str
    build: Callable[..., Matrix] | None
    description: str
    source: str
    params: dict[str, Any] = field(default_factory=dict)
    data_dependent: bool = False
    runner: Callable[..., Estimate] | None = None
    private: bool = True
    scope: Callable[[Matrix, NoiseModel], None] | None = None
    optimizer: bool = False
    structured_1d: bool | Callable[[int], str | None] = False
    tables: bool = False
    audit: AuditSpec | None = None
    online: bool = False

    def structured_reason(self, n: int) -> str | None:
        """None if :attr:`structured_1d` holds on a 1D interval workload of ``n`` cells, else why not.

        Raises
        ------
        ValueError
            If ``n`` is not a positive integer.
        """
        if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
            raise ValueError(f"the domain size must be a positive integer, got {n!r}")
        if callable(self.structured_1d):
            return self.structured_1d(int(n))
        return None if self.structured_1d else "needs an n × n matrix"

    def audit_spec(self) -> AuditSpec:
        """:attr:`audit` with its case kind filled in (``"one_record"`` or ``"one_cell"`` by default)."""
        spec = self.audit or AuditSpec()
        if spec.case is None:
            spec = AuditSpec("one_record" if self.data_dependent else "one_cell",
                             spec.workload, spec.cells, spec.noise)
        return spec

    def not_applicable(self, W: Matrix, noise: NoiseModel) -> str | None:
        """Why this mechanism cannot be used for ``W: (m, n)`` under ``noise``, or None.

        Runs only the cheap :attr:`scope` check (no strategy is built): None
        means the check found nothing, not that the build will succeed.

        Raises
        ------
        TypeError
            If ``noise`` is not a noise model.
        """
        check_noise(noise)
        if self.scope is None:
            return None
        try:
            self.scope(W, noise)
        except NotApplicableError as exc:
            return str(exc)
        return None

    def strategy(self, W: Matrix, noise: NoiseModel, **params: Any) -> Matrix:
        """Build the strategy for ``W`` with the defaults overridden by ``params``.

        Raises
        ------
        ValueError
            If the mechanism is data-dependent (it has no fixed strategy) or a
            parameter is unknown (:meth:`check_params`); as
            :class:`NotApplicableError` (a ValueError) when :attr:`scope` or
            the builder finds the workload or noise out of scope.
        TypeError
            If ``noise`` is not a noise model.
        """
        if self.build is None:
            raise ValueError(f"{self.name!r} is data-dependent: it has no data-independent strategy")
        check_noise(noise)
        self.check_params(params)
        if self.scope is not None:
            self.scope(W, noise)
        kwargs = {**self.params, **params}
        A = self.build(W, noise, **kwargs)
        if A is W:  # never rename the caller's workload
            A = Weighted(W, 1.0)
        A.name = self.name
        return A

    def check_params(self, params: dict[str, Any]) -> None:
        """Refuse, before any work, parameters the builder (or runner) does not take.

        A builder's or runner's parameters are those of its signature after the
        leading ``(W, noise)`` or ``(data, W, noise, rng)``; one taking
        ``**params`` takes the names of its default :attr:`params`.

        Raises
        ------
        TypeError
            If ``params`` is not a dict.
        ValueError
            Naming the unknown parameters and the ones the mechanism takes.
        """
        if not isinstance(params, dict):
            raise TypeError(f"the parameters of {self.name!r} must be a dict, got {type(params).__name__}")
        fn, lead = (self.runner, 4) if self.runner is not None else (self.build, 2)
        try:
            sig = _signature(fn)  # None (neither): TypeError, below
        except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
            return
        named = [p.name for p in list(sig.parameters.values())[lead:]
                 if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
            named = sorted(set(named) | set(self.params))
        unknown = sorted(set(params) - set(named))
        if unknown:
            raise ValueError(f"bad parameters for mechanism {self.name!r}: unknown parameter(s) {unknown}; "
                             f"its parameters are {named}")
        try:
            sig.bind(*([None] * lead), **{**self.params, **params})
        except TypeError as exc:
            raise ValueError(f"bad parameters {sorted(params)} for mechanism {self.name!r}: {exc}") from None


@functools.lru_cache(maxsize=256)
def _signature(fn: Callable[..., Any]) -> inspect.Signature:
    """``inspect.signature(fn)``, computed once per function (a mechanism run checks its
    parameters on every call; the signature of a registered function does not change)."""
    return inspect.signature(fn)


@dataclass
class Estimate:
    """What a mechanism run returns: the estimate and its public by-products.

    Attributes
    ----------
    x_hat : ndarray, shape (n,)
        Estimate of the data vector (counts).
    info : dict
        Public, mechanism-specific outputs (e.g. DAWA's partition, per-stage
        budgets, the strategy used).
    answers : ndarray, shape (m,), or None
        The workload answers when the mechanism does not answer ``W x̂``
        (strategies with an ``answer(W, y)`` method, e.g. OPT+'s local least
        squares, HDMM Sec. 10 item 3); ``None`` means ``W x̂``.
    """

    x_hat: npt.NDArray[np.float64]
    info: dict[str, Any] = field(default_factory=dict)
    answers: npt.NDArray[np.float64] | None = None


REGISTRY: dict[str, Mechanism] = {}


def register(mechanism: Mechanism, replace: bool = False) -> Mechanism:
    """Add a mechanism to the registry.

    Raises
    ------
    ValueError
        If the name is taken (and ``replace`` is false) or is not a lowercase identifier.
    TypeError
        If ``mechanism`` is not a :class:`Mechanism`, or its facts have the
        wrong type: ``optimizer`` not a bool (or set on a mechanism without a
        builder), ``structured_1d`` neither a bool nor callable (or set
        without a builder), ``tables`` not a bool (or set without a
        builder), ``audit`` neither None nor an :class:`AuditSpec`,
        ``online`` not a bool.
    """
    if not isinstance(mechanism, Mechanism):
        raise TypeError(f"register takes a registry.Mechanism, got {type(mechanism).__name__}")
    if not mechanism.name.isidentifier() or mechanism.name.lower() != mechanism.name:
        raise ValueError(f"mechanism names are lowercase identifiers, got {mechanism.name!r}")
    if not isinstance(mechanism.optimizer, bool) or (mechanism.optimizer and mechanism.build is None):
        raise TypeError(f"{mechanism.name!r}: optimizer must be a bool, and True only for a mechanism "
                        f"with a strategy builder, got {mechanism.optimizer!r}")
    if ((not isinstance(mechanism.structured_1d, bool) and not callable(mechanism.structured_1d))
            or (mechanism.structured_1d is not False and mechanism.build is None)):
        raise TypeError(f"{mechanism.name!r}: structured_1d must be a bool or a callable n -> reason, "
                        f"and not False only for a mechanism with a strategy builder, got "
                        f"{mechanism.structured_1d!r}")
    if not isinstance(mechanism.tables, bool) or (mechanism.tables and mechanism.build is None):
        raise TypeError(f"{mechanism.name!r}: tables must be a bool, and True only for a mechanism "
                        f"with a strategy builder, got {mechanism.tables!r}")
    if mechanism.audit is not None and not isinstance(mechanism.audit, AuditSpec):
        raise TypeError(f"{mechanism.name!r}: audit must be a registry.AuditSpec or None, "
                        f"got {type(mechanism.audit).__name__}")
    if not isinstance(mechanism.online, bool):
        raise TypeError(f"{mechanism.name!r}: online must be a bool, got {mechanism.online!r}")
    if mechanism.name in REGISTRY and not replace:
        raise ValueError(f"a mechanism named {mechanism.name!r} is already registered")
    REGISTRY[mechanism.name] = mechanism
    return mechanism


def get(name: str) -> Mechanism:
    """The registered mechanism called ``name``.

    Raises
    ------
    TypeError
        If ``name`` is not a string.
    KeyError
        With the list of registered names, if there is none called ``name``.
    """
    if not isinstance(name, str):
        raise TypeError(f"a mechanism name must be a str such as 'hb', got {type(name).__name__} {name!r}; "
                        f"registered: {sorted(REGISTRY)}")
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"no mechanism named {name!r}; registered: {sorted(REGISTRY)}") from None


def names(data_dependent: bool | None = None, private: bool | None = None,
          optimizer: bool | None = None, tables: bool | None = None,
          online: bool | None = None) -> list[str]:
    """Registered names in registration order, optionally only those with the given facts.

    ``data_dependent``, ``private``, ``optimizer``, ``tables``, ``online``: keep only the
    mechanisms whose :class:`Mechanism` attribute of that name has this
    value (None: any).
    """
    return [k for k, m in REGISTRY.items()
            if (data_dependent is None or m.data_dependent == data_dependent)
            and (private is None or m.private == private)
            and (optimizer is None or m.optimizer == optimizer)
            and (tables is None or m.tables == tables)
            and (online is None or m.online == online)]
