"""Careless and hostile input to the explorer's components: refused in words, session kept.

Every case drives a component the way its widgets do and checks that the
input is refused (the method returns ``False``/``None``), that the message
says what was wrong in words (no raw ``param`` text), that nothing raised and
nothing was logged as an exception, and that the session -- workload,
dataset, ε/δ, ledgers -- is as it was.  The size cases run under
:func:`dpexplorer.limits.override` so that a refused upload is small here.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import dpexplorer as dpx

pn = pytest.importorskip("panel")

from dpexplorer.ui import builder as bmod  # noqa: E402
from dpexplorer.ui.builder import WorkloadBuilder  # noqa: E402
from dpexplorer.ui.data_view import DataView  # noqa: E402
from dpexplorer.ui.session import Session  # noqa: E402
from dpexplorer.ui.sums_view import SumsView  # noqa: E402
from dpexplorer.ui.uploads import Upload, size_text, upload_limit  # noqa: E402

# the explorer in process (pages, their background work and threads): the full suite runs these;
# the quick tier has the smoke tests of tests/test_ui_smoke.py
pytestmark = pytest.mark.slow


@pytest.fixture
def session():
    return Session()


@pytest.fixture
def builder(session):
    return WorkloadBuilder(session)


def _state(session):
    return (session.workload, session.dataset, session.epsilon, session.delta, session.noise,
            session.seed, list(session.param.dataset.objects),
            {k: len(v.entries) for k, v in session.ledgers.items()})


def _no_tracebacks(caplog):
    bad = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert not bad, [r.getMessage() for r in bad]


# ------------------------------------------------------------------ a domain of 10⁹ cells
def test_domain_size_is_checked_before_building(builder, session):
    """Too many cells or too large an attribute: refused from the text, before any term is built."""
    W = session.workload
    for text, words in [("a:4096,b:4096,c:4096,d:4096,e:4096", "cells"),
                        ("a:5000", "too large"), ("a:0", "at least 1"),
                        (",".join(f"x{i}:2" for i in range(17)), "at most 16"),
                        ("a:2, a:3", "distinct"), ("a:2:3", "name:size")]:
        assert not builder.set_domain(attributes=text), text
        assert words in builder.error and session.workload is W, (text, builder.error)


def test_a_billion_cell_domain_stays_factorised_and_says_so(builder, session):
    """``a:1000,b:1000,c:1000`` (10⁹ cells): the workload stays implicit, the page explains the limit."""
    assert builder.set_domain(attributes="a:1000,b:1000,c:1000")
    assert session.workload.n == 10**9 and isinstance(session.workload, dpx.matrix.Kronecker)
    note = builder.large_domain_note()
    assert "1,000,000,000 cells" in note and note in builder.summary()
    assert builder.set_domain(attributes="a:100,b:100") and builder.large_domain_note() == ""


def test_a_billion_cell_domain_does_not_allocate_in_the_compare_rows():
    """What took the server down: every Compare row of ``a:1000,b:1000,c:1000`` within 2 GiB more memory.

    Before the fix the rows of identity-like strategies materialised the 10⁹
    column norms (7.45 GiB each) and the server grew until the kernel killed it.
    The cap is on address space, 2 GiB above what the process has mapped once the
    UI is imported (≈ 1.8 GiB of virtual memory; an absolute 2 GiB cap left the
    optimiser pool's threads ≈ 0.3 GiB, and pickling a task failed in one CI run).
    """
    code = textwrap.dedent("""
        import resource
        import dpexplorer as dpx
        from dpexplorer.ui.session import Session
        from dpexplorer.ui.builder import WorkloadBuilder
        s = Session(); b = WorkloadBuilder(s)
        assert b.set_domain(attributes="a:1000,b:1000,c:1000")
        W = s.workload
        mapped = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmSize")) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (mapped + 2 * 2**30, mapped + 2 * 2**30))
        quick = ["identity", "hb", "h2", "wavelet", "workload", "greedy_h", "eigen_design", "fourier",
                 "dawa", "uniform"]
        df = dpx.compare(W, dpx.Laplace(1.0), quick, cache=s.cache)
        assert df["rmse"].notna().sum() >= 3, df
        missing = df[df["rmse"].isna()]
        assert all(isinstance(n, str) and len(n) > 20 for n in missing["note"]), missing  # why, in words
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-3000:]


