"""How the served explorer's work reaches the browser: three rules, each kept for a measurement.

They act only in a served app; in a notebook, a script or a test pages draw at once.

1. **One redraw at a time, the user's own first** (:class:`RedrawQueue`): posted straight
   to the shared event loop, an ε change waited behind every session's plots (eight
   sessions opening Compare, ``benchmarks/bench_browser.py --n 1024 --sessions 8``, 2
   cores: the loop almost always busy, 38 % of it in Compare redraws).  An ``urgent`` redraw
   (the user's ε, δ or noise) goes first; a page has at most one waiting.
2. **A hidden page waits** (:class:`ShownGate`, :class:`LazyCard`, :class:`TableSlot`): the
   280,000-cell CPS preset took 15-40 s to show its query count while the hidden Compare
   and Strategy pages redrew (headless Chromium, 2 cores).  Status widgets bind to a
   :meth:`ShownGate.mirror`: each text or visibility change lays out the document again
   (0.3-1 s each).
3. **One session's events in the user's order** (:class:`SessionOrderedPool`,
   :func:`install`): Panel 1.9 submits each event to its pool on its own, and a weight of -2
   typed just before "Add term" added a term of weight 1 (seen in a full test run).
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


__all__ = [
    "LABEL", "COLOR", "button", "RedrawQueue", "REDRAWS", "STALL_SECONDS", "CHECK_SECONDS",
    "on_loop", "on_session_loop", "served_document", "models_batch", "freeze_models",
    "no_connection", "on_event_loop", "LazyCard", "TableSlot", "ShownGate", "run_redraws",
    "HOLD_SECONDS", "SessionOrderedPool", "document_of", "install_echo_guard", "install",
]


def button(label: str, color: str, on_click: Callable[[], object], **params) -> pn.widgets.Button:
    """A Button (``color``: Panel's button colour; ``params``: the Button's) calling
    ``on_click()`` on each click."""
    widget = pn.widgets.Button(**{LABEL: label, COLOR: color}, **params)
    widget.on_click(lambda e: on_click())
    return widget

log = logging.getLogger(__name__)


# ================================================================ 1. one redraw at a time
#: Seconds after which a redraw handed to the loop (0.1-2 s each) no longer holds the queue.
STALL_SECONDS = 5.0
#: Seconds between two checks for a lost or stalled redraw.
CHECK_SECONDS = 0.5


def served_document():
    """The current Bokeh document if it belongs to a server session, else None."""
    doc = pn.state.curdoc
    return doc if doc is not None and doc.session_context is not None else None


def no_connection(doc) -> bool:
    """Whether ``doc``'s server session has no browser connected (Bokeh destroys it only 15 s
    later); True also when destroyed or not connected yet, False with no server session."""
    session = getattr(getattr(doc, "session_context", None), "session", None)
    if session is None:  # not set up yet, or no server
        return False
    return bool(session.destroyed) or session.connection_count == 0


#: The redraw batch running in this context: [document, its exit stack, frozen yet].
_BATCH: contextvars.ContextVar = contextvars.ContextVar("redraw_batch", default=None)


@contextlib.contextmanager
def models_batch(doc) -> Iterator[None]:
    """Run redraws together; the first :func:`freeze_models` freezes ``doc``'s models until the
    end, so Bokeh re-indexes them (20-45 ms for the explorer's pages) once, not per redraw."""
    with contextlib.ExitStack() as stack:
        token = _BATCH.set([doc, stack, False])
        try:
            yield
        finally:
            _BATCH.reset(token)


def freeze_models() -> None:
    """Freeze the running batch's document models until it ends (no batch: nothing)."""
    batch = _BATCH.get()
    if batch is not None and not batch[2]:
        batch[1].enter_context(batch[0].models.freeze())
        batch[2] = True


def on_event_loop() -> bool:
    """Whether the caller runs as a callback of a running asyncio loop (the server's)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def on_loop(doc, fn: Callable[[], None]) -> None:
    """Schedule ``fn`` on the event loop of ``doc``'s session (Panel: document lock, curdoc set)."""
    with set_curdoc(doc):
        pn.state.execute(fn, schedule=True)


def on_session_loop(fn: Callable[[], None]) -> None:
    """Run ``fn`` on the current session's event loop (at once outside a server): a hold
    released from a thread can overtake Panel's messages ("reference … isn't known")."""
    doc = served_document()
    if doc is None:
        fn()  # a notebook, a script, a test
    else:
        on_loop(doc, fn)


class RedrawQueue:
    """Redraws of many pages, handed to the event loop one at a time.

    The redraw on the loop holds the queue until done, :meth:`forget`-ten, its session
    closed, or :data:`STALL_SECONDS` passed (checked every ``check_seconds``; None: no watch
    thread).  ``schedule(doc, fn)`` runs ``fn`` on ``doc``'s event loop.
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
        """Run ``run()`` on ``doc``'s loop after the redraws before it; ``owner``'s waiting redraw
        is replaced in place, or goes first when ``urgent``."""
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
        """Release the queue if the redraw on the loop's session closed or it stalled."""
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
        """The redraw ``ticket`` is over: hand the next over."""
        with self._guard:
            if self._running is not None and self._running[0] == ticket:
                self._running = None
        self._next()


#: The server's queue, shared by every session's pages.
REDRAWS = RedrawQueue()


# ================================================================ 2. a hidden page waits
_MIRRORS = itertools.count(1)


class ShownGate:
    """Run UI updates at once while the page is shown, else the latest per key when next shown;
    ``lock`` (reentrant, the page's) is held while deferred updates run."""

    def __init__(self, lock: threading.RLock | None = None):
        self._lock = lock if lock is not None else contextlib.nullcontext()
        self._guard = threading.Lock()
        self._pending: dict[str, Callable[[], None]] = {}
        self._shown = True

    @property
    def shown(self) -> bool:
        return self._shown

    @property
    def pending(self) -> tuple[str, ...]:
        """Keys of the updates waiting for the page to be shown, in request order."""
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
        """A copy of ``source``'s parameters ``names`` following them only while shown; bind
        widgets to ``mirror.param.<name>``.  KeyError for a name ``source`` lacks."""
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
            # one message on the loop (each costs a walk over the page's models, 10 ms for
            # Compare); not from a thread, where a hold can overtake Panel's messages
            doc = served_document()
            held = doc is not None and on_event_loop()
            with pn.io.hold(doc) if held else contextlib.nullcontext():
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
    """A read-only table replaced by a new one on each :meth:`show`: Panel 1.9's Tabulator
    dropped a data update arriving while it rendered (the release ledger missed a release, 1
    run in 5).  ``make(frame)``: the Tabulator of a DataFrame; ``params``: ``pn.Column``'s."""

    def __init__(self, make: Callable[[pd.DataFrame], pn.widgets.Tabulator], frame: pd.DataFrame,
                 **params):
        params.setdefault("sizing_mode", "stretch_width")
        super().__init__(make(frame), **params)
        self._make = make

    @property
    def table(self) -> pn.widgets.Tabulator:
        return self.objects[0]

    def show(self, frame: pd.DataFrame) -> None:
        """Show ``frame``'s rows in a new table."""
        self.objects = [self._make(frame)]


class LazyCard(pn.Card):
    """A ``pn.Card``, collapsed by default, whose contents' models are built when first expanded
    (not sent or walked before); :meth:`select` still finds them."""

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
#: Seconds a session's running event handler holds its later events back (Panel's take ms).
HOLD_SECONDS = 1.5
#: Seconds an event handler waited or ran before it is logged (debug).
SLOW_SECONDS = 0.5


def document_of(fn, args=(), kwargs=None):
    """The Bokeh ``Document`` among a Panel task's arguments (partials unwrapped), or None."""
    candidates = list(args) + list((kwargs or {}).values())
    while isinstance(fn, functools.partial):
        candidates += list(fn.args) + list(fn.keywords.values())
        fn = fn.func
    return next((v for v in candidates if isinstance(v, Document)), None)


@dataclasses.dataclass(eq=False)
class _Lane:
    """One session's waiting tasks, the ticket holding the lane, since when it runs (or None)."""

    waiting: collections.deque = dataclasses.field(default_factory=collections.deque)
    ticket: int = 0
    since: float | None = None


class SessionOrderedPool(ThreadPoolExecutor):
    """A ``ThreadPoolExecutor`` starting one session's tasks in order, each after the previous
    ends or has run ``hold_seconds``; ``key(fn, args, kwargs)``: a task's session (None: no
    order).  ValueError for ``hold_seconds`` <= 0."""

    def __init__(self, max_workers: int | None = None, hold_seconds: float = HOLD_SECONDS,
                 key=document_of, thread_name_prefix: str = "dpexplorer-events"):
        super().__init__(max_workers=max_workers, thread_name_prefix=thread_name_prefix)
        if not hold_seconds > 0:
            raise ValueError(f"hold_seconds must be a positive number of seconds, not {hold_seconds!r}")
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
                stale = [(s, lane.ticket) for s, lane in running if now - lane.since >= self.hold_seconds]
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
    """``a == b`` as one bool, False when it fails or is ambiguous (arrays)."""
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - e.g. numpy's "truth value of an array is ambiguous"
        return False


def _keep_browser_values(update):
    """Wrap ``Syncable._scheduled_update_model``: pass a value equal to the browser's as its own."""

    @functools.wraps(update)
    def scheduled_update_model(self, events, msg, root, model, doc, comm, curdoc_events):
        for attr, sent in (curdoc_events or {}).items():
            if attr in msg and msg[attr] is not sent and _equal(msg[attr], sent):
                msg[attr] = sent
        return update(self, events, msg, root, model, doc, comm, curdoc_events)

    scheduled_update_model.keeps_browser_values = True
    return scheduled_update_model


def install_echo_guard(syncable=None) -> None:
    """Stop Panel sending a widget's older value back over a newer one the browser sent.

    Panel 1.9 drops echoes by identity; a selection's echo is an equal new object, and an
    attribute removed from a MultiChoice came back (3 of 12 rounds, Chromium, 2 cores at
    load 5).  RuntimeError if ``Syncable._scheduled_update_model`` moved.
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
    """Replace Panel's widget-callback pool (after ``pn.extension(nthreads=N)``) by a
    :class:`SessionOrderedPool` and install :func:`install_echo_guard`; returns the pool in
    place (None: no pool).  RuntimeError if ``pn.state._thread_pool`` moved."""
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
