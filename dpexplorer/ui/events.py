"""Panel's thread pool, with each browser session's events handled in the order they came.

With ``pn.config.nthreads`` set, Panel hands every widget change and button
click to one ``ThreadPoolExecutor`` shared by all sessions: one session's
long callback then does not hold up another's.  But two events of the same
session run at once on two threads, so they may finish in either order: a
weight typed and "Add term" clicked right after it were handled click first
in a full test run (the term got the old weight).  Panel 1.9 has no setting
for this (its ``_event_coroutine`` only waits until the pending change has
been *submitted* before submitting the click).

:class:`SessionOrderedExecutor` is a drop-in for that pool: a task whose
first argument is a Bokeh ``Document`` (how Panel submits change events,
Bokeh events and callbacks of a session) joins its session's queue and runs
after the session's earlier tasks; sessions still run side by side on the
pool's threads, and tasks without a document run as before.
:func:`install` puts it in place of the pool Panel made.
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor

import panel as pn
from bokeh.document import Document

__all__ = ["SessionOrderedExecutor", "install"]


class SessionOrderedExecutor(ThreadPoolExecutor):
    """A thread pool that runs the tasks of one document one after another, in submission order.

    ``submit(fn, doc, ...)`` with a :class:`bokeh.document.Document` first
    argument queues the task behind that document's unfinished tasks and
    returns a :class:`~concurrent.futures.Future` of its own; tasks of other
    documents, and tasks with no document, run concurrently as in a plain
    :class:`~concurrent.futures.ThreadPoolExecutor` of ``max_workers`` threads.
    """

    def __init__(self, max_workers: int | None = None, **kwargs):
        super().__init__(max_workers=max_workers, **kwargs)
        self._queues: dict[Document, deque] = {}
        self._order = threading.Lock()

    def submit(self, fn, /, *args, **kwargs) -> Future:
        doc = args[0] if args and isinstance(args[0], Document) else None
        if doc is None:
            return super().submit(fn, *args, **kwargs)
        future: Future = Future()
        with self._order:
            queue = self._queues.get(doc)
            idle = queue is None
            if idle:
                queue = self._queues[doc] = deque()
            queue.append((future, fn, args, kwargs))
        if idle:
            super().submit(self._drain, doc)
        return future

    def _drain(self, doc: Document) -> None:
        """Run ``doc``'s queued tasks in order until its queue is empty."""
        while True:
            with self._order:
                queue = self._queues[doc]
                if not queue:
                    del self._queues[doc]
                    return
                future, fn, args, kwargs = queue.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - handed to the future, as the pool does
                future.set_exception(exc)
            else:
                future.set_result(result)


def install(threads: int = 2) -> SessionOrderedExecutor:
    """Make Panel's event thread pool a :class:`SessionOrderedExecutor` (idempotent).

    Sets ``pn.config.nthreads = threads`` unless threads are already configured
    (``pn.extension(nthreads=...)`` or ``PANEL_NUM_THREADS``, whose count is
    kept), then replaces the plain pool Panel made (``pn.state._thread_pool``,
    Panel's attribute for it; ``tests/test_ui_events.py`` checks that the
    installed Panel still uses it).  Served apps run their script once per
    session: later calls return the pool already installed.
    """
    pool = pn.state._thread_pool
    if isinstance(pool, SessionOrderedExecutor):
        return pool
    if pn.config.nthreads is None:
        pn.config.nthreads = threads  # Panel makes its pool
    old = pn.state._thread_pool
    pool = SessionOrderedExecutor(max_workers=pn.config.nthreads or None,
                                  thread_name_prefix="panel-events")
    pn.state._thread_pool = pool
    if old is not None:
        old.shutdown(wait=False)
    return pool
