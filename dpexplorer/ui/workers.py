"""Strategy optimisers in worker processes: an ε change never waits behind an optimiser.

The explorer's pages build strategies in background threads
(:class:`~dpexplorer.ui.tasks.Jobs`).  A quick strategy (identity,
H2, ...) takes milliseconds there, but an optimiser (OPT0, OPT⊗, OPT+, OPT_M,
HDMM, Eigen-Design) computes for seconds to minutes, and much of that time
is Python code holding the interpreter lock the server's event loop needs:
on this project's 2-core machine an ε change waited 0.2-2 s behind one
optimiser and 3-15 s with eight sessions optimising (``python benchmarks/bench_browser.py``), where it
costs milliseconds alone.  Lowering the threads' priority did not help (a
low-priority thread holding the lock stalls the event loop all the same).

So every session's :class:`~dpexplorer.StrategyCache` builds the optimisers
through :func:`build`, which runs them in a small pool of worker processes
(:data:`MAX_WORKERS`, at :data:`WORKER_NICE` priority), each with its own
interpreter.  They start with ``forkserver``: forked from a single-threaded
process that has imported ``dpexplorer`` (never the server's own threads and
locks), and without re-running the user's main script, as ``spawn`` would.  The calling thread (a page's job) waits for the result and
relays the optimiser's progress reports to the page's progress callback
(:func:`dpexplorer.core.optimization.progress`), so progress bars, Cancel
and "the workload changed meanwhile" work as before: when the callback asks
to stop, the worker is told and stops at its next report, and the page's
job gets the same :class:`~dpexplorer.ui.optimize_view.Cancelled`.

What goes to a worker is public: the workload, the noise model's parameters
and the mechanism's name and parameters; what comes back is the strategy
(with its ``optimization`` record).  No data ever crosses.

Which mechanisms run in a worker is a fact of the registry: those flagged
:attr:`~dpexplorer.core.registry.Mechanism.optimizer`.  The registry entry
itself is sent to the worker, its builder (and scope check) by module and
qualified name, as pickle sends functions: the worker imports that module.
So an optimiser registered at run time by a user's module also runs in a
worker when its builder is a module-level function of an importable module
(not ``__main__``, not a closure, a lambda or a callable object); otherwise
it is built in the calling thread, as any other mechanism, and a warning
says so once per name (:func:`in_worker`).

An optimised strategy depends only on the public workload, the noise's norm and
the mechanism's parameters, so the server keeps the last :data:`MEMO_SIZE` of
them for every session: a second tab, or a second page, on a workload already
optimised gets its strategy at once (workloads compared by
:func:`dpexplorer.queries.spec.fingerprint`; one without a spec is never shared).
A session never waits for another session's build: two sessions asking at once
each optimise, as before (a page waiting behind another page's build could
neither cancel it nor show its progress).
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


#: Worker processes shared by every session of the server (at most this many optimisers run
#: at once; more wait their turn, their progress bars saying so).
MAX_WORKERS = max(1, min(2, os.cpu_count() or 1))
#: CPU priority (nice) of the worker processes: the server's own process keeps the processor.
#: ``DPEXPLORER_WORKER_NICE`` sets another (0: the optimisers share the processor equally with
#: the server and with every other program on the machine).
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
    whose builder, and every other function of its entry (scope check, ...), a
    worker can import by module and qualified name (:func:`importable`): the
    entry is sent to the worker.  An optimiser whose builder cannot be
    imported there is built in the calling thread; a warning says so, once per name.
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
    """Whether a worker process can import ``fn`` by its module and qualified name.

    A module-level function (or class) of a module other than ``__main__`` that
    is importable here; not a lambda, a closure, a bound method or a callable object.
    """
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
    """A loky process pool, the shared report queue, the stop events' manager, the router.

    loky starts its workers without re-running the caller's main script (as
    ``spawn`` and ``forkserver`` do) and without forking the server's threads.
    """

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
        When the interpreter is exiting.  A page's optimiser thread asking for
        a pool after the exit hook had stopped it used to start a new one that
        nothing stopped: a script or notebook that ended while optimisers ran
        then never exited (its interpreter waited for the new pool's threads).
    """
    global _pool
    with _lock:
        if _pool is None:
            if _exiting:
                raise Cancelled("the process is exiting: no optimiser is started")
            _pool = _Pool()
        return _pool


def warm_up() -> None:
    """Start the worker processes now (the served app, at each session), not at the first optimiser.

    Starting a worker imports numpy, scipy and dpexplorer (seconds on a busy
    machine); only the first call does it.
    """
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
        with contextlib.suppress(Exception):
            pool.executor.shutdown(wait=False, kill_workers=True)
        with contextlib.suppress(Exception):
            pool.reports.put(None)
        with contextlib.suppress(Exception):
            pool.manager.shutdown()


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
    """Whether :func:`build` would return ``mechanism``'s strategy for ``W`` at once: the
    server keeps it (:data:`MEMO_SIZE`), built for another session or an earlier comparison."""
    if not in_worker(mechanism):
        return False
    key = _memo_key(mechanism, W, noise, params)
    if key is None:
        return False
    with _memo_lock:
        return key in _memo


def _own_copy(A):
    """A shallow copy of a kept strategy (and of its ``optimization`` record, as the
    registered builders return theirs: :func:`~dpexplorer.strategies.templates.fresh`): the
    caller may rename or annotate it without touching the one kept."""
    record = getattr(A, "optimization", None)
    if record is not None and getattr(record, "strategy", None) is A:
        return fresh(record)
    return copy.copy(A)


def build(mechanism, W, noise, params: dict):
    """Build ``mechanism``'s strategy for ``W``, an optimiser in a worker process.

    The builder of a :class:`~dpexplorer.StrategyCache` (``StrategyCache(build=build)``):
    same arguments and result as ``mechanism.strategy(W, noise, **params)``.
    Progress reports of the worker go to this thread's progress callback; when
    that callback asks to stop (it raises, or its ``stop()`` says so) the
    worker is told to stop and the callback's exception (or
    :class:`~dpexplorer.ui.optimize_view.Cancelled`) is raised here.
    A strategy the server keeps (:data:`MEMO_SIZE`) is returned at once, as a copy
    of its own.

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
    callback = dpx.optimization.current()
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
                if SHUTDOWN.is_set() or _stop_requested(callback):
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
    """Hand the worker's queued reports to this thread's callback (it may raise to stop).

    Returns ``True`` once the task's last message came (its reports are all delivered).
    """
    while True:
        try:
            msg = inbox.get_nowait()
        except queue.Empty:
            return False
        if msg == (_DONE,):
            return True
        dpx.optimization.report(*msg)


def _stop_requested(callback) -> bool:
    stop = getattr(callback, "stop", None)
    return bool(stop()) if callable(stop) else False
