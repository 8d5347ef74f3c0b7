"""Tests for dpexplorer.datasets: DPBench, user data, bundled bokeh-sampledata."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import dpexplorer as dpx
from dpexplorer import datasets as ds

DPBENCH = (Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "dpbench").resolve()


@pytest.fixture
def dpbench_dir() -> Path:
    if not DPBENCH.is_dir():
        pytest.skip(f"DPBench data not found at {DPBENCH}")
    return DPBENCH


# ---------------------------------------------------------------- DPBench
@pytest.mark.parametrize("name", ds.DAWA_DATASETS)
def test_dawa_datasets_load(dpbench_dir, name):
    x = ds.load_dpbench(name, dpbench_dir)
    assert x.shape == (4096,)
    assert x.dtype == np.float64
    assert (x >= 0).all() and np.array_equal(x, np.round(x)) and x.sum() > 0


def test_dawa_names():
    assert ds.DAWA_DATASETS == ("ADULT", "HEPTH", "INCOME", "MEDCOST", "NETTRACE", "PATENT", "SEARCHLOGS")


def test_list_dpbench(dpbench_dir):
    table = ds.list_dpbench(dpbench_dir)
    assert list(table.columns) == ["name", "paper_name", "dims", "shape", "path", "description",
                                   "source", "error"]
    assert table["error"].isna().all()  # every bundled file reads (bad files get a reason)
    assert table["source"].str.contains("DPBench").all()   # every file says where it comes from
    assert set(table["dims"]) == {1, 2}
    assert (table.loc[table["dims"] == 1, "shape"] == (4096,)).all()
    assert (table.loc[table["dims"] == 2, "shape"] == (256, 256)).all()
    assert set(ds.DAWA_DATASETS) <= set(table["paper_name"])
    row = table[table["name"] == "ADULTFRANK.n4096"].iloc[0]
    assert row["paper_name"] == "ADULT" and row["dims"] == 1
    assert table[table["name"] == "bids"].iloc[0]["paper_name"] == "bids"


def test_names_resolve(dpbench_dir):
    by_paper = ds.load_dpbench("adult", dpbench_dir)
    by_stem = ds.load_dpbench("ADULTFRANK.n4096", dpbench_dir)
    assert np.array_equal(by_paper, by_stem)
    grid = ds.load_dpbench("Adult_2D_256_256", dpbench_dir)
    assert grid.shape == (256, 256) and (grid >= 0).all()


def test_unknown_dpbench_name(dpbench_dir):
    with pytest.raises(ValueError, match="unknown DPBench dataset 'NOPE'.*available.*ADULT"):
        ds.load_dpbench("NOPE", dpbench_dir)
    with pytest.raises(KeyError):
        ds.load_dpbench("NOPE", dpbench_dir)


def test_missing_dpbench_dir(tmp_path):
    with pytest.raises(FileNotFoundError, match="DPBench directory .* not found"):
        ds.list_dpbench(tmp_path / "absent")
    with pytest.raises(FileNotFoundError):
        ds.load_dpbench("ADULT", tmp_path / "absent")


def _npy_header(shape) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f8", "fortran_order": False, "shape": shape})
    return buf.getvalue()


def test_bad_npy_files_are_listed_with_a_reason_and_refused_on_load(tmp_path):
    """Regression: one corrupt .npy made list_dpbench fail for every file."""
    (tmp_path / "1D").mkdir()
    (tmp_path / "2D").mkdir()
    np.save(tmp_path / "1D" / "GOOD.npy", np.arange(6.0))
    (tmp_path / "1D" / "JUNK.npy").write_bytes(b"junk")
    (tmp_path / "1D" / "SHORT.npy").write_bytes(_npy_header((100,)) + bytes(16))
    (tmp_path / "2D" / "HUGE.npy").write_bytes(_npy_header((10**6, 10**6)))  # 7 TiB declared, 128 bytes
    table = ds.list_dpbench(tmp_path).set_index("name")
    assert table.loc["GOOD", "error"] is None and table.loc["GOOD", "shape"] == (6,)
    assert "not a valid .npy file" in table.loc["JUNK", "error"] and table.loc["JUNK", "shape"] is None
    assert "truncated" in table.loc["SHORT", "error"]
    assert "`cells` limit" in table.loc["HUGE", "error"]
    assert ds.load_dpbench("GOOD", tmp_path).sum() == 15
    with pytest.raises(ValueError, match="JUNK.npy: not a valid .npy file"):
        ds.load_dpbench("JUNK", tmp_path)
    with pytest.raises(dpx.LimitExceededError, match="cells"):
        ds.from_npy(tmp_path / "2D" / "HUGE.npy")
    buf = io.BytesIO(_npy_header((10**12,)))
    with pytest.raises(dpx.LimitExceededError, match="cells"):
        ds.from_npy(buf)
    with dpx.limits.override(cells=4):
        with pytest.raises(dpx.LimitExceededError, match="cells"):
            ds.from_npy(tmp_path / "1D" / "GOOD.npy")
    assert ds.npy_shape(tmp_path / "1D" / "GOOD.npy") == (6,)


def test_csv_and_bins_are_sized_before_reading(tmp_path):
    with pytest.raises(ValueError, match="empty"):
        ds.from_csv(io.StringIO(""), "a", 4)
    with pytest.raises(ValueError, match="no rows"):
        ds.from_csv(io.StringIO("a\n"), "a", 4)
    big = tmp_path / "big.csv"
    with open(big, "wb") as f:
        f.truncate(10**10)  # a sparse file: nothing written
    with pytest.raises(dpx.LimitExceededError, match="upload_bytes"):
        ds.from_csv(big, "a", 4)
    with dpx.limits.override(upload_bytes=10):
        with pytest.raises(dpx.LimitExceededError, match="upload_bytes"):
            ds.from_csv(io.StringIO("a\n" + "1\n" * 10), "a", 4)
    for call in (lambda: ds.histogram([1.0, 2.0], 10**9),
                 lambda: ds.histogram2d([1.0], [1.0], (10**5, 10**5)),
                 lambda: ds.bucket_edges(np.arange(5.0), 10**9, "quantile")):
        with pytest.raises(dpx.LimitExceededError, match="bins"):
            call()
    counts, edges = ds.histogram([1.0, 2.0], 4)
    assert counts.sum() == 2 and edges.size == 5


def test_default_dpbench_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("DPEXPLORER_DPBENCH", str(tmp_path))
    assert ds.default_dpbench_dir() == tmp_path
    monkeypatch.delenv("DPEXPLORER_DPBENCH")
    assert ds.default_dpbench_dir() == (DPBENCH if DPBENCH.is_dir() else None)


# ---------------------------------------------------------------- check_counts
@pytest.mark.parametrize(
    "x, match",
    [
        ([], "empty"),
        ([1.0, np.nan], r"NaN/inf.*x\[1\]"),
        ([1.0, np.inf], "NaN/inf"),
        ([3, -1, 2], r"negative.*x\[1\][^=]*>= 0"),  # the index, never the value
        ([[1, 2], [3, -4]], r"negative.*x\[1, 1\]"),
        ([1.0, 2.5], r"non-integer.*x\[1\][^=]*whole numbers"),
        (np.ones((2, 2, 2)), r"1D \(n,\) or 2D.*\(2, 2, 2\)"),
        (5, "1D"),
        (["a", "b"], "numeric"),
        (np.array([2**60], dtype=np.int64), "2\\*\\*53"),
    ],
)
def test_check_counts_invalid(x, match):
    with pytest.raises(ValueError, match=match):
        ds.check_counts(x)


def test_check_counts_whole_floats_and_name():
    out = ds.check_counts(np.array([[0.0, 2.0], [5.0, 1.0]]))
    assert out.dtype == np.float64 and out.shape == (2, 2)
    with pytest.raises(ValueError, match=r"^data has"):
        ds.check_counts([-1], name="data")


def test_check_counts_does_not_alias():
    x = np.array([1.0, 2.0])
    out = ds.check_counts(x)
    out[0] = 9
    assert x[0] == 1.0


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(np.int64, hnp.array_shapes(min_dims=1, max_dims=2, max_side=20),
                  elements=st.integers(0, 10**9)))
def test_check_counts_roundtrip(x):
    out = ds.check_counts(x)
    assert out.dtype == np.float64 and out.shape == x.shape
    assert np.array_equal(out, x)


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(np.int64, hnp.array_shapes(min_dims=1, max_dims=2, max_side=20),
                  elements=st.integers(0, 10**9)),
       st.integers(-(10**9), -1), st.data())
def test_check_counts_rejects_negative(x, neg, data):
    x = x.copy()
    idx = tuple(data.draw(st.integers(0, s - 1)) for s in x.shape)
    x[idx] = neg
    with pytest.raises(ValueError, match="negative"):
        ds.check_counts(x)


# ---------------------------------------------------------------- histograms
def test_histogram_counts_rows():
    values = [0.5, 1.5, 1.7, 2.0, 3.9]
    counts, edges = ds.histogram(values, 4)
    assert counts.sum() == len(values) and counts.shape == (4,) and edges.shape == (5,)
    counts, edges = ds.histogram(values, [0, 1, 2, 4])
    assert np.array_equal(edges, [0, 1, 2, 4]) and np.array_equal(counts, [1, 2, 2])
    counts, edges = ds.histogram(values, 2, range=(0, 4))
    assert np.array_equal(edges, [0, 2, 4]) and np.array_equal(counts, [3, 2])
    counts, _ = ds.histogram([7, 7, 7], 3)  # constant data
    assert counts.sum() == 3


@pytest.mark.parametrize(
    "values, bins, rng, match",
    [
        ([], 3, None, "empty"),
        ([1.0, np.nan, np.nan], 3, None, "2 NaN/inf value"),
        ([1.0, np.inf], 3, None, "1 NaN/inf"),
        (["a", "b"], 3, None, "numeric"),
        ([1, None], 3, None, "1 NaN/inf"),
        ([1, 2], 0, None, ">= 1"),
        ([1, 2], [0, 2, 1], None, "strictly increasing"),
        ([1, 2], [0, 0, 3], None, "strictly increasing"),
        ([1, 2], [0], None, ">= 2 finite"),
        ([1, 2], "auto", None, "int or a sequence"),
        ([1, 2], 2.5, None, "int or a sequence"),
        ([1, 2, 5, 6], [0, 3, 4], None, "2 of the values fall outside"),
        ([1, 2, 5], 3, (0, 4), "1 of the values fall outside"),
        ([1, 2], 3, (4, 0), "lo < hi"),
        ([1, 2], [0, 1, 2], (0, 2), "range cannot be combined"),
    ],
)
def test_histogram_invalid(values, bins, rng, match):
    with pytest.raises(ValueError, match=match):
        ds.histogram(values, bins, range=rng)


def test_histogram2d():
    x, y = [0.1, 0.9, 0.9, 1.5], [0.1, 0.2, 1.9, 1.0]
    grid, xe, ye = ds.histogram2d(x, y, 2, range=((0, 2), (0, 2)))
    assert grid.shape == (2, 2) and grid.sum() == 4
    assert np.array_equal(grid, [[2, 1], [0, 1]])
    grid, xe, ye = ds.histogram2d(x, y, ([0, 1, 2], 4))
    assert grid.shape == (2, 4) and np.array_equal(xe, [0, 1, 2]) and grid.sum() == 4
    with pytest.raises(ValueError, match="equal length"):
        ds.histogram2d([1, 2], [1], 2)
    with pytest.raises(ValueError, match="1 of the y_values fall outside"):
        ds.histogram2d(x, y, ([0, 2], [0, 1.5]))
    with pytest.raises(ValueError, match="one entry per axis"):
        ds.histogram2d(x, y, ([0, 1, 2], 3, 4))
    grid, xe, ye = ds.histogram2d(x, y, np.array([0.0, 1.0, 2.0]))  # same edges on both axes
    assert grid.shape == (2, 2) and np.array_equal(ye, [0, 1, 2])
    with pytest.raises(ValueError, match="x_values has 1 NaN/inf"):
        ds.histogram2d([np.nan, 1], [1, 2], 2)


CSV = "city,pop,kind\na,10,x\nb,25,y\nc,31,x\nd,47,z\ne,50,x\n"


def test_from_csv_roundtrip():
    counts, edges = ds.from_csv(io.StringIO(CSV), "pop", 4)
    assert counts.sum() == 5 and counts.dtype == np.float64
    counts, edges = ds.from_csv(io.StringIO(CSV), "pop", [0, 20, 40, 60])
    assert np.array_equal(edges, [0, 20, 40, 60]) and np.array_equal(counts, [1, 2, 2])


def test_from_csv_errors():
    with pytest.raises(ValueError, match=r"column 'nope' not found.*\['city', 'pop', 'kind'\]"):
        ds.from_csv(io.StringIO(CSV), "nope", 4)
    with pytest.raises(ValueError, match="column 'kind' must be numeric"):
        ds.from_csv(io.StringIO(CSV), "kind", 4)
    with pytest.raises(ValueError, match="column 'pop' has 2 missing"):
        ds.from_csv(io.StringIO("id,pop\na,1\nb,\nc,2\nd,NA\ne,3\n"), "pop", 4)


def test_from_dataframe():
    df = pd.DataFrame({"a": [1, 2, 3], "b": [True, False, True]})
    counts, _ = ds.from_dataframe(df, "a", 3)
    assert np.array_equal(counts, [1, 1, 1])
    with pytest.raises(ValueError, match="must be numeric"):
        ds.from_dataframe(df, "b", 2)


def test_from_npy(tmp_path):
    buf = io.BytesIO()
    np.save(buf, np.array([[1, 2], [0, 4]]))
    buf.seek(0)
    assert np.array_equal(ds.from_npy(buf), [[1, 2], [0, 4]])
    path = tmp_path / "bad.npy"
    np.save(path, np.array([1.0, -3.0]))
    with pytest.raises(ValueError, match="bad.npy has 1 negative"):
        ds.from_npy(path)


# ---------------------------------------------------------------- bundled
EXPECTED = {"airports_elevation": (256,), "us_cities_lonlat": (64, 64), "superstore": (256,)}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bundled(name):
    d = ds.load_bundled(name)
    assert d.name == name and d.x.shape == EXPECTED[name] == d.shape
    assert d.x.dtype == np.float64 and (d.x >= 0).all() and np.array_equal(d.x, np.round(d.x))
    assert d.x.sum() == d.n_records > 0
    assert len(d.edges) == d.x.ndim == len(d.attributes)
    assert all(len(e) == n + 1 for e, n in zip(d.edges, d.x.shape))
    assert "bokeh-sampledata" in d.description and "\n" not in d.description


def test_bundled_records():
    from bokeh.sampledata.airport_routes import airports
    from bokeh.sampledata.us_cities import data

    assert ds.load_bundled("airports_elevation").n_records == len(airports)
    cities = ds.load_bundled("us_cities_lonlat")
    assert 0.95 * len(data["lon"]) < cities.n_records <= len(data["lon"])
    store = ds.load_bundled("superstore")
    assert store.frame is not None and store.n_records == len(store.frame)
    assert {"Sales", "Profit", "Category", "Region"} <= set(store.frame.columns)
    assert pd.api.types.is_numeric_dtype(store.frame["Profit"])


def test_bundled_registry_and_defaults():
    reg = ds.bundled()
    assert set(reg) == set(EXPECTED) and all(callable(f) for f in reg.values())
    assert ds.load_bundled(ds.DEFAULT_1D).x.ndim == 1
    assert ds.load_bundled(ds.DEFAULT_2D).x.ndim == 2
    assert ds.load_bundled(ds.DEFAULT_TABLE).frame is not None
    with pytest.raises(ValueError, match="unknown bundled dataset 'x'.*superstore"):
        ds.load_bundled("x")


def test_no_ui_imports():
    src = Path(ds.__file__).read_text()
    assert "import panel" not in src and "holoviews" not in src
