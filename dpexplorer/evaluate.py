"""Reproducible empirical evaluation of mechanisms on data (DAWA Sec. 5.1 methodology).

:func:`evaluate` runs every registered mechanism asked for on every data
vector, workload instance and privacy budget ε, several times, and reports
the empirical error of the workload answers with confidence intervals::

    import dpexplorer as dpx
    from dpexplorer.evaluate import evaluate, uniform_ranges

    df = evaluate(["identity", "hb", "dawa"], ["ADULT", "NETTRACE"],
                  [uniform_ranges(2000)], epsilons=[0.01, 0.1, 0.5])

Methodology (Li, Hay, Miklau, Wang, "A Data- and Workload-Aware Algorithm
for Range Queries Under Differential Privacy", PVLDB 2014, Sec. 5.1): each
random workload is instantiated with 5 seeds (``workload_seeds``, generated
once and shared by all mechanisms, datasets and budgets), each instance is
run ``trials`` (3) times, and the error is averaged over workloads and
trials.  The primary metric is DAWA's *average L1 error per query*
``(1/m) ‖W x − W x̂‖₁`` (Sec. 2, "average error on W"), in counts and *not*
scaled by the number of records (DPBench, Hay et al. SIGMOD 2016, reports a
scaled error; divide by ``x.sum()`` to get it).

Reproducibility: the noise of every run comes from
``numpy.random.default_rng(SeedSequence([seed, key...]))`` where the key is
a stable hash of the run's mechanism label, dataset name, workload name,
workload seed, ε and the trial number.  Numbers therefore depend only on
``seed`` and the cell they belong to -- not on the execution order, the
number of workers, Dask or local processes, nor on which other mechanisms or
datasets are in the same call.

Inference (``inferences=``, :mod:`dpexplorer.core.inference`): every
mechanism can be run with each inference that applies to it
(:func:`dpexplorer.mechanism.inferences`), one row each, with the
``inference`` column saying which.  The seed key does not include the
inference, so the inferences of one mechanism see the same noise in every
run: their errors are a paired comparison.
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import importlib
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import scipy.stats

from . import datasets as _datasets
from . import mechanism as _mechanism
from .core import inference as _inference
from .core import registry
from .core.parallel import blas_limit
from .core.registry import NotApplicableError
from .privacy import PrivateData, check_shape
from .privacy.noise import Laplace
from .queries import limits
from .queries import workloads as _workloads
from .queries.matrix import Matrix, as_matrix

__all__ = [
    "evaluate", "uniform_ranges", "clustered_ranges", "large_clustered_ranges", "RangeWorkload",
    "SUMMARY_COLUMNS", "RAW_COLUMNS",
]

#: Columns of the summary table (one row per mechanism, dataset, workload, ε).
SUMMARY_COLUMNS = [
    "mechanism", "inference", "dataset", "workload", "n", "epsilon", "runs",
    "l1", "l1_ci_low", "l1_ci_high", "rmse", "rmse_ci_low", "rmse_ci_high",
    "rel", "rel_ci_low", "rel_ci_high", "seconds", "note",
]

#: Columns of the per-run table (``raw=True``).
RAW_COLUMNS = [
    "mechanism", "inference", "dataset", "workload", "workload_seed", "n", "m", "epsilon", "trial",
    "l1", "mse", "rmse", "rel", "seconds", "epsilon_spent", "note",
]

#: Modules that register further mechanisms when imported; imported on demand
#: when a name is not (yet) in the registry.
_PLUGIN_MODULES = ("dpexplorer.adaptive.dawa",)


# ------------------------------------------------------------- workloads
@dataclass(frozen=True)
class RangeWorkload:
    """Picklable factory of DAWA's random interval workloads: ``f(n, seed) -> Matrix``.

    Parameters
    ----------
    m : int
        Number of intervals per instance (DAWA Sec. 5.1 uses 2000).
    kind : {"uniform", "clustered", "large_clustered"}
        See :func:`dpexplorer.queries.workloads.random_ranges`.

    Notes
    -----
    Calling it with a 2D data shape raises
    :class:`~dpexplorer.core.registry.NotApplicableError` (intervals are 1D),
    which :func:`evaluate` reports in its ``note`` column.
    """

    m: int = 2000
    kind: str = "uniform"

    def __post_init__(self):
        limits.whole_number(self.m, "RangeWorkload: m (queries)", limit="queries")
        _workloads.random_ranges(1, 1, self.kind, 0)  # validates kind

    @property
    def name(self) -> str:
        """Name used in the ``workload`` column, e.g. ``uniform_ranges(m=2000)``."""
        return f"{self.kind}_ranges(m={self.m})"

    def __call__(self, n, seed: int) -> Matrix:
        if not isinstance(n, int | np.integer):
            shape = tuple(n)
            if len(shape) != 1:
                raise NotApplicableError(f"{self.name} is a 1D workload; the data has shape {shape}")
            n = shape[0]
        return _workloads.random_ranges(int(n), self.m, self.kind, seed)


def uniform_ranges(m: int = 2000) -> RangeWorkload:
    """DAWA's uniform interval workload factory: ``f(n, seed) = random_ranges(n, m, "uniform", seed)``.

    Parameters
    ----------
    m : int
        Number of intervals (2000 in DAWA Sec. 5.1).

    Returns
    -------
    RangeWorkload
        A picklable callable ``(n, seed) -> Matrix`` of shape ``(m, n)``.
    """
    return RangeWorkload(m, "uniform")


def clustered_ranges(m: int = 2000) -> RangeWorkload:
    """DAWA's clustered interval workload factory (5 centres, std 256)."""
    return RangeWorkload(m, "clustered")


