"""The explorer app: one sidebar of shared controls, one tab per page.

``ExplorerApp(session).template()`` is what ``apps/explorer.py`` serves; in a notebook,
display ``ExplorerApp()`` after ``pn.extension("tabulator", inline=True)``.  ε, δ, noise,
dataset, seed, page and workload are synced to the URL (a value that cannot be used is
named and the current one kept).  A page is built at its tab's first opening and stays
(Panel 1.9's dynamic tabs drew Compare again, seconds, at every opening).
"""

from __future__ import annotations

import importlib
import logging

import panel as pn
import param

from .session import Session, notify

__all__ = ["ExplorerApp", "PAGES"]

log = logging.getLogger(__name__)

#: (tab title, module, class) of every page, in order.
PAGES = [
    ("Workload", "dpexplorer.ui.builder", "WorkloadBuilder"),
    ("Compare", "dpexplorer.ui.compare_view", "ComparePage"),
    ("Strategy", "dpexplorer.ui.strategy_view", "StrategyView"),
    ("Data & DAWA", "dpexplorer.ui.data_view", "DataView"),
    ("Release", "dpexplorer.ui.release_view", "ReleaseView"),
    ("Audit", "dpexplorer.ui.audit_view", "AuditView"),
    ("Sum queries", "dpexplorer.ui.sums_view", "SumsView"),
    ("Learn", "dpexplorer.ui.learn", "LearnView"),
]

#: URL keys of the Workload page (a link carrying one builds that page at load).
_WORKLOAD_URL_KEYS = ("n", "attrs", "w")

URL_PARAMS = {"epsilon": "eps", "delta": "delta", "noise": "noise", "dataset": "data", "seed": "seed"}


class ExplorerApp(pn.viewable.Viewer):
    """All pages around one :class:`Session`; ``pages``: title -> page, built so far."""

    page = param.Integer(default=0, bounds=(0, len(PAGES) - 1), doc="Index of the open page.")

    def __init__(self, session: Session | None = None, **params):
        super().__init__(**params)
        self.session = session or Session()
        self.pages: dict[str, object] = {}
        self._url_synced = False
        #: Messages about link (URL) values that could not be used.
        self.url_problems: list[str] = []
        self._slots = {title: pn.Column(sizing_mode="stretch_width") for title, _, _ in PAGES}
        self.tabs = pn.Tabs(*self._slots.items(), dynamic=False, active=self.page,
                            sizing_mode="stretch_width")
        self.tabs.link(self, active="page", bidirectional=True)
        self.tabs.param.watch(lambda e: self._open(e.new), "active")
        self.page_for(PAGES[self.tabs.active][0])  # drawn when the app is displayed

    def page_for(self, title: str):
        """The page called ``title``, built on first use (KeyError if there is none)."""
        if title not in self._slots:
            raise KeyError(f"no page {title!r}; pages: {[t for t, _, _ in PAGES]}")
        if title not in self.pages:
            module, cls = next((m, c) for t, m, c in PAGES if t == title)
            page = self.pages[title] = _build(title, module, cls, self.session)
            if (gate := getattr(page, "gate", None)) is not None:
                gate.show(PAGES[self.tabs.active][0] == title)
            if self._url_synced:
                self._sync_page_url(page)
        return self.pages[title]

    def _open(self, index: int) -> None:
        """Draw tab ``index``'s page at its first opening; tell every page's gate."""
        if 0 <= index < len(PAGES):
            title = PAGES[index][0]
            if not (slot := self._slots[title]).objects:
                slot.objects = [self.page_for(title)]
        for i, (title, _, _) in enumerate(PAGES):
            if (gate := getattr(self.pages.get(title), "gate", None)) is not None:
                gate.show(i == index)

    def sync_url(self) -> None:
        """Keep ε, δ, noise, dataset, seed and the open page in the URL's query string."""
        if pn.state.location is None:
            return
        location = pn.state.location
        location.sync(self.session, URL_PARAMS, on_error=self._url_refused(self.session, URL_PARAMS))
        location.sync(self, {"page": "page"}, on_error=self._url_refused(self, {"page": "page"}))
        self._url_synced = True
        # a shared link's workload applies at load, whichever page opens first
        query = location.query_params or {}
        if any(key in query for key in _WORKLOAD_URL_KEYS):
            self.page_for(PAGES[0][0])
        for page in list(self.pages.values()):  # pages built later sync when built
            self._sync_page_url(page)

    def _sync_page_url(self, page) -> None:
        """Sync a page's own shareable selections (its ``URL_PARAMS``) to the URL."""
        params = getattr(page, "URL_PARAMS", None)
        if isinstance(page, param.Parameterized) and params and pn.state.location is not None:
            pn.state.location.sync(page, params, on_error=self._url_refused(page, params))

    def _url_refused(self, target: param.Parameterized, names: dict[str, str]):
        """``on_error`` of Panel's URL sync (which drops every value when one is invalid): apply
        them one by one, reporting each refused ``key=value`` (kept in ``url_problems``)."""
        def on_error(mapped: dict) -> None:
            refused = []
            for pname, value in mapped.items():
                try:
                    target.param.update(**{pname: value})
                except Exception as exc:  # noqa: BLE001 - reported to the user
                    why = _allowed(target, pname, exc)
                    refused.append(f"{names.get(pname, pname)}={value!r}: {why}")
            if refused:
                message = ("This link's " + "; ".join(refused)
                           + ". The explorer kept its current value instead.")
                self.url_problems.append(message)
                notify(message, "warning")
        return on_error

    def template(self) -> pn.template.BootstrapTemplate:
        """The served page, without Panel's process-wide busy indicator: every session's event
        updated every open page (eight sessions: 0.5 s of a 0.6 s ε change)."""
        self.sync_url()
        self._open(self.tabs.active)  # the page the link opens, not the default first one
        return pn.template.BootstrapTemplate(
            title="dpexplorer — linear queries under differential privacy",
            sidebar=[self.session.controls()], main=[self.tabs], sidebar_width=300,
            busy_indicator=None)

    def __panel__(self):
        self._open(self.tabs.active)
        return pn.Row(pn.Column(self.session.controls(), width=300), self.tabs, sizing_mode="stretch_width")


def _build(title, module, cls, session):
    """Instantiate a page; one that fails shows its error instead."""
    try:
        return getattr(importlib.import_module(module), cls)(session)
    except Exception as exc:  # noqa: BLE001 - keep the other pages usable
        log.exception("page %s failed to build", title)
        return pn.pane.Alert(f"The {title} page could not be built: {exc}", alert_type="danger")


#: What a link may carry, per parameter, in the user's words.
_ALLOWED = {
    "epsilon": "ε must be a number above 0 (e.g. eps=0.5)",
    "delta": "δ must be a number strictly between 0 and 1, far below 1/n (e.g. delta=1e-6)",
    "noise": "noise must be Laplace or Gaussian",
    "seed": "the simulation seed must be a whole number 0 or above",
    "page": f"page must be a tab number from 0 to {len(PAGES) - 1}",
    "n": "n must be a whole number of cells",
}


def _allowed(target: param.Parameterized, pname: str, exc: BaseException) -> str:
    """Why a link's value for ``pname`` was refused, with the values allowed."""
    if pname == "dataset":
        names = list(target.param["dataset"].objects)
        shown = ", ".join(names[:8]) + (", …" if len(names) > 8 else "")
        return f"there is no dataset of that name (datasets: {shown})"
    return _ALLOWED.get(pname) or str(exc).replace(f"{type(target).__name__}.", "")
