"""MWEM: multiplicative weights and the exponential mechanism.

Hardt, Ligett, McSherry, "A simple and practical algorithm for
differentially private data release", NeurIPS 2012, Algorithm 1.  MWEM keeps
a synthetic data vector ``A`` (counts, summing to the number of records
``N``) and, for ``T`` rounds:

1. **select** the workload query the current ``A`` answers worst, with the
   exponential mechanism (McSherry & Talwar, FOCS 2007) on the utility
   ``u_i(x) = |q_i(x) − q_i(A)|`` and budget ``ε_round/2`` -- here its
   permute-and-flip form, report-noisy-max with ``Exponential(2Δu/ε)`` noise
   (McKenna & Sheldon 2020, Thm 2: the same ε-DP guarantee, never less
   accurate; what opendp samples in release mode);
2. **measure** that query with the Laplace mechanism, budget ``ε_round/2``;
3. **update** ``A`` multiplicatively towards the measurement:
   ``A(j) ∝ A(j)·exp(q(j)·(m − q(A)) / (2N))``, renormalised to sum ``N``.

Published strength (the public implementations).  The paper's practical
improvements (Sec. 3.3 of Hardt, Ligett, McSherry) reuse past measurements;
DPBench/DPComp's ``mwemND_engine`` -- the code behind the MWEM figures of the
DAWA paper and of DPBench -- runs ``updateround = 100`` multiplicative-weights
passes over *all* measurements taken so far after each round's measurement
and returns the last iterate, with the number of records taken as public.
The registered ``mwem`` does the same by default (``updates_per_round=100``,
``average=False``; :data:`DEFAULT_UPDATES_PER_ROUND`) but measures the number
of records with a stated share of ε (``total_share``, 5 %) unless it is given
as public (``total=N``).  ``updates_per_round=1, average=True`` is Algorithm 1
as printed (one update with the new measurement; average of the iterates).
The passes are post-processing of the noisy measurements: they cost no ε.
They run on the *atoms* of the measured queries (cells every measured query
weighs alike; at most ``2t + 1`` for ``t`` intervals) instead of the ``n``
cells -- the same updates, since an update multiplies all cells of an atom
by one factor -- so that hundreds of rounds stay affordable.

Number of rounds.  A fixed ``T`` does not fit all data: at ``T = 10`` MWEM's
error on DAWA's INCOME histogram (ε = 0.1) is hundreds of times DAWA's, and
DAWA's authors tuned ``T`` per dataset (Li et al., PVLDB 2014, Sec. 5.1) --
which, done on the private data, is itself a release.  ``T="auto"`` (the
default) takes ``T`` from the number of records and public quantities only,
``T = clip(round(0.26·sqrt(N·ε·sqrt(ln n)/ln m)), 3, 450)``
(:func:`auto_rounds`: the signal strength ``N·ε`` of DPBench's MWEM*, Hay et
al., SIGMOD 2016, in the combination of Hardt et al.'s accuracy bound, Thm
2.2; the constants fitted on DPBench histograms that are not DAWA's seven).
``N`` is the noisy count below (or a public ``total``), so the choice costs
no ε beyond it.

Budget (all in ε, one run, sequential composition):

* ``total=None``: ``ε_N = total_share·ε`` (default 5 %) buys a noisy
  record count ``N̂ = 1ᵀx + Laplace(1/ε_N)`` (Total has L1 sensitivity 1).
  Algorithm 1 takes ``N`` as known; DPBench/DAWA-era implementations treat
  the scale as public -- pass ``total=<number>`` for that, which spends
  nothing on it.
* ``T`` is then fixed (given, or :func:`auto_rounds` of ``N̂`` or the public
  ``N``: post-processing), and the rest is split evenly over the ``T``
  rounds, ``ε_round = (ε − ε_N)/T``, half to each of the two mechanisms of a
  round -- Algorithm 1's ``ε/(2T)`` for selection and ``Laplace(2T/ε)`` for a
  counting query.  ``T`` depends on the first measurement, but what the
  rounds spend together does not: ``ε − ε_N`` whatever ``N̂`` is, so the run
  is ``ε``-DP by sequential composition (Dwork & Roth 2014, Thm 3.16, for
  mechanisms each chosen from the earlier outputs, as MWEM's rounds are).

Sensitivities (add/remove-one-record: ``x`` changes by ``±e_j``):

* selection: ``u_i`` changes by at most ``|W_ij| ≤ Δu := max_ij |W_ij|``
  (reverse triangle inequality), so the exponential mechanism uses ``Δu``;
  for counting (0/1) workloads ``Δu = 1`` as in Algorithm 1.
* measurement of the chosen row ``q``: ``q·x`` changes by ``|q_j|``, so its
  L1 sensitivity is ``max_j |q_j|`` (``≤ Δu``; 1 for counting queries, where
  the noise is Algorithm 1's ``Laplace(2T/ε)``).

Both go through :class:`~dpexplorer.privacy.PrivateData`, which records
every spend; the budgets are split so that the ledger's total is exactly ``ε``.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numba
import numpy as np

from ..core import registry
from ..privacy import PrivateData
from ..privacy.noise import Laplace, NoiseModel
from ..queries.matrix import (
    Dense,
    Diagonal,
    Grouping,
    Identity,
    Kronecker,
    Matrix,
    Ones,
    Permutation,
    Product,
    RectangleQueries,
    Sparse,
    Total,
    Transpose,
    VStack,
    Weighted,
    _Ranges,
)

__all__ = ["mwem", "auto_rounds", "max_abs_entry", "split_epsilon", "multiplicative_weights",
           "AUTO_T_SCALE", "AUTO_T_EXPONENT", "AUTO_T_MIN", "AUTO_T_MAX", "DEFAULT_TOTAL_SHARE",
           "DEFAULT_UPDATES_PER_ROUND", "SCAN_CHUNK_ENTRIES"]

#: Fraction of ε spent on the noisy record count when ``total=None``.
DEFAULT_TOTAL_SHARE = 0.05

#: Multiplicative-weights passes over all measurements per round: DPComp ``mwemND_engine``'s
#: ``updateround = 100`` (the public implementation behind DPBench's and DAWA's MWEM figures).
DEFAULT_UPDATES_PER_ROUND = 100

#: Largest block (entries) materialised at once when scanning an unstructured
#: implicit matrix column block by column block.
SCAN_CHUNK_ENTRIES = 2**22


#: ``T="auto"`` (:func:`auto_rounds`): ``T = AUTO_T_SCALE · s^AUTO_T_EXPONENT``, fitted on
#: the DPBench histograms that are not DAWA's seven (see :func:`auto_rounds`).
AUTO_T_SCALE = 0.26
AUTO_T_EXPONENT = 0.5
#: Bounds of ``T="auto"``: the range of ``T`` the rule was fitted over.
AUTO_T_MIN, AUTO_T_MAX = 3, 450


# ----------------------------------------------------------------- helpers
def auto_rounds(N: float, epsilon: float, n: int, m: int) -> int:
    """MWEM's number of rounds from public quantities and the number of records.

    ``T = clip(round(0.26 · sqrt(s)), 3, 450)`` with the signal
    ``s = N·ε·sqrt(ln n) / ln m``.

    *Form.*  DPBench's MWEM* (Hay et al., SIGMOD 2016) sets ``T`` from the
    signal strength ``N·ε`` (scale × ε) alone.  Here ``N·ε`` enters in the
    combination of MWEM's accuracy bound (Hardt, Ligett & McSherry, NeurIPS
    2012, Theorem 2.2: worst error ``≤ 2N·sqrt(ln n / T) + 10·T·ln m / ε``,
    which is balanced at ``T ∝ (N·ε·sqrt(ln n) / ln m)^(2/3)``), so that the
    domain size ``n`` and the number of queries ``m`` count as the theorem
    says.  The bound is a worst case; the exponent and the constant are fitted.

    *Fit* (data that is not the evaluation data).  The 11 DPBench 1D
    histograms outside DAWA's seven (MDSALARY, MDSALARY-FA, LC-REQ-ALL/-F1/-F2,
    LC-DTIR-ALL/-F1/-F2, BIDS-ALL/-FJ/-FM; N = 1.0e5 to 7.7e6), n = 4096,
    2000 uniform random ranges (DAWA, Li et al. PVLDB 2014, Sec. 5.1),
    ε ∈ {1, 0.1, 0.03, 0.01, 0.001} (55 cells, ``N·ε`` from 100 to 7.7e6),
    the registered defaults (100 passes, number of records measured with 5 % of
    ε), ``T ∈ {3, 6, 12, 25, 50, 100, 200}`` with 3 seeded runs each, and
    ``T ∈ {200, 300, 450}`` with 2 more runs in the 12 cells with
    ``N·ε ≥ 3e5`` (where 200 was often best); mean L1 error per query.
    Minimising the mean over the cells of ``ln(error(T_rule) / min_T error)``
    (error interpolated linearly in ``ln T``) gives the exponent 0.51; at the
    exponent 1/2 the constant is 0.257 (0.244 to 0.264 when any one dataset
    is left out) and the mean excess error is ``exp(0.127) − 1 ≈ 14 %``
    (worst cell 1.8×).  The bounds are the range of ``T`` measured; a round
    costs time growing with the rounds before it (about 6 s of CPU per run at
    ``T = 450``, n = 4096, 2000 ranges; 0.7 s at ``T = 200``).  Only ``n = 4096`` and ``m = 2000`` were
    measured: the ``n`` and ``m`` dependence is the theorem's, not fitted
    (``ln n`` and ``ln m`` are taken at least ``ln 2``).

    *Budget.*  None of its own: ``N`` is either public (``mwem(total=N)``)
    or MWEM's noisy count ``N̂`` (``total_share·ε``, already spent), and
    ``ε``, ``n``, ``m`` are public, so ``T`` is post-processing.

    Parameters
    ----------
    N : float
        Number of records (counts), public or noisy; values below 1 count as 1.
    epsilon : float
        ε of the whole MWEM run (> 0).
    n : int
        Number of cells of the data vector (≥ 1).
    m : int
        Number of workload queries MWEM selects from (≥ 1).

    Returns
    -------
    int
        ``T`` in ``[AUTO_T_MIN, AUTO_T_MAX]`` = [3, 450].

    Raises
    ------
    ValueError
        If ``N`` is not a finite number, ``epsilon`` not a positive finite
        number, or ``n``/``m`` not a positive integer.
    """
    if not (isinstance(N, int | float | np.integer | np.floating) and math.isfinite(N)):
        raise ValueError(f"N (number of records) must be a finite number, got {N!r}")
    if not (isinstance(epsilon, int | float | np.integer | np.floating) and math.isfinite(epsilon)
            and epsilon > 0):
        raise ValueError(f"epsilon must be a positive finite number, got {epsilon!r}")
    for name, v in (("n (cells)", n), ("m (queries)", m)):
        if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    s = max(float(N), 1.0) * float(epsilon) * math.sqrt(math.log(max(int(n), 2))) \
        / math.log(max(int(m), 2))
    return int(min(AUTO_T_MAX, max(AUTO_T_MIN, round(AUTO_T_SCALE * s ** AUTO_T_EXPONENT))))


def split_epsilon(epsilon: float, weights) -> list[float]:
    """Split ``epsilon`` in proportion to ``weights`` so the pieces sum to it exactly.

    The ledger adds spends with :func:`math.fsum`; the largest piece absorbs
    the rounding so that ``math.fsum(pieces) == epsilon`` holds bit for bit.

    Parameters
    ----------
    epsilon : float
        Total budget, ε > 0.
    weights : sequence of float
        Positive relative shares.

    Returns
    -------
    list of float
        Positive budgets, one per weight.

    Raises
    ------
    ValueError
        If a weight is not positive or a piece would not be positive.
    """
    w = np.asarray(weights, dtype=float)
    if w.ndim != 1 or w.size == 0 or not np.all(np.isfinite(w)) or not np.all(w > 0):
        raise ValueError(f"budget shares must be positive finite numbers, got {weights!r}")
    parts = [float(epsilon * wi / w.sum()) for wi in w]
    j = int(np.argmax(w))
    others = [i for i in np.argsort(w) if i != j]
    for attempt in range(9):
        rest = Fraction(epsilon) - sum((Fraction(p) for i, p in enumerate(parts) if i != j), Fraction(0))
        parts[j] = float(rest)
        for _ in range(64):
            s = math.fsum(parts)
            if s == epsilon:
                break
            parts[j] = float(np.nextafter(parts[j], math.inf if s < epsilon else -math.inf))
        if math.fsum(parts) == epsilon and min(parts) > 0:
            return parts
        if not others:
            break
        # the other pieces put the exact sum half an ulp from ε, where rounding to even never
        # lands on ε (seen: ε = 12.883922655594036 in shares 0.05/0.95): lower one a little
        k = others[attempt % len(others)]
        parts[k] = float(np.nextafter(parts[k], 0.0))
    raise ValueError(f"cannot split ε = {epsilon!r} into {w.size} positive pieces")


def _split_rest(epsilon: float, spent: float, rest: float, k: int) -> list[float]:
    """``k`` equal shares of ``rest`` such that ``math.fsum([spent, *shares]) == epsilon`` bit for bit.

    ``spent + rest`` is ``epsilon`` (from :func:`split_epsilon`); the first
    share absorbs the rounding of the ledger's :func:`math.fsum`.
    """
    parts = split_epsilon(rest, [1.0] * k)
    for _ in range(64):
        s = math.fsum([spent, *parts])
        if s == epsilon:
            break
        parts[0] = float(np.nextafter(parts[0], math.inf if s < epsilon else -math.inf))
    if math.fsum([spent, *parts]) != epsilon or min(parts) <= 0:  # pragma: no cover - defensive
        raise ValueError(f"cannot split ε = {epsilon!r} into {k} positive rounds after {spent!r}")
    return parts


def max_abs_entry(W: Matrix) -> float:
    """Largest absolute entry ``max_ij |W_ij|`` of a query matrix, without materialising it.

    The sensitivity of MWEM's selection utility ``|q_i(x) − q_i(A)|`` under
    add/remove-one-record (module docstring).  Closed forms for the engine's
    structured matrices (ranges, rectangles, identity, totals, groupings and
    permutations have 0/1 entries; weights scale, Kronecker products multiply,
    stacks take the maximum); any other matrix is scanned in column blocks of
    at most :data:`SCAN_CHUNK_ENTRIES` entries through its implicit product.

    Parameters
    ----------
    W : Matrix, shape (m, n)

    Returns
    -------
    float
        ``max_ij |W_ij|`` (an upper bound for ``Product`` with a diagonal factor).
    """
    if isinstance(W, _Ranges | RectangleQueries | Identity | Ones | Permutation | Grouping):
        return 1.0
    if isinstance(W, Dense):
        return float(np.max(np.abs(W.array)))
    if isinstance(W, Sparse):
        return float(np.max(np.abs(W.matrix.data))) if W.matrix.nnz else 0.0
    if isinstance(W, Diagonal):
        return float(np.max(np.abs(W.v)))
    if isinstance(W, Weighted):
        return abs(W.weight) * max_abs_entry(W.base)
    if isinstance(W, VStack):
        return max(max_abs_entry(b) for b in W.blocks)
    if isinstance(W, Kronecker):
        return float(math.prod(max_abs_entry(f) for f in W.factors))
    if isinstance(W, Transpose):
        return max_abs_entry(W.base)
    if isinstance(W, Product) and isinstance(W.right, Permutation | Grouping):
        return max_abs_entry(W.left)  # columns of L reindexed
    if isinstance(W, Product) and isinstance(W.right, Diagonal):
        return max_abs_entry(W.left) * float(np.max(np.abs(W.right.v)))  # upper bound
    return _scan_max_abs(W)


def _scan_max_abs(W: Matrix) -> float:
    step = max(1, SCAN_CHUNK_ENTRIES // max(W.m, 1))
    best = 0.0
    for start in range(0, W.n, step):
        stop = min(W.n, start + step)
        E = np.zeros((W.n, stop - start))
        E[np.arange(start, stop), np.arange(stop - start)] = 1.0
        best = max(best, float(np.max(np.abs(W._matmat(E)))))
    return best


def _row_getter(W: Matrix):
    """``i -> W[i, :]`` as a dense ``(n,)`` array, without materialising ``W``."""
    if isinstance(W, _Ranges):
        lo, hi = W.ranges()

        def range_row(i):
            r = np.zeros(W.n)
            r[lo[i]:hi[i] + 1] = 1.0
            return r
        return range_row

    def row(i):
        e = np.zeros(W.m)
        e[i] = 1.0
        return W.rmatvec(e)
    return row


def _distribution(logA: np.ndarray, N: float) -> np.ndarray:
    """``N · softmax(logA)``: the synthetic data vector (counts summing to ``N``)."""
    p = np.exp(logA - logA.max())
    return N * p / p.sum()


@numba.njit(cache=True)
def _mw_passes(logA, indptr, indices, values, m, N, passes):
    """``passes`` sweeps of multiplicative-weights updates over the measured queries (in order).

    The queries are the rows of a CSR matrix (``indptr``, ``indices``,
    ``values``; only their non-zero entries are visited).  Each update is
    Algorithm 1's step 3 for one measured query ``q`` with noisy answer
    ``m``: ``A(j) ∝ A(j)·exp(q(j)·(m − q(A))/(2N))``, renormalised to sum
    ``N``.  Kept in the log domain (``logA``, exact); the linear weights
    ``w = exp(logA − shift)`` are refreshed from it at every sweep, so cells
    far below the others never underflow for good.
    """
    n = logA.size
    k = indptr.size - 1
    w = np.empty(n)
    for _ in range(passes):
        shift = logA.max()
        total = 0.0
        for j in range(n):
            w[j] = math.exp(logA[j] - shift)
            total += w[j]
        for i in range(k):
            qa = 0.0
            for p in range(indptr[i], indptr[i + 1]):
                qa += values[p] * w[indices[p]]
            c = (m[i] - N * qa / total) / (2.0 * N)
            f1 = math.exp(c)  # the factor of every cell with q(j) = 1 (counting queries)
            for p in range(indptr[i], indptr[i + 1]):
                j = indices[p]
                qj = values[p]
                step = qj * c
                logA[j] += step
                grown = w[j] * (f1 if qj == 1.0 else math.exp(step))
                total += grown - w[j]
                w[j] = grown
            if not (total > 1e-200 and total < 1e200):  # rescale before the float range ends
                shift = logA.max()
                total = 0.0
                for j in range(n):
                    w[j] = math.exp(logA[j] - shift)
                    total += w[j]
    return logA - logA.max()


def _refine_atoms(labels: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Split the cells' atoms by the values of one more query row: ``(n,)`` labels ``0..k-1``.

    Two cells are in the same atom when every measured query gives them the
    same coefficient (the same column of ``Q``).
    """
    _, code = np.unique(q, return_inverse=True)
    key = labels.astype(np.int64) * (int(code.max()) + 1) + code
    return np.unique(key, return_inverse=True)[1].reshape(-1)


