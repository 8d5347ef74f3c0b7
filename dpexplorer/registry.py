"""The mechanism registry: every mechanism the explorer can compare or run.

A :class:`Mechanism` maps a short lowercase name from the papers (``identity``,
``h2``, ``hb``, ``wavelet``, ``greedy_h``, ...) to a builder, its default
parameters, a one-line description and its source.  Data-independent
mechanisms of the matrix-mechanism family build a strategy ``A`` from the
workload ``W`` (and the noise model, whose norm some optimisers need); the
comparison and the app list whatever is registered, without special cases.
Later mechanisms (``dawa``, ``opt0``, ``hdmm``, ...) register themselves the
same way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from . import strategies
from .matrix import Matrix, Weighted
from .noise import NoiseModel

__all__ = ["Mechanism", "Estimate", "REGISTRY", "register", "get", "names", "NotApplicableError"]


class NotApplicableError(ValueError):
    """The mechanism cannot be used for this workload (e.g. a 1D-only method on 2D)."""


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
    """

    name: str
    label: str
    build: Callable[..., Matrix] | None
    description: str
    source: str
    params: dict = field(default_factory=dict)
    data_dependent: bool = False
    runner: Callable[..., Estimate] | None = None

    def strategy(self, W: Matrix, noise: NoiseModel, **params) -> Matrix:
        """Build the strategy for ``W`` with the defaults overridden by ``params``.

        Raises
        ------
        ValueError
            If the mechanism is data-dependent (it has no fixed strategy).
        """
        if self.build is None:
            raise ValueError(f"{self.name!r} is data-dependent: it has no data-independent strategy")
        kwargs = {**self.params, **params}
        A = self.build(W, noise, **kwargs)
        if A is W:  # never rename the caller's workload
            A = Weighted(W, 1.0)
        A.name = self.name
        return A


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

    x_hat: np.ndarray
    info: dict = field(default_factory=dict)
    answers: np.ndarray | None = None


REGISTRY: dict[str, Mechanism] = {}


def register(mechanism: Mechanism, replace: bool = False) -> Mechanism:
    """Add a mechanism to the registry.

    Raises
    ------
    ValueError
        If the name is taken (and ``replace`` is false) or is not a lowercase identifier.
    """
    if not mechanism.name.isidentifier() or mechanism.name.lower() != mechanism.name:
        raise ValueError(f"mechanism names are lowercase identifiers, got {mechanism.name!r}")
    if mechanism.name in REGISTRY and not replace:
        raise ValueError(f"a mechanism named {mechanism.name!r} is already registered")
    REGISTRY[mechanism.name] = mechanism
    return mechanism


def get(name: str) -> Mechanism:
    """The registered mechanism called ``name``.

    Raises
    ------
    KeyError
        With the list of registered names, if there is none called ``name``.
    """
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"no mechanism named {name!r}; registered: {sorted(REGISTRY)}") from None


def names(data_dependent: bool | None = None) -> list[str]:
    """Registered names, optionally only the data-(in)dependent ones."""
    return [k for k, m in REGISTRY.items() if data_dependent is None or m.data_dependent == data_dependent]


# --------------------------------------------------------------- builders
def _one_dimensional(W: Matrix, what: str) -> int:
    if len(W.domain) != 1:
        raise NotApplicableError(f"{what} is defined for 1D domains; this workload's domain is {W.domain}")
    return W.n


def _identity(W, noise):
    return strategies.identity(W.domain)


def _workload(W, noise):
    return strategies.workload(W)


def _hierarchical(W, noise, b=2):
    return strategies.per_attribute(lambda n: strategies.hierarchical(n, b), W.domain)


def _hb(W, noise):
    return strategies.per_attribute(strategies.hb, W.domain)


def _wavelet(W, noise):
    return strategies.per_attribute(strategies.wavelet, W.domain)


def _greedy_h(W, noise, b=2):
    _one_dimensional(W, "GreedyH")
    return strategies.greedy_h(W, b)


for _m in [
    Mechanism("identity", "Identity", _identity,
              "Noisy count of every cell (A = I), answers summed from them.",
              "Dwork et al. 2006; HDMM Table 4 'Identity'"),
    Mechanism("workload", "Workload", _workload,
              "Answer every workload query directly (A = W).",
              "Laplace/Gaussian mechanism on W; HDMM Table 4 'Laplace'/'Gaussian'"),
    Mechanism("h2", "H2", _hierarchical,
              "Binary hierarchy of intervals, leaves to root (Kronecker per attribute).",
              "Hay, Rastogi, Miklau, Suciu, PVLDB 2010; MATH.md 'H2'", params={"b": 2}),
    Mechanism("hb", "HB", _hb,
              "Hierarchy with the branching factor chosen for the domain size.",
              "Qardaji, Yang, Li, PVLDB 2013; MATH.md 'HB'"),
    Mechanism("wavelet", "Privelet", _wavelet,
              "Haar wavelet queries (Kronecker per attribute).",
              "Xiao, Wang, Gehrke, ICDE 2010 (Privelet); MATH.md 'Wavelet'"),
    Mechanism("greedy_h", "GreedyH", _greedy_h,
              "Binary hierarchy with query weights chosen greedily for the workload (1D).",
              "Li, Hay, Miklau, Wang, PVLDB 2014, Sec. 4.3-4.4, Alg. 2", params={"b": 2}),
]:
    register(_m)
