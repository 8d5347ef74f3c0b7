"""Each session's widget events in the order the user made them (dpexplorer.ui.serving)."""

from __future__ import annotations

import functools
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest
from bokeh.document import Document

from dpexplorer.ui.serving import (
    HOLD_SECONDS,
    SessionOrderedPool,
    document_of,
    install,
    install_echo_guard,
)

ROOT = Path(__file__).resolve().parents[1]


# the explorer in process (pages, their background work and threads): the full suite runs these;
# the quick tier has the smoke tests of tests/test_ui_smoke.py
pytestmark = pytest.mark.slow


def _recorder():
    log, guard = [], threading.Lock()

    def task(doc, name, seconds=0.0, gate=None):
        with guard:
            log.append(("start", name))
        if gate is not None:
            assert gate.wait(10)
        time.sleep(seconds)
        with guard:
            log.append(("end", name))
        return name
    return log, task


def test_one_sessions_tasks_start_in_order_each_after_the_previous_ends():
    pool = SessionOrderedPool(max_workers=2)
    log, task = _recorder()
    doc = Document()
    slow = pool.submit(task, doc, "typed value", 0.3)
    fast = pool.submit(task, doc, "click")
    assert fast.result(5) == "click" and slow.result(5) == "typed value"
    assert log == [("start", "typed value"), ("end", "typed value"),
                   ("start", "click"), ("end", "click")]
    assert pool.pending() == 0
    pool.shutdown()


def test_a_plain_pool_reverses_them_which_is_the_race():
    pool = ThreadPoolExecutor(max_workers=2)
    log, task = _recorder()
    doc = Document()
    pool.submit(task, doc, "typed value", 0.3)
    pool.submit(task, doc, "click").result(5)
    pool.shutdown(wait=True)
    assert log.index(("end", "click")) < log.index(("end", "typed value"))


def test_sessions_run_side_by_side():
    pool = SessionOrderedPool(max_workers=2)
    log, task = _recorder()
    gate = threading.Event()
    first = pool.submit(task, Document(), "session 1", 0.0, gate)
    other = pool.submit(task, Document(), "session 2")
    assert other.result(5) == "session 2" and not first.done()
    gate.set()
    assert first.result(5) == "session 1"
    pool.shutdown()


def test_a_long_handler_stops_holding_the_session_after_hold_seconds():
    pool = SessionOrderedPool(max_workers=2, hold_seconds=0.2)
    log, task = _recorder()
    doc, gate = Document(), threading.Event()
    t0 = time.monotonic()
    running = pool.submit(task, doc, "release run", 0.0, gate)
    behind = pool.submit(task, doc, "epsilon change")
    assert behind.result(5) == "epsilon change"
    waited = time.monotonic() - t0
    assert not running.done() and 0.2 <= waited < 2.0
    gate.set()
    assert running.result(5) == "release run"
    # its late end releases nothing more: the session's next task runs at once
    assert pool.submit(task, doc, "next").result(5) == "next"
    pool.shutdown()


def test_the_default_hold_is_seconds_not_minutes():
    assert 0.5 <= HOLD_SECONDS <= 5


def test_errors_reach_the_future_and_the_next_task_still_runs():
    pool = SessionOrderedPool(max_workers=1)
    doc = Document()

    def fail(_doc):
        raise ValueError("weight must be > 0")
    bad = pool.submit(fail, doc)
    good = pool.submit(lambda _doc: "ran", doc)
    with pytest.raises(ValueError, match="weight must be"):
        bad.result(5)
    assert good.result(5) == "ran"
    pool.shutdown()


def test_tasks_of_no_session_are_not_held():
    pool = SessionOrderedPool(max_workers=2)
    gate = threading.Event()
    held = pool.submit(gate.wait, 10)
    assert pool.submit(lambda: "periodic").result(5) == "periodic" and not held.done()
    gate.set()
    pool.shutdown()


def test_document_of_finds_the_session_as_panel_submits_it():
    doc = Document()
    assert document_of(print, (doc, "event")) is doc
    assert document_of(functools.partial(print, doc, "callback")) is doc
    assert document_of(functools.partial(functools.partial(print, doc))) is doc
    assert document_of(print, (), {"doc": doc}) is doc
    assert document_of(print, (1, "x")) is None


def test_a_handler_that_waited_or_ran_long_is_logged(monkeypatch, caplog):
    # the debug log says which of a session's event handlers waited for its turn, and how
    # long each ran (where an ε change spends its time with eight sessions,
    # ``python benchmarks/bench_browser.py``)
    import logging

    from dpexplorer.ui import serving

    monkeypatch.setattr(serving, "SLOW_SECONDS", 0.1)
    pool = SessionOrderedPool(max_workers=2, hold_seconds=5)
    log, task = _recorder()
    doc = Document()
    with caplog.at_level(logging.DEBUG, logger="dpexplorer.ui.serving"):
        submitted = time.perf_counter()
        first = pool.submit(task, doc, "slow", 0.3)
        second = pool.submit(task, doc, "quick")
        gap = time.perf_counter() - submitted  # the quick one came this much later
        assert first.result(5) == "slow" and second.result(5) == "quick"
        pool.shutdown()
    lines = [r.getMessage() for r in caplog.records if "event handler" in r.getMessage()]
    assert len(lines) == 2, lines
    ran = float(lines[0].split("ran ")[1].split(" s")[0])
    waited = float(lines[1].split("started ")[1].split(" s")[0])
    # the quick one waited for the slow one (all of it but the gap between the two submits;
    # the log rounds to 0.01 s)
    assert ran >= 0.3 and waited >= 0.3 - gap - 0.005, (waited, gap)


