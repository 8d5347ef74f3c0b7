"""The explorer's long computations as tasks: status, progress, result, error and cancel.

A page binds its widgets to a :class:`Task`'s parameters; its :class:`TaskRunner` starts
tasks on :data:`OPTIMIZER_THREADS` (threads waiting for :mod:`dpexplorer.ui.workers`) or
:data:`EXECUTOR`, never on Panel's pool, which runs every session's widget callbacks.  A
task's updates reach the page on the session's event loop, batched per document; outside a
server they run at once under the page's lock.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import panel as pn
import param
from panel.io.state import set_curdoc

import dpexplorer as dpx

from . import workers
from .messages import exception_message
from .optimize_view import Cancelled
from .serving import on_loop

__all__ = ["Task", "TaskRunner", "TaskCancelled", "Jobs", "EXECUTOR", "OPTIMIZER_THREADS",
           "BACKGROUND_NICE", "build_lock", "lower_native_helper_threads", "task_message",
           "percent"]

log = logging.getLogger(__name__)

#: CPU priority (nice) of the background threads: builds and optimisations yield the
#: processor to the threads that answer the browser (ε changes, redraws).
BACKGROUND_NICE = 10


def _background_thread() -> None:
    """Lower the calling thread's CPU priority (Linux: nice is per thread)."""
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BACKGROUND_NICE)


def lower_native_helper_threads(nice: int = BACKGROUND_NICE) -> list[int]:
    """Lower this process's threads Python did not start (the BLAS helpers, which run half of
    a background comparison's products); call after the imports.  Returns the ids lowered."""
    return workers.lower_threads(nice, native_only=True)


#: Worker threads shared by all pages and sessions (strategy builds, per-query errors).
EXECUTOR = ThreadPoolExecutor(max_workers=4, thread_name_prefix="dpexplorer-ui",
                              initializer=_background_thread)
#: Threads waiting for the optimisers' worker processes (they hold no processor).
OPTIMIZER_THREADS = ThreadPoolExecutor(max_workers=32, thread_name_prefix="dpexplorer-opt",
                                       initializer=_background_thread)

_BUILD_LOCKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_BUILD_LOCKS_GUARD = threading.Lock()


def build_lock(cache: dpx.StrategyCache, key=None) -> threading.RLock:
    """The lock serialising the builds of one entry of ``cache``: ``key`` is ``(W, name, norm)``
    for a strategy, ``("svdb", W)`` for an SVD bound, None for the whole cache."""
    with _BUILD_LOCKS_GUARD:
        locks = _BUILD_LOCKS.setdefault(cache, {})
        return locks.setdefault(key, threading.RLock())


def task_message(exc: BaseException) -> str:
    """A task's failure in words: a ValueError's in the app's words, else type and message."""
    if isinstance(exc, ValueError):
        return exception_message(exc)
    return f"{type(exc).__name__}: {exc}"


class TaskCancelled(Exception):
    """Raised inside a task's function (:meth:`Task.check`) once the task was cancelled."""


class Task(param.Parameterized):
    """One long computation of a page; its parameters change on the session's event loop.

    Its function gets the task: :meth:`report` progress, :meth:`post` UI updates,
    :meth:`check` (or :attr:`cancel_requested`) to stop when cancelled.
    """

    status = param.Selector(default="idle", constant=True, objects=[
        "idle", "queued", "running", "done", "failed", "cancelled"])
    progress = param.Number(default=None, allow_None=True, bounds=(0, 1), constant=True,
                            doc="Fraction done, None when unknown.")
    message = param.String(default="", constant=True, doc="What the task is doing, in words.")
    result = param.Parameter(default=None, constant=True, doc="What the function returned.")
    error = param.String(default="", constant=True, doc="The failure in words, '' if none.")

    def __init__(self, post: Callable[[Callable[[], None]], None] | None = None, **params):
        super().__init__(**params)
        self._post = post if post is not None else (lambda callback: callback())
        self._cancel = threading.Event()
        self._finished = threading.Event()
        #: The exception that failed the task (None unless ``status == 'failed'``).
        self.exception: BaseException | None = None

    @property
    def finished(self) -> bool:
        """Whether the function has returned (its final state may still be on its way)."""
        return self._finished.is_set()

    @property
    def cancel_requested(self) -> bool:
        return self._cancel.is_set()

    def cancel(self) -> None:
        """Ask the task to stop: :meth:`check` raises from now on."""
        self._cancel.set()

    def check(self) -> None:
        """Raise :class:`TaskCancelled` once the task was cancelled."""
        if self._cancel.is_set():
            raise TaskCancelled(self.name)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the function has returned; ``False`` on timeout."""
        return self._finished.wait(timeout)

    def post(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` on the page's event loop (at once outside a server)."""
        self._post(callback)

    def report(self, progress: float | None = None, message: str | None = None) -> None:
        """Post the progress (0..1) and message (None keeps the current one)."""
        values = {} if message is None else {"message": message}
        if progress is not None:
            values["progress"] = min(max(float(progress), 0.0), 1.0)
        if values:
            self.post(lambda: self._update(**values))

    def _update(self, **values) -> None:
        with param.edit_constant(self):
            self.param.update(**values)


