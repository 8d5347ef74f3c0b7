"""How the served explorer's work reaches the browser: three rules, each kept for a measurement.

They act only in a served app; in a notebook, a script or a test pages draw at once.

1. **One redraw at a time, the user's own first** (:class:`RedrawQueue`, :data:`REDRAWS`).
   All sessions share one event loop; a redraw holds it for 0.1-2 s.  Posted straight to
   the loop, an ε change waited behind every other session's plots: with eight sessions
   opening Compare (``python benchmarks/bench_browser.py --n 1024 --sessions 8``, 2 cores)
   py-spy showed the loop almost always busy, 38 % of it in Compare redraws.  The queue
   hands the loop one redraw at a time; an ``urgent`` one (the user's ε, δ or noise change)
   goes first, and a page has at most one redraw waiting.

2. **A hidden page waits** (:class:`ShownGate`, :class:`LazyCard`, :class:`TableSlot`).
   A hidden page redrawing for a shared :class:`~dpexplorer.ui.session.Session` change cost
   the server about a second per redraw and the browser as much: the 280,000-cell CPS
   preset took 15-40 s to show its query count on the Workload page while the hidden
   Compare and Strategy pages redrew (served app, headless Chromium via Playwright, 2
   cores).  A gate keeps a hidden page's latest redraw per key until the app calls
   :meth:`ShownGate.show`; status widgets bind to a :meth:`ShownGate.mirror`, as each text
   or visibility change lays out the whole document again (0.3-1 s each).  A page used on
   its own (a notebook cell, a test) is always shown.

3. **One session's events in the order the user made them** (:class:`SessionOrderedPool`,
   :func:`install`).  Panel 1.9 submits each event to its thread pool
   (``pn.extension(nthreads=2)``) on its own: a weight of -2 typed and "Add term" clicked
   just after added a term of weight 1 and no message (seen in a full test run).  The pool
   starts one session's events in order, each after the previous one ends (sessions side
   by side), unless it runs longer than :data:`HOLD_SECONDS`.  :func:`install` (called by
   ``apps/explorer.py``) replaces Panel's private ``pn.state._thread_pool``, raising if it
   moved, and installs :func:`install_echo_guard`.

Tests: ``tests/test_ui_redraws.py``, ``tests/test_ui_shown.py``,
``tests/test_ui_event_order.py`` (also in a served page in headless Chromium).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import dataclasses
import functools
import itertools
import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

import panel as pn
import param
from bokeh.document import Document
from panel.io.state import set_curdoc

if TYPE_CHECKING:
    import pandas as pd

#: Keyword of a widget's caption: ``label`` since Panel 1.9 (``name`` is deprecated there).
LABEL = "label" if "label" in pn.widgets.IntInput.param else "name"
#: Keyword of a button's colour: ``color`` since Panel 1.9 (``button_type`` is deprecated there).
COLOR = "color" if "color" in pn.widgets.Button.param else "button_type"


def button(label: str, color: str, on_click: Callable[[], object]) -> pn.widgets.Button:
    """A Button (``color``: Panel's button colour) calling ``on_click()`` on each click."""
    widget = pn.widgets.Button(**{LABEL: label, COLOR: color})
    widget.on_click(lambda e: on_click())
    return widget

__all__ = [
    "LABEL", "COLOR", "button", "RedrawQueue", "REDRAWS", "STALL_SECONDS", "CHECK_SECONDS",
    "on_loop",
    "on_session_loop", "served_document", "models_batch", "freeze_models", "no_connection",
    "held_on_loop", "on_event_loop", "LazyCard", "TableSlot", "ShownGate", "run_redraws",
    "HOLD_SECONDS", "SessionOrderedPool", "document_of", "install_echo_guard", "install",
]

log = logging.getLogger(__name__)


# ================================================================ 1. one redraw at a time
#: Seconds after which a redraw handed to the loop no longer holds the queue (a redraw takes
#: 0.1-2 s; Bokeh drops the callbacks of a session destroyed before the loop ran them).
STALL_SECONDS = 5.0
#: Seconds between two checks, by the queue's watch thread, for a lost or stalled redraw.
CHECK_SECONDS = 0.5


def served_document():
    """The current Bokeh document if it belongs to a server session, else None."""
    doc = pn.state.curdoc
    return doc if doc is not None and doc.session_context is not None else None


def no_connection(doc) -> bool:
    """Whether the server session of ``doc`` (a Bokeh document) has no browser connected.

    Bokeh destroys a session only 15 s after its last connection; meanwhile a closed tab's
    page would compute for nobody.  True also for a destroyed session and before the
    websocket connects (ask after ``pn.state.onload``); False with no server session.
    """
    session = getattr(getattr(doc, "session_context", None), "session", None)
    if session is None:  # not set up yet, or no server
        return False
    return bool(session.destroyed) or session.connection_count == 0


#: The redraw batch running in this context: [document, its exit stack, frozen yet].
_BATCH: contextvars.ContextVar = contextvars.ContextVar("redraw_batch", default=None)


@contextlib.contextmanager
def models_batch(doc) -> Iterator[None]:
    """Run redraws together; the first that calls :func:`freeze_models` freezes ``doc``'s models.

    Bokeh re-indexes all of a document's models (20-45 ms for the explorer's pages) after
    each change of its structure, or once at the end of a ``doc.models.freeze()`` block:
    redraws that only set numbers need no index; a HoloViews redraw calls
    :func:`freeze_models`, and the batch is indexed once, at its end.
    """
    with contextlib.ExitStack() as stack:
        token = _BATCH.set([doc, stack, False])
        try:
            yield
        finally:
            _BATCH.reset(token)


def freeze_models() -> None:
    """Freeze the running batch's document models until the batch ends (no batch: nothing)."""
    batch = _BATCH.get()
    if batch is not None and not batch[2]:
        batch[1].enter_context(batch[0].models.freeze())
        batch[2] = True


def on_event_loop() -> bool:
    """Whether the caller runs as a callback of a running asyncio loop (the server's); False
    in Panel's worker threads, the pages' background threads, a script or a notebook."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def held_on_loop() -> contextlib.AbstractContextManager:
    """Send the current session's document changes made in the block as one message.

    On the server's event loop the block runs under ``pn.io.hold()`` (each message costs
    the loop a walk over the page's models: about 10 ms for a Compare page's 540); elsewhere
    it runs as it is (a hold released from a thread can overtake Panel's messages, see
    :func:`on_session_loop`).  Not for a block that replaces a HoloViews plot (the browser
    was left a model reference it never received).  Raises what the block raises.
    """
    doc = served_document()
    return pn.io.hold(doc) if doc is not None and on_event_loop() else contextlib.nullcontext()


def on_loop(doc, fn: Callable[[], None]) -> None:
    """Schedule ``fn`` on the event loop of ``doc``'s session (Panel: document lock, curdoc set)."""
    with set_curdoc(doc):
        pn.state.execute(fn, schedule=True)


