"""Nothing private in messages or logs: values planted in the data never reach an error or a log line.

Each data entry point gets a value that only the data holds -- a count
987654321 that is negative, fractional or above 2**53, a category string, an
out-of-range number -- and the test checks that the error names the array or
attribute and says what is allowed, but does not repeat the value.  Then a
release, a simulation, a comparison and a table release run with the
``logging`` level at DEBUG, and no record holds a planted value.
"""

from __future__ import annotations

import decimal
import io
import logging

import numpy as np
import pandas as pd
import pytest

import dpexplorer as dpx
from dpexplorer import datasets as ds
from dpexplorer.privacy import PrivateData, validate_counts

SECRET = 987654321
#: Spellings of the planted values a message could hold (repr of ints, floats, longdoubles, Decimals).
PLANTED = ("987654321", "98765432", "9.87654", "9876543", "ceo-only-dept", "1.0000000098", "1152921505")

W4 = dpx.workloads.prefix(4)
L = dpx.Laplace(1.0)


def _x(value, dtype=float) -> np.ndarray:
    x = np.array([1, 2, 3, 0], dtype=dtype)
    x[2] = value
    return x


def _no_planted(text: str) -> None:
    for s in PLANTED:
        assert s not in text, f"{s!r} in {text!r}"


def _npy(tmp_path, x) -> str:
    path = tmp_path / "counts.npy"
    np.save(path, x)
    return ds.check_counts(ds.from_npy(path))


ENTRY_POINTS = {
    "release_negative": (lambda p: dpx.release(_x(-SECRET), W4, "identity", L), "x", "negative"),
    "release_fraction": (lambda p: dpx.release(_x(SECRET + 0.5), W4, "identity", L), "x", "whole"),
    "release_int_above_2pow53": (lambda p: dpx.release(_x(2**60 + SECRET, np.int64), W4, "hb", L), "x", "2**53"),
    "release_longdouble_above_2pow53": (
        lambda p: dpx.release(_x(np.longdouble(2**53) + SECRET, np.longdouble), W4, "hb", L), "x", "2**53"),
    "release_decimal_above_2pow53": (
        lambda p: dpx.release(_x(decimal.Decimal(2**60 + SECRET), object), W4, "hb", L), "x", "2**53"),
    "release_object_str": (lambda p: dpx.release(_x("ceo-only-dept", object), W4, "hb", L), "x", "numeric"),
    "release_dawa_negative": (lambda p: dpx.release(_x(-SECRET), W4, "dawa", L), "x", "negative"),
    "simulate_weights_too_large": (
        lambda p: dpx.simulate(_x(1e17 + SECRET), W4, "identity", L, seed=0, counts=False), "x", "2**53"),
    "private_data_fraction": (lambda p: PrivateData(_x(SECRET + 0.25)), "x", "whole"),
    "compare_negative": (lambda p: dpx.compare(W4, L, x=_x(-SECRET)), "x", "negative"),
    "validate_counts_named": (lambda p: validate_counts(_x(-SECRET), "salaries"), "salaries", "negative"),
    "check_counts_negative": (lambda p: ds.check_counts(_x(-SECRET)), "x", "negative"),
    "npy_fraction": (lambda p: _npy(p, _x(SECRET + 0.5)), "counts.npy", "whole"),
    "histogram_category": (lambda p: ds.histogram(np.array([1.0, "ceo-only-dept"], dtype=object), 4),
                           "values", "numeric"),
    "histogram_outside_edges": (lambda p: ds.histogram([1.0, 2.0, float(SECRET)], [0, 1, 2, 3]),
                                "values", "outside"),
    "from_csv_category": (lambda p: ds.from_csv(io.StringIO("a\n1\n2\nceo-only-dept\n"), "a", 2), "'a'", "numeric"),
    "from_csv_outside_edges": (lambda p: ds.from_csv(io.StringIO(f"a\n1\n2\n{SECRET}\n"), "a", [0, 1, 2, 3]),
                               "values", "outside"),
    "from_dataframe_category": (
        lambda p: ds.from_dataframe(pd.DataFrame({"a": [1, 2, "ceo-only-dept"]}), "a", 2), "'a'", "numeric"),
    "numerical_attribute_outside_range": (
        lambda p: ds.numerical_attribute([1.0, 2.0, float(SECRET)], 3, range=(0, 4)), "values", "outside"),
    "numerical_from_csv_category": (
        lambda p: ds.numerical_from_csv(io.StringIO("a\n1\nceo-only-dept\n"), "a", 2), "'a'", "numeric"),
}