def _mw_on_atoms(logA: np.ndarray, Q: np.ndarray, m: np.ndarray, N: float, passes: int,
                 labels: np.ndarray) -> np.ndarray:
    """:func:`_mw_passes` run on the atoms of ``Q`` (identical columns) instead of the cells.

    Every update multiplies all cells of an atom by the same factor, so the
    cells' weights within an atom keep their ratios and the sweeps only need
    each atom's total weight: the result equals the cell-level sweeps (up to
    rounding) at a cost proportional to the number of atoms -- at most
    ``2k + 1`` for ``k`` intervals, whatever ``n``.  Post-processing only.
    """
    k_atoms = int(labels.max()) + 1
    rep = np.empty(k_atoms, dtype=np.int64)
    rep[labels] = np.arange(labels.size)
    top = np.full(k_atoms, -np.inf)
    np.maximum.at(top, labels, logA)  # per-atom shift: no atom underflows to weight 0
    la = top + np.log(np.bincount(labels, np.exp(logA - top[labels]), minlength=k_atoms))
    Qa = Q[:, rep]
    rows, cols = np.nonzero(Qa)  # row-major: the rows' entries in order
    indptr = np.concatenate(([0], np.cumsum(np.bincount(rows, minlength=Qa.shape[0]))))
    la_new = _mw_passes(la.copy(), indptr.astype(np.int64), cols.astype(np.int64),
                        np.ascontiguousarray(Qa[rows, cols], dtype=float),
                        np.ascontiguousarray(m, dtype=float), float(N), int(passes))
    out = logA + (la_new - la)[labels]
    return out - out.max()