def on_session_loop(fn: Callable[[], None]) -> None:
    """Run ``fn`` on the current session's event loop; at once outside a server.

    For a redraw that holds the document and may be asked for from a worker thread: held
    from a thread, its changes go through Bokeh's own messages and can overtake Panel's,
    leaving the browser a dangling reference ("reference … isn't known").
    """
    doc = served_document()
    if doc is None:
        fn()  # a notebook, a script, a test
    else:
        on_loop(doc, fn)


class RedrawQueue:
    """Redraws of many pages, handed to the event loop one at a time (see the module docstring).

    The redraw on the loop holds the queue until it is done, its page is :meth:`forget`-ten,
    its session closes, or :data:`STALL_SECONDS` pass, checked by a watch thread every
    ``check_seconds`` (None: no thread; tests call :meth:`release_lost`).
    ``schedule(doc, fn)`` runs ``fn`` later on ``doc``'s event loop (:func:`on_loop`).
    """

    def __init__(self, schedule: Callable = on_loop, check_seconds: float | None = CHECK_SECONDS):
        self._schedule = schedule
        self._guard = threading.Lock()
        self._waiting: collections.OrderedDict = collections.OrderedDict()  # owner -> (doc, run)
        self._running: tuple | None = None  # (ticket, owner, doc, since) of the one on the loop
        self._tickets = itertools.count(1)
        self._check_seconds = check_seconds
        self._watch: threading.Thread | None = None

    def submit(self, owner: Hashable, doc, run: Callable[[], None], urgent: bool = False) -> None:
        """Run ``run()`` (the redraw) on ``doc``'s event loop once the redraws before it are done.

        ``owner`` (the page) has at most one redraw waiting: a newer one replaces it in place,
        or goes to the front when ``urgent`` (the user's own action asked for it).
        """
        with self._guard:
            self._waiting[owner] = (doc, run)  # an owner already waiting keeps its place
            if urgent:
                self._waiting.move_to_end(owner, last=False)
            if self._watch is None and self._check_seconds is not None:
                self._watch = threading.Thread(target=self._watch_loop, daemon=True,
                                               name="dpexplorer-redraws")
                self._watch.start()
        self.release_lost()
        self._next()

    def forget(self, owner: Hashable) -> None:
        """Drop ``owner``'s waiting redraw (its session closed); if it was running, go on."""
        with self._guard:
            self._waiting.pop(owner, None)
            running = self._running is not None and self._running[1] is owner
            ticket = self._running[0] if running else None
        if running:
            self._done(ticket)

    def pending(self) -> int:
        """Redraws waiting (not counting the one on the loop)."""
        with self._guard:
            return len(self._waiting)

    def release_lost(self) -> bool:
        """Stop waiting for the redraw on the loop if its session closed or it stalled; True
        when the queue was released (the next redraw is then handed over)."""
        with self._guard:
            if self._running is None:
                return False
            _, _, doc, since = self._running
            closed = doc.session_context is None
            waited = time.monotonic() - since
            if not closed and waited < STALL_SECONDS:
                return False
            self._running = None
        if not closed:
            log.warning("a redraw was not done after %.1f s: the next one goes", waited)
        self._next()
        return True

    def _watch_loop(self) -> None:
        while True:
            time.sleep(self._check_seconds)
            try:
                self.release_lost()
            except Exception:  # noqa: BLE001 - the watch must outlive any one failure
                log.exception("the redraw queue's check failed")

    def _next(self) -> None:
        with self._guard:
            if self._running is not None:
                return
            while self._waiting:
                owner, (doc, run) = self._waiting.popitem(last=False)
                if doc.session_context is not None:  # None: the session was closed
                    ticket = next(self._tickets)
                    self._running = (ticket, owner, doc, time.monotonic())
                    break
            else:
                return

        def step():
            try:
                run()
            finally:
                self._done(ticket)
        try:
            self._schedule(doc, step)
        except Exception:  # noqa: BLE001 - a session closing meanwhile: the others go on
            log.exception("a redraw could not be scheduled")
            self._done(ticket)

    def _done(self, ticket: int) -> None:
        """The redraw ``ticket`` is over: hand the next over (unless one is already on the loop)."""
        with self._guard:
            if self._running is not None and self._running[0] == ticket:
                self._running = None
        self._next()


