"""Export any figure of the explorer: PNG or SVG images (through Bokeh) and a CSV of its numbers.

Every plot the app shows is a HoloViews object rendered by Bokeh (or a Panel
``HoloViews`` pane holding one); the same object passed here gives

* :func:`export_png` / :func:`export_svg`: the picture, by Bokeh's own
  exporters (:func:`bokeh.io.export_png`, :func:`bokeh.io.export_svg`), which
  render the figure in a headless browser through a Selenium webdriver
  (Chromium with chromedriver, e.g. Debian's ``chromium`` and
  ``chromium-driver``; or Firefox with geckodriver);
* :func:`figure_html` / :func:`export_html`: the interactive figure as one
  standalone HTML file that loads nothing (no URL: Bokeh's code and styles
  inline), so it opens offline and from ``file://``;
* :func:`figure_frame` / :func:`export_csv`: the numbers drawn, as a tidy
  table: one row per drawn point, with the element type, its group and
  label (``element``, ``element_group``, ``element_label``), and the element's own columns (HoloViews ``Element.dframe()``).
  Raw Bokeh models give the columns of their data sources.

Every CSV the package writes (figures here, the explorer's release downloads)
goes through :func:`safe_csv`, which neutralises text cells a spreadsheet
would run as a formula.

:func:`export_figure` picks the format from the file name.  Nothing here
touches private data; HoloViews, Bokeh and Selenium are imported only when a
function needs them.
"""

from __future__ import annotations

import atexit
import csv
import os
from pathlib import Path
from typing import cast

import pandas as pd

__all__ = ["FORMATS", "FORMULA_PREFIXES", "safe_csv", "to_bokeh", "figure_frame", "export_csv", "export_png", "export_svg",
           "figure_html", "export_html", "inline_resources", "export_figure", "figure_bytes",
           "webdriver", "image_export_missing"]

#: File formats of the app's download buttons (:class:`dpexplorer.ui.exports.FigureExport`).
FORMATS = ("png", "svg", "csv")
#: File formats :func:`export_figure` writes, by suffix.
EXPORT_FORMATS = (*FORMATS, "html")

_DRIVER = None

#: First characters that make a spreadsheet read a cell as a formula (OWASP, "CSV Injection").
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


def _neutral(value):
    """A text value that starts like a formula, prefixed with ``'``; anything else unchanged."""
    if isinstance(value, str) and value.startswith(FORMULA_PREFIXES):
        return "'" + value
    return value


def _comment(line) -> str:
    """One ``# ...`` line: line breaks and other control characters written as escapes."""
    text = "".join(c if c >= " " or c == "\t" else repr(c)[1:-1] for c in str(line))
    return "# " + text + "\n"


def safe_csv(frame: pd.DataFrame, path=None, comments=()) -> str:
    """``frame`` as CSV text (no index) in which no cell can run as a spreadsheet formula.

    Follows OWASP's rule against CSV injection ("CSV Injection", OWASP
    Foundation): a text cell -- or column name -- that begins with ``=``, ``+``,
    ``-``, ``@``, a tab or a carriage return gets a leading single quote
    (``=cmd|' /C calc'!A0`` is written ``"'=cmd|' /C calc'!A0"``), and every text
    cell is quoted (``csv.QUOTE_NONNUMERIC``: a carriage return inside a cell
    cannot end its row).  Numbers are values, not text, and stay as they are,
    unquoted: ``-3.5`` is written ``-3.5``.  Category
    labels read from data, dataset and attribute names are text and so are
    neutralised however they look (a label ``"+1"`` is written ``'+1``).

    Parameters
    ----------
    frame : pandas.DataFrame
        Any shape; column dtypes other than object, string and category are
        written by pandas unchanged.
    path : str or Path, optional
        Also write the text there (UTF-8).
    comments : iterable of str
        Lines written first, each as ``# line`` (read back with
        ``pandas.read_csv(..., comment="#")``); control characters in them are
        escaped, so a value cannot start a new row.

    Returns
    -------
    str
        The CSV text, ``\\n`` line ends.
    """
    out = frame.copy(deep=False)
    for col in out.columns:
        if not (pd.api.types.is_numeric_dtype(out[col]) or pd.api.types.is_datetime64_any_dtype(out[col])):
            out[col] = out[col].astype(object).map(_neutral)
    out.columns = [_neutral(c) for c in out.columns]
    body = out.to_csv(index=False, lineterminator="\n", quoting=csv.QUOTE_NONNUMERIC)
    text = "".join(_comment(line) for line in comments) + body
    if path is not None:
        Path(path).write_text(text, encoding="utf-8")
    return text