def large_clustered_ranges(m: int = 2000) -> RangeWorkload:
    """DAWA's large clustered interval workload factory (5 centres, std 1024)."""
    return RangeWorkload(m, "large_clustered")


# ------------------------------------------------------------- tasks
@dataclass(frozen=True)
class _MechSpec:
    label: str
    name: str
    params: dict
    modules: tuple[str, ...]
    inference: str | None = None  # None: the mechanism's default


@dataclass
class _Task:
    """One chunk of work: every workload instance and trial of one (mechanism, dataset, workload, ε)."""

    order: tuple[int, int, int, int]
    mech: _MechSpec
    dataset: str
    workload: str
    epsilon: float
    trials: int
    seed: int
    gamma: float
    instances_key: tuple = field(default=())

    def context(self) -> str:
        how = "" if self.mech.inference is None else f" with {self.mech.inference} inference"
        return (f"while evaluating mechanism {self.mech.label!r} ({self.mech.name}){how} on dataset "
                f"{self.dataset!r}, workload {self.workload!r}, ε = {self.epsilon:g}")


def _stable_key(value) -> int:
    """A 64-bit integer from ``repr(value)``, the same in every process and Python run."""
    return int.from_bytes(hashlib.blake2b(repr(value).encode(), digest_size=8).digest(), "little")


def _seed_sequence(seed: int, label: str, dataset: str, workload: str, wseed, epsilon: float,
                   trial: int) -> np.random.SeedSequence:
    return np.random.SeedSequence([int(seed), _stable_key(("mechanism", label)),
                                   _stable_key(("dataset", dataset)),
                                   _stable_key(("workload", workload)), _stable_key(("wseed", wseed)),
                                   _stable_key(("epsilon", float(epsilon))), int(trial)])


def _ensure_registered(name: str, modules: Sequence[str]) -> None:
    """Import the module that registers ``name`` (workers started by spawn/forkserver, Dask)."""
    if name in registry.REGISTRY:
        return
    for mod in (*modules, *_PLUGIN_MODULES):
        try:
            importlib.import_module(mod)
        except ImportError:
            continue
        if name in registry.REGISTRY:
            return


def _add_context(exc: BaseException, context: str) -> None:
    if not any(str(note).startswith(context) for note in getattr(exc, "__notes__", ())):
        exc.add_note(context)


def _nan_row(task: _Task, wseed, n, m, trial, note) -> dict:
    return dict(mechanism=task.mech.label, inference=_inference_label(task.mech),
                dataset=task.dataset, workload=task.workload,
                workload_seed=wseed, n=n, m=m, epsilon=task.epsilon, trial=trial,
                l1=np.nan, mse=np.nan, rmse=np.nan, rel=np.nan, seconds=np.nan,
                epsilon_spent=np.nan, note=note)


def _inference_label(mech: _MechSpec) -> str:
    """The ``inference`` column of a mechanism spec (its default when none was asked for)."""
    if mech.inference is not None:
        return mech.inference
    try:
        return _mechanism.inferences(mech.name)[0]
    except KeyError:  # not registered in this process: reported by the run itself
        return _inference.DEFAULT_INFERENCE