#: The server's queue, shared by every session's pages.
REDRAWS = RedrawQueue()


# ================================================================ 2. a hidden page waits
_MIRRORS = itertools.count(1)


class ShownGate:
    """Run UI updates at once while the page is shown, else once when it is next shown.

    Thread-safe: an update requested while the page becomes visible is never lost.
    ``lock`` (optional, reentrant: the page's own) is held while deferred updates run.
    """

    def __init__(self, lock: threading.RLock | None = None):
        self._lock = lock if lock is not None else contextlib.nullcontext()
        self._guard = threading.Lock()
        self._pending: dict[str, Callable[[], None]] = {}
        self._shown = True

    @property
    def shown(self) -> bool:
        """Whether the page is on screen (``True`` until told otherwise)."""
        return self._shown

    @property
    def pending(self) -> tuple[str, ...]:
        """Keys of the updates waiting for the page to be shown (in request order)."""
        with self._guard:
            return tuple(self._pending)

    def run(self, key: str, fn: Callable[[], None]) -> None:
        """Call ``fn()`` now if the page is shown, else keep it (replacing an older ``key``)."""
        with self._guard:
            if not self._shown:
                self._pending.pop(key, None)  # keep the order of the latest requests
                self._pending[key] = fn
                return
        fn()

    def show(self, shown: bool = True) -> None:
        """Mark the page shown or hidden; when shown, run the updates kept meanwhile."""
        with self._guard:
            self._shown = bool(shown)
            if not shown or not self._pending:
                return
            pending, self._pending = self._pending, {}
        with self._lock:
            run_redraws(pending)

    def mirror(self, source: param.Parameterized, names: Sequence[str]) -> param.Parameterized:
        """A copy of ``source``'s parameters ``names`` that follows them only while shown (in one
        update when shown); bind widgets to ``mirror.param.<name>``.

        Raises
        ------
        KeyError
            If a name is not a parameter of ``source``.
        """
        names = list(names)
        missing = [n for n in names if n not in source.param]
        if missing:
            raise KeyError(f"{type(source).__name__} has no parameter(s) {missing}")
        cls = param.parameterized_class(
            f"Shown{type(source).__name__}",
            {n: param.Parameter(default=getattr(source, n), doc=source.param[n].doc)
             for n in names})
        view = cls()
        key = f"mirror-{next(_MIRRORS)}"

        def copy() -> None:
            with held_on_loop():  # the widgets' changes go to the browser in one message
                view.param.update(**{n: getattr(source, n) for n in names})
        source.param.watch(lambda *_: self.run(key, copy), names)
        return view


