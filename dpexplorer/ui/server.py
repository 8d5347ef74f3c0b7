"""What the served explorer needs from its process: a prompt exit on SIGTERM, its log, a cheaper GC, memory given back.

:func:`log_from_env` sends the explorer's own log (the ``dpexplorer``
loggers) to standard error when ``DPEXPLORER_LOG_LEVEL`` is set, e.g.
``DPEXPLORER_LOG_LEVEL=debug panel serve apps/explorer.py``: the Compare page
then logs where each comparison's time goes (load wait, SVD bound, every
strategy, optimisers), with timestamps.  ``panel serve --log-level`` sets
Bokeh's and Tornado's loggers only.

``panel serve`` stops its IOLoop on SIGTERM, but the interpreter then waits
for every worker thread (Panel's thread pool, the pages' job threads) to
finish what it is computing: a long computation started by a session can keep a
stopped server alive for many seconds (10.5 s measured, 15 s and more with
several sessions optimising, 2 cores).  The computations are simulations on public data that the
stopped server will never show, so nothing is lost by not waiting:
:func:`exit_promptly_on_sigterm` chains a handler to the server's that, after
:data:`GRACE_SECONDS` for the server's own shutdown, ends the process with
``os._exit`` after killing the optimisers' worker processes
(:func:`dpexplorer.ui.workers.shutdown`) -- and, should that thread not get
to run (it needs the GIL, which busy worker threads hold), SIGALRM's default
action ends it
:data:`HARD_EXTRA_SECONDS` later (exit status 128 + 14).

Every session of a server shares one event loop, and a full garbage
collection stops it (and every thread) while it scans every tracked object:
Panel schedules one on the loop a few seconds after sessions close, and
Python runs one whenever enough objects have survived.  With eight Compare
sessions open, a py-spy profile of the server's loop put 23 % of its busy
time in Panel's ``gc.collect()`` while a user's ε change waited
(``python benchmarks/bench_browser.py --n 1024 --sessions 8``, 2 cores).
:func:`freeze_startup_objects` moves the objects alive once the app's
modules are imported (about 260,000: numpy, scipy, pandas, Panel, Bokeh,
HoloViews, dpexplorer) to the collector's permanent generation
(``gc.freeze``), which collections no longer scan: a full collection with
eight explorer sessions took 0.13 s instead of 0.26-0.29 s (quiet machine).
They are module-level objects that live as long as the process anyway.

The server's computations run on many threads at once (each session's
comparison, per-query errors and strategy views on the pages' job threads),
and OpenBLAS, numpy's and scipy's BLAS, serves calls from several threads
badly: with its default of one thread per core it queues them behind one
lock while its helper threads spin, waiting for work.  Eight threads each
building the Compare rows of All Range at n = 1024 took 3.2 s with two BLAS
threads (the Workload strategy's row 2.2-3.2 s in each, 0.16 s alone) and
0.9 s with one (0.65-0.71 s; 2 cores, ``python benchmarks/bench_threads.py``).
:func:`one_blas_thread` gives every BLAS library of the served process one
thread: the sessions' threads are the parallelism.

A server lives for days, and memory its closed sessions freed should go back
to the system.  With glibc's defaults it mostly did not: freed arrays stay in
the allocator's per-thread arenas (up to eight per core), and after the first
large array is freed glibc raises its ``mmap`` threshold (up to 32 MiB), so
later large arrays come from those arenas too.  A soak of 4 sessions for 3
minutes (``python benchmarks/bench_soak.py --sessions 4 --minutes 3``, 2 cores,
quiet) left the server at 629 MiB a minute after the sessions closed, over a
warm level of 419 MiB; with at most :data:`ARENA_MAX` arenas and a fixed
threshold of :data:`MMAP_THRESHOLD` (arrays of 1 MiB and more are mapped and
unmapped one by one) 561 MiB over 411.  :func:`return_freed_memory` sets both
and trims the heap (``malloc_trim``) :data:`TRIM_DELAY` seconds after each
session ends: 525 MiB over 408 (ε → Compare unchanged: median 0.73 s vs
0.76 s).  Python's own objects of the closed sessions are freed
(``tests/test_ui_sessions_freed.py``; 11 MiB of Python allocations made during
that soak were still alive after it, the kept strategies among them).  With a
warm-up that also takes every scripted action once and the soak repeated on one
server (``--soaks 3``), each soak left +106, +64 and -22 MiB (430 MiB warm, 577
after the third): the memory levels off, about 25-40 % above the warm level; what
holds that plateau is not found yet.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import logging
import os
import signal
import sys
import threading

__all__ = ["exit_promptly_on_sigterm", "freeze_startup_objects", "log_from_env", "one_blas_thread",
           "return_freed_memory", "trim_heap", "ARENA_MAX", "GRACE_SECONDS", "LOG_LEVELS",
           "MMAP_THRESHOLD", "TRIM_DELAY"]

log = logging.getLogger(__name__)

#: Seconds the server gets to shut down by itself after SIGTERM before the process ends.
GRACE_SECONDS = 1.0

#: After the grace, seconds more before the kernel ends the process (SIGALRM) if it still runs.
HARD_EXTRA_SECONDS = 1.5

_installed = False

#: Values ``DPEXPLORER_LOG_LEVEL`` takes (any case).
LOG_LEVELS = ("debug", "info", "warning", "error")
_HANDLER = "dpexplorer-stderr"  # the name of the handler log_from_env adds (once)


def log_from_env(environ=None) -> int | None:
    """Log the ``dpexplorer`` loggers to standard error at ``DPEXPLORER_LOG_LEVEL``.

    Parameters
    ----------
    environ : mapping, optional
        Where to read the variable (default ``os.environ``).

    Returns
    -------
    int or None
        The level set (``logging.DEBUG`` ...), or None when the variable is
        unset or empty (nothing changed).

    Raises
    ------
    ValueError
        If the variable is not one of :data:`LOG_LEVELS`.
    """
    value = (os.environ if environ is None else environ).get("DPEXPLORER_LOG_LEVEL", "").strip()
    if not value:
        return None
    if value.lower() not in LOG_LEVELS:
        raise ValueError(f"DPEXPLORER_LOG_LEVEL={value!r}: use one of {', '.join(LOG_LEVELS)}")
    level = getattr(logging, value.upper())
    logger = logging.getLogger("dpexplorer")
    logger.setLevel(level)
    if not any(h.get_name() == _HANDLER for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.set_name(_HANDLER)
        handler.setFormatter(logging.Formatter("%(asctime)s %(threadName)s %(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False  # not twice when the root logger prints too
    return level


_frozen = False


def freeze_startup_objects() -> int:
    """Leave the objects alive now out of every later garbage collection (``gc.freeze``).

    Call it from the app script once its imports are done; only the first
    call in a process freezes (later ones, one per session, do nothing).

    Returns
    -------
    int
        The number of objects in the permanent generation.
    """
    global _frozen
    if not _frozen:
        _frozen = True
        gc.collect()  # what is garbage now is not kept for ever
        gc.freeze()
    return gc.get_freeze_count()


_blas_limited = None


def one_blas_thread() -> list[dict]:
    """Give every BLAS library loaded in this process one thread (threadpoolctl), once.

    For the served explorer, whose sessions compute on many threads at once
    (see the module's docstring).  Call it from the app script once its
    imports are done: a BLAS library loaded later keeps its own thread count.
    Later calls (one per session) change nothing.  Not for a notebook, where
    one computation at a time gains from every core.

    Returns
    -------
    list of dict
        threadpoolctl's description of the BLAS libraries as they were before
        the first call (``num_threads`` among others).
    """
    global _blas_limited
    if _blas_limited is None:
        import scipy.linalg  # noqa: F401 - load scipy's own BLAS before limiting it
        from threadpoolctl import threadpool_info, threadpool_limits

        _blas_limited = [info for info in threadpool_info() if info.get("user_api") == "blas"]
        threadpool_limits(limits=1, user_api="blas")
    return _blas_limited


def exit_promptly_on_sigterm(grace: float = GRACE_SECONDS) -> bool:
    """Make SIGTERM end the process within ``grace`` seconds (plus the time to run the handler).

    Call it from the app script; it installs the handler once per process
    and only from the main thread (where Python runs signal handlers).
    Returns ``True`` once the handler is installed.
    """
    global _installed
    if _installed:
        return True
    if threading.current_thread() is not threading.main_thread():
        return False
    previous = signal.getsignal(signal.SIGTERM)

    def handler(signum, frame):
        if previous == signal.SIG_IGN:
            return
        log.warning("SIGTERM: the process ends in %.1f s at the latest", grace)
        timer = threading.Timer(grace, _exit_now)
        timer.daemon = True
        timer.start()
        # the kernel's backstop, needing no Python thread: SIGALRM's default action ends the
        # process (the timer thread may wait for the GIL behind busy worker threads)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.setitimer(signal.ITIMER_REAL, grace + HARD_EXTRA_SECONDS)
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            _exit_now()

    signal.signal(signal.SIGTERM, handler)
    _installed = True
    return True


def _exit_now() -> None:
    try:
        from . import workers

        workers.shutdown()  # the optimisers' worker processes end with the server
        sys.stderr.write("SIGTERM: ending the process without waiting for running computations\n")
        sys.stderr.flush()
    finally:
        os._exit(0)


#: glibc's ``mallopt`` parameters (``malloc.h``).
_M_MMAP_THRESHOLD, _M_ARENA_MAX = -3, -8
#: Allocations of this many bytes and more are mapped and unmapped one by one (1 MiB).
MMAP_THRESHOLD = 2**20
#: The most malloc arenas the served process keeps (glibc's default: eight per core).
ARENA_MAX = 2
#: Seconds after a session ends before the heap is trimmed (its objects freed by then).
TRIM_DELAY = 20.0

_malloc_tuned = False


@functools.cache
def _glibc():
    """The C library if it is glibc (``mallopt``, ``malloc_trim``), else None (looked up once)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.gnu_get_libc_version  # noqa: B018 - glibc only
        libc.malloc_trim  # noqa: B018
        return libc
    except (OSError, AttributeError):
        return None


def trim_heap() -> bool:
    """Give the C heap's free memory back to the system now (glibc's ``malloc_trim(0)``).

    Returns True if memory was given back, False if none was or the C library is not glibc.
    """
    libc = _glibc()
    return bool(libc is not None and libc.malloc_trim(0))


def _trim_later(_session_context) -> None:
    from tornado.ioloop import IOLoop

    IOLoop.current().call_later(TRIM_DELAY, trim_heap)


def return_freed_memory() -> bool:
    """Let the served process give memory its closed sessions freed back to the system (glibc).

    Call it from the app script: the first call sets glibc's ``mallopt`` to at most
    :data:`ARENA_MAX` arenas and a fixed ``mmap`` threshold of :data:`MMAP_THRESHOLD`
    bytes; every call made while a session's document is current trims the heap
    :data:`TRIM_DELAY` seconds after that session ends (:func:`trim_heap`).  See the module's
    docstring for the measurement.

    Returns
    -------
    bool
        False (nothing done) when the C library is not glibc (macOS, musl).
    """
    global _malloc_tuned
    libc = _glibc()
    if libc is None:
        return False
    if not _malloc_tuned:
        _malloc_tuned = True
        libc.mallopt(_M_ARENA_MAX, ARENA_MAX)
        libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    import panel as pn

    if pn.state.curdoc is not None and pn.state.curdoc.session_context is not None:
        pn.state.on_session_destroyed(_trim_later)
    return True