def _run_chunk(task: _Task, x: np.ndarray, instances: list) -> list[dict]:
    """Run one chunk; a pure function of its arguments (shipped to local processes or Dask).

    ``instances`` is a list of ``(workload_seed, W)``.  Returns one dict per
    run (see :data:`RAW_COLUMNS`).  A :class:`NotApplicableError` becomes a
    row with a ``note``; any other exception is re-raised with a note saying
    which mechanism, dataset, workload, ε and trial it came from.
    """
    mech = task.mech
    _ensure_registered(mech.name, mech.modules)
    noise = Laplace(task.epsilon)
    x_flat = np.asarray(x, dtype=float).ravel()
    rows = []
    for wseed, W in instances:
        y = W.matvec(x_flat)  # true answers, counts, shape (m,)
        denom = np.maximum(np.abs(y), task.gamma)
        for trial in range(task.trials):
            data = PrivateData(x)
            rng = np.random.default_rng(_seed_sequence(task.seed, mech.label, task.dataset,
                                                       task.workload, wseed, task.epsilon, trial))
            where = f"{task.context()}, workload seed {wseed!r}, trial {trial}"
            t0 = time.perf_counter()
            try:
                est = _mechanism.run(mech.name, data, W, noise, rng, inference=mech.inference,
                                     **mech.params)
            except NotApplicableError as exc:
                rows.append(_nan_row(task, wseed, W.n, W.m, trial, f"not applicable: {exc}"))
                continue
            except Exception as exc:
                _add_context(exc, where)
                raise
            seconds = time.perf_counter() - t0
            spent = data.ledger.epsilon
            if not math.isclose(spent, task.epsilon, rel_tol=1e-9, abs_tol=1e-15) or data.ledger.delta:
                raise RuntimeError(f"privacy accounting mismatch {where}: the ledger recorded "
                                   f"ε = {spent!r}, δ = {data.ledger.delta!r}; expected ε = "
                                   f"{task.epsilon!r}, δ = 0")
            x_hat = np.asarray(est.x_hat, dtype=float).ravel()
            if x_hat.shape != x_flat.shape:
                raise ValueError(f"mechanism returned x_hat of shape {np.shape(est.x_hat)}, "
                                 f"expected ({x_flat.size},), {where}")
            # strategies answering by local least squares (OPT+) give their own answers
            answers = W.matvec(x_hat) if est.answers is None else np.asarray(est.answers, dtype=float)
            err = answers - y
            abs_err = np.abs(err)
            mse = float(np.mean(err * err))
            used = est.info.get("inference", _inference_label(mech))
            rows.append(dict(mechanism=mech.label, inference=used, dataset=task.dataset,
                             workload=task.workload,
                             workload_seed=wseed, n=W.n, m=W.m, epsilon=task.epsilon, trial=trial,
                             l1=float(abs_err.mean()), mse=mse, rmse=math.sqrt(mse),
                             rel=float(np.mean(abs_err / denom)), seconds=seconds,
                             epsilon_spent=spent, note=None))
    return rows


# ------------------------------------------------------------- input normalisation
def _mechanism_specs(mechanisms, params) -> list[_MechSpec]:
    if isinstance(mechanisms, str | tuple):
        mechanisms = [mechanisms]
    mechanisms = list(mechanisms)
    if not mechanisms:
        raise ValueError("mechanisms is empty; give at least one registry name, e.g. ['identity']")
    if params is not None and not isinstance(params, Mapping):
        raise ValueError(f"params must be a dict {{mechanism name or label: {{param: value}}}}, got {params!r}")
    params = dict(params or {})
    specs, labels = [], set()
    own: Any  # a Mapping, checked below
    for entry in mechanisms:
        if isinstance(entry, str):
            label, name, own = entry, entry, {}
        elif isinstance(entry, tuple | list) and len(entry) in (2, 3):
            label, name = entry[0], entry[1]
            own = entry[2] if len(entry) == 3 else {}
            if not isinstance(label, str) or not isinstance(name, str) or not isinstance(own, Mapping):
                raise ValueError(f"a mechanism entry must be a name or (label, name, params), got {entry!r}")
        else:
            raise ValueError(f"a mechanism entry must be a name or (label, name, params), got {entry!r}")
        if name not in registry.REGISTRY:
            _ensure_registered(name, ())
        if name not in registry.REGISTRY:
            raise ValueError(f"unknown mechanism {name!r}; registered: {sorted(registry.names())}")
        if label in labels:
            raise ValueError(f"mechanism label {label!r} appears twice; give (label, name, params) "
                             "tuples with distinct labels to run one mechanism with different parameters")
        labels.add(label)
        mech = registry.get(name)
        modules = tuple(sorted({f.__module__ for f in (mech.build, mech.runner)
                                if f is not None and getattr(f, "__module__", None)}))
        merged = {**params.get(name, {}), **(params.get(label, {}) if label != name else {}), **own}
        try:
            mech.check_params(dict(merged))
        except ValueError as exc:
            raise ValueError(f"mechanism {label!r}: {exc}") from None
        specs.append(_MechSpec(label, name, merged, modules))
    unknown = set(params) - {s.label for s in specs} - {s.name for s in specs}
    if unknown:
        raise ValueError(f"params given for {sorted(unknown)}, which are not among the mechanisms "
                         f"{[s.label for s in specs]}")
    return specs