def _unwrap(fig):
    """The HoloViews object or Bokeh model inside a Panel pane (or ``fig`` itself)."""
    obj = getattr(fig, "object", None)
    if obj is not None and type(fig).__module__.startswith("panel"):
        return obj
    return fig


def _is_holoviews(fig) -> bool:
    try:
        import holoviews as hv
    except ImportError:  # pragma: no cover - a dependency
        return False
    return isinstance(fig, hv.core.Dimensioned)


def to_bokeh(fig, width: int | None = None, height: int | None = None):
    """The Bokeh model of a figure, sized for export.

    Parameters
    ----------
    fig : HoloViews object, Panel HoloViews pane or Bokeh model
    width, height : int, optional
        Pixels of every plot (needed for responsive figures, which have no
        size of their own; default 800 × 400 for those).

    Returns
    -------
    bokeh.model.Model

    Raises
    ------
    TypeError
        If ``fig`` is none of the above.
    """
    from bokeh.model import Model
    from bokeh.models import Plot

    fig = _unwrap(fig)
    if _is_holoviews(fig):
        import holoviews as hv

        model = hv.render(fig, backend="bokeh")
    elif isinstance(fig, Model):
        model = fig
    else:
        raise TypeError(f"cannot export a {type(fig).__name__}: pass a HoloViews object, a Panel "
                        "HoloViews pane or a Bokeh model")
    for plot in model.select({"type": Plot}):
        responsive = plot.sizing_mode not in (None, "fixed")
        if responsive or width is not None or height is not None:
            plot.sizing_mode = "fixed"
            plot.width = width or (plot.width if not responsive else None) or 800
            plot.height = height or plot.height or 400
    if getattr(model, "sizing_mode", None) not in (None, "fixed"):
        model.sizing_mode = "fixed"
    return model


def figure_frame(fig) -> pd.DataFrame:
    """The numbers a figure draws, as one tidy table.

    Parameters
    ----------
    fig : HoloViews object, Panel HoloViews pane or Bokeh model

    Returns
    -------
    pandas.DataFrame
        For HoloViews: one block of rows per element (Curve, Scatter, Area,
        Spread, Bars, HLine, ...) in drawing order, with columns ``element``
        (type), ``element_group``, ``element_label`` and the element's dimensions
        (``Element.dframe()``; key and value dimensions by name), blocks with
        other dimensions filled with NaN.  For a Bokeh model: the columns of
        every ``ColumnDataSource``, with a ``source`` column numbering them.

    Raises
    ------
    TypeError
        If ``fig`` is not a figure.
    """
    fig = _unwrap(fig)
    if _is_holoviews(fig):
        import holoviews as hv

        blocks = []
        for el in fig.traverse(lambda e: e, [hv.Element]):
            df = el.dframe()
            meta = pd.DataFrame({"element": type(el).__name__, "element_group": el.group,
                                 "element_label": el.label}, index=df.index)
            blocks.append(pd.concat([meta, df], axis=1))
        if not blocks:
            return pd.DataFrame(columns=["element", "element_group", "element_label"])
        return pd.concat(blocks, ignore_index=True, sort=False)
    from bokeh.model import Model
    from bokeh.models import ColumnDataSource

    if not isinstance(fig, Model):
        raise TypeError(f"no numbers to export from a {type(fig).__name__}")
    blocks = []
    for i, src in enumerate(fig.select({"type": ColumnDataSource})):
        # the selector returns only ColumnDataSource models
        data = {k: list(v) for k, v in cast(ColumnDataSource, src).data.items()}
        df = pd.DataFrame(data)
        df.insert(0, "source", i)
        blocks.append(df)
    return pd.concat(blocks, ignore_index=True, sort=False) if blocks else pd.DataFrame()


