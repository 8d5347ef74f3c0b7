"""Strategy optimisers in worker processes: an ε change never waits behind an optimiser.

An optimiser (OPT0, OPT⊗, OPT+, OPT_M, HDMM, Eigen-Design) runs for seconds to minutes,
much of it holding the interpreter lock the event loop needs: on 2 cores an ε change waited
0.2-2 s behind one optimiser in a thread and 3-15 s with eight sessions optimising
(``python benchmarks/bench_browser.py``), where it costs milliseconds alone.  So every
session's :class:`~dpexplorer.StrategyCache` builds optimisers through :func:`build`, in a
small pool of loky processes (:data:`MAX_WORKERS`, at :data:`WORKER_NICE`).  The calling
thread relays the worker's progress to its progress callback
(:func:`dpexplorer.core.optimization.progress`), so progress bars and Cancel work as in a
thread (a stopped worker gives :class:`~dpexplorer.ui.optimize_view.Cancelled`).  Only
public things cross: the workload, the noise's parameters, the registry entry (its
functions by module and qualified name: :func:`in_worker`) and the strategy back.  The
server keeps the last :data:`MEMO_SIZE` optimised strategies for every session (workloads
compared by :func:`dpexplorer.queries.spec.fingerprint`); a session never waits for
another session's build (it could neither cancel it nor show its progress).
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import itertools
import logging
import os
import queue
import threading
import time
from collections import OrderedDict
from multiprocessing.managers import SyncManager

import dpexplorer as dpx
from dpexplorer.queries.spec import fingerprint
from dpexplorer.strategies.templates import fresh

from .optimize_view import SHUTDOWN, Cancelled
from .remote import _DONE, _remote_build, _start_worker, _Stopped, _watch_parent, lower_threads

__all__ = ["build", "forget", "in_worker", "kept", "lower_threads", "optimizers", "shutdown",
           "warm_up", "MAX_WORKERS", "MEMO_SIZE", "WORKER_NICE"]

log = logging.getLogger(__name__)


def _nice_from_environment(default: int = 10) -> int:
    """``DPEXPLORER_WORKER_NICE`` if set (a whole number 0-19), else ``default``.

    Raises
    ------
    ValueError
        If the variable is set to anything else (the explorer does not start).
    """
    text = os.environ.get("DPEXPLORER_WORKER_NICE", "").strip()
    if not text:
        return default
    if not (text.isdigit() and 0 <= int(text) <= 19):
        raise ValueError(f"DPEXPLORER_WORKER_NICE must be a whole number from 0 (the server's "
                         f"own priority) to 19 (the lowest), got {text!r}")
    return int(text)


#: Worker processes shared by every session (more optimisers wait their turn).
MAX_WORKERS = max(1, min(2, os.cpu_count() or 1))
#: CPU priority (nice) of the worker processes (``DPEXPLORER_WORKER_NICE``; 0: the server's).
WORKER_NICE = _nice_from_environment()
#: Seconds between two checks of the worker's progress reports and of the page's Cancel.
POLL_SECONDS = 0.05
#: Optimised strategies the server keeps for every session (least recently used dropped).
MEMO_SIZE = 16


def optimizers() -> tuple[str, ...]:
    """Registry names of the strategy optimisers (``Mechanism.optimizer``), in registration order."""
    return tuple(dpx.registry.names(optimizer=True))


_warned: set[str] = set()  # optimisers already warned about (built in the calling thread)
_warned_lock = threading.Lock()


def in_worker(mechanism) -> bool:
    """Whether :func:`build` runs ``mechanism`` (a registry entry, or None) in a worker process.

    True for a strategy optimiser (:attr:`~dpexplorer.core.registry.Mechanism.optimizer`)
    every function of whose entry a worker can import (:func:`importable`); any other
    optimiser is built in the calling thread, with a warning once per name.
    """
    fn = getattr(mechanism, "build", None)
    if fn is None or not getattr(mechanism, "optimizer", False):
        return False
    sent = [fn, mechanism.scope, mechanism.runner,
            mechanism.structured_1d if callable(mechanism.structured_1d) else None]
    if all(f is None or importable(f) for f in sent):  # the entry pickles by reference
        return True
    with _warned_lock:
        first = mechanism.name not in _warned
        _warned.add(mechanism.name)
    if first:
        log.warning("optimiser %r is built in the calling thread, not in a worker process: its "
                    "builder %r is not a module-level function of an importable module (define it "
                    "at the top level of a module other than __main__)", mechanism.name, fn)
    return False


def importable(fn) -> bool:
    """Whether a worker process can import ``fn`` by its module and qualified name: a
    module-level function or class of an importable module other than ``__main__``."""
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not module or not qualname or module == "__main__" or "<" in qualname:
        return False
    try:
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        return False
    return obj is fn


# ------------------------------------------------------------------ in the server
class _Pool:
    """A loky process pool, the shared report queue, the stop events' manager, the router."""

    def __init__(self):
        from loky import ProcessPoolExecutor
        from loky.backend.context import get_context

        ctx = get_context("loky")
        self.reports = ctx.Queue()
        # per-task stop events; the manager's process, like the workers, ends with the server
        self.manager = SyncManager(ctx=ctx)
        self.manager.start(_watch_parent, (os.getpid(),))
        # a pool of our own, not loky's process-wide reusable one (joblib in the same
        # notebook would replace that one, and break the futures waiting on it)
        self.executor = ProcessPoolExecutor(
            max_workers=MAX_WORKERS, context=ctx, initializer=_start_worker,
            initargs=(self.reports, os.getpid(), WORKER_NICE))
        self.inboxes: dict[int, queue.Queue] = {}
        self.guard = threading.Lock()
        self.ids = itertools.count(1)
        self.router = threading.Thread(target=self._route, name="dpexplorer-reports", daemon=True)
        self.router.start()

    def _route(self) -> None:
        while True:
            try:
                msg = self.reports.get()
            except (EOFError, OSError, ValueError):  # closed at shutdown
                return
            if msg is None:
                return
            with self.guard:
                inbox = self.inboxes.get(msg[0])
            if inbox is not None:
                inbox.put(msg[1:])

    def open(self) -> tuple[int, queue.Queue, object]:
        task, inbox, stop = next(self.ids), queue.Queue(), self.manager.Event()
        with self.guard:
            self.inboxes[task] = inbox
        return task, inbox, stop

    def close(self, task: int) -> None:
        with self.guard:
            self.inboxes.pop(task, None)