# ------------------------------------------------------------------ Attributes after Clear all
def test_attributes_right_after_clear_all_draw_without_a_traceback(builder, session, caplog):
    layout = builder.panel()
    assert builder.clear_terms()
    builder.attributes = "a:4, b:8"  # what typing in the Attributes box does
    assert builder.domain == (4, 8) and builder.error == ""
    text = builder.summary()
    assert "a (4) × b (8)" in text and "old one" in text
    assert builder.add_term("prefix")
    assert "a (4) × b (8)" in builder.summary()
    assert layout.get_root() is not None
    _no_tracebacks(caplog)


# ------------------------------------------------------------------ specs through the limits
@pytest.mark.parametrize("text, words", ids=["marginals_bomb", "random_ranges_3e8", "depth_200",
                                              "yaml_aliases", "not_utf8", "empty", "broken_json"],
                         argvalues=[
    ('{"domain": [2' + ', 2' * 39 + '], "marginals": [20]}', "factors"),
    ('{"domain": [4096], "products": [{"factors": [{"type": "random_ranges", "m": 300000000}]}]}',
     "queries"),
    ('{"domain": [4], "products": [{"factors": [' + '{"type": "permuted", "base": ' * 200
     + '{"type": "identity"}' + '}' * 200 + ']}]}', "spec_depth"),
    ("a: &a [1, 1]\nb: [*a, *a, *a]\n" + "c: [" + ", ".join(["*a"] * 2000) + "]\n", "domain"),
    ("\xff\xfe", "UTF-8"), ("", "empty"), ("[1, 2", "spec"),
])
def test_hostile_spec_files_are_refused_and_the_workload_kept(builder, session, caplog, text, words):
    W = session.workload
    upload = [w for w in builder.panel().select(Upload) if w.accepted_filetypes[0] == ".json"][0]  # not the schema upload
    data = text.encode("latin-1") if text.startswith("\xff") else text.encode()
    upload.receive(data, "w.yaml" if "&a" in text else "w.json")
    assert session.workload is W
    assert words.lower() in session.error.lower(), session.error
    _no_tracebacks(caplog)


def test_spec_and_csv_uploads_above_the_limit_are_refused_after_one_chunk(session, builder, caplog):
    with dpx.limits.override(upload_bytes=1000):
        layout = builder.panel()
        upload = [w for w in layout.select(Upload) if w.accepted_filetypes[0] == ".json"][0]  # not the schema upload
        assert upload.max_bytes == 1000 and upload.max_file_size == "1KB"
        assert "1000 bytes" in size_text(upload.max_bytes)
        W = session.workload
        upload.chunk_size = 400
        upload.receive(b" " * 5000, "big.json")
        assert session.workload is W and "upload limit" in session.error
        assert not upload._file_buffer  # nothing of the file kept
        view = DataView(session)
        card = view.upload_card()
        notes = [str(p.object) for p in card.select(pn.pane.Markdown)]
        assert any("Files up to 1000 bytes" in n for n in notes)
        before = _state(session)
        csv_in = card.select(Upload)[0]
        csv_in.receive(b"a\n" + b"1\n" * 2000, "big.csv")
        assert _state(session) == before and "upload limit" in session.error
    _no_tracebacks(caplog)


def test_upload_limit_is_the_one_in_dpx_limits():
    assert upload_limit() == dpx.limits.current().upload_bytes
    with dpx.limits.override(upload_bytes=2**30, spec_bytes=2**20):
        assert upload_limit("spec_bytes") == 2**20 and upload_limit() == 2**30


# ------------------------------------------------------------------ feedback on data uploads
@pytest.mark.parametrize("data, words", [
    (b"", "empty"), (b"abc", "no rows"), (b"\xff\xfe\x00garbage", "UTF-8"),
    (b'a,b\n1,"2\n', "CSV"),
])
def test_bad_csv_uploads_say_why_and_keep_the_session(session, caplog, data, words):
    view = DataView(session)
    before = _state(session)
    csv_in = view.upload_card().select(Upload)[0]
    csv_in.receive(data, "bad.csv")
    assert _state(session) == before
    assert words.lower() in session.error.lower(), session.error
    assert "Traceback" not in session.error
    sums = SumsView(session)
    csv2 = sums.upload_card().select(Upload)[0]
    session.error = ""
    csv2.receive(data, "bad.csv")
    assert session.error, "the sum-query page's upload must say why too"
    _no_tracebacks(caplog)


