"""Each session's widget events handled in the order the user made them.

The served explorer runs Panel's widget callbacks on a thread pool
(``pn.extension(nthreads=2)``), so that a callback that computes (a release,
a DAWA run, a CSV upload) does not stop the event loop every session shares.
Panel 1.9 submits each event to that pool on its own: a value typed into a
field and a button clicked a moment later go to two threads, and the click can
be handled first.  A user who typed a weight of -2 and pressed "Add term" then
got a term of weight 1 added and no message (seen in a full test run; the
browser test waited 1.5 s between the two to stay green).

:class:`SessionOrderedPool` is Panel's pool with one rule added: the events of
one session (one Bokeh ``Document``) start in the order they were submitted,
each after the previous one has finished.  Different sessions still run side by
side on the pool's threads.  A handler that runs longer than
:data:`HOLD_SECONDS` (a Run button's computation) stops holding the ones behind
it, so an ε change made during a long run waits at most that long.  Work
submitted without a session (periodic callbacks) runs as before.

:func:`install` puts it in place of the pool ``pn.extension(nthreads=...)``
made; ``apps/explorer.py`` calls it.  Panel keeps its pool in
``pn.state._thread_pool`` (a private name: :func:`install` checks it is there
and raises otherwise, and ``tests/test_ui_event_order.py`` checks the order in a
served page, so a Panel upgrade that moves it fails a test instead of silently
bringing the race back).
"""

from __future__ import annotations

import collections
import functools
import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

from bokeh.document import Document

__all__ = ["HOLD_SECONDS", "SessionOrderedPool", "document_of", "install"]

log = logging.getLogger(__name__)

#: Seconds a session's running event handler holds the session's later events back.  Panel's
#: own handlers of a typed value or a click take milliseconds (tens under load); a handler
#: running longer is computing, and the events behind it should not wait for the result.
HOLD_SECONDS = 1.5


#: A session's event handler that waited or ran longer than this (seconds) is logged (debug).
SLOW_SECONDS = 0.5


def document_of(fn, args=(), kwargs=None):
    """The Bokeh ``Document`` a task submitted by Panel belongs to, or None.

    Panel submits ``(handler, doc, ...)`` for widget changes and events,
    ``handler(doc)`` for on-load callbacks, and ``partial(run, doc, callback)``
    for ``pn.state.execute(..., schedule="thread")``.
    """
    candidates = list(args) + list((kwargs or {}).values())
    while isinstance(fn, functools.partial):
        candidates += list(fn.args) + list(fn.keywords.values())
        fn = fn.func
    for value in candidates:
        if isinstance(value, Document):
            return value
    return None


class _Lane:
    """One session's queue: the tasks waiting, which start holds the lane, and since when it
    runs (None while it waits for a free thread)."""

    __slots__ = ("waiting", "ticket", "since")

    def __init__(self):
        self.waiting: collections.deque = collections.deque()
        self.ticket = 0
        self.since: float | None = None


