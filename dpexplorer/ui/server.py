"""What the served explorer needs from its process; the app script calls each of them.

- :func:`log_from_env`: the ``dpexplorer`` loggers to standard error at
  ``DPEXPLORER_LOG_LEVEL`` (``panel serve --log-level`` sets Bokeh's and Tornado's only).
- :func:`exit_promptly_on_sigterm`: after SIGTERM the interpreter waited 10.5 s for the
  worker threads' simulations (2 cores); the process ends :data:`GRACE_SECONDS` after the
  server's shutdown began, SIGALRM :data:`HARD_EXTRA_SECONDS` later as a backstop.
- :func:`freeze_startup_objects`: py-spy put 23 % of the shared loop's busy time in
  ``gc.collect()`` (eight Compare sessions, ``benchmarks/bench_browser.py``, 2 cores);
  freezing the ~260,000 objects alive after the imports took a full collection from
  0.26-0.29 s to 0.13 s.
- :func:`one_blas_thread`: eight threads building All Range's Compare rows at n = 1024 took
  3.2 s with two OpenBLAS threads, 0.9 s with one (``benchmarks/bench_threads.py``, 2 cores).
- :func:`return_freed_memory`: after 4 sessions for 3 minutes (``benchmarks/bench_soak.py``,
  2 cores) the server stayed at 629 MiB over a warm 419 MiB; with :data:`ARENA_MAX` arenas, a
  fixed :data:`MMAP_THRESHOLD` and ``malloc_trim`` after each session, 525 MiB over 408.
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
    """Log ``dpexplorer`` to standard error at ``DPEXPLORER_LOG_LEVEL`` of ``environ`` (default
    ``os.environ``); the level set, or None when unset.  ValueError outside :data:`LOG_LEVELS`."""
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


@functools.cache
def _freeze() -> None:
    gc.collect()  # what is garbage now is not kept for ever
    gc.freeze()


def freeze_startup_objects() -> int:
    """``gc.freeze`` the objects alive now (the first call only); the permanent generation's size."""
    _freeze()
    return gc.get_freeze_count()


@functools.cache
def one_blas_thread() -> list[dict]:
    """Give every BLAS library loaded now one thread, once (served explorer only); returns
    threadpoolctl's description of them before the first call."""
    import scipy.linalg  # noqa: F401 - load scipy's own BLAS before limiting it
    from threadpoolctl import threadpool_info, threadpool_limits

    before = [info for info in threadpool_info() if info.get("user_api") == "blas"]
    threadpool_limits(limits=1, user_api="blas")
    return before


def exit_promptly_on_sigterm(grace: float = GRACE_SECONDS) -> bool:
    """Make SIGTERM end the process within ``grace`` seconds (handler installed once, from the
    main thread only); ``True`` once installed."""
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


@functools.cache
def _tune_malloc(libc) -> None:
    libc.mallopt(_M_ARENA_MAX, ARENA_MAX)
    libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)


def trim_heap() -> bool:
    """``malloc_trim(0)`` now; False if nothing was given back or the C library is not glibc."""
    libc = _glibc()
    return bool(libc is not None and libc.malloc_trim(0))


def _trim_later(_session_context) -> None:
    from tornado.ioloop import IOLoop

    IOLoop.current().call_later(TRIM_DELAY, trim_heap)


def return_freed_memory() -> bool:
    """Set ``mallopt`` once and trim the heap :data:`TRIM_DELAY` s after the current session
    ends; False (nothing done) when the C library is not glibc."""
    libc = _glibc()
    if libc is None:
        return False
    _tune_malloc(libc)
    import panel as pn

    if pn.state.curdoc is not None and pn.state.curdoc.session_context is not None:
        pn.state.on_session_destroyed(_trim_later)
    return True
