"""Engine errors reach app users in the app's words: no Python advice, no internal names.

The engine's messages are written for Python callers (``dpx.limits.override(...)``,
``scope='kronecker'``, a workload's internal name such as ``'χ{}'``); the pages show
:func:`dpexplorer.ui.session.exception_message` of an exception, and every page alert and
notification goes through :func:`dpexplorer.ui.session.app_text`.
"""

from __future__ import annotations

import re

import pytest

import dpexplorer as dpx

pytest.importorskip("panel")

from dpexplorer.strategies.fourier import fourier  # noqa: E402
from dpexplorer.ui import session as ui_session  # noqa: E402
from dpexplorer.ui.session import Session, app_text, exception_message  # noqa: E402

#: What Python looks like in a message: the package's names, keyword arguments, code marks,
#: and the names the engine gives workloads (``χ{...}`` marginal sets).
PYTHON_SYNTAX = re.compile(r"dpx\.|\b[a-z_]+=\S|`|\.override\(|\.configure\(|\(\.\.\.\)|χ\{")


# the explorer in process (pages, their background work and threads): the full suite runs these;
# the quick tier has the smoke tests of tests/test_ui_smoke.py
pytestmark = pytest.mark.slow


def _limit_error() -> dpx.limits.LimitExceededError:
    """The error a user met: column norms of a Kronecker workload over too large a domain."""
    W = dpx.workloads.kron([dpx.workloads.total(64), dpx.workloads.total(64)])
    with dpx.limits.override(cells=1000), pytest.raises(dpx.limits.LimitExceededError) as info:
        W.column_norms(1)
    return info.value


def _fourier_error() -> ValueError:
    W = dpx.workloads.all_range(16)
    with pytest.raises(dpx.registry.NotApplicableError) as info:
        fourier(W)
    return info.value


def _errors() -> dict[str, BaseException]:
    return {"limit": _limit_error(), "fourier": _fourier_error()}


def test_the_engine_messages_are_for_python_callers():
    """The premise: the raw messages do carry Python advice (else this module tests nothing)."""
    for exc in _errors().values():
        assert PYTHON_SYNTAX.search(str(exc)), str(exc)


@pytest.mark.parametrize("name", ["limit", "fourier"])
def test_ui_message_of_each_engine_error_has_no_python(name):
    exc = _errors()[name]
    shown = exception_message(exc)
    assert not PYTHON_SYNTAX.search(shown), shown
    # the same error formatted into a page's own sentence, as pages do
    framed = app_text(f"Preset not loaded: {exc}")
    assert not PYTHON_SYNTAX.search(framed), framed
    assert framed.startswith("Preset not loaded: ")


def test_limit_message_keeps_the_numbers_and_says_what_to_do():
    exc = _limit_error()
    for text in (exception_message(exc), app_text(f"Not run: {exc}")):
        assert "4,096" in text and "1,000" in text  # asked for, allowed
        assert exc.bounds in text and "smaller" in text
        assert "DPEXPLORER_LIMITS" in text  # the server's setting, not Python
    # the Python caller keeps the Python advice
    assert "dpx.limits.override(cells=...)" in str(exc)


def test_session_report_and_page_alerts_show_the_app_words():
    session = Session()
    exc = _limit_error()
    session.report(f"Domain not changed: {exc}")
    assert not PYTHON_SYNTAX.search(session.error), session.error
    alert = ui_session.error_alert(session.param.error)
    text = alert.object() if callable(alert.object) else alert.object
    assert not PYTHON_SYNTAX.search(str(text))


def test_compare_rows_note_uses_the_app_words():
    from dpexplorer.ui import compare_view

    for exc in _errors().values():
        note = compare_view._message(exc)
        assert not PYTHON_SYNTAX.search(note), note