def multiplicative_weights(logA: np.ndarray, queries: np.ndarray, answers: np.ndarray, N: float,
                           passes: int = 1) -> np.ndarray:
    """Multiplicative-weights updates of a synthetic histogram (Hardt et al. 2012, Alg. 1 step 3).

    Post-processing of noisy answers: public inputs only.

    Parameters
    ----------
    logA : ndarray, shape (n,)
        Log-weights of the synthetic data (any additive constant).
    queries : ndarray, shape (k, n)
        The measured queries, one per row, in the order they are applied.
    answers : ndarray, shape (k,)
        Their noisy answers (counts).
    N : float
        Number of records the synthetic data sums to (> 0).
    passes : int
        Sweeps over all ``k`` queries (≥ 1).

    Returns
    -------
    ndarray, shape (n,)
        The updated log-weights (max 0); ``N·softmax`` of it is the synthetic data.
    """
    Q = np.ascontiguousarray(np.atleast_2d(np.asarray(queries, dtype=float)))
    m = np.ascontiguousarray(np.asarray(answers, dtype=float).ravel())
    if Q.shape[0] != m.size or Q.shape[1] != np.size(logA):
        raise ValueError(f"queries of shape {Q.shape} do not match {m.size} answers over "
                         f"{np.size(logA)} cells")
    labels = np.zeros(Q.shape[1], dtype=np.int64)
    for q in Q:
        labels = _refine_atoms(labels, q)
    return _mw_on_atoms(np.array(logA, dtype=float), Q, m, float(N), int(passes), labels)


