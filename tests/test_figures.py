"""dpexplorer.figures: every figure exports as PNG/SVG (Bokeh's exporters, headless Chromium)
and as a CSV of the numbers it draws."""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET

import numpy as np
import pandas as pd
import pytest

hv = pytest.importorskip("holoviews")
pn = pytest.importorskip("panel")
hv.extension("bokeh")

from dpexplorer import figures  # noqa: E402


def _needs_browser():
    pytest.importorskip("selenium")
    if shutil.which("chromedriver") is None and shutil.which("geckodriver") is None:
        pytest.skip("no webdriver (chromium-driver or geckodriver) on PATH")


def _figure():
    x = np.arange(5.0)
    curve = hv.Curve((x, x**2), "n", "rmse", label="HB").opts(color="#ff0000", line_width=6)
    scatter = hv.Scatter((x, x + 1), "n", "rmse", label="points")
    band = hv.Spread((x, x**2, np.full(5, 0.5)), "n", ["rmse", "err"], label="band")
    return (band * curve * scatter).opts(hv.opts.Curve(responsive=True, height=250))


def test_figure_frame_has_exactly_the_numbers_drawn():
    df = figures.figure_frame(_figure())
    assert list(df["element"].unique()) == ["Spread", "Curve", "Scatter"]
    curve = df[df["element"] == "Curve"]
    np.testing.assert_array_equal(curve["n"], np.arange(5.0))
    np.testing.assert_array_equal(curve["rmse"], np.arange(5.0) ** 2)
    assert set(curve["element_label"]) == {"HB"}
    spread = df[df["element"] == "Spread"]
    np.testing.assert_array_equal(spread["err"], np.full(5, 0.5))
    assert curve["err"].isna().all()                          # columns of other elements: NaN
    assert len(df) == 15


def test_elements_with_label_or_group_dimensions():
    bars = hv.Bars(pd.DataFrame({"label": ["a", "b"], "group": ["x", "y"], "rmse": [1.0, 2.0]}),
                   ["label", "group"], "rmse")
    df = figures.figure_frame(bars * hv.HLine(1.5))
    assert list(df.columns[:3]) == ["element", "element_group", "element_label"]
    assert list(df["label"].iloc[:2]) == ["a", "b"] and list(df["rmse"].iloc[:2]) == [1.0, 2.0]


def test_csv_round_trip(tmp_path):
    path = figures.export_figure(pn.pane.HoloViews(_figure()), tmp_path / "fig.csv")
    back = pd.read_csv(path)
    pd.testing.assert_frame_equal(back, figures.figure_frame(_figure()), check_dtype=False)


def test_figure_bytes_for_download_buttons():
    data = figures.figure_bytes(_figure(), "csv")
    assert data.decode().splitlines()[0].startswith('"element","element_group","element_label"')
    with pytest.raises(ValueError, match="format"):
        figures.figure_bytes(_figure(), "gif")


def test_bokeh_models_export_their_sources():
    from bokeh.plotting import figure

    p = figure(width=200, height=100)
    p.line([1, 2, 3], [4, 5, 6])
    df = figures.figure_frame(p)
    assert list(df["x"]) == [1, 2, 3] and list(df["y"]) == [4, 5, 6] and set(df["source"]) == {0}


def test_bad_input_is_refused():
    with pytest.raises(TypeError, match="HoloViews"):
        figures.to_bokeh("not a figure")
    with pytest.raises(TypeError):
        figures.figure_frame(42)
    with pytest.raises(ValueError, match=r"\.png.*\.svg.*\.csv"):
        figures.export_figure(_figure(), "fig.jpg")


@pytest.mark.browser
def test_png_export(tmp_path):
    _needs_browser()
    from PIL import Image

    path = figures.export_figure(_figure(), tmp_path / "fig.png", width=320, height=200)
    assert figures.figure_bytes(_figure(), "png", width=320, height=200)[:8] == b"\x89PNG\r\n\x1a\n"
    img = np.asarray(Image.open(path).convert("RGB")).astype(int)
    assert img.shape == (200, 320, 3)
    red = (img[..., 0] > 200) & (img[..., 1] < 80) & (img[..., 2] < 80)
    assert red.sum() > 100                                    # the thick red curve is drawn
    # a responsive figure without a size gets 800 px wide
    wide = figures.export_png(_figure(), tmp_path / "wide.png")
    assert Image.open(wide).size == (800, 250)


