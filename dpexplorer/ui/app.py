"""The explorer app: one sidebar of shared controls, one tab per page.

``ExplorerApp(session).template()`` is what ``apps/explorer.py`` serves; in a
notebook, display ``ExplorerApp()`` (or any single page) after
``pn.extension()``.  The main selections (ε, δ, noise, dataset, seed, page)
are synced to the URL so a view can be shared and reloaded.
"""

from __future__ import annotations

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
    ("Sum queries", "dpexplorer.ui.sums_view", "SumsView"),
    ("Audit", "dpexplorer.ui.audit_view", "AuditView"),
    ("Learn", "dpexplorer.ui.learn", "LearnView"),
]

URL_PARAMS = {"epsilon": "eps", "delta": "delta", "noise": "noise", "dataset": "data", "seed": "seed"}


class ExplorerApp(pn.viewable.Viewer):
    """All pages around one :class:`Session` (displays itself in a notebook)."""

    page = param.Integer(default=0, bounds=(0, len(PAGES) - 1), doc="Index of the open page.")

    def __init__(self, session: Session | None = None, **params):
        super().__init__(**params)
        self.session = session or Session()
        self.pages = {}
        for title, module, cls in PAGES:
            self.pages[title] = _build(title, module, cls, self.session)
        # dynamic=False: with Panel 1.9 a pane updated inside a hidden *dynamic* tab makes
        # the browser fetch its stylesheet from cdn.holoviz.org, which breaks offline use
        self.tabs = pn.Tabs(*[(t, p) for t, p in self.pages.items()], dynamic=False,
                            sizing_mode="stretch_width")
        self.tabs.link(self, active="page", bidirectional=True)
        # pages in hidden tabs keep their redraws until shown (dpexplorer.ui.shown)
        self.tabs.param.watch(lambda e: self._show_active(), "active")
        self._show_active()

    def _show_active(self) -> None:
        """Tell every page with a :class:`~dpexplorer.ui.shown.ShownGate` whether it is shown."""
        active = self.tabs.active
        for i, page in enumerate(self.pages.values()):
            gate = getattr(page, "gate", None)
            if gate is not None:
                gate.show(i == active)

    def sync_url(self) -> None:
        """Keep ε, δ, noise, dataset, seed and the open page in the URL's query string."""
        if pn.state.location is None:
            return
        pn.state.location.sync(self.session, URL_PARAMS)
        pn.state.location.sync(self, {"page": "page"})
        for page in self.pages.values():  # pages with their own shareable selections
            params = getattr(page, "URL_PARAMS", None)
            if isinstance(page, param.Parameterized) and params:
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
    import importlib

    try:
        return getattr(importlib.import_module(module), cls)(session)
    except Exception as exc:  # noqa: BLE001 - keep the other pages usable
        log.exception("page %s failed to build", title)
        return pn.pane.Alert(f"The {title} page could not be built: {exc}", alert_type="danger")