def run_redraws(pending: dict[str, Callable[[], None]]) -> None:
    """Call every redraw of ``pending`` (key -> function) in order; one failing is logged."""
    for key, fn in pending.items():
        try:
            fn()
        except Exception:  # noqa: BLE001 - one failed redraw must not stop the others
            log.exception("deferred update %r failed", key)


class TableSlot(pn.Column):
    """One read-only table in a column, replaced by a new table on each :meth:`show`.

    Panel 1.9's Tabulator drops a data update reaching the browser while it (re)renders the
    table and shows the old rows for good (the table release's ledger missed the release, 1
    run in 5); a new table carries its rows from the start.  ``make(frame)`` gives the
    ``pn.widgets.Tabulator`` of a ``pandas.DataFrame``; ``frame`` holds the first rows;
    ``params`` are ``pn.Column``'s (``sizing_mode`` defaults to ``"stretch_width"``).
    """

    def __init__(self, make: Callable[[pd.DataFrame], pn.widgets.Tabulator], frame: pd.DataFrame,
                 **params):
        params.setdefault("sizing_mode", "stretch_width")
        super().__init__(make(frame), **params)
        self._make = make

    @property
    def table(self) -> pn.widgets.Tabulator:
        """The table shown now."""
        return self.objects[0]

    def show(self, frame: pd.DataFrame) -> None:
        """Show the rows of ``frame`` (a ``pandas.DataFrame``) in a new table."""
        self.objects = [self._make(frame)]


class LazyCard(pn.Card):
    """A ``pn.Card`` that starts collapsed and puts its contents in the page when first expanded.

    Until then the contents' Bokeh models are not built, sent or walked on every update of
    the document; :meth:`select` still finds them.  ``collapsed`` defaults to True (False
    gives a plain card); other parameters are ``pn.Card``'s.
    """

    def __init__(self, *objects, **params):
        params.setdefault("collapsed", True)
        collapsed = params["collapsed"]
        super().__init__(*(() if collapsed else objects), **params)
        self._stash = [pn.panel(o) for o in objects] if collapsed else []
        self._watcher = self.param.watch(self._expand, "collapsed") if self._stash else None

    def _expand(self, event) -> None:
        if event.new or not self._stash:
            return
        stash, self._stash = self._stash, []
        self.param.unwatch(self._watcher)
        self.objects = stash

    def select(self, selector=None):
        """Like ``pn.Card.select``, also over contents not drawn yet."""
        found = super().select(selector)
        for obj in self._stash:
            found += obj.select(selector)
        return found


# ================================================================ 3. one session's events in order
#: Seconds a session's running event handler holds its later events back (Panel's own
#: handlers take milliseconds; a longer one is computing, and the events behind it go on).
HOLD_SECONDS = 1.5
#: A session's event handler that waited or ran longer than this (seconds) is logged (debug).
SLOW_SECONDS = 0.5


def document_of(fn, args=(), kwargs=None):
    """The Bokeh ``Document`` a task submitted by Panel belongs to, or None.

    Panel submits ``(handler, doc, ...)`` for widget events, ``handler(doc)`` for on-load
    callbacks and ``partial(run, doc, callback)`` for ``pn.state.execute(..., schedule="thread")``.
    """
    candidates = list(args) + list((kwargs or {}).values())
    while isinstance(fn, functools.partial):
        candidates += list(fn.args) + list(fn.keywords.values())
        fn = fn.func
    return next((v for v in candidates if isinstance(v, Document)), None)