def _expand_inferences(specs: list[_MechSpec], inferences) -> list[_MechSpec]:
    """One spec per mechanism and applicable inference (:func:`dpexplorer.mechanism.inferences`).

    ``None``: each mechanism with its default.  A mechanism none of the asked
    inferences applies to (MWEM, EFPA, ...) keeps its own (``"native"``).
    """
    if inferences is None:
        return specs
    if isinstance(inferences, str):
        inferences = [inferences]
    inferences = list(inferences)
    if not inferences:
        raise ValueError(f"inferences is empty; give some of {list(_inference.INFERENCES)} or None")
    for name in inferences:
        _inference.check_inference(name)
    if len(set(inferences)) != len(inferences):
        raise ValueError(f"duplicate values in inferences {inferences}")
    out: list[_MechSpec] = []
    for spec in specs:
        allowed = _mechanism.inferences(spec.name)
        chosen = [i for i in inferences if i in allowed] or [allowed[0]]
        out.extend(replace(spec, inference=i) for i in chosen)
    return out


def _dataset_dict(data_in, directory) -> dict[str, np.ndarray]:
    if isinstance(data_in, Mapping):
        if not data_in:
            raise ValueError("datasets is empty; give at least one data vector")
        out = {}
        for name, x in data_in.items():
            if isinstance(x, str | os.PathLike):
                raise ValueError(f"dataset {name!r}: give the data vector itself (an array of counts), "
                                 f"not a path; load it with dpexplorer.datasets.from_npy")
            out[str(name)] = _datasets.check_counts(x, name=str(name))
        return out
    if isinstance(data_in, str | os.PathLike):
        d = Path(data_in)
        if not d.is_dir():
            raise ValueError(f"datasets={str(data_in)!r} is not a directory; pass a directory of .npy "
                             "histograms, a list of DPBench names, or a dict name -> data vector")
        return _directory_datasets(d)
    if isinstance(data_in, np.ndarray):
        raise ValueError("datasets must be named: pass {'name': x} rather than a bare array")
    names = list(data_in)
    if not names:
        raise ValueError("datasets is empty; give at least one DPBench name, directory or data vector")
    bad = [n for n in names if not isinstance(n, str)]
    if bad:
        raise ValueError(f"a list of datasets must hold DPBench names (str), got {bad[:3]!r}; "
                         "pass a dict name -> data vector for your own histograms")
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate dataset names in {names}")
    return {name: _datasets.load_dpbench(name, directory) for name in names}


def _directory_datasets(d: Path) -> dict[str, np.ndarray]:
    """Every 1D ``.npy`` histogram in ``d`` (or in ``d/1D`` for a DPBench folder)."""
    src = d / "1D" if (d / "1D").is_dir() else d
    out = {}
    for f in sorted(src.glob("*.npy")):
        shape = _datasets.npy_shape(f)
        if len(shape) != 1:
            continue
        out[_datasets.PAPER_NAMES.get(f.stem, f.stem)] = _datasets.from_npy(f)
    if not out:
        raise ValueError(f"no 1D .npy histograms found in {src}")
    return out


def _workload_dict(w_in) -> dict[str, Matrix | Callable[..., Any]]:
    if isinstance(w_in, Mapping):
        items = [(str(k), v) for k, v in w_in.items()]
    else:
        if isinstance(w_in, Matrix) or callable(w_in):
            w_in = [w_in]
        items = []
        for i, w in enumerate(w_in):
            name: str | None
            if isinstance(w, Matrix):
                name = w.name
            else:
                name = getattr(w, "name", None)
                if not isinstance(name, str):
                    name = getattr(w, "__name__", None)
                if not isinstance(name, str) or name == "<lambda>":
                    name = f"workload{i}"
            items.append((name, w))
    if not items:
        raise ValueError("workloads is empty; give at least one workload, e.g. [uniform_ranges(2000)]")
    names = [k for k, _ in items]
    dup = sorted({k for k in names if names.count(k) > 1})
    if dup:
        raise ValueError(f"workload names {dup} appear more than once; pass a dict name -> workload")
    out: dict[str, Matrix | Callable[..., Any]] = {}
    for name, w in items:
        if isinstance(w, Matrix) or not callable(w):
            try:
                w = as_matrix(w)
            except Exception as exc:
                raise ValueError(f"workload {name!r} must be a Matrix or a factory f(n, seed) -> Matrix, "
                                 f"got {type(w).__name__}: {exc}") from None
        out[name] = w
    return out


