"""File uploads of the explorer: one widget, its size limit stated next to it and checked on both ends.

Panel's ``FileInput`` sends a file in one websocket message, and Bokeh closes the connection
above 20 MiB.  :class:`Upload` (Panel's ``FileDropper``) sends chunks of :data:`CHUNK_BYTES`;
FilePond refuses a file above :func:`upload_limit` before sending, and the server again after the
first chunk past it (nothing kept, ``on_error`` told).  The limit is ``upload_bytes`` of
:mod:`dpexplorer.queries.limits` (256 MiB; ``DPEXPLORER_LIMITS``), capped by a second (``spec_bytes``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from types import SimpleNamespace

import panel as pn
import param

import dpexplorer as dpx

__all__ = ["Upload", "upload_limit", "size_text", "CHUNK_BYTES"]

#: Bytes per websocket message of an upload: far below Bokeh's 20 MiB message limit.
CHUNK_BYTES = 4 * 2**20

#: The MIME types browsers give files of these extensions (FilePond checks the type, not the
#: name): Excel's CSV is ``application/vnd.ms-excel``; Chromium gives ``.npy`` and ``.parquet``
#: no type (``""``).  The server reads the bytes and refuses what is not the expected format.
ALSO_ACCEPTED = {
    ".csv": ("text/csv", "application/vnd.ms-excel", "application/csv", "text/x-csv",
             "text/comma-separated-values", "text/plain", ""),
    ".npy": ("application/octet-stream", ""),
    ".parquet": ("application/octet-stream", "application/vnd.apache.parquet", ""),
    ".txt": ("text/plain",),
    ".yaml": ("text/yaml", "application/x-yaml", "application/yaml", "text/x-yaml"),
    ".yml": ("text/yaml", "application/x-yaml", "application/yaml", "text/x-yaml"),
}


def upload_limit(also: str | None = None) -> int:
    """Largest upload in bytes: the ``upload_bytes`` limit, and the ``also`` limit if given (e.g. ``"spec_bytes"``)."""
    current = dpx.limits.current()
    limit = current.upload_bytes
    return min(limit, getattr(current, also)) if also else limit


def size_text(nbytes: int) -> str:
    """``nbytes`` for people: ``"256 MiB"``, ``"20 KiB"``, ``"900 bytes"``."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= size:
            value = nbytes / size
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{nbytes} bytes"


class Upload(pn.widgets.FileDropper):
    """A one-file upload within ``max_bytes`` (bytes; FilePond is told too): chunked, refused above
    the limit in the browser and on the server.  ``on_file(data: bytes, filename)`` gets each file
    received in full (text as UTF-8); ``on_error(message)`` a refusal in plain words."""

    max_bytes = param.Integer(default=2**28, bounds=(1, None), doc="Largest file accepted (bytes).")

    _rename = {**pn.widgets.FileDropper._rename, "max_bytes": None}  # server side only

    def __init__(self, on_file: Callable | None = None, on_error: Callable | None = None, **params):
        params = {"chunk_size": CHUNK_BYTES, "multiple": False, "previews": [], "layout": "compact",
                  "sizing_mode": "stretch_width", "max_bytes": upload_limit(), **params}
        types = list(params.get("accepted_filetypes", []))
        for ext in list(types):
            types += [t for t in ALSO_ACCEPTED.get(ext.lower(), ()) if t not in types]
        # FilePond counts in units of 1000 bytes: round down so that it never lets through more
        params = {"max_file_size": f"{max(1, params['max_bytes'] // 1000)}KB", **params,
                  "accepted_filetypes": types}
        super().__init__(**params)
        self._on_file, self._on_error = on_file, on_error
        self._received: dict[str, int] = {}

    def _refuse(self, name: str, size: int) -> None:
        """Drop the file ``name``, which has more than ``size`` bytes, and say so."""
        self._received[name] = -1
        self._file_buffer.pop(name, None)
        if self._on_error is not None:
            self._on_error(f"{name!r} was not loaded: it has more than "
                           f"{size_text(size)}, above the upload limit of "
                           f"{size_text(self.max_bytes)}. Use a smaller file (or, on a server "
                           "with the memory for it, raise the limit with "
                           "DPEXPLORER_LIMITS='upload_bytes=...').")

    def _process_event(self, event) -> None:
        data = event.data
        if event.event_name != "upload_event":
            return super()._process_event(event)
        name = data["name"]
        chunk, total = int(data["chunk"]), int(data["total_chunks"])
        if chunk == 1:
            self._received[name] = 0
            if (total - 1) * self.chunk_size >= self.max_bytes:  # announced size already too large
                return self._refuse(name, (total - 1) * self.chunk_size)
        got = self._received.get(name, -1)
        if got < 0:  # refused earlier (or a chunk without its first): dropped
            return
        got += len(data["data"])
        if got > self.max_bytes:
            return self._refuse(name, self.max_bytes)
        self._received[name] = got
        super()._process_event(event)
        if chunk == total:
            self._received.pop(name, None)
            content = self.value.pop(name, b"")  # the page keeps what it needs; not a second copy
            if self._on_file is not None:
                self._on_file(content.encode("utf-8") if isinstance(content, str) else bytes(content),
                              name)

    def receive(self, data: bytes, filename: str, mime_type: str = "") -> None:
        """Take ``data`` in chunks as the browser sends it, through the same checks (tests, scripts)."""
        total = max(1, math.ceil(len(data) / self.chunk_size))
        for k in range(total):
            chunk = data[k * self.chunk_size:(k + 1) * self.chunk_size]
            self._process_event(SimpleNamespace(event_name="upload_event", data={
                "name": filename, "chunk": k + 1, "total_chunks": total, "data": chunk,
                "type": mime_type}))

    def note(self, **params) -> pn.pane.Markdown:
        """The limit, in words, to show next to the widget (``params`` go to the Markdown pane)."""
        return pn.pane.Markdown(f"*Files up to {size_text(self.max_bytes)}.*", margin=(0, 10), **params)
