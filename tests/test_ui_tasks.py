"""The explorer's task runtime (dpexplorer.ui.tasks): status, progress, result, error, cancel."""

from __future__ import annotations

import threading

import pytest

pn = pytest.importorskip("panel")

from dpexplorer.ui.optimize_view import Cancelled  # noqa: E402
from dpexplorer.ui.tasks import OPTIMIZER_THREADS, Task, TaskRunner  # noqa: E402

# the explorer in process (pages, their background work and threads): the full suite runs these;
# the quick tier has the smoke tests of tests/test_ui_smoke.py
pytestmark = pytest.mark.slow


@pytest.fixture
def runner():
    return TaskRunner(threading.RLock())


def test_a_task_ends_done_with_its_result_and_reports_progress(runner):
    seen, ended = [], []

    def work(task, x):
        task.report(0.5, "half way")
        seen.append((task.progress, task.message))  # outside a server: posted at once
        return 2 * x

    task = runner.start(work, 21, name="double", on_end=ended.append)
    assert task.wait(30) and runner.wait(30)
    assert task.status == "done" and task.result == 42 and task.error == ""
    assert task.progress == 1.0 and seen == [(0.5, "half way")]
    assert ended == [task] and task.name == "double"


def test_a_failing_task_keeps_its_error_in_words(runner):
    def work(task):
        raise ValueError("ε must be positive")

    task = runner.start(work)
    assert task.wait(30) and runner.wait(30)
    assert task.status == "failed" and task.error == "ε must be positive"
    assert isinstance(task.exception, ValueError) and task.result is None


def test_a_cancelled_task_stops_at_its_next_check(runner):
    started, release = threading.Event(), threading.Event()

    def work(task):
        started.set()
        release.wait(30)
        task.check()
        return "not reached"

    task = runner.start(work)
    assert started.wait(30) and task.status == "running"
    task.cancel()
    release.set()
    assert task.wait(30) and runner.wait(30)
    assert task.status == "cancelled" and task.result is None and task.error == ""


def test_an_optimiser_cancelled_in_its_progress_callback_ends_cancelled(runner):
    def work(task):
        raise Cancelled("opt0")

    task = runner.start(work, optimizer=True)
    assert task.wait(30) and runner.wait(30) and task.status == "cancelled"


def test_optimiser_tasks_run_on_the_optimiser_threads(runner):
    task = runner.start(lambda task: threading.current_thread().name, optimizer=True)
    assert task.wait(30) and runner.wait(30)
    assert task.result.startswith(OPTIMIZER_THREADS._thread_name_prefix)
    quick = runner.start(lambda task: threading.current_thread().name)
    assert quick.wait(30) and runner.wait(30) and quick.result.startswith("dpexplorer-ui")


def test_in_the_callers_thread_without_background(runner):
    task = runner.start(lambda task: threading.current_thread(), background=False)
    assert task.status == "done" and task.result is threading.current_thread()


def test_widgets_bound_to_a_task_follow_it(runner):
    release = threading.Event()

    def work(task):
        release.wait(30)
        task.report(0.25, "a quarter")
        return "ok"

    task = runner.start(work)
    status = pn.pane.Markdown(pn.bind(lambda s, m: f"{s}: {m}", task.param.status,
                                      task.param.message))
    bar = pn.indicators.Progress(value=pn.bind(lambda p: int(100 * (p or 0)), task.param.progress),
                                 max=100)
    release.set()
    assert task.wait(30) and runner.wait(30)
    assert status.object == "done: a quarter" and bar.value == 100


def test_a_new_task_is_idle_until_started():
    task = Task()
    assert task.status == "idle" and task.progress is None and not task.finished
    assert not task.wait(0.01)