def _epsilon_list(epsilons) -> list[float]:
    if isinstance(epsilons, int | float | np.number):
        epsilons = [epsilons]
    epsilons = list(epsilons)
    if not epsilons:
        raise ValueError("epsilons is empty; give at least one privacy budget ε > 0")
    out = []
    for e in epsilons:
        try:
            v = Laplace(e).epsilon  # the noise models' own check of ε
        except ValueError as exc:
            raise ValueError(f"every ε must be valid for Laplace noise: {exc}") from None
        out.append(v)
    if len(set(out)) != len(out):
        raise ValueError(f"duplicate values in epsilons {out}")
    return out


def _positive_int(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{what} must be an integer >= 1, got {value!r}")
    return int(value)


def _data_arg(shape: tuple[int, ...]):
    """What a workload factory is called with: ``n`` for 1D data, the shape for 2D."""
    return shape[0] if len(shape) == 1 else shape


# ------------------------------------------------------------- execution
def _init_worker(threads: int | None) -> None:
    """Initializer of the local worker processes: fix their BLAS threads for good."""
    blas_limit(threads)  # threadpool_limits applies on construction; the process is ours


def _evaluate_keys(task) -> tuple:
    """Dask scatter keys of :func:`_run_chunk`'s arguments: the data vector and the workload instances."""
    return ("data", task.dataset), ("workload",) + task.instances_key


def _execute(tasks, payload, client, n_jobs, progress, mp_context, blas_threads, *,
             worker=_run_chunk, keys=_evaluate_keys, desc="evaluate", unit="task", weight=None):
    """Run ``tasks``; yield each task with its result as they complete.

    The parallel machinery of :func:`evaluate`, shared with
    :func:`dpexplorer.audit.audit`: ``worker(task, *payload(task))`` runs
    inline (``n_jobs == 1`` or one task), in local worker processes, or on a
    Dask ``client`` (``keys(task)`` names each payload argument, so that
    every distinct object is scattered once).  ``weight(task)`` is the task's
    share of the tqdm bar (default 1).  The worker must be a picklable,
    module-level function.
    """
    from tqdm.auto import tqdm

    class _Bar(tqdm):
        monitor_interval = 0  # no monitor thread: local workers may be forked

    weight = weight or (lambda task: 1)
    bar = _Bar(total=sum(weight(t) for t in tasks), disable=not progress, unit=unit, desc=desc)
    try:
        if client is not None:
            done = _execute_dask(tasks, payload, client, worker, keys)
        elif n_jobs == 1 or len(tasks) <= 1:
            done = ((task, worker(task, *payload(task))) for task in tasks)
        else:
            done = _execute_pool(tasks, payload, n_jobs, mp_context, blas_threads, worker)
        for task, result in done:
            bar.update(weight(task))
            yield task, result
    finally:
        bar.close()


def _execute_pool(tasks, payload, n_jobs, mp_context, blas_threads, worker):
    ctx = None
    if mp_context is not None:
        import multiprocessing

        ctx = multiprocessing.get_context(mp_context) if isinstance(mp_context, str) else mp_context
    with cf.ProcessPoolExecutor(max_workers=min(n_jobs, len(tasks)), mp_context=ctx,
                                initializer=_init_worker, initargs=(blas_threads,)) as ex:
        futures = {ex.submit(worker, task, *payload(task)): task for task in tasks}
        try:
            for fut in cf.as_completed(futures):
                task = futures[fut]
                try:
                    rows = fut.result()
                except BaseException as exc:
                    _add_context(exc, task.context())
                    raise
                yield task, rows
        except BaseException:
            for fut in futures:
                fut.cancel()
            raise


def _execute_dask(tasks, payload, client, worker, keys):
    try:
        from dask.distributed import as_completed
    except ImportError as exc:  # pragma: no cover - client given without dask installed
        raise ImportError("evaluate(client=...) needs dask.distributed: pip install 'dask[distributed]'") from exc
    # ship each data vector and each list of workload instances once, not per task
    scattered: dict[tuple, object] = {}

    def remote(key, obj):
        if key not in scattered:
            scattered[key] = client.scatter([obj], hash=False)[0]
        return scattered[key]

    futures = {}
    for task in tasks:
        args = [remote(key, obj) for key, obj in zip(keys(task), payload(task), strict=True)]
        fut = client.submit(worker, task, *args, pure=False)
        futures[fut] = task
    try:
        for fut in as_completed(list(futures)):
            task = futures[fut]
            try:
                rows = fut.result()
            except BaseException as exc:
                _add_context(exc, task.context())
                raise
            yield task, rows
    except BaseException:
        client.cancel(list(futures))
        raise


# ------------------------------------------------------------- summary
def _mean_ci(values: np.ndarray, confidence: float) -> tuple[float, float, float]:
    k = values.size
    if k == 0:
        return np.nan, np.nan, np.nan
    mean = float(values.mean())
    if k < 2:
        return mean, np.nan, np.nan
    half = float(scipy.stats.t.ppf(0.5 + confidence / 2.0, k - 1) * values.std(ddof=1) / math.sqrt(k))
    return mean, mean - half, mean + half


def _summarize(raw: pd.DataFrame, confidence: float) -> pd.DataFrame:
    out = []
    keys = ["mechanism", "inference", "dataset", "workload", "epsilon"]
    for key, g in raw.groupby(keys, sort=False):
        ok = g[g["note"].isna()]
        l1 = _mean_ci(ok["l1"].to_numpy(float), confidence)
        rel = _mean_ci(ok["rel"].to_numpy(float), confidence)
        mse = _mean_ci(ok["mse"].to_numpy(float), confidence)
        rmse = tuple(math.sqrt(max(v, 0.0)) if np.isfinite(v) else np.nan for v in mse)
        notes = g["note"].dropna()
        note = None
        if len(notes):
            uniq = list(dict.fromkeys(notes))
            note = "; ".join(uniq)
            if len(ok):
                note = f"{len(notes)} of {len(g)} runs: {note}"
        out.append(dict(zip(keys, key, strict=True), n=int(g["n"].iloc[0]), runs=len(ok),
                        l1=l1[0], l1_ci_low=l1[1], l1_ci_high=l1[2],
                        rmse=rmse[0], rmse_ci_low=rmse[1], rmse_ci_high=rmse[2],
                        rel=rel[0], rel_ci_low=rel[1], rel_ci_high=rel[2],
                        seconds=float(ok["seconds"].mean()) if len(ok) else np.nan, note=note))
    return pd.DataFrame(out, columns=SUMMARY_COLUMNS)


# ------------------------------------------------------------- evaluate
def evaluate(mechanisms, datasets, workloads, epsilons, trials: int = 3, seed: int = 0,
             client=None, n_jobs: int | None = None, progress: bool = True, params=None, *,
             workload_seeds: Sequence[int] = range(5), gamma: float = 1.0, directory=None,
             raw: bool = False, confidence: float = 0.95, mp_context=None,
             blas_threads: int | None = 1, inferences=None) -> pd.DataFrame:
    """Empirical error of mechanisms on data, workloads and budgets (DAWA Sec. 5.1).

    For every mechanism, dataset, workload instance, ε and trial, a fresh
    :class:`~dpexplorer.privacy.PrivateData` is made and the mechanism is run
    through :func:`dpexplorer.mechanism.run` with ``Laplace(ε)`` and a
    Generator seeded from ``seed`` and the run's identity (see the module
    docstring).  The errors of the workload answers ``ŷ = W x̂`` against the
    true answers ``y = W x`` are recorded per run and summarised with
    Student-t confidence intervals.

    Parameters
    ----------
    mechanisms : list of str or (label, name, params)
        Registry names (:func:`dpexplorer.core.registry.names`), or tuples to run
        one mechanism under several parameter settings with distinct labels.
    datasets : dict, list of str, or path
        ``{name: x}`` with ``x`` an array of counts of shape ``(n,)`` or
        ``(n1, n2)`` (validated by :func:`dpexplorer.datasets.check_counts`);
        or DPBench names (``"ADULT"``, ``"NETTRACE.n4096"``, ...) loaded from
        ``directory``; or a directory, of which every 1D ``.npy`` histogram is
        evaluated (a DPBench folder's ``1D/`` subfolder, or the directory
        itself).
    workloads : list or dict
        Workload factories ``f(n, seed) -> Matrix`` (``n`` an int for 1D
        data, the shape ``(n1, n2)`` for 2D data), e.g.
        :func:`uniform_ranges`, or fixed workloads (:class:`Matrix` or
        arrays, shape ``(m, n)``); a dict gives them names.  A factory is
        instantiated once per dataset shape and workload seed, and the
        instance is shared by all mechanisms and budgets; a fixed workload is
        one instance.
    epsilons : sequence of float
        Privacy budgets ε > 0; each run spends exactly ε (checked on the
        ledger).
    trials : int
        Runs per workload instance (DAWA: 3).
    seed : int
        Base seed (>= 0) of all the noise.
    client : dask.distributed.Client, optional
        Run the tasks on this Dask cluster instead of local processes.
    n_jobs : int, optional
        Local worker processes (default ``os.cpu_count()``); 1 runs inline
        in this process, as does a single task.
    progress : bool
        Show a ``tqdm`` progress bar over completed tasks.
    params : dict, optional
        ``{mechanism name or label: {param: value}}``: parameter overrides
        passed to the mechanism (a tuple entry's own params take precedence).
    workload_seeds : sequence of int
        Seeds of the workload instances of each factory (DAWA: 5 workloads).
    gamma : float
        Smoothing constant γ > 0 (counts) of the relative error
        ``|ŷ − y| / max(|y|, γ)``, which keeps queries with a true answer of
        0 from dividing by zero.
    directory : str or path, optional
        DPBench folder for names (default
        :func:`dpexplorer.datasets.default_dpbench_dir`).
    raw : bool
        Return the per-run rows (:data:`RAW_COLUMNS`) instead of the summary.
    confidence : float
        Level of the confidence intervals, in (0, 1).
    mp_context : str or multiprocessing context, optional
        Start method of the local processes (default: the platform's).  With
        ``"spawn"``/``"forkserver"`` custom mechanisms must be registered by an
        importable module.
    blas_threads : int or None
        Threads of the BLAS/LAPACK pools during the runs, set with
        ``threadpoolctl`` when it is installed (default 1: one per worker
        process, no oversubscription; it also keeps the floating-point
        results identical across execution modes).  ``None`` leaves them
        alone.  Dask worker processes get 1 thread from Dask itself.
    inferences : sequence of str, optional
        Inferences to run every mechanism with (``"least_squares"``,
        ``"nonnegative"``; :mod:`dpexplorer.core.inference`), one row per
        mechanism and applicable inference (:func:`dpexplorer.mechanism.inferences`:
        DAWA's stage 2 takes both; a mechanism with its own estimate, such
        as MWEM, gets one row with ``"native"``).  ``None`` (default): each
        mechanism's default.  The inferences of a mechanism share the noise
        of every run (paired comparison).

    Returns
    -------
    pandas.DataFrame
        One row per (mechanism, inference, dataset, workload, ε), in input
        order, with the columns of :data:`SUMMARY_COLUMNS`:

        * ``inference``: how ``x̂`` was inferred (``"least_squares"``,
          ``"nonnegative"``, or ``"native"`` for a mechanism's own estimate);
        * ``n``: number of cells; ``runs``: successful runs
          (``len(workload_seeds) × trials`` for a factory);
        * ``l1``: mean over runs of the average L1 error per query
          ``(1/m) Σ_i |ŷ_i − y_i|`` (DAWA's metric; counts, unscaled);
        * ``rmse``: ``sqrt`` of the mean over runs of the per-run mean
          squared error ``(1/m) Σ_i (ŷ_i − y_i)²`` (counts), comparable
          to :func:`dpexplorer.core.error.rmse`;
        * ``rel``: mean over runs of ``(1/m) Σ_i |ŷ_i − y_i| / max(|y_i|, γ)``;
        * ``*_ci_low``, ``*_ci_high``: ``confidence`` intervals of the mean
          over the runs, ``mean ± t_{k−1} · s / sqrt(k)``
          (``scipy.stats.t.ppf``, ``k`` runs, NaN when ``k < 2``); for
          ``rmse``, the square roots of the interval of the mean squared
          error.  Runs on different workload instances are pooled, so the
          interval covers the workload-sampling variation too;
        * ``seconds``: mean wall-clock seconds of one ``mechanism.run`` call;
        * ``note``: why runs are missing (e.g. a mechanism's
          :class:`~dpexplorer.core.registry.NotApplicableError`), else None.

        ``df.attrs`` holds ``seed``, ``trials``, ``workload_seeds``,
        ``gamma``, ``confidence`` and ``methodology``.  With ``raw=True``,
        one row per run (:data:`RAW_COLUMNS`: also ``workload_seed``, ``m``,
        ``trial``, ``mse``, ``epsilon_spent``).

    Raises
    ------
    ValueError
        Before any run: unknown mechanism names or inferences, empty inputs, ε ≤ 0,
        ``trials`` < 1, a bad ``seed``, ``gamma``, ``n_jobs`` or
        ``confidence``, invalid data vectors, unknown DPBench names, a fixed
        workload that fits none of the datasets, or a factory whose workload
        does not have the dataset's number of cells.
    Exception
        An exception other than ``NotApplicableError`` raised by a mechanism
        propagates with a note naming the mechanism, dataset, workload, ε
        and trial.
    RuntimeError
        If a run's ledger does not record exactly ε.

    References
    ----------
    Li, Hay, Miklau, Wang. A Data- and Workload-Aware Algorithm for Range
    Queries Under Differential Privacy. PVLDB 7(5), 2014, Sec. 2 and 5.1.
    Hay, Machanavajjhala, Miklau, Chen, Zhang. Principled Evaluation of
    Differentially Private Algorithms using DPBench. SIGMOD 2016.
    """
    # ---- validate everything before any work starts
    specs = _expand_inferences(_mechanism_specs(mechanisms, params), inferences)
    eps_list = _epsilon_list(epsilons)
    trials = _positive_int(trials, "trials")
    seed = limits.whole_number(seed, "evaluate: seed", minimum=0)
    if n_jobs is None:
        n_jobs = os.cpu_count() or 1
    n_jobs = _positive_int(n_jobs, "n_jobs")
    if blas_threads is not None:
        blas_threads = _positive_int(blas_threads, "blas_threads")
    try:
        gamma = float(gamma)
    except (TypeError, ValueError):
        raise ValueError(f"gamma must be a positive finite number of counts, got {gamma!r}") from None
    if not (math.isfinite(gamma) and gamma > 0):
        raise ValueError(f"gamma must be a positive finite number of counts, got {gamma!r}")
    if not (isinstance(confidence, float | int) and 0 < confidence < 1):
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    wseeds = list(workload_seeds)
    if not wseeds:
        raise ValueError("workload_seeds is empty; give at least one seed, e.g. range(5)")
    if len(set(map(repr, wseeds))) != len(wseeds):
        raise ValueError(f"duplicate values in workload_seeds {wseeds}")
    wl = _workload_dict(workloads)
    data = _dataset_dict(datasets, directory)

    # ---- workload instances: generated once per (workload, data shape), shared by everything
    instances: dict[tuple, list | str] = {}
    for wname, w in wl.items():
        fits_any = False
        for dname, x in data.items():
            key = (wname, x.shape)
            if key in instances:
                fits_any = fits_any or not isinstance(instances[key], str)
                continue
            if isinstance(w, Matrix):
                try:
                    check_shape(x.shape, w.domain, f"dataset {dname!r}")
                except ValueError as exc:
                    instances[key] = f"not applicable: workload {wname!r}: {exc}"
                else:
                    instances[key] = [(None, w)]
                    fits_any = True
                continue
            built: list[tuple[Any, Matrix]] | str = []
            for s in wseeds:
                try:
                    W = as_matrix(w(_data_arg(x.shape), s))
                except NotApplicableError as exc:
                    built = f"not applicable: {exc}"
                    break
                except Exception as exc:
                    _add_context(exc, f"while building workload {wname!r} for shape {x.shape}, seed {s!r}")
                    raise
                if W.n != x.size:
                    raise ValueError(f"workload factory {wname!r} returned a workload over {W.n} cells "
                                     f"for dataset {dname!r} with {x.size} cells")
                assert isinstance(built, list)  # it becomes a refusal text only just before `break`
                built.append((s, W))
            instances[key] = built
            fits_any = fits_any or not isinstance(built, str)
        if isinstance(w, Matrix) and not fits_any:
            raise ValueError(f"fixed workload {wname!r} over the domain {w.domain} fits none of the "
                             f"datasets (their shapes: { {k: v.shape for k, v in data.items()} })")

    # ---- tasks: one per (mechanism, dataset, workload, ε); the data ships once per task
    tasks, skipped = [], []
    for mi, spec in enumerate(specs):
        for di, (dname, x) in enumerate(data.items()):
            for wi, wname in enumerate(wl):
                inst = instances[(wname, x.shape)]
                for ei, eps in enumerate(eps_list):
                    task = _Task((mi, di, wi, ei), spec, dname, wname, eps, trials, seed, gamma,
                                 (wname, x.shape))
                    if isinstance(inst, str):
                        skipped.append((task, [_nan_row(task, None, x.size, np.nan, None, inst)]))
                    else:
                        tasks.append(task)

    def payload(task):
        return data[task.dataset], instances[task.instances_key]

    results = dict((t.order, rows) for t, rows in skipped)
    with blas_limit(blas_threads):
        for task, rows in _execute(tasks, payload, client, n_jobs, progress, mp_context, blas_threads):
            results[task.order] = rows

    raw_rows = [r for order in sorted(results) for r in results[order]]
    raw_df = pd.DataFrame(raw_rows, columns=RAW_COLUMNS)
    raw_df["note"] = raw_df["note"].astype(object).where(raw_df["note"].notna(), None)
    out = raw_df if raw else _summarize(raw_df, confidence)
    out.attrs.update(
        seed=seed, trials=trials, workload_seeds=wseeds, gamma=gamma, confidence=confidence,
        methodology=("DAWA (Li et al. PVLDB 2014) Sec. 5.1: workload instances x trials, "
                     "average L1 error per query (1/m)||Wx - Wx_hat||_1, unscaled counts"),
    )
    return out