def inline_resources():
    """Bokeh's own code and styles, inline, and nothing else: what an exported figure loads.

    Bokeh's ``INLINE`` resources also list, as URLs, the files that every model
    class imported in the process declares (``__javascript__``/``__css__``): with
    Panel imported, Panel's bundles as server paths (``static/extensions/panel/...``,
    which a ``file://`` page cannot load) and, after ``pn.extension(...)``, its
    extensions' files and MathJax from a CDN (nothing offline).  A figure drawn
    by HoloViews is made of Bokeh's own models, which need none of them.
    """
    from bokeh.resources import Resources

    class _FigureResources(Resources):
        def _collect_external_resources(self, resource_attr):  # other libraries' model files
            return []

        def clone(self, *, components=None):  # Bokeh's bundle clones the resources it is given
            return type(self)(mode="inline", components=components or list(self.components))

    return _FigureResources(mode="inline")


def figure_html(fig, width: int | None = None, height: int | None = None,
                title: str = "dpexplorer figure") -> str:
    """The figure as one standalone HTML page that loads nothing from anywhere.

    Parameters
    ----------
    fig : HoloViews object, Panel HoloViews pane or Bokeh model
    width, height : int, optional
        Pixels of every plot (see :func:`to_bokeh`).
    title : str
        The page's title.

    Returns
    -------
    str
        HTML with Bokeh's code and styles inline (:func:`inline_resources`).
    """
    from bokeh.embed import file_html

    return file_html(to_bokeh(fig, width, height), resources=inline_resources(), title=title)


def export_html(fig, path, *, width: int | None = None, height: int | None = None) -> Path:
    """Write :func:`figure_html` of ``fig`` to ``path`` (UTF-8); the file opens offline."""
    path = Path(path)
    path.write_text(figure_html(fig, width, height), encoding="utf-8")
    return path


def export_csv(fig, path) -> Path:
    """Write :func:`figure_frame` of ``fig`` to a CSV file (:func:`safe_csv`, no index).

    Returns
    -------
    pathlib.Path
        ``path``.
    """
    path = Path(path)
    safe_csv(figure_frame(fig), path)
    return path


