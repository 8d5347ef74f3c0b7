"""dpexplorer.ui.events: Panel's event pool runs one session's events in order, sessions side by side."""

import inspect
import threading
import time

import panel as pn
import panel.reactive
import pytest
from bokeh.document import Document

from dpexplorer.ui import events


@pytest.fixture
def pool():
    p = events.SessionOrderedExecutor(max_workers=2)
    yield p
    p.shutdown(wait=True)


def test_one_documents_tasks_run_in_submission_order(pool):
    doc, seen, overlap = Document(), [], []
    running = threading.Lock()

    def task(name, pause):
        if not running.acquire(blocking=False):
            overlap.append(name)  # another task of this document is running
            return name
        try:
            time.sleep(pause)
            seen.append(name)
        finally:
            running.release()
        return name

    # the first task is the slowest: on a plain 2-thread pool the second would finish first
    futures = [pool.submit(lambda d, n=n, s=s: task(n, s), doc)
               for n, s in (("value", 0.3), ("click", 0.0), ("third", 0.05))]
    assert [f.result(timeout=10) for f in futures] == ["value", "click", "third"]
    assert seen == ["value", "click", "third"] and overlap == []


def test_a_plain_pool_would_reorder_them():
    # the defect this module fixes, shown on the executor Panel makes by itself
    plain, seen = __import__("concurrent.futures").futures.ThreadPoolExecutor(2), []
    try:
        doc = Document()
        a = plain.submit(lambda d: (time.sleep(1.0), seen.append("value")), doc)
        b = plain.submit(lambda d: seen.append("click"), doc)
        a.result(timeout=10), b.result(timeout=10)
    finally:
        plain.shutdown(wait=True)
    assert seen == ["click", "value"]


def test_documents_run_side_by_side(pool):
    first, second = Document(), Document()
    other_ran = threading.Event()

    def waits(doc):
        return other_ran.wait(timeout=10)  # only true if the other document's task ran meanwhile

    a = pool.submit(waits, first)
    b = pool.submit(lambda doc: other_ran.set(), second)
    assert a.result(timeout=15) is True
    b.result(timeout=10)


def test_exceptions_and_tasks_without_a_document(pool):
    doc = Document()

    def fail(d):
        raise ValueError("bad value")

    bad = pool.submit(fail, doc)
    good = pool.submit(lambda d: 7, doc)  # the queue goes on after a failure
    assert isinstance(bad.exception(timeout=10), ValueError)
    assert good.result(timeout=10) == 7
    assert pool.submit(lambda x: x + 1, 1).result(timeout=10) == 2
    assert not pool._queues  # every queue drained


def test_install_replaces_panels_pool_once(monkeypatch):
    # Panel still hands change events and Bokeh events to state._thread_pool with the document first
    for fn in (panel.reactive.Syncable._comm_change, panel.reactive.Syncable._event_coroutine):
        assert "state._thread_pool.submit(self._" in inspect.getsource(fn)
    assert "submit(self._schedule_change, doc" in inspect.getsource(panel.reactive.Syncable._comm_change)
    saved = pn.config.nthreads
    try:
        pool = events.install(2)
        assert isinstance(pn.state._thread_pool, events.SessionOrderedExecutor)
        assert events.install(2) is pool  # the app script runs once per session
        assert pool._max_workers == pn.config.nthreads == 2
    finally:
        pn.state._thread_pool.shutdown(wait=False)
        pn.state._thread_pool = None
        pn.config.nthreads = saved
