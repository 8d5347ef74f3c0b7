"""The Compare page's work as tasks (:class:`CompareWork`, a mixin of
:class:`~dpexplorer.ui.compare_view.ComparePage`): strategies built once per (workload, mechanism,
noise norm) into ``session.cache`` (one :func:`~dpexplorer.ui.tasks.build_lock` per entry), kept as
unit-noise figures that ε and δ rescale; the optimisers last, each row shown once built, on
:data:`~dpexplorer.ui.tasks.OPTIMIZER_THREADS` (worker processes: :mod:`dpexplorer.ui.workers`).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import pandas as pd

import dpexplorer as dpx
from dpexplorer.accuracy import EPSILON_GRID

from . import workers
from .optimize_view import SHUTDOWN, Cancelled, ProgressRelay
from .serving import no_connection
from .tasks import OPTIMIZER_THREADS, build_lock
from .tasks import task_message as _message

__all__ = ["CompareWork", "cached_entry", "EPS_GRID", "NOT_RUN", "OPTIMIZING", "CANCELLED"]

log = logging.getLogger("dpexplorer.ui.compare_view")  # the page's log (DPEXPLORER_LOG_LEVEL)

#: ε grid of the privacy–accuracy curve (the session's ε is added to it).
EPS_GRID = EPSILON_GRID

NOT_RUN = ("optimiser not run yet: press 'Run optimisers' (or tick 'Run optimisers "
           "automatically'); it may take a while")

OPTIMIZING = "optimising… (its row fills in when it is built; see the progress bar)"

CANCELLED = "cancelled: press 'Run optimisers' to build it"


def cached_entry(cache: dpx.StrategyCache, W, name: str, noise):
    """``cache.entry(W, name, noise)`` if it is already built, else None (never builds)."""
    entries = getattr(cache, "_entries", None)
    if entries is None:  # pragma: no cover - another cache implementation
        return None
    return entries.get((W, name, noise.norm, ()))


@dataclass
class _Base:
    """Unit-noise figures of one comparison: everything ε and δ rescale."""

    W: dpx.matrix.Matrix
    norm: int
    frame: pd.DataFrame  # dpx.compare columns + unit_tse, registry order
    svdb: float
    failures: list = field(default_factory=list)
    pending: list = field(default_factory=list)  # optimisers not run (deferred or cancelled)
    objective: str = "sum"  # what the table ranks by (dpx.compare's objective)

    @property
    def failed(self) -> bool:
        """Every analytic mechanism raised: nothing to show."""
        finite = np.isfinite(self.frame["unit_tse"].to_numpy(dtype=float)) if len(self.frame) else []
        return bool(self.failures) and not np.any(finite)

    def with_frame(self, frame: pd.DataFrame, failures: list, pending: list) -> _Base:
        return _Base(self.W, self.norm, frame, self.svdb, list(failures), list(pending),
                     self.objective)


@dataclass
class _PerQuery:
    """Per-query errors of one (workload, mechanism, norm) for unit noise variance (times
    ``sqrt(variance_per_unit)``: the per-query RMSE and mean RMSE per range length)."""

    unit_std: np.ndarray | None  # sqrt(per-query variance / variance_per_unit)
    lengths: np.ndarray | None = None
    note: str = ""
    length_values: np.ndarray | None = None  # distinct range lengths
    length_means: np.ndarray | None = None  # mean unit_std per distinct length

    @property
    def size(self) -> int:
        return 0 if self.unit_std is None else self.unit_std.size


def _params(mech, objective: str) -> dict:
    """The builder parameters of ``mech`` for ``objective`` (as :func:`dpexplorer.compare` passes them)."""
    return {"objective": objective} if "objective" in mech.params else {}


def _row(name: str, note: str, causal: bool) -> pd.DataFrame:
    """A :func:`dpexplorer.compare` row of ``name`` without an analytic error (failed, not run);
    ``causal``: :func:`dpexplorer.streaming.is_causal` of the workload."""
    mech = dpx.registry.get(name)
    return pd.DataFrame([{
        "mechanism": mech.name, "label": mech.label, "rmse": math.nan, "kind": "analytic",
        "ratio": math.nan, "seconds": math.nan, "rows": math.nan, "sensitivity": math.nan,
        "data_dependent": False, "online": bool(mech.online and causal),
        "description": mech.description, "source": mech.source,
        "note": note, "unit_tse": math.nan, "unit_max": math.nan}])


def _in_order(frame: pd.DataFrame, names: list) -> pd.DataFrame:
    """``frame``'s rows in the order of ``names`` (stable), as dpx.compare before its sort."""
    order = {n: i for i, n in enumerate(names)}
    return frame.sort_values("mechanism", key=lambda s: s.map(order),
                             kind="stable").reset_index(drop=True)