def webdriver():
    """A headless Chromium webdriver for Bokeh's exporters, created once per process.

    Uses :func:`bokeh.io.webdriver.create_chromium_webdriver` (chromedriver
    on ``PATH``, or ``BOKEH_CHROMEDRIVER_PATH``); as root, where Chromium's
    sandbox cannot run, it adds ``--no-sandbox`` (the page rendered is the
    figure itself, with Bokeh's inline resources).  Falls back to Firefox
    with geckodriver.  Closed when the process exits.

    Raises
    ------
    RuntimeError
        If neither browser with its driver is installed (with how to install one).
    """
    global _DRIVER
    if _DRIVER is not None:
        return _DRIVER
    try:
        from bokeh.io.webdriver import (
            create_chromium_webdriver,
            create_firefox_webdriver,
        )
    except ImportError as exc:  # pragma: no cover - selenium missing
        raise RuntimeError("figure export needs selenium (pip install 'dpexplorer[export]')") from exc
    extra = ["--no-sandbox"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []
    errors = []
    for make in (lambda: create_chromium_webdriver(extra_options=extra),
                 create_firefox_webdriver):
        try:
            _DRIVER = make()
            break
        except Exception as exc:  # noqa: BLE001 - try the next browser, report both
            errors.append(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    if _DRIVER is None:
        raise RuntimeError("PNG/SVG export needs a headless browser and its webdriver: Chromium "
                           "with chromedriver (Debian: apt-get install chromium chromium-driver) "
                           "or Firefox with geckodriver; " + "; ".join(errors))
    atexit.register(_quit)
    return _DRIVER


def image_export_missing() -> str:
    """Why PNG/SVG export cannot work on this machine, in plain words; ``""`` if it may.

    A cheap check before any browser is started: selenium importable, and a
    webdriver for Chromium (``chromedriver`` on ``PATH`` or
    ``BOKEH_CHROMEDRIVER_PATH``) or Firefox (``geckodriver``) present.  An
    empty answer does not promise success (the browser may still fail to
    start: :func:`webdriver` then raises), a non-empty one means it cannot.
    """
    import importlib.util
    import shutil

    if _DRIVER is not None:
        return ""
    if importlib.util.find_spec("selenium") is None:
        return ("PNG and SVG images need the selenium package and a headless browser on the "
                "computer running the app, and selenium is not installed there")
    chromedriver = os.environ.get("BOKEH_CHROMEDRIVER_PATH") or shutil.which("chromedriver")
    if chromedriver is None and shutil.which("geckodriver") is None:
        return ("PNG and SVG images are drawn by a headless browser on the computer running the "
                "app (Chromium with chromedriver, or Firefox with geckodriver), and none is "
                "installed there")
    return ""


def _quit() -> None:
    global _DRIVER
    if _DRIVER is not None:
        try:
            _DRIVER.quit()
        finally:
            _DRIVER = None



def export_png(fig, path, *, width: int | None = None, height: int | None = None,
               scale: float = 1, driver=None) -> Path:
    """Write ``fig`` as a PNG image (:func:`bokeh.io.export_png`).

    Parameters
    ----------
    fig : HoloViews object, Panel HoloViews pane or Bokeh model
    path : str or path
    width, height : int, optional
        Pixels of every plot (see :func:`to_bokeh`).
    scale : float
        Device pixel ratio (2 for a sharper image twice the size).
    driver : selenium WebDriver, optional
        Default :func:`webdriver`.

    Returns
    -------
    pathlib.Path

    Raises
    ------
    TypeError
        If ``fig`` is not a figure.
    RuntimeError
        If no browser/webdriver is available.
    """
    from bokeh.io.export import get_screenshot_as_png

    path = Path(path)
    model = to_bokeh(fig, width, height)
    # bokeh.io.export_png's page would list other libraries' files (see inline_resources)
    image = get_screenshot_as_png(model, driver=driver or webdriver(), scale_factor=scale,
                                  resources=inline_resources())
    if image.width == 0 or image.height == 0:
        raise RuntimeError("the browser drew an empty image")
    image.save(str(path))
    return path


def export_svg(fig, path, *, width: int | None = None, height: int | None = None,
               driver=None) -> Path:
    """Write ``fig`` as one SVG image (every plot drawn with Bokeh's SVG backend; :func:`bokeh.io.export_svg`).

    Parameters
    ----------
    fig, path, width, height, driver
        As for :func:`export_png`.

    Returns
    -------
    pathlib.Path

    Raises
    ------
    TypeError, RuntimeError
        As :func:`export_png`.
    """
    from bokeh.io.export import get_svg
    from bokeh.models import Plot

    path = Path(path)
    model = to_bokeh(fig, width, height)
    for plot in model.select({"type": Plot}):
        plot.output_backend = "svg"
    svgs = get_svg(model, driver=driver or webdriver(), resources=inline_resources())
    if not svgs:
        raise RuntimeError("the browser drew no SVG")
    path.write_text(svgs[0], encoding="utf-8")
    return path


def export_figure(fig, path, **options) -> Path:
    """Export ``fig`` in the format of ``path``'s suffix: ``.png``, ``.svg``, ``.csv`` or ``.html``.

    Raises
    ------
    ValueError
        For another suffix (the allowed ones are :data:`EXPORT_FORMATS`).
    """
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in EXPORT_FORMATS:
        raise ValueError(f"cannot export to {Path(path).name!r}: the file name must end in one of "
                         f"{['.' + f for f in EXPORT_FORMATS]}")
    if suffix == "csv":
        if options:
            raise ValueError(f"CSV export takes no options, got {sorted(options)}")
        return export_csv(fig, path)
    if suffix == "html":
        return export_html(fig, path, **options)
    return (export_png if suffix == "png" else export_svg)(fig, path, **options)


def figure_bytes(fig, format: str, **options) -> bytes:
    """The exported file's content, for a download button: ``format`` in :data:`FORMATS`.

    Written by :func:`export_figure` into a temporary folder and read back.

    Raises
    ------
    ValueError
        For an unknown format.
    TypeError, RuntimeError
        As :func:`export_figure`.
    """
    import tempfile

    fmt = str(format).lower().lstrip(".")
    if fmt not in EXPORT_FORMATS:
        raise ValueError(f"format must be one of {EXPORT_FORMATS}, got {format!r}")
    with tempfile.TemporaryDirectory() as tmp:
        return export_figure(fig, Path(tmp) / f"figure.{fmt}", **options).read_bytes()
