"""The explorer app: one sidebar of shared controls, one tab per page.

``ExplorerApp(session).template()`` is what ``apps/explorer.py`` serves; in a
notebook, display ``ExplorerApp()`` (or any single page) after
``pn.extension()``.  The main selections (ε, δ, noise, dataset, simulation
seed, page) are synced to the URL so a view can be shared and reloaded.

Pages are views on the one :class:`~dpexplorer.ui.session.Session`, each
built the first time its tab is opened (the first page at once): the browser
first draws only the sidebar and that page.  A page, once drawn, stays in the
document (``pn.Tabs(dynamic=False)``); while its tab is hidden its redraws
wait in its :class:`~dpexplorer.ui.shown.ShownGate` and run when it is shown
again.  Panel 1.9's *dynamic* tabs were tried instead and measured: they draw
a page again (seconds for the Compare or Workload page) every time its tab is
opened, and a Card drawn again no longer expanded on click (its header
button had no effect in headless Chromium) -- see the issue notes.
"""

from __future__ import annotations

import importlib
import logging

import panel as pn
import param

from .session import Session

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

URL_PARAMS = {"epsilon": "eps", "delta": "delta", "noise": "noise", "dataset": "data", "seed": "seed"}


class ExplorerApp(pn.viewable.Viewer):
    """All pages around one :class:`Session` (displays itself in a notebook).

    Attributes
    ----------
    pages : dict
        Tab title -> page, for the pages built so far (see :meth:`page_for`).
    tabs : pn.Tabs
        One tab per page; each holds a slot filled with its page on first opening.
    """

    page = param.Integer(default=0, bounds=(0, len(PAGES) - 1), doc="Index of the open page.")

    def __init__(self, session: Session | None = None, **params):
        super().__init__(**params)
        self.session = session or Session()
        self.pages: dict[str, object] = {}
        self._url_synced = False
        self._slots = {title: pn.Column(sizing_mode="stretch_width") for title, _, _ in PAGES}
        self.tabs = pn.Tabs(*self._slots.items(), dynamic=False, active=self.page,
                            sizing_mode="stretch_width")
        self.tabs.link(self, active="page", bidirectional=True)
        self.tabs.param.watch(lambda e: self._open(e.new), "active")
        self._open(self.tabs.active)

    def page_for(self, title: str):
        """The page called ``title``, built (and put in its tab) on first use.

        Raises
        ------
        KeyError
            If there is no page of that title.
        """
        if title not in self._slots:
            raise KeyError(f"no page {title!r}; pages: {[t for t, _, _ in PAGES]}")
        if title not in self.pages:
            module, cls = next((m, c) for t, m, c in PAGES if t == title)
            page = self.pages[title] = _build(title, module, cls, self.session)
            gate = getattr(page, "gate", None)
            if gate is not None:
                gate.show(PAGES[self.tabs.active][0] == title)
            self._slots[title].objects = [page]
            if self._url_synced:
                self._sync_page_url(page)
        return self.pages[title]

    def _open(self, index: int) -> None:
        """Build the page of tab ``index`` the first time it is opened; tell every page's gate."""
        if 0 <= index < len(PAGES):
            self.page_for(PAGES[index][0])
        for i, (title, _, _) in enumerate(PAGES):
            gate = getattr(self.pages.get(title), "gate", None)
            if gate is not None:
                gate.show(i == index)

    def sync_url(self) -> None:
        """Keep ε, δ, noise, dataset, seed and the open page in the URL's query string."""
        if pn.state.location is None:
            return
        pn.state.location.sync(self.session, URL_PARAMS)
        pn.state.location.sync(self, {"page": "page"})
        self._url_synced = True
        for page in list(self.pages.values()):  # pages built later sync when built
            self._sync_page_url(page)

    @staticmethod
    def _sync_page_url(page) -> None:
        """Sync a page's own shareable selections (its ``URL_PARAMS``) to the URL."""
        params = getattr(page, "URL_PARAMS", None)
        if isinstance(page, param.Parameterized) and params and pn.state.location is not None:
            pn.state.location.sync(page, params)

    def template(self) -> pn.template.BootstrapTemplate:
        """The served page (Bootstrap template: no web fonts, all resources local)."""
        self.sync_url()
        return pn.template.BootstrapTemplate(
            title="dpexplorer — linear queries under differential privacy",
            sidebar=[self.session.controls()], main=[self.tabs], sidebar_width=300)

    def __panel__(self):
        return pn.Row(pn.Column(self.session.controls(), width=300), self.tabs,
                      sizing_mode="stretch_width")


def _build(title, module, cls, session):
    """Instantiate a page; a page that fails to build shows its error instead of breaking the app."""
    try:
        return getattr(importlib.import_module(module), cls)(session)
    except Exception as exc:  # noqa: BLE001 - keep the other pages usable
        log.exception("page %s failed to build", title)
        return pn.pane.Alert(f"The {title} page could not be built: {exc}", alert_type="danger")