class TaskRunner:
    """Start a page's tasks and post their updates; ``lock``: the page's, held while they run."""

    def __init__(self, lock: threading.RLock):
        self.lock = lock
        self._futures: set = set()
        self._guard = threading.Lock()
        self._posts: dict = {}  # document -> callbacks posted and not run yet, in order

    def start(self, fn: Callable, *args, name: str = "", optimizer: bool = False,
              executor: ThreadPoolExecutor | None = None, background: bool = True,
              on_end: Callable[[Task], None] | None = None) -> Task:
        """A :class:`Task` running ``fn(task, *args)`` on :data:`OPTIMIZER_THREADS` (``optimizer``),
        ``executor`` or :data:`EXECUTOR`; ``background=False``: in the caller's thread.

        :class:`TaskCancelled` or ``Cancelled`` ends it ``cancelled``; another exception
        ``failed`` (:func:`task_message`, :attr:`Task.exception`).  ``on_end(task)`` runs
        where its updates run, once its final state is set.
        """
        doc = pn.state.curdoc
        post = self._poster(doc) if background else (lambda callback: callback())
        task = Task(post=post, name=name or getattr(fn, "__name__", "task"))
        task._update(status="queued")

        def finish(**values) -> None:
            # one update of the task; held on the event loop, its widgets change in one message
            def apply():
                with _held(doc):
                    task._update(**values)
                    if on_end is not None:
                        on_end(task)
            post(apply)

        def run():
            ctx = set_curdoc(doc) if doc is not None and background else contextlib.nullcontext()
            with ctx:
                post(lambda: task._update(status="running"))
                try:
                    result = fn(task, *args)
                except (TaskCancelled, Cancelled):
                    finish(status="cancelled")
                except Exception as exc:  # noqa: BLE001 - the task's error, shown by the page
                    task.exception = exc
                    if not isinstance(exc, ValueError):
                        log.error("task %s failed", task.name, exc_info=exc)
                    finish(status="failed", error=task_message(exc))
                else:
                    finish(status="done", result=result, progress=1.0)
                finally:
                    task._finished.set()

        if not background:
            run()
            return task
        pool = executor or (OPTIMIZER_THREADS if optimizer else EXECUTOR)
        try:
            future = pool.submit(run)
        except RuntimeError:  # the interpreter is shutting down: nothing more runs
            log.debug("task not started: the executor is shut down", exc_info=True)
            task._update(status="cancelled")
            task._finished.set()
            return task
        with self._guard:
            self._futures.add(future)
        future.add_done_callback(self._done)
        return task

    def _done(self, future) -> None:
        with self._guard:
            self._futures.discard(future)
        exc = future.exception()
        if exc is not None:  # tasks catch their own errors; this is a bug
            log.error("background task failed", exc_info=exc)

    def _poster(self, doc):
        """``post(callback)`` for ``doc``'s session: callbacks posted while one waits for the loop
        run with it, in order, in one turn: scheduled one by one, progress posts made an ε
        typed in the page wait 19 s (eight headless Chromium sessions, 2 cores)."""
        lock = self.lock
        if doc is None or doc.session_context is None:
            def post_now(callback):
                with lock:
                    callback()
            return post_now

        def run_posted():
            with self._guard:
                batch = self._posts.pop(doc, [])
            with set_curdoc(doc), lock:
                for callback in batch:
                    try:
                        callback()
                    except Exception:  # noqa: BLE001 - one failed update must not stop the rest
                        log.exception("a background task's update of the page failed")

        def post(callback):
            with self._guard:
                waiting = doc in self._posts
                self._posts.setdefault(doc, []).append(callback)
            if waiting:
                return  # the run already scheduled takes this one too
            try:  # Panel schedules it on the session's event loop, with the document lock
                on_loop(doc, run_posted)
            except Exception:  # noqa: BLE001 - the session was closed meanwhile
                with self._guard:
                    self._posts.pop(doc, None)
                log.debug("could not post to a closed session", exc_info=True)
        return post

    @property
    def pending(self) -> int:
        """Tasks running or queued."""
        with self._guard:
            return len(self._futures)

    def wait(self, timeout: float = 300.0) -> bool:
        """Block until no task runs or waits (tasks may start tasks); ``False`` on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            with self._guard:
                futures = list(self._futures)
            if not futures:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            for f in futures:
                with contextlib.suppress(Exception):  # logged in _done
                    f.result(timeout=max(remaining, 0.01))

    def submit(self, fn: Callable, *args, executor: ThreadPoolExecutor | None = None) -> Task:
        """Run the job ``fn(post, *args)`` (it catches its own errors) as a task."""
        return self.start(lambda task, *a: fn(task.post, *a), *args,
                          name=getattr(fn, "__name__", "job"), executor=executor)


Jobs = TaskRunner  # the older name


def percent(done: float | None, total: float | None = 1.0) -> int:
    """``done / total`` as a whole percentage in 0..100 (None or a total of 0: 0)."""
    if done is None or not total:
        return 0
    return int(min(max(100.0 * float(done) / float(total), 0.0), 100.0))


def _held(doc):
    """``pn.io.hold(doc)`` for a served document (one message to the browser), else nothing."""
    served = doc is not None and doc.session_context is not None
    return pn.io.hold(doc) if served else contextlib.nullcontext()
