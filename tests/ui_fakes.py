"""Small fake strategy optimisers for the UI tests (registered for one test, then removed).

They follow the engine's contract (dpexplorer.core.optimization): report progress
with ``optimization.report`` and attach an ``OptimizationResult``.  The
strategy is the Identity (or a stack of weighted Kronecker blocks), so the
error shown by the pages can be checked against the engine.
"""

from __future__ import annotations

import contextlib
import threading
import time
import types

import numpy as np

import dpexplorer as dpx
from dpexplorer.core import optimization
from dpexplorer.queries.matrix import Identity, Kronecker, Total, VStack, Weighted


class FakeOptimizer:
    """``build(W, noise)``: ``iters`` reports per restart; optionally blocks on ``gate``.

    Attributes
    ----------
    reports : list of (stage, done, total)
        Every report made (also those after which the caller cancelled).
    gate : threading.Event or None
        While set to an unset Event the optimiser keeps reporting (every
        ``pause`` seconds) without finishing: a long optimisation.
    """

    def __init__(self, iters: int = 5, restarts: int = 2, gate: threading.Event | None = None,
                 pause: float = 0.01, stacked: bool = False):
        self.iters, self.restarts, self.gate, self.pause = iters, restarts, gate, pause
        self.stacked = stacked
        self.reports: list = []
        self.started = threading.Event()
        self.builds = 0

    def strategy(self, W):
        if not self.stacked:
            return dpx.strategies.identity(W.domain)
        dom = W.domain
        blocks = [Weighted(Kronecker([Identity(n) for n in dom]), 0.8),
                  Weighted(Kronecker([Total(n) for n in dom]), 0.2)]
        return VStack(blocks, name="fake_stack")

    def report(self, stage, done, total, objective):
        self.reports.append((stage, done, total))
        optimization.report(stage, done, total, objective)

    def __call__(self, W, noise):
        self.builds += 1
        A = self.strategy(W)
        final = dpx.error.unit_tse(W, A, noise.norm)
        trace = final * (1 + 1.0 / np.arange(1, self.iters + 1))
        ends = []
        total = self.iters * self.restarts
        for r in range(self.restarts):
            for it in range(self.iters):
                self.started.set()
                self.report(f"fake restart {r + 1}/{self.restarts}", r * self.iters + it + 1,
                            total, trace[it] * (1 + r))
                while self.gate is not None and not self.gate.is_set():
                    time.sleep(self.pause)
                    self.report(f"fake restart {r + 1}/{self.restarts} (waiting)",
                                r * self.iters + it + 1, total, trace[it] * (1 + r))
            ends.append(final * (1 + r))
        result = optimization.OptimizationResult(
            A, final, trace, np.asarray(ends), 0.01, 3, "fake_opt", {"iters": self.iters})
        return optimization.attach(result)


@contextlib.contextmanager
def registered(monkeypatch, fake, name: str = "fake_opt", label: str = "Fake OPT"):
    """Register ``fake`` as an optimiser called ``name`` for the duration of the block.

    A callable object, not a module-level function: the explorer builds it in the
    calling thread (a worker process could not import it), where the test sees it.
    ``monkeypatch`` is not used any more (the registry entry says it is an optimiser).
    """
    mech = dpx.registry.Mechanism(name, label, fake, "fake optimiser for tests", "tests",
                                  optimizer=True)
    dpx.registry.register(mech, replace=True)
    try:
        yield mech
    finally:
        if fake.gate is not None:
            fake.gate.set()
        dpx.registry.REGISTRY.pop(name, None)


def wait_for(predicate, timeout: float = 30.0, step: float = 0.01) -> bool:
    """Poll ``predicate()`` until true; False on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return bool(predicate())


class FakeSessionContext:
    """Stands for a Bokeh server session's context: a document holding one counts as served.

    Its ``request`` has no arguments (Panel reads them when a widget is made in the session).
    """

    request = types.SimpleNamespace(arguments={})


def served_document():
    """``(doc, context)``: a Bokeh ``Document`` that the pages take for a served session's.

    Keep ``context`` alive while the document is used (the document holds it weakly);
    calling every hook of ``doc.session_destroyed_callbacks`` with it plays the session's end.
    """
    import weakref

    from bokeh.document import Document

    doc, context = Document(), FakeSessionContext()
    doc._session_context = weakref.ref(context)
    return doc, context