_lock = threading.Lock()
_pool: _Pool | None = None
_exiting = False  # the interpreter is exiting: no pool is started any more


def _at_exit() -> None:
    global _exiting
    with _lock:
        _exiting = True
    shutdown()


_register_atexit = getattr(threading, "_register_atexit", None)
if _register_atexit is not None:  # before loky's own exit hook joins a worker still optimising
    _register_atexit(_at_exit)


def _get_pool() -> _Pool:
    """The worker pool, started at the first call.

    Raises
    ------
    Cancelled
        When the interpreter is exiting (a pool started then would keep it from exiting).
    """
    global _pool
    with _lock:
        if _pool is None:
            if _exiting:
                raise Cancelled("the process is exiting: no optimiser is started")
            _pool = _Pool()
        return _pool


def warm_up() -> None:
    """Start the worker processes now (seconds: they import numpy, scipy and dpexplorer),
    not at the first optimiser; only the first call does it (the served app, each session)."""
    global _pool
    with _lock:
        if _pool is not None or _exiting:
            return
        _pool = _Pool()
        for _ in range(MAX_WORKERS):
            _pool.executor.submit(os.getpid)


def shutdown() -> None:
    """Stop the workers at once (a server exiting); a running optimisation is abandoned."""
    global _pool
    with _lock:
        pool, _pool = _pool, None
    if pool is not None:
        for stop in (lambda: pool.executor.shutdown(wait=False, kill_workers=True),
                     lambda: pool.reports.put(None), pool.manager.shutdown):
            with contextlib.suppress(Exception):
                stop()


_memo: OrderedDict = OrderedDict()  # (mechanism, builder, workload, norm, params) -> strategy
_memo_lock = threading.Lock()


def forget() -> None:
    """Drop every strategy the server keeps (:data:`MEMO_SIZE`): the next builds optimise anew."""
    with _memo_lock:
        _memo.clear()