class CompareWork:
    """The Compare page's background work (a mixin of :class:`ComparePage`)."""

    #: Largest workload (queries) whose per-query errors are computed.
    max_per_query_rows = 10_000_000
    #: Workload comparisons and per-query vectors kept (least recently used dropped).
    keep = 8
    #: Per-query errors kept in memory, summed over the cached vectors.
    max_cached_queries = 20_000_000
    #: Least seconds between two partial updates while optimisers run (each redraws the page).
    merge_interval = 1.5
    #: Most seconds the first comparison waits for the browser to draw the page, and seconds the
    #: optimisers wait after it has: else they slow the first render (~4 s → 5-10 s page load).
    load_wait = 30.0
    load_grace = 1.5

    def _fail(self, message: str) -> None:
        self._set(error=message)
        self.session.report(message)

    def _start(self, key, W, noise) -> None:
        self._token += 1
        self._pending = key
        self._cancel = False
        _, now, _ = self._plan(W, key[2], noise, key[3])
        self._set(busy=True, progress=0, total=max(1, len(now)),
                  status=f"Building strategies for {W.name} ({W.m:,} queries × {W.n:,} cells)…")
        self._submit(self._compare_job, self._token, key, W, noise, list(key[2]),
                     self.auto_optimize)

    def _plan(self, W, names, noise, objective: str) -> tuple[dict, list, list]:
        """``(reasons, now, later)`` of the data-independent ``names``: why some are not built
        (:meth:`_not_built`), those built first, the optimisers built after them."""
        indep = [n for n in names if not dpx.registry.get(n).data_dependent]
        reasons = {n: r for n in indep if (r := self._not_built(W, n, noise)) is not None}
        later = [n for n in indep if n not in reasons
                 and self._built_later(W, n, noise, objective)]
        return reasons, [n for n in indep if n not in reasons and n not in later], later

    def _built_later(self, W, name: str, noise, objective: str) -> bool:
        """Whether ``name`` is an optimiser neither the cache nor the server
        (:func:`~dpexplorer.ui.workers.kept`) has: built after the others."""
        mech = dpx.registry.get(name)
        if not mech.optimizer or cached_entry(self.cache, W, name, noise) is not None:
            return False
        return not (self.cache.build is workers.build
                    and workers.kept(mech, W, noise, _params(mech, objective)))

    def _stopped(self, token) -> bool:
        """Whether the build under ``token`` must stop: superseded, cancelled, or tab closed."""
        return token != self._token or self._cancel or self._closed()

    def _closed(self) -> bool:
        """Whether the drawn page's tab has no connection left (then :meth:`stop`): its optimisers
        stop at their next report, not when Bokeh ends the session 15-32 s later."""
        doc = self._doc() if self._doc is not None else None
        if doc is None or not self._loaded.is_set() or not no_connection(doc):
            return False
        if not self._cancel:
            log.debug("the browser tab of a Compare page closed: its work stops")
            self.stop()
        return True

    def _post_status(self, post, token, key=None, **values) -> None:
        """Post ``values`` (status, progress) unless superseded or the work is over: the comparison
        of ``key``, or without one the optimisers; one waiting status per kind, the newest."""
        slot = key is None
        with self._queued_guard:
            waiting = slot in self._statuses
            self._statuses[slot] = (token, key, values)
        if waiting:
            return  # the callback already posted applies these values

        def apply():
            with self._queued_guard:
                token, key, values = self._statuses.pop(slot)
            if token != self._token:
                return
            if key is not None and self._pending != key:
                return  # the comparison is already shown
            if key is None and not self.optimizing:
                return  # the optimisers are done
            self._set(**values)
        post(apply)

    def _build_row(self, post, token, W, noise, name, cancellable: bool = True,
                   objective: str = "sum") -> tuple[pd.DataFrame, str | None]:
        """Worker: ``(row, failure)``, the :func:`dpexplorer.compare` row of ``name`` with
        ``unit_tse`` and the failure (None on success); a superseded build (``cancellable``: or
        cancelled) raises :class:`Cancelled`.  Progress goes to :attr:`optimization`."""
        cache, mech = self.cache, dpx.registry.get(name)
        serial = next(self._serials)
        progress = self.optimization
        stop = ((lambda: self._stopped(token)) if cancellable else
                (lambda: token != self._token or self._closed()))
        post(lambda: progress.begin(serial, mech.label))
        relay = ProgressRelay(post, lambda *a: progress.update(serial, *a), stop=stop)
        try:
            with dpx.optimization.progress(relay), build_lock(cache, (W, name, noise.norm)):
                if stop():  # stopped while waiting for the lock
                    raise Cancelled(name)
                df = dpx.compare(W, noise, [name], cache=cache, objective=objective)
                params = _params(mech, objective)
                df["unit_tse"] = cache.entry(W, name, noise, params)[1]
                df["unit_max"] = (cache.max_variance(W, name, noise, params)[0]
                                  if objective == "max" else math.nan)
            return df, None
        except Exception as exc:  # noqa: BLE001 - one mechanism failing is reported
            if not isinstance(exc, ValueError):
                log.exception("mechanism %s failed", name)
            failed = _row(name, f"failed: {_message(exc)}", dpx.streaming.is_causal(W))
            return failed, f"{mech.label}: {_message(exc)}"
        finally:
            post(lambda: progress.end(serial))

    def _compare_job(self, post, token, key, W, noise, names, auto=True) -> None:
        """Worker: build every strategy, keep the unit-noise figures; the optimisers not built yet
        come after the others are shown (``auto``: :meth:`_optimize_job`)."""
        t0 = time.perf_counter()
        if not self._loaded.is_set():  # n = 1024: first paint 3.3-6.4 s while computing, 1.0-2.0 s after
            self._wait_for_load()
        # logged at DEBUG (DPEXPLORER_LOG_LEVEL=debug): where a comparison's time goes
        timings = {"load wait": time.perf_counter() - t0}
        try:
            cache, causal = self.cache, dpx.streaming.is_causal(W)
            dep = [n for n in names if dpx.registry.get(n).data_dependent]
            reasons, now, later = self._plan(W, names, noise, key[3])
            rows = {n: _row(n, reason, causal) for n, reason in reasons.items()}
            failures = []
            t1 = time.perf_counter()
            with build_lock(cache, ("svdb", W)):
                svdb = cache.svdb(W)
            timings["SVD bound"] = time.perf_counter() - t1
            for i, name in enumerate(now):
                if token != self._token or self._closed():
                    return  # superseded or tab closed: the strategies built so far stay cached
                # the total too: an optimiser another session finished since _start is built now
                self._post_status(post, token, key, progress=i, total=max(1, len(now)),
                                  status=f"Building {dpx.registry.get(name).label} "
                                         f"({i + 1}/{len(now)})…")
                t1 = time.perf_counter()
                try:
                    rows[name], failure = self._build_row(post, token, W, noise, name,
                                                          cancellable=False, objective=key[3])
                    timings[name] = time.perf_counter() - t1
                except Cancelled:
                    if token != self._token:
                        return  # superseded (new workload or noise norm)
                    rows[name] = _row(name, CANCELLED, causal)
                    later.append(name)
                    continue
                if failure:
                    failures.append(failure)
            for name in later:
                rows[name] = _row(name, OPTIMIZING if auto else NOT_RUN, causal)
            frames = [rows[n] for n in names if n in rows]
            if dep:
                try:
                    df = dpx.compare(W, noise, dep, cache=cache, objective=key[3])
                    df["unit_tse"] = df["unit_max"] = math.nan
                    frames.append(df)
                except Exception as exc:  # noqa: BLE001
                    failures.append(f"data-dependent mechanisms: {_message(exc)}")
            frame = _in_order(pd.concat(frames, ignore_index=True), names) if frames else \
                pd.DataFrame()
            base = _Base(W, noise.norm, frame, svdb, failures, later, key[3])
        except Exception as exc:  # noqa: BLE001 - e.g. the SVD bound failing
            log.exception("comparison failed")
            message = _message(exc)  # `exc` is unbound once the except block ends
            post(lambda: self._job_failed(token, key, message))
            return
        run = (auto and bool(later) and token == self._token and not self._cancel
               and not base.failed)
        timings["total"] = time.perf_counter() - t0
        log.debug("comparison of %s (n = %d) built: %s", W.name, W.n,
                  ", ".join(f"{k} {v:.2f} s" for k, v in timings.items()))
        posted = time.perf_counter()

        def done():
            log.debug("comparison of %s shown %.2f s after it was built", W.name,
                      time.perf_counter() - posted)
            self._job_done(token, key, base, running=run)
        post(done)
        if run:  # then the optimisers, the table already shown (a thread that only waits)
            self._submit(self._optimize_after_load, token, key, base, noise, list(later),
                         executor=OPTIMIZER_THREADS)

    def _wait_for_load(self) -> None:
        """Wait until the browser has drawn the page, :attr:`load_wait` s at most, or the exit."""
        deadline = time.monotonic() + self.load_wait
        while not SHUTDOWN.is_set() and time.monotonic() < deadline:
            if self._loaded.wait(timeout=0.25):
                return

    def _optimize_after_load(self, post, token, key, base: _Base, noise, names) -> None:
        """Worker: :meth:`_optimize_job`, once the browser has drawn the page (first load)."""
        if not self._loaded.is_set():
            self._wait_for_load()
            time.sleep(self._grace)
        t0 = time.perf_counter()
        log.debug("optimisers of %s start: %s", base.W.name, ", ".join(names))
        self._optimize_job(post, token, key, base, noise, names)
        log.debug("optimisers of %s done in %.2f s", base.W.name, time.perf_counter() - t0)

    def _job_failed(self, token, key, message) -> None:
        if self._pending == key:
            self._pending = None
        if token == self._token:
            self._set(busy=False, status="")
            self._fail(f"Comparison failed: {message}")

    def _job_done(self, token, key, base: _Base, running: bool = False) -> None:
        if self._pending == key:
            self._pending = None
        self._bases[key] = base
        while len(self._bases) > self.keep:
            self._bases.popitem(last=False)
        if running:
            self._opt_pending = key
        if token != self._token:
            return
        self._set(busy=False, progress=self.total, status="",
                  **({"optimizing": True} if running else {}))
        if base.failures:
            self._fail("Every mechanism failed, showing the last result: "
                       + "; ".join(base.failures) if base.failed else
                       "Some mechanisms failed (showing the others): " + "; ".join(base.failures))
        self.update()

    def run_optimizers(self) -> bool:
        """Build the optimisers left out of the shown comparison (:attr:`pending`) in the
        background, each row shown when built; ``False`` (and a message) without a comparison."""
        with self._lock:
            key = self._shown
            base = self._bases.get(key) if key is not None else None
            if base is None:
                if self._pending is not None:
                    return True  # the comparison being built runs them (auto_optimize)
                self._fail("Optimisers not run: there is no comparison yet")
                return False
            if not base.pending or self._opt_pending == key or self._pending is not None:
                return True  # nothing to run, already running, or a comparison is starting
            try:
                noise = self.session.noise_model()
            except ValueError as exc:
                self._fail(_message(exc))
                return False
            if noise.norm != base.norm:
                return True  # the comparison for the other norm is being built
            self._cancel = False
            self._opt_pending = key
            frame = base.frame.copy()
            frame.loc[frame["mechanism"].isin(base.pending), "note"] = OPTIMIZING
            base = self._bases[key] = base.with_frame(frame, base.failures, base.pending)
            self._set(optimizing=True, pending=[],
                      status=f"Running {len(base.pending)} optimiser(s)…")
            self._show(key, base, noise)
            self._submit(self._optimize_job, self._token, key, base, noise, list(base.pending),
                         executor=OPTIMIZER_THREADS)
            return True

    def _session_destroyed(self, _context) -> None:
        try:
            self.stop()
        finally:  # its redraws are dropped (the queue also notices a closed session itself)
            self._forget_redraws()

    def stop(self) -> None:
        """Stop all background work of the page (its session ended): nothing more is shown."""
        self._token += 1
        self._cancel = True
        self._loaded.set()
        first = getattr(self, "accuracy_first", None)
        if first is not None:  # and the accuracy-first simulation study
            first.stop()

    def cancel(self) -> None:
        """Stop the running optimisation (those not built stay pending) and untick
        :attr:`auto_optimize`: 'Run optimisers' builds them."""
        self._cancel = True
        self.auto_optimize = False

    def _optimize_job(self, post, token, key, base: _Base, noise, names) -> None:
        """Worker: build the pending optimisers of ``base``, adding each row when it is built."""
        done, failures = {}, list(base.failures)
        last, unreported = time.monotonic(), []

        def merged(pending):
            old = base.frame
            frame = pd.concat([done[m].reindex(columns=old.columns) if m in done
                               else old.iloc[[i]] for i, m in enumerate(old["mechanism"])],
                              ignore_index=True)
            return base.with_frame(frame, failures, pending)

        try:
            for i, name in enumerate(names):
                if self._stopped(token):
                    break
                self._post_status(post, token, status=(
                    f"Optimising {dpx.registry.get(name).label} ({i + 1}/{len(names)}); the "
                    f"table shows the other mechanisms meanwhile"))
                try:
                    done[name], failure = self._build_row(post, token, base.W, noise, name,
                                                          objective=key[3])
                except Cancelled:
                    break
                if failure:
                    failures.append(failure)
                    unreported.append(failure)
                # the rows built so far, the others still running
                if i + 1 < len(names) and time.monotonic() - last >= self.merge_interval:
                    step = merged([n for n in names if n not in done])
                    post(partial(self._merge, token, key, step, "; ".join(unreported) or None,
                                 final=False))
                    last, unreported = time.monotonic(), []
            final_failure = "; ".join(unreported) or None
            rest = [n for n in names if n not in done]
            causal = dpx.streaming.is_causal(base.W) if rest else False
            for name in rest:
                done[name] = _row(name, CANCELLED if token == self._token else NOT_RUN, causal)
            final = merged(rest)
        except Exception as exc:  # noqa: BLE001 - never a traceback in the page
            log.exception("running the optimisers failed")
            final, final_failure = None, f"Optimisers failed: {_message(exc)}"
        post(lambda: self._merge(token, key, final, final_failure, final=True))

    def _merge(self, token, key, base: _Base | None, failure: str | None, final: bool) -> None:
        """Store (and show) a comparison with more optimisers built."""
        if final and self._opt_pending == key:
            self._opt_pending = None
        if base is not None and key in self._bases:
            self._bases[key] = base
        if final and self._opt_pending is None:  # (another comparison's optimisers may run)
            self._set(optimizing=False, **({} if self.busy else {"status": ""}))
        if token != self._token:
            return
        if failure:
            self._fail(failure if base is None else
                       f"Some mechanisms failed (showing the others): {failure}")
        self.update(urgent=False)  # a background result: other pages' redraws go first

    def _refresh_per_query(self) -> None:
        with self._lock:
            if self._shown is None:
                return
            W, norm = self._shown[0], self._shown[1]
            name = self.mechanism
            if name not in self.mechanisms():
                return self._set(per_query=None, per_query_note=f"{name!r} is not a "
                                 f"data-independent mechanism; choose one of {self.mechanisms()}")
            try:
                noise = self.session.noise_model()
            except ValueError:
                return  # reported by update()
            if noise.norm != norm:
                return  # the comparison for this norm is being built
            mech = dpx.registry.get(name)
            base = self._bases.get(self._shown)
            if base is not None and name in base.pending:
                return self._set(per_query=None, per_query_note=(
                    f"{mech.label} is being optimised: its per-query errors follow when it is "
                    f"built" if self._opt_pending == self._shown else f"{mech.label} has not "
                    f"been built for this workload yet: run the optimisers first"))
            reason = self._not_built(W, name, noise)
            if reason is not None:
                return self._set(per_query=None, per_query_note=f"{mech.label}: {reason}")
            pkey = (W, name, norm, self._shown[3] if "objective" in mech.params else "sum")
            pq = self._pq.get(pkey)
            if pq is None:
                if self._pq_pending != pkey:
                    self._pq_pending = pkey
                    self._set(per_query_busy=True)
                    self._submit(self._per_query_job, pkey, noise)
                return
            self._pq.move_to_end(pkey)
            if pq.unit_std is None:
                return self._set(per_query=None, per_query_note=pq.note)
            view = (pkey, noise.label, id(pq))
            if view == self._pq_view and self.per_query is not None:
                return  # already shown (e.g. an optimiser's row came in): nothing to redraw
            self._pq_view = view
            std = noise.std_per_unit
            data = {"query": np.arange(pq.size), "rmse": std * pq.unit_std}
            if pq.lengths is not None:
                data["length"] = pq.lengths
            df = pd.DataFrame(data, copy=False)
            df.attrs.update(mechanism=name, label=mech.label, noise=noise.label,
                            workload=W.name, workload_id=id(W), norm=norm)
            if pq.length_values is not None:
                df.attrs["mean_by_length"] = pd.Series(std * pq.length_means,
                                                       index=pq.length_values, name="rmse")
            self._set(per_query=df, per_query_note="")

    def _per_query_job(self, post, pkey, noise) -> None:
        W, name, _, objective = pkey
        try:
            mech = dpx.registry.get(name)
            if W.m > self.max_per_query_rows:
                pq = _PerQuery(None, None, f"{W.m:,} queries: too many to compute the error of "
                               f"each (at most {self.max_per_query_rows:,})")
            else:
                with build_lock(self.cache, (W, name, noise.norm)):
                    A, _, _, note = self.cache.entry(W, name, noise, _params(mech, objective))
                if A is None:
                    pq = _PerQuery(None, None, f"{mech.label} does not apply to this workload: "
                                   f"{note}")
                else:
                    var = dpx.error.per_query_variance(W, A, noise)
                    pq = _PerQuery(np.sqrt(var / noise.variance_per_unit))
                    if callable(getattr(W, "lengths", None)):
                        same = [p for (w, _, _, _), p in list(self._pq.items())
                                if w is W and p.lengths is not None]
                        pq.lengths = same[0].lengths if same else np.asarray(W.lengths())
                        values, inverse, counts = np.unique(pq.lengths, return_inverse=True,
                                                            return_counts=True)
                        pq.length_values = values
                        pq.length_means = np.bincount(inverse, pq.unit_std) / counts
        except Exception as exc:  # noqa: BLE001 - shown as a note, never a traceback
            if not isinstance(exc, ValueError):
                log.exception("per-query error failed")
            pq = _PerQuery(None, None, f"Per-query error unavailable: {_message(exc)}")

        def done():
            if self._pq_pending == pkey:
                self._pq_pending = None
            self._pq[pkey] = pq
            while len(self._pq) > 1 and (len(self._pq) > self.keep or sum(
                    p.size for p in self._pq.values()) > self.max_cached_queries):
                self._pq.popitem(last=False)
            self._set(per_query_busy=False)
            self._refresh_per_query()
        post(done)