class SessionOrderedPool(ThreadPoolExecutor):
    """A ``ThreadPoolExecutor`` that starts one session's tasks one after the other, in order.

    Parameters
    ----------
    max_workers : int, optional
        Threads shared by all sessions (Panel's ``nthreads``).
    hold_seconds : float
        How long a running task holds its session's later tasks back
        (:data:`HOLD_SECONDS`); after that the next one starts beside it.
    key : callable, optional
        ``key(fn, args, kwargs)`` -> the session a task belongs to, or None for
        a task with no order to keep (default :func:`document_of`).

    ``submit`` returns a ``Future`` that completes with the task, as the
    standard pool's does.
    """

    def __init__(self, max_workers: int | None = None, hold_seconds: float = HOLD_SECONDS,
                 key=document_of, thread_name_prefix: str = "dpexplorer-events"):
        super().__init__(max_workers=max_workers, thread_name_prefix=thread_name_prefix)
        if not hold_seconds > 0:
            raise ValueError(f"hold_seconds must be a positive number of seconds, "
                             f"not {hold_seconds!r}")
        self.hold_seconds = float(hold_seconds)
        self._key = key
        self._guard = threading.Condition()
        self._lanes: dict = {}
        self._watcher: threading.Thread | None = None
        self._closed = False

    # ------------------------------------------------------------------ submitting
    def submit(self, fn, /, *args, **kwargs) -> Future:
        session = self._key(fn, args, kwargs)
        if session is None:
            return super().submit(fn, *args, **kwargs)
        outer: Future = Future()
        task = (fn, args, kwargs, outer, time.monotonic())
        with self._guard:
            if self._closed:
                raise RuntimeError("cannot schedule new futures after shutdown")
            lane = self._lanes.get(session)
            if lane is not None:
                lane.waiting.append(task)
                return outer
            lane = self._lanes[session] = _Lane()
        self._start(session, lane, task)
        return outer

    def _start(self, session, lane: _Lane, task) -> None:
        fn, args, kwargs, outer, submitted = task
        with self._guard:
            lane.ticket += 1
            ticket = lane.ticket
            lane.since = None  # the hold counts from when a thread runs it, not from now
            self._ensure_watcher()
        if not outer.set_running_or_notify_cancel():  # cancelled while it waited
            self._release(session, ticket)
            return
        try:
            inner = super().submit(self._run, lane, ticket, submitted, fn, *args, **kwargs)
        except BaseException as exc:  # the pool was shut down meanwhile
            outer.set_exception(exc)
            self._release(session, ticket)
            return
        inner.add_done_callback(functools.partial(self._finished, session, ticket, outer))

    def _run(self, lane: _Lane, ticket: int, submitted: float, fn, /, *args, **kwargs):
        start = time.monotonic()
        with self._guard:
            if lane.ticket == ticket:
                lane.since = start
                self._guard.notify_all()  # the watcher times the hold from now
        try:
            return fn(*args, **kwargs)
        finally:
            if start - submitted > SLOW_SECONDS or time.monotonic() - start > SLOW_SECONDS:
                log.debug("event handler %s started %.2f s after it was submitted, ran %.2f s",
                          getattr(fn, "__qualname__", fn), start - submitted,
                          time.monotonic() - start)

    def _finished(self, session, ticket: int, outer: Future, inner: Future) -> None:
        exc = inner.exception()
        if exc is None:
            outer.set_result(inner.result())
        else:
            outer.set_exception(exc)
        self._release(session, ticket)

    def _release(self, session, ticket: int) -> None:
        """Start the session's next task, if ``ticket`` still holds its lane."""
        with self._guard:
            lane = self._lanes.get(session)
            if lane is None or lane.ticket != ticket:
                return  # a late end of a task that stopped holding the lane
            if not lane.waiting:
                del self._lanes[session]
                return
            task = lane.waiting.popleft()
        self._start(session, lane, task)

    # ------------------------------------------------------------------ long handlers
    def _ensure_watcher(self) -> None:
        if self._watcher is None or not self._watcher.is_alive():
            self._watcher = threading.Thread(target=self._watch, name="dpexplorer-events-watch",
                                             daemon=True)
            self._watcher.start()

    def _watch(self) -> None:
        """Release the lanes whose task has held them longer than ``hold_seconds``."""
        while True:
            with self._guard:
                if self._closed and not self._lanes:
                    return
                now = time.monotonic()
                running = [(s, lane) for s, lane in self._lanes.items() if lane.since is not None]
                stale = [(s, lane.ticket) for s, lane in running
                         if now - lane.since >= self.hold_seconds]
                if not stale:
                    soonest = min((lane.since + self.hold_seconds - now
                                   for _, lane in running), default=None)
                    self._guard.wait(soonest)
                    continue
            for session, ticket in stale:
                log.debug("an event handler ran over %.1f s; the session's next event starts",
                          self.hold_seconds)
                self._release(session, ticket)

    def pending(self) -> int:
        """Tasks waiting for their session's earlier task (not counting running ones)."""
        with self._guard:
            return sum(len(lane.waiting) for lane in self._lanes.values())

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._guard:
            self._closed = True
            if cancel_futures:
                for lane in self._lanes.values():
                    for _fn, _args, _kwargs, outer, _submitted in lane.waiting:
                        outer.cancel()
                    lane.waiting.clear()
            self._guard.notify_all()
        super().shutdown(wait=wait, cancel_futures=cancel_futures)


def install(state=None) -> SessionOrderedPool | None:
    """Replace Panel's widget-callback pool by a :class:`SessionOrderedPool` of the same size.

    Call after ``pn.extension(nthreads=N)``.  Returns the pool in place, or
    None when Panel runs callbacks on the event loop (no ``nthreads``: already
    in order).  Calling it again changes nothing.

    Raises
    ------
    RuntimeError
        If this Panel keeps no ``_thread_pool`` on ``pn.state`` (the private
        attribute this relies on has moved).
    """
    if state is None:
        from panel.io.state import state
    if not hasattr(state, "_thread_pool"):
        raise RuntimeError("this Panel version keeps no pn.state._thread_pool; the "
                           "session-ordered event pool cannot be installed")
    pool = state._thread_pool
    if pool is None or isinstance(pool, SessionOrderedPool):
        return pool
    ordered = SessionOrderedPool(max_workers=pool._max_workers)
    state._thread_pool = ordered
    pool.shutdown(wait=False)
    return ordered