def test_no_new_tasks_after_shutdown():
    pool = SessionOrderedPool(max_workers=1)
    pool.shutdown()
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.submit(print, Document())


def test_hold_seconds_must_be_positive():
    with pytest.raises(ValueError, match="positive number of seconds"):
        SessionOrderedPool(hold_seconds=0)


def test_install_replaces_panels_pool_once_keeping_its_size():
    state = SimpleNamespace(_thread_pool=ThreadPoolExecutor(max_workers=3))
    pool = install(state)
    assert isinstance(pool, SessionOrderedPool) and state._thread_pool is pool
    assert pool._max_workers == 3
    assert install(state) is pool
    pool.shutdown()
    assert install(SimpleNamespace(_thread_pool=None)) is None
    with pytest.raises(RuntimeError, match="_thread_pool"):
        install(SimpleNamespace())


def _handled_then_pending(handled, pending, echoed=None):
    """A MultiChoice whose browser sent ``handled`` (being handled on a thread) and then
    ``pending`` (already on the server's model, waiting in Panel's queue); Panel's update of
    the model for ``handled`` (or for ``echoed``, a value a handler set) comes from the loop."""
    import panel as pn

    names = ["Ship Mode", "Segment", "Region", "State"]
    w = pn.widgets.MultiChoice(options=names, value=list(pending))
    doc = Document()
    model = w.get_root(doc)
    w._events = {"value": list(pending)}
    msg = w._process_param_change({"value": list(echoed or handled)})  # labels: a new list
    w._scheduled_update_model({}, msg, model, model, doc, None, {"value": list(handled)})
    return w, model


def test_a_widgets_echo_does_not_undo_the_browsers_newer_value():
    # Panel 1.9 matched the echo by identity: the selection widget's new list was taken for a
    # Python change, the pending newer value dropped and the older one sent to the browser
    install(SimpleNamespace(_thread_pool=ThreadPoolExecutor(max_workers=1))).shutdown()
    w, model = _handled_then_pending(["Segment", "Region", "State"], ["Segment", "Region"])
    assert model.value == ["Segment", "Region"]           # not the older value sent back
    assert w._events == {"value": ["Segment", "Region"]}  # the newer one still to be handled


def test_a_value_a_handler_changed_is_still_sent_to_the_browser():
    install_echo_guard()
    w, model = _handled_then_pending(["Segment", "Region", "State"], ["Segment", "Region"],
                                     echoed=["Segment"])
    assert model.value == ["Segment"]


def test_the_echo_guard_installs_once_and_says_when_panel_moved():
    from panel.reactive import Syncable

    install_echo_guard()
    guarded = Syncable._scheduled_update_model
    install_echo_guard()
    assert Syncable._scheduled_update_model is guarded and guarded.keeps_browser_values
    with pytest.raises(RuntimeError, match="_scheduled_update_model"):
        install_echo_guard(type("OtherSyncable", (), {}))

    class Fake:
        def _scheduled_update_model(self, events, msg, root, model, doc, comm, curdoc_events):
            self.msg = dict(msg)

    install_echo_guard(Fake)
    fake, sent = Fake(), [1.0, 2.0]
    import numpy as np

    fake._scheduled_update_model({}, {"value": [1.0, 2.0], "x": np.ones(2)}, None, None, None,
                                 None, {"value": sent, "x": np.ones(2)})
    assert fake.msg["value"] is sent          # equal: the browser's own object, Panel drops it
    assert isinstance(fake.msg["x"], np.ndarray)  # arrays: no ambiguous truth value raised


def test_the_app_script_installs_it():
    text = (ROOT / "apps" / "explorer.py").read_text()
    assert text.index("nthreads=2") < text.index("install_event_order()")


# ------------------------------------------------------------------ in a served page
@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "panel-pool"])
def test_a_value_typed_then_a_click_are_handled_in_that_order(ordered, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    from tests.test_browser import CHROMIUM, FLAGS, READY_MS, start_server
    if not Path(CHROMIUM).exists():
        pytest.skip(f"chromium not found at {CHROMIUM}")
    proc, url, log = start_server(tmp_path / "panel.log", app="tests/apps/event_order_app.py",
                                  env={"ORDERED": "1" if ordered else "0"})
    try:
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            page = browser.new_page()
            page.goto(url, timeout=READY_MS)
            field = page.get_by_role("textbox")
            field.wait_for(timeout=READY_MS)
            field.fill("-2")
            field.press("Enter")
            page.get_by_role("button", name="Add").click()  # at once, as a quick user
            page.wait_for_selector("text=/added with weight/", timeout=READY_MS)
            shown = page.locator("text=/added with weight/").inner_text()
            browser.close()
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
    if ordered:
        assert shown.strip() == "added with weight -2"
    else:  # the control: Panel's own pool handles the click first (the defect)
        assert shown.strip() == "added with weight 1"


def test_the_hold_counts_from_when_a_thread_runs_the_task_not_from_its_submission():
    """Both threads busy with other sessions: the session's first task waits for a thread
    longer than the hold, and its second task still starts only after it."""
    pool = SessionOrderedPool(max_workers=2, hold_seconds=0.2)
    log, task = _recorder()
    gate = threading.Event()
    busy = [pool.submit(task, Document(), f"other {i}", 0.0, gate) for i in range(2)]
    doc = Document()
    first = pool.submit(task, doc, "typed value", 0.05)
    second = pool.submit(task, doc, "click")
    time.sleep(0.5)  # more than the hold, both threads still taken
    assert not first.done() and not second.done()
    gate.set()
    assert second.result(5) == "click" and first.result(5) == "typed value"
    assert all(f.result(5) for f in busy)
    assert log.index(("end", "typed value")) < log.index(("start", "click"))
    pool.shutdown()
