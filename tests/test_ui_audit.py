"""Tests of the "Audit" page (AuditView), driven without a browser."""

from __future__ import annotations

import threading

import pytest

pn = pytest.importorskip("panel")
hv = pytest.importorskip("holoviews")

from dpexplorer.core import registry  # noqa: E402
from dpexplorer.ui import app as app_module  # noqa: E402
from dpexplorer.ui import audit_view  # noqa: E402
from dpexplorer.ui.audit_view import AuditView  # noqa: E402

# the explorer in process (pages, their background work and threads): the full suite runs these;
# the quick tier has the smoke tests of tests/test_ui_smoke.py
pytestmark = pytest.mark.slow


@pytest.fixture
def view(session):
    return AuditView(session, background=False, runs=400)


def test_page_is_in_the_app():
    assert ("Audit", "dpexplorer.ui.audit_view", "AuditView") in app_module.PAGES


def test_defaults_and_mechanisms(view):
    assert view.mechanism == "identity" and view.result is None and not view.busy
    # every registered mechanism can be audited, the study variant included
    assert set(registry.names()) <= set(view.param.mechanism.objects)
    assert "dawa_as_published" in view.param.mechanism.objects
    assert "No audit yet" in view.summary()
    view.panel()  # builds without a result


def test_run_audit_shows_bound_claim_and_histograms(session, view):
    session.seed = 3
    assert view.run_audit() is True, view.error
    r = view.result
    assert r.mechanism == "identity" and r.claim == 1.0 and r.seed == 3 and r.runs == 400
    assert r.epsilon_lb <= r.claim
    frame = view.bound_frame()
    assert frame["what"].tolist() == ["claimed ε", "audited lower bound", "plug-in estimate"]
    assert frame["epsilon"].iloc[1] == pytest.approx(r.epsilon_lb)
    text = view.summary()
    assert "no violation found" in text and "x₀ = (0, 0, 0, 0)" in text
    assert isinstance(view.bound_plot(), hv.Overlay)
    assert isinstance(view.histogram_plot(), hv.Overlay)
    assert len(session.ledger.entries) == 0  # an audit is a simulation: no budget spent


def test_teaching_example_shows_the_violation(view):
    assert view.teaching_example() is True, view.error
    r = view.result
    assert view.mechanism == "dawa_as_published" and view.epsilon == 4.0 and view.case == 1
    assert r.claim == pytest.approx(1.0) and r.statistic == "buckets"
    assert r.violated, r.summary()
    assert "VIOLATION" in view.summary() and "NOT PRIVATE" in view.summary()


def test_cases_follow_the_mechanism(view):
    view.mechanism = "dawa"
    assert len(view.cases()) == 2
    view.case = 1
    assert view.claim() == pytest.approx(view.epsilon * registry.get("dawa").params["ratio"])
    view.mechanism = "identity"  # one case only: back to the whole output
    assert view.case == 0 and view.claim() == view.epsilon


def test_errors_are_reported_and_keep_the_last_result(session, view, monkeypatch):
    assert view.run_audit()
    last = view.result

    class Broken:
        label, x0, x1, why, claim_share = "broken", (0,), (1,), "", 1.0

        def run(self, *args, **kwargs):
            raise ValueError("x0 and x1 must be neighbours")
    monkeypatch.setattr(audit_view, "cases", lambda name: [Broken()])
    assert view.run_audit() is False
    assert "neighbours" in view.error and "neighbours" in session.error
    assert view.result is last and not view.busy  # the last audit stays on the page
    view._set(busy=True)  # an audit is running: a second one is refused
    assert view.run_audit() is False and "already running" in view.error


def test_marginal_and_gaussian_mechanisms_run(view):
    view.param.update(mechanism="datacube", runs=100)
    assert view.run_audit(), view.error
    view.param.update(mechanism="residual_planner")  # Gaussian: the standard case carries δ
    assert view.run_audit(), view.error
    assert view.result.delta > 0 and view.result.epsilon_lb <= view.result.claim


def test_background_audit_does_not_block_and_can_be_stopped(session):
    view = AuditView(session, background=True, runs=200_000)
    started = threading.Event()
    view.param.watch(lambda e: e.new and started.set(), "done")
    assert view.run_audit() is True
    assert view.busy  # returned at once, the audit runs in a worker thread
    assert started.wait(60), "no progress reported"
    view.stop()
    assert view.wait(60)
    assert not view.busy and view.result is None and "stopped" in view.error
    assert view.task.status == "cancelled" and view.task.cancel_requested


def test_background_audit_completes(session):
    view = AuditView(session, background=True, runs=300)
    assert view.run_audit() is True
    assert view.wait(120)
    assert view.result is not None and view.error == "" and view.done == view.total > 0
    task = view.task  # the audit as a task: its result is the page's
    assert task.status == "done" and task.result is view.result and task.progress == 1.0


def test_the_controls_follow_the_audit_task_and_wait_while_hidden(view):
    root = view.panel()
    bar = root.select(pn.indicators.Progress)[0]
    buttons = {b.label if "label" in b.param else b.name: b for b in root.select(pn.widgets.Button)}
    run, stop = buttons["Run audit"], buttons["Stop"]
    assert not bar.visible and not run.disabled and stop.disabled
    view._set(busy=True, done=150, total=600)  # what the running audit's updates set
    assert bar.visible and bar.value == 25 and run.disabled and not stop.disabled
    assert any(m.object == "150 of 600 runs…" for m in root.select(pn.pane.Markdown))
    view._set(busy=False)
    view.gate.show(False)  # a hidden tab: its controls change when it is shown again
    view._set(busy=True, done=300)
    assert not bar.visible and not run.disabled
    view.gate.show(True)
    assert bar.visible and bar.value == 50 and run.disabled
    view._set(busy=False)
    assert view.run_audit() is True  # background=False: done when it returns
    assert view.task.status == "done" and view.result is view.task.result and not bar.visible


def test_published_note_says_it_was_not_private():
    assert "not private" in audit_view.PUBLISHED_NOTE
    assert "not private" in audit_view.HEADER
