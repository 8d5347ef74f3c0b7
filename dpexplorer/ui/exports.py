"""One download control for every figure of the app: PNG, SVG and a CSV of its numbers.

Each page puts a :class:`FigureExport` under each figure, kept in its ``exports`` dict by name.
The figure is made on a click; the bytes are :func:`dpexplorer.figures.figure_bytes`'s (PNG and
SVG through a headless browser on the server: without one the buttons are off and a line says
why, :func:`dpexplorer.figures.image_export_missing`).  A failed export is only reported.
"""

from __future__ import annotations

import html
import io
import logging
import re
import threading

import holoviews as hv
import panel as pn

from dpexplorer import figures

from .serving import COLOR as _BUTTON
from .serving import LABEL as _LABEL
from .session import exception_message, notify

__all__ = ["FigureExport"]

log = logging.getLogger(__name__)

#: One image export at a time: the headless browser is shared by every session of the process.
_IMAGE_LOCK = threading.Lock()
#: Why image export failed in this process (after a failure, PNG/SVG stay off with this reason).
_BROKEN: list[str] = []


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-") or "figure"


class FigureExport(pn.viewable.Viewer):
    """PNG, SVG and CSV download buttons for one figure, in ``dpexplorer-<page>-<figure>.<format>``.

    ``make()``: the figure as shown now (HoloViews object, HoloViews pane or Bokeh model) or
    ``None``; ``report(message)`` shows an error (default: a notification); ``into``: the page's
    ``exports`` dict, where the control is stored under ``figure``.
    """

    def __init__(self, page: str, figure: str, make, *, report=None, into: dict | None = None,
                 **params):
        super().__init__(**params)
        self.page, self.figure, self.make = page, figure, make
        self._report = report or (lambda m: notify(m, "error"))
        self._row = None
        if into is not None:
            into[figure] = self

    def filename(self, fmt: str) -> str:
        return f"dpexplorer-{_slug(self.page)}-{_slug(self.figure)}.{fmt}"

    def figure_now(self):
        """The figure now: ``make()`` (a pane's object, a DynamicMap's frame), or ``None``."""
        fig = self.make()
        if type(fig).__module__.startswith("panel") and getattr(fig, "object", None) is not None:
            fig = fig.object
        return fig[()] if isinstance(fig, hv.DynamicMap) else fig

    def data(self, fmt: str) -> bytes:
        """The file's bytes in ``fmt`` (``"png"``, ``"svg"``, ``"csv"``); ValueError without a figure
        or for an unknown format, RuntimeError when PNG/SVG has no headless browser."""
        fig = self.figure_now()
        if fig is None:
            raise ValueError(f"there is no {self.figure.replace('-', ' ')} figure to export yet")
        if fmt == "csv":
            return figures.figure_bytes(fig, "csv")
        missing = self.images_missing()
        if missing:
            raise RuntimeError(missing)
        with _IMAGE_LOCK:
            return figures.figure_bytes(fig, fmt)

    @staticmethod
    def images_missing() -> str:
        """Why PNG/SVG cannot be made here (``""`` if they may)."""
        return _BROKEN[0] if _BROKEN else figures.image_export_missing()

    def _download(self, fmt: str) -> io.BytesIO:
        try:
            return io.BytesIO(self.data(fmt))
        except Exception as exc:  # noqa: BLE001 - reported on the page, never a traceback
            if fmt != "csv" and isinstance(exc, RuntimeError):
                if not _BROKEN:
                    _BROKEN.append(f"PNG and SVG images could not be drawn on the computer "
                                   f"running the app ({exception_message(exc)})")
                self._disable_images()
                message = (f"{fmt.upper()} not made: {self.images_missing()}. The CSV of the "
                           "figure's numbers still works, and the page keeps everything.")
            else:
                if not isinstance(exc, ValueError):
                    log.exception("export of %s/%s as %s failed", self.page, self.figure, fmt)
                message = f"{fmt.upper()} of the figure not made: {exception_message(exc)}"
            self._report(message)
            return io.BytesIO(b"")

    def _disable_images(self) -> None:
        if self._row is None:
            return
        for w in self._buttons[:2]:
            w.disabled = True
        self._note.object = self._note_text(self.images_missing())
        self._note.visible = True

    def show(self, visible: bool) -> None:
        """Show or hide the control (with its figure)."""
        self.__panel__().visible = bool(visible)

    @staticmethod
    def _note_text(missing: str) -> str:
        return f"<em>{html.escape(missing)}; the CSV holds the figure's numbers.</em>"

    def buttons(self) -> dict[str, pn.widgets.FileDownload]:
        """The download widgets by format (built with the row)."""
        self.__panel__()
        return dict(zip(figures.FORMATS, self._buttons, strict=True))

    def __panel__(self) -> pn.Row:
        if self._row is not None:
            return self._row
        missing = self.images_missing()
        self._buttons = [
            pn.widgets.FileDownload(
                callback=(lambda f=fmt: self._download(f)), filename=self.filename(fmt),
                **{_LABEL: fmt.upper()}, **{_BUTTON: "light"}, width=64, height=30,
                margin=(2, 3), disabled=bool(missing) and fmt != "csv",
                description=(f"Download this figure as {fmt.upper()}" if fmt != "csv" else
                             "Download the numbers this figure draws (CSV)"),
                css_classes=[f"figure-export-{fmt}"])
            for fmt in figures.FORMATS]
        self._note = pn.pane.HTML(self._note_text(missing) if missing else "",
                                  visible=bool(missing), styles={"font-size": "85%"},
                                  margin=(6, 5), sizing_mode="stretch_width",
                                  css_classes=["figure-export-note"])
        self._row = pn.Row(pn.pane.Markdown("Export:", margin=(6, 5), styles={"font-size": "85%"}),
                           *self._buttons, self._note, sizing_mode="stretch_width",
                           css_classes=["figure-export"])
        return self._row
