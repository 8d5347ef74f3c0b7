"""The explorer's response times in a real browser, reported (printed and kept in
test-artifacts/), never asserted.

Performance lives in ``benchmarks/bench_browser.py`` (run by hand, with the
machine's load); this test runs the same steps once so CI shows the figures and
checks that each step *works*: the Compare table fills, every ε change reaches
the table with RMSE ∝ 1/ε, the CPS preset shows its structure and a collapsed card
opens.  The bench's sessions at once (``--sessions``) are left to the run by hand: two
sessions working at once are tested in ``test_browser_new_user.py``.
"""

from __future__ import annotations

import json
import math

import pytest
from test_browser import ARTIFACTS, bench, server  # noqa: F401  (skips without chromium/playwright)

# drives headless chromium; one module, one worker under pytest-xdist (``--dist loadgroup``
# or ``loadscope``): its tests share the module's served explorer
pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.xdist_group("browser-timing")]


def test_timings_are_reported(server):  # noqa: F811
    figures = bench.measure(server, ns=(256,), sessions=0)
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "browser-timings.json").write_text(json.dumps(figures, indent=1))
    print("browser timings:", json.dumps(figures))
    first = figures["n=256"]
    assert math.isfinite(first["table"]) and first["table"] > 0
    # per ε change: the table's row and the chart's ε line, each seen after the Enter
    assert len(first["epsilon"]) == 4 and all(
        e["table"] > 0 and e["chart"] > 0 for e in first["epsilon"])
    assert figures["cps_structure"] > 0
    assert figures["card_expand"]["seconds"] > 0 and figures["card_expand"]["longest_task_ms"] >= 0