# -------------------------------------------------------------- mechanism
def mwem(data: PrivateData, W: Matrix, noise: NoiseModel, rng: np.random.Generator,
         T: int | str = "auto", total: float | None = None, total_share: float = DEFAULT_TOTAL_SHARE,
         average: bool = False,
         updates_per_round: int = DEFAULT_UPDATES_PER_ROUND) -> registry.Estimate:
    """Run MWEM (Hardt, Ligett, McSherry, NeurIPS 2012, Algorithm 1) on a workload.

    Parameters
    ----------
    data : PrivateData
        Private data vector ``x: (n,)`` of non-negative counts.
    W : Matrix, shape (m, n)
        Workload of linear queries (any implicit matrix; its rows are never
        all materialised -- answers come from ``W @ v``, one selected row at
        a time from ``Wᵀ e_i`` or the interval bounds of a range workload).
    noise : Laplace
        ``noise.epsilon`` is the ε of the whole run.
    rng : numpy.random.Generator or dpexplorer.privacy.OS_CSPRNG
        Source of all randomness (selection and Laplace noise): seeded
        Generator (simulation) or the OS CSPRNG (release).
    T : int or "auto"
        Number of rounds.  ``"auto"`` (default): :func:`auto_rounds` of the
        number of records ``N`` (public ``total``, else the noisy count),
        ``ε``, ``n`` and ``m`` -- ``round(0.26·sqrt(N·ε·sqrt(ln n)/ln m))``
        clipped to [3, 450], fitted on DPBench histograms outside DAWA's
        seven; it spends no ε of its own.  An integer fixes ``T`` (DPComp's
        ``mwemND_engine`` and the earlier default: 10).
    total : float, optional
        Public number of records ``N`` (spends nothing).  ``None`` (default)
        estimates it privately with ``total_share·ε`` (see ``total_share``).
    total_share : float
        Fraction of ε spent on the noisy total when ``total is None``,
        default :data:`DEFAULT_TOTAL_SHARE` = 0.05; ``N̂ = 1ᵀx +
        Laplace(1/(total_share·ε))`` (Total sensitivity 1), clipped below at
        1 record (post-processing) so the multiplicative weights stay defined.
    average : bool
        ``False`` (default, as DPComp's ``mwemND_engine``): return the final
        iterate ``A_T``.  ``True``: the average of the iterates
        ``A_1, ..., A_T`` (Algorithm 1's output; see Notes for the index
        convention).
    updates_per_round : int
        Multiplicative-weights passes per round.  ``1`` is Algorithm 1: one
        update, with the new measurement.  ``k > 1`` runs ``k`` passes over
        *all* measurements taken so far, in the order taken -- the paper's
        practical improvement of reusing past measurements, as DPComp's
        ``mwemND_engine`` does with ``updateround = 100`` (the default,
        :data:`DEFAULT_UPDATES_PER_ROUND`).  Post-processing: no extra ε.

    Returns
    -------
    Estimate
        ``x_hat``, shape ``(n,)`` (counts summing to ``N``); ``info`` with
        ``epsilon_total`` (ε spent on ``N``; 0 if public), ``epsilon_per_round``
        (``ε_round``, split half/half), ``selected`` (row indices, one per
        round), ``measurements`` (noisy answers), ``T``, ``total`` (``N`` used),
        ``utility_sensitivity`` (Δu) and ``average``.

    Raises
    ------
    NotApplicableError
        For non-Laplace noise (MWEM is pure ε-DP here).
    ValueError
        For bad parameters (``T`` neither a positive integer nor ``"auto"``, ...),
        a workload/data size mismatch, or an all-zero workload.
    BudgetExceededError
        If the ledger's budget would be exceeded.

    Notes
    -----
    Algorithm 1 outputs ``avg_{i<T} A_i``; this implementation averages the
    ``T`` iterates that follow the updates, ``A_1..A_T``, so that every
    measurement (including the last) contributes and the data-independent
    starting point ``A_0 = N·uniform`` is not mixed into the output.
    """
    if not isinstance(noise, Laplace):
        raise registry.NotApplicableError(
            f"mwem uses the Laplace and exponential mechanisms (pure ε-DP); got "
            f"{type(noise).__name__} noise")
    if W.n != data.n:
        raise ValueError(f"the workload is over {W.n} cells but the data vector has {data.n}")
    auto = isinstance(T, str) and T == "auto"
    if not auto and (isinstance(T, bool) or not isinstance(T, int | np.integer) or T < 1):
        raise ValueError(f"T (number of rounds) must be a positive integer or 'auto', got {T!r}")
    if (isinstance(updates_per_round, bool) or not isinstance(updates_per_round, int | np.integer)
            or updates_per_round < 1):
        raise ValueError(f"updates_per_round must be a positive integer, got {updates_per_round!r}")
    updates_per_round = int(updates_per_round)
    if total is None:
        if not (0.0 < total_share < 1.0):
            raise ValueError(f"total_share must be in (0, 1), got {total_share!r}")
    elif not (np.isfinite(total) and total > 0):
        raise ValueError(f"a public total must be a positive finite number, got {total!r}")

    n, eps = data.n, noise.epsilon
    delta_u = max_abs_entry(W)
    if not delta_u > 0:
        raise ValueError(f"workload {W.name!r} has no non-zero entry: nothing to answer")

    if total is None:
        eps_total, eps_rounds = split_epsilon(eps, [total_share, 1.0 - total_share])
        y = data.measure(Total(n), Laplace(eps_total), rng,
                         label="mwem: noisy total (number of records)")
        N = max(float(y[0]), 1.0)
    else:
        eps_total, eps_rounds, N = 0.0, eps, float(total)
    # the rule sees only public inputs and the noisy total (post-processing): no extra ε
    T = auto_rounds(N, eps, n, W.m) if auto else int(T)
    rounds = _split_rest(eps, eps_total, eps_rounds, 2 * T)

    row = _row_getter(W)
    logA = np.zeros(n)
    A = _distribution(logA, N)
    acc = np.zeros(n)
    selected: list[int] = []
    history: list[tuple[np.ndarray, float]] = []
    Q = np.zeros((T, n))  # measured queries, one row per round (public)
    answers = np.zeros(T)
    labels = np.zeros(n, dtype=np.int64)  # atoms of the measured queries (identical columns)
    for t in range(T):
        eps_sel, eps_meas = rounds[2 * t], rounds[2 * t + 1]
        WA = W.matvec(A)  # public: answers of the synthetic data

        def scores(x, WA=WA):
            return np.abs(W.matvec(x) - WA)

        i = data.noisy_max(scores, delta_u, eps_sel, rng,
                           label=f"mwem round {t + 1}/{T}: select query")
        q = row(i)
        sens_q = float(np.max(np.abs(q))) or delta_u  # an all-zero row: any positive scale is safe
        def answer(x: np.ndarray, q: np.ndarray = q) -> np.ndarray:
            return np.array([q @ x])

        m_i = float(data.measure_function(answer, sens_q, eps_meas, rng,
                                          label=f"mwem round {t + 1}/{T}: measure query {i}")[0])
        selected.append(i)
        history.append((q, m_i))
        Q[t], answers[t] = q, m_i
        labels = _refine_atoms(labels, q)
        if updates_per_round == 1:  # Algorithm 1: one update with the new measurement
            logA = _mw_on_atoms(logA, Q[t:t + 1], answers[t:t + 1], N, 1, labels)
        else:  # passes over all measurements so far (DPComp's updateround)
            logA = _mw_on_atoms(logA, Q[:t + 1], answers[:t + 1], N, updates_per_round, labels)
        A = _distribution(logA, N)
        acc += A

    x_hat = acc / T if average else A
    info = {
        "epsilon_total": eps_total,
        "epsilon_per_round": (eps - eps_total) / T,
        "selected": selected,
        "measurements": [m for _, m in history],
        "T": T,
        "total": N,
        "utility_sensitivity": delta_u,
        "average": bool(average),
    }
    return registry.Estimate(x_hat, info)


def _runner(data, W, noise, rng, **params):
    return mwem(data, W, noise, rng, **params)


if "mwem" not in registry.REGISTRY:
    registry.register(registry.Mechanism(
        "mwem", "MWEM", None,
        "Exponential mechanism picks the worst-answered query, Laplace measures it, "
        "multiplicative weights update a synthetic histogram.",
        "Hardt, Ligett, McSherry, NeurIPS 2012, Algorithm 1 (updates as DPComp's mwemND_engine)",
        params={"T": "auto", "total": None, "total_share": DEFAULT_TOTAL_SHARE, "average": False,
                "updates_per_round": DEFAULT_UPDATES_PER_ROUND},
        data_dependent=True, runner=_runner, audit=registry.AuditSpec("mwem"),
    ))