@pytest.mark.parametrize("data", [b"", b"not numpy", np.array([1.5, 2]).tobytes(),
                                  b"\x93NUMPY\x01\x00\x76\x00{'descr': '<f8', 'fortran_order': False, "
                                  b"'shape': (1000000000000,), }" + b" " * 40 + b"\n"])
def test_bad_npy_uploads_say_why_and_keep_the_session(session, caplog, data):
    view = DataView(session)
    before = _state(session)
    npy_in = view.upload_card().select(Upload)[1]
    npy_in.receive(data, "bad.npy")
    assert _state(session) == before and session.error
    _no_tracebacks(caplog)


# ------------------------------------------------------------------ feedback on sidebar inputs
@pytest.mark.parametrize("name, value, words", [
    ("epsilon", -1.0, "above 0"), ("epsilon", 0.0, "above 0"), ("epsilon", None, "needs a value"),
    ("epsilon", "abc", "above 0"), ("epsilon", 1e-12, "1e-9"), ("epsilon", float("nan"), "above 0"),
    ("epsilon", float("inf"), "above 0"), ("delta", 2.0, "between 0 and 1"),
    ("delta", 0.0, "between 0 and 1"), ("delta", None, "needs a value"), ("seed", -1, "whole number"),
    ("seed", 2.5, "whole number"), ("budget_epsilon", -5.0, "above 0"),
    ("budget_delta", 1.5, "between 0 and 1"),
])
def test_sidebar_refuses_in_words_and_keeps_the_value(session, caplog, name, value, words):
    controls = session.controls()
    before = _state(session)
    assert not session.set_input(name, value)
    assert words in session.error, session.error
    assert "parameter" not in session.error and "Number" not in session.error
    assert _state(session) == before
    assert controls is not None
    _no_tracebacks(caplog)


def test_sidebar_widgets_report_and_show_the_value_in_use(session):
    controls = session.controls()
    eps = [w for w in controls.select(pn.widgets.FloatInput) if "ε" in str(getattr(w, bmod._LABEL))][0]
    eps.value = -3.0
    assert eps.value == session.epsilon == 1.0 and "ε = -3 was not used" in session.error
    eps.value = None
    assert eps.value == 1.0 and "needs a value" in session.error


@pytest.mark.parametrize("setting, words", [
    ({"epsilon": 1e9}, "almost no privacy"), ({"epsilon": 1e-9}, "noise"),
    ({"noise": "Gaussian", "delta": 0.5}, "far below 1/N"),
])
def test_extreme_but_valid_values_are_explained(session, setting, words):
    session.data()  # the dataset's number of records is known
    for name, value in setting.items():
        assert session.set_input(name, value)
    note = session.privacy_note()
    assert words in note, note
    pane = [p for p in session.controls().select(pn.pane.Markdown) if "⚠" in str(p.object)]
    assert pane and words in str(pane[0].object)


def test_ordinary_values_need_no_note(session):
    session.data()
    assert session.set_input("epsilon", 0.5) and session.privacy_note() == ""
    assert session.set_input("noise", "Gaussian") and session.privacy_note() == ""



@pytest.mark.parametrize("label, text, words", [
    ("ε (> 0)", "abc", "ε = 'abc' is not a number: ε must be a number above 0"),
    ("δ (0 < δ < 1)", "2x", "δ = '2x' is not a number: δ is a probability"),
    ("Budget ρ", "1,5", "Budget ρ = '1,5' is not a number: the budget ρ is a number above 0"),
])
def test_sidebar_number_box_refuses_a_text_in_words(session, caplog, label, text, words):
    """The browser sends the sidebar's number boxes what was typed (a browser's number box
    dropped "abc" as it was typed, and nothing was said): a text that is not a number is
    refused with what is allowed, the value in use stays and the box shows it again."""
    from dpexplorer.ui.session import EnteredFloatInput

    controls = session.controls()
    box = [w for w in controls.select(EnteredFloatInput) if getattr(w, bmod._LABEL) == label][0]
    before = _state(session)
    kept = box.value
    box._process_events({"value": text})  # what the browser sends on Enter
    assert words in session.error and "it stays" in session.error, session.error
    assert _state(session) == before and box.value == kept
    session.error = ""
    box._process_events({"value": text})  # the same text again: said again
    assert words in session.error
    box._process_events({"value": " 0.25 "})  # a number is read and used
    assert box.value == 0.25
    _no_tracebacks(caplog)