@pytest.mark.parametrize("case", list(ENTRY_POINTS), ids=list(ENTRY_POINTS))
def test_errors_name_the_data_never_its_values(case, tmp_path):
    run, name, allowed = ENTRY_POINTS[case]
    with pytest.raises(ValueError) as info:
        run(tmp_path)
    text = str(info.value)
    _no_planted(text)
    assert name in text and allowed in text, text


def test_error_gives_count_and_first_index():
    x = np.zeros((3, 4))
    x[1, 2], x[2, 0] = -SECRET, -1
    with pytest.raises(ValueError, match=r"x has 2 negative entries \(the first is x\[1, 2\]\)") as info:
        validate_counts(x)
    _no_planted(str(info.value))


def test_table_entry_point_never_repeats_a_category():
    dom = dpx.Domain((dpx.Attribute("dept", categories=("a", "b")),
                      dpx.Attribute("salary", edges=(0, 50000, 100000))))
    df = pd.DataFrame({"dept": ["a", "b", "ceo-only-dept"], "salary": [30000, 41000, 42000]})
    noise = dpx.Gaussian(1.0, 1e-6, calibration="zcdp")
    try:
        r = dpx.release(dpx.Table(df, dom), dpx.workloads.marginals((2, 2), 1), "residual_planner", noise)
    except ValueError as exc:
        _no_planted(str(exc))
    else:
        _no_planted(r.to_frame().to_csv() + r.to_json())


# ------------------------------------------------------------------ logs
def test_debug_logs_carry_no_data_values(caplog):
    """Releases, simulations, comparisons and a table release at DEBUG: no log record holds a planted value.

    The explorer logs the errors it shows (``ui.session.notify`` outside a
    served page, ``log.exception`` in the pages), so refused inputs are sent
    through ``notify`` as the app does.
    """
    from dpexplorer.ui.session import notify

    caplog.set_level(logging.DEBUG)  # every logger, dpexplorer's, opendp's, pandas'
    x = np.array([3.0, SECRET, 5.0, 1.0])
    dpx.release(x, W4, "identity", L)
    dpx.release(x, W4, "dawa", L)
    dpx.simulate(x, W4, "hb", L, seed=0)
    dpx.compare(W4, L, x=x, trials=2)
    dom = dpx.Domain((dpx.Attribute("dept", categories=("a", "b")),
                      dpx.Attribute("salary", edges=(0.0, 5e6, 1e7))))
    df = pd.DataFrame({"dept": ["a", "b", "a"], "salary": [30000.0, 41000.0, 9876543.21]})
    dpx.release(dpx.Table(df, dom), dpx.workloads.marginals((2, 2), 1), "residual_planner",
                dpx.Gaussian(1.0, 1e-6, calibration="zcdp"))
    refused = 0
    for bad in (_x(-SECRET), _x(SECRET + 0.5), _x(decimal.Decimal(2**60 + SECRET), object)):
        try:
            dpx.release(bad, W4, "hb", L)
        except ValueError as exc:
            notify(str(exc))
            refused += 1
    assert refused == 3
    assert any("negative" in r.getMessage() for r in caplog.records)  # the notes were logged
    _no_planted("\n".join(r.getMessage() for r in caplog.records) + caplog.text)
