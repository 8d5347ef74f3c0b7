"""``benchmarks/bench_tier_cpu.py``: a test tier's processor time by kind of process."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("psutil")
ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bench_tier_cpu", ROOT / "benchmarks" / "bench_tier_cpu.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


@pytest.mark.parametrize("cmdline,kind", [
    ("/usr/lib/chromium/chromium --type=renderer --no-sandbox", "chromium"),
    ("/usr/bin/python -m panel serve apps/explorer.py --port 4000", "served explorer"),
    ("/usr/bin/python -m loky.backend.popen_loky_posix --process-name LokyProcess-3", "optimiser/audit workers"),
    ("/usr/bin/python -m ipykernel_launcher -f /tmp/k.json", "notebook kernels"),
    ("/usr/bin/python -u -c import sys;exec(eval(sys.stdin.readline()))", "pytest and its workers"),
    ("/bin/bash", "other"),
])
def test_processes_are_sorted_by_kind(cmdline, kind):
    assert bench.kind(cmdline) == kind


@pytest.mark.timeout(60)
def test_a_busy_child_is_counted(capsys):
    # a child computing for ~0.5 s of CPU: its time is counted once, under its own kind
    used = bench.main(["--interval", "0.1", "--", sys.executable, "-c",
                       "import time; t = time.process_time()\nwhile time.process_time() - t < 0.5: pass"])
    assert used["wall"] >= 0.4
    assert 0.3 <= used["other"] <= used["wall"] + 1.0, used
    assert "cores" in capsys.readouterr().out