def _memo_key(mechanism, W, noise, params: dict) -> tuple | None:
    workload = fingerprint(W)
    if workload is None:
        return None
    key = (mechanism.name, mechanism.build, workload, noise.norm, tuple(sorted(params.items())))
    try:
        hash(key)
    except TypeError:  # a list-valued parameter
        return None
    return key


def kept(mechanism, W, noise, params: dict) -> bool:
    """Whether :func:`build` would return ``mechanism``'s strategy for ``W`` at once (kept)."""
    key = _memo_key(mechanism, W, noise, params) if in_worker(mechanism) else None
    if key is None:
        return False
    with _memo_lock:
        return key in _memo


def _own_copy(A):
    """A shallow copy of a kept strategy and of its ``optimization`` record
    (:func:`~dpexplorer.strategies.templates.fresh`), for the caller to rename or annotate."""
    record = getattr(A, "optimization", None)
    if record is not None and getattr(record, "strategy", None) is A:
        return fresh(record)
    return copy.copy(A)


def build(mechanism, W, noise, params: dict):
    """Build ``mechanism``'s strategy for ``W``, an optimiser in a worker process.

    The builder of a :class:`~dpexplorer.StrategyCache`: same arguments and result as
    ``mechanism.strategy(W, noise, **params)``.  The worker's progress reports go to this
    thread's progress callback; when it asks to stop (it raises, or its ``stop()`` says so)
    the worker stops and the callback's exception (or ``Cancelled``) is raised here.  A kept
    strategy (:data:`MEMO_SIZE`) is returned at once, as a copy of its own.

    Raises
    ------
    Whatever the mechanism raises for this workload (ValueError, NotApplicableError, ...).
    Cancelled
        When the page stopped the optimisation or the server shuts down.
    """
    if not in_worker(mechanism):
        return mechanism.strategy(W, noise, **params)
    mechanism.check_params(params)  # refuse bad parameters here, before any process work
    key = _memo_key(mechanism, W, noise, params)
    if key is None:
        return _build_in_worker(mechanism, W, noise, params)
    with _memo_lock:
        A = _memo.get(key)
        if A is not None:
            _memo.move_to_end(key)
    if A is None:
        A = _build_in_worker(mechanism, W, noise, params)
        with _memo_lock:
            _memo[key] = A
            while len(_memo) > MEMO_SIZE:
                _memo.popitem(last=False)
    return _own_copy(A)


def _build_in_worker(mechanism, W, noise, params: dict):
    """:func:`build` in a worker process: submit, relay the reports, return or raise."""
    stop_requested = getattr(dpx.optimization.current(), "stop", None)
    pool = _get_pool()
    task, inbox, stop = pool.open()
    try:
        try:
            future = pool.executor.submit(_remote_build, task, stop, mechanism, W, noise, dict(params))
        except RuntimeError:  # shut down meanwhile
            raise Cancelled(f"{mechanism.name}: the server is stopping") from None
        try:
            while not _relay(inbox):  # until every report of the task is delivered
                if future.done() and future.exception() is not None:
                    break  # failed (or the worker died): its reports do not matter
                if SHUTDOWN.is_set() or (callable(stop_requested) and stop_requested()):
                    raise Cancelled(f"{mechanism.name} stopped")
                if future.done():
                    time.sleep(POLL_SECONDS / 10)  # the result came first; its reports follow
                else:
                    with contextlib.suppress(TimeoutError):
                        future.result(timeout=POLL_SECONDS)
            try:
                return future.result()
            except _Stopped:
                raise Cancelled(f"{mechanism.name} stopped") from None
        except BaseException:
            if not future.cancel():
                with contextlib.suppress(Exception):
                    stop.set()
            raise
    finally:
        pool.close(task)


def _relay(inbox: queue.Queue) -> bool:
    """Hand the worker's queued reports to this thread's callback (it may raise to stop);
    ``True`` once the task's last message came."""
    while True:
        try:
            msg = inbox.get_nowait()
        except queue.Empty:
            return False
        if msg == (_DONE,):
            return True
        dpx.optimization.report(*msg)