@pytest.mark.browser  # drives chromium through chromedriver, like the PNG export
def test_svg_export(tmp_path):
    _needs_browser()
    path = figures.export_figure(pn.pane.HoloViews(_figure()), tmp_path / "fig.svg", width=300,
                                 height=180)
    root = ET.parse(path).getroot()
    assert root.tag.endswith("svg") and root.get("width") == "300" and root.get("height") == "180"
    paths = root.iter("{http://www.w3.org/2000/svg}path")
    assert sum(1 for _ in paths) > 5
    assert "#ff0000" in path.read_text().lower() or "rgb(255,0,0)" in path.read_text().replace(" ", "")


@pytest.mark.browser
def test_an_app_figure_exports(tmp_path):
    """A Learn-page figure, as the app draws it: the CSV holds the engine's densities."""
    _needs_browser()
    from dpexplorer.ui.learn import NoiseLesson
    from dpexplorer.ui.session import Session

    lesson = NoiseLesson(Session())
    assert lesson.refresh()
    fig = lesson.figure()
    df = figures.figure_frame(fig)
    curves = df[df["element"] == "Curve"]
    frame = lesson.result["frame"]
    np.testing.assert_array_equal(curves["density"].to_numpy(), frame["density"].to_numpy())
    np.testing.assert_array_equal(curves["z"].to_numpy(), frame["z"].to_numpy())
    assert (df["element"] == "VLine").sum() == 4
    assert figures.export_png(fig, tmp_path / "noise.png", width=400, height=250).stat().st_size > 1000


# ------------------------------------------------------------------ CSV injection
@pytest.mark.parametrize("label", ["=cmd|' /C calc'!A0", "=cmd|calc!A1", "+1", "@x", "-x", "\tx", "\rx",
                                   "=1+1\n=2"])
def test_safe_csv_neutralises_formula_cells(label):
    """OWASP's rule: a text cell starting with = + - @ tab or CR gets a leading ' (and is quoted)."""
    import io as _io

    df = pd.DataFrame({"label": [label, "ok"], "cat": pd.Categorical([label, "b"]),
                       label: [1.5, -3.5]})
    text = figures.safe_csv(df, comments=[f"dataset: {label}"])
    back = pd.read_csv(_io.StringIO(text), comment="#")
    assert list(back.columns) == ["label", "cat", "'" + label]
    assert back["label"].tolist() == ["'" + label, "ok"]
    assert back["cat"].tolist() == ["'" + label, "b"]
    assert back["'" + label].tolist() == [1.5, -3.5]           # numbers stay numbers
    assert "\n-3.5\n" not in text and ",-3.5\n" in text       # written unquoted, as a number
    import csv as _csv

    for row in _csv.reader(_io.StringIO(text.split("\n", 1)[1])):  # no cell starts like a formula
        for cell in row:
            assert not cell.startswith(("=", "+", "-", "@", "\t", "\r")) or cell == "-3.5", row
    assert text.startswith("# dataset: ") and text.count("\n#") == 0  # the comment stays one line


def test_safe_csv_keeps_numbers_and_plain_text():
    df = pd.DataFrame({"a": ["x", "a-b", "1"], "n": [-1, 0, 2], "f": [-0.5, np.nan, 1e-300]})
    text = figures.safe_csv(df)
    assert text.splitlines() == ['"a","n","f"', '"x",-1,-0.5', '"a-b",0,""', '"1",2,1e-300']


def test_figure_csv_neutralises_labels(tmp_path):
    curve = hv.Curve(pd.DataFrame({"cell": ["=cmd|calc!A1", "@x"], "y": [-1.0, 2.0]}), "cell", "y",
                     label="=HYPERLINK(1)")
    text = figures.export_csv(curve, tmp_path / "f.csv").read_text()
    assert "'=cmd|calc!A1" in text and "'@x" in text and "'=HYPERLINK(1)" in text
    assert ",-1.0" in text