@dataclasses.dataclass(eq=False)
class _Lane:
    """One session's queue: its waiting tasks, the ticket holding the lane, and since when
    that task runs (None while it waits for a thread)."""

    waiting: collections.deque = dataclasses.field(default_factory=collections.deque)
    ticket: int = 0
    since: float | None = None


class SessionOrderedPool(ThreadPoolExecutor):
    """A ``ThreadPoolExecutor`` that starts one session's tasks one after the other, in order.

    ``max_workers``: threads shared by all sessions; ``hold_seconds``: how long a running
    task holds its session's later tasks back; ``key(fn, args, kwargs)``: the task's
    session, or None for a task with no order to keep (default :func:`document_of`).

    Raises
    ------
    ValueError
        If ``hold_seconds`` is not positive.
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
            if self._watcher is None or not self._watcher.is_alive():
                self._watcher = threading.Thread(target=self._watch, daemon=True,
                                                 name="dpexplorer-events-watch")
                self._watcher.start()
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
                    self._guard.wait(min((lane.since + self.hold_seconds - now
                                          for _, lane in running), default=None))
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
                    for task in lane.waiting:
                        task[3].cancel()
                    lane.waiting.clear()
            self._guard.notify_all()
        super().shutdown(wait=wait, cancel_futures=cancel_futures)


def _equal(a, b) -> bool:
    """``a == b`` as one bool, False when the comparison fails or is ambiguous (arrays)."""
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - e.g. numpy's "truth value of an array is ambiguous"
        return False


def _keep_browser_values(update):
    """Wrap Panel's ``Syncable._scheduled_update_model``: a value equal to the one the browser
    sent is passed on as that very object, so Panel drops the echo (:func:`install_echo_guard`)."""

    @functools.wraps(update)
    def scheduled_update_model(self, events, msg, root, model, doc, comm, curdoc_events):
        for attr, sent in (curdoc_events or {}).items():
            if attr in msg and msg[attr] is not sent and _equal(msg[attr], sent):
                msg[attr] = sent
        return update(self, events, msg, root, model, doc, comm, curdoc_events)

    scheduled_update_model.keeps_browser_values = True
    return scheduled_update_model


def install_echo_guard(syncable=None) -> None:
    """Stop Panel sending a widget's own older value back over a newer one the browser sent.

    Panel 1.9 drops the echo of the browser's values by identity; a selection widget's echo
    is an equal new object, and a newer value sent meanwhile was dropped instead: a second
    attribute removed from a MultiChoice came back (3 of 12 rounds of five quick removals,
    Chromium on 2 cores at load 5).  An equal value is passed on as the browser's own object.
    Calling it again changes nothing.

    Raises
    ------
    RuntimeError
        If Panel's ``Syncable`` has no ``_scheduled_update_model`` (the private method moved).
    """
    if syncable is None:
        from panel.reactive import Syncable as syncable
    update = getattr(syncable, "_scheduled_update_model", None)
    if update is None:
        raise RuntimeError("this Panel version has no Syncable._scheduled_update_model; the "
                           "guard against a widget's echoed older value cannot be installed")
    if not getattr(update, "keeps_browser_values", False):
        syncable._scheduled_update_model = _keep_browser_values(update)


def install(state=None) -> SessionOrderedPool | None:
    """Replace Panel's widget-callback pool by a :class:`SessionOrderedPool` of the same size.

    Call after ``pn.extension(nthreads=N)``; returns the pool in place, or None with no
    pool (already in order).  With a pool it also installs :func:`install_echo_guard`.

    Raises
    ------
    RuntimeError
        If ``pn.state`` keeps no ``_thread_pool`` (the private attribute moved), or
        :func:`install_echo_guard` cannot be installed.
    """
    if state is None:
        from panel.io.state import state
    if not hasattr(state, "_thread_pool"):
        raise RuntimeError("this Panel version keeps no pn.state._thread_pool; the "
                           "session-ordered event pool cannot be installed")
    pool = state._thread_pool
    if pool is not None:
        install_echo_guard()
    if pool is None or isinstance(pool, SessionOrderedPool):
        return pool
    ordered = SessionOrderedPool(max_workers=pool._max_workers)
    state._thread_pool = ordered
    pool.shutdown(wait=False)
    return ordered
