"""The size limits (dpexplorer.queries.limits): overrides, configuration, the environment, messages,
and the document walk that sizes specs (depth and values with shared parts expanded)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import dpexplorer as dpx
from dpexplorer.queries import limits, spec

ROOT = Path(__file__).resolve().parents[1]


def test_every_limit_is_documented_with_its_default():
    doc = limits.__doc__
    for f in dataclasses.fields(limits.Limits):
        assert f"``{f.name}``" in doc, f.name
        assert f.name in limits._BOUNDS
    assert limits.current() == limits.DEFAULTS == limits.Limits()  # no DPEXPLORER_LIMITS in tests
    assert dpx.limits is limits and dpx.LimitExceededError is limits.LimitExceededError


def test_check_names_the_argument_the_size_the_limit_and_the_way_out():
    with pytest.raises(limits.LimitExceededError) as err:
        limits.check("cells", 2**30, "all_range: n")
    e = err.value
    assert isinstance(e, ValueError)
    assert (e.limit, e.value, e.allowed) == ("cells", 2**30, 2**24)
    msg = str(e)
    for part in ("all_range: n", "1,073,741,824", "16,777,216", "`cells`", "override(cells=",
                 "configure(cells=", "DPEXPLORER_LIMITS='cells="):
        assert part in msg, part
    assert limits.check("cells", 2**24, "n") == 2**24  # at the limit is allowed


def test_override_is_scoped_nested_and_restored_after_errors():
    base = limits.current()
    with limits.override(cells=10) as inner:
        assert limits.current().cells == 10 == inner.cells
        assert limits.current().queries == base.queries
        with limits.override(queries=7):
            assert (limits.current().cells, limits.current().queries) == (10, 7)
        assert limits.current().queries == base.queries
        with pytest.raises(limits.LimitExceededError, match="cells"):
            dpx.workloads.identity(11)
        assert dpx.workloads.identity(10).n == 10
    assert limits.current() == base
    with pytest.raises(RuntimeError), limits.override(cells=3):
        raise RuntimeError
    assert limits.current() == base


def test_override_is_per_thread_and_configure_is_per_process():
    seen = {}

    def other():
        seen["cells"] = limits.current().cells

    with limits.override(cells=5):
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert seen["cells"] == limits.DEFAULTS.cells  # another thread keeps the process's limits
    previous = limits.configure(cells=123)
    try:
        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert seen["cells"] == 123 == limits.current().cells
        with limits.override(queries=9):  # an override starts from the configured limits
            assert (limits.current().cells, limits.current().queries) == (123, 9)
    finally:
        limits.configure(**dataclasses.asdict(previous))
    assert limits.current() == limits.DEFAULTS


@pytest.mark.parametrize("bad, exc, match", [
    (dict(cellz=4), TypeError, "unknown limit 'cellz'"),
    (dict(cells=0), ValueError, "whole number >= 1"),
    (dict(cells=2.5), ValueError, "whole number >= 1"),
    (dict(cells=True), ValueError, "whole number >= 1"),
    (dict(cells="10"), ValueError, "whole number >= 1"),
])
def test_bad_overrides_are_refused(bad, exc, match):
    with pytest.raises(exc, match=match), limits.override(**bad):
        pass  # pragma: no cover
    with pytest.raises(exc, match=match):
        limits.configure(**bad)
    assert limits.current() == limits.DEFAULTS


def test_parse_env():
    assert limits.parse_env("cells=2**28, queries=1e8,bins=1_000") == {
        "cells": 2**28, "queries": 10**8, "bins": 1000}
    assert limits.parse_env("") == {} and limits.parse_env(None) == {} and limits.parse_env(" , ") == {}
    for bad in ("cells", "cells=lots", "cells=2.5", "cells=2**x", "=5"):
        with pytest.raises((ValueError, TypeError), match="DPEXPLORER_LIMITS"):
            limits.parse_env(bad)
    with pytest.raises(ValueError, match="whole number >= 1"):
        limits.parse_env("cells=0")
    with pytest.raises(TypeError, match="unknown limit"):
        limits.parse_env("cellz=5")


def _python(code: str, env_value: str | None):
    env = {k: v for k, v in os.environ.items() if k != "DPEXPLORER_LIMITS"}
    if env_value is not None:
        env["DPEXPLORER_LIMITS"] = env_value
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)


@pytest.mark.slow  # a fresh interpreter per setting: 10-80 s under load on 2 cores (the full suite runs it)
def test_the_environment_variable_sets_the_defaults_at_import():
    code = ("import dpexplorer as dpx; c = dpx.limits.current(); "
            "print(c.cells, c.queries, c.bins, dpx.limits.DEFAULTS == c)")
    out = _python(code, "cells=2**26, queries=1e7")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(2**26), str(10**7), str(2**24), "True"]
    bad = _python("import dpexplorer", "cells=many")
    assert bad.returncode != 0 and "DPEXPLORER_LIMITS" in bad.stderr


def test_whole_number():
    assert limits.whole_number(np.int64(5), "m") == 5 and type(limits.whole_number(np.int64(5), "m")) is int
    assert limits.whole_number(0, "seed", minimum=0) == 0
    for bad in (0, -1, 2.5, "3", True, None, float("nan")):
        with pytest.raises(ValueError, match="m must be a whole number >= 1"):
            limits.whole_number(bad, "m")
    with pytest.raises(limits.LimitExceededError, match="queries"):
        limits.whole_number(2**40, "m", limit="queries")


# ------------------------------------------------------------------ documents
def _expanded(obj) -> tuple[int, int]:
    """Depth and values of ``obj`` by brute force: every shared part walked as often as it appears."""
    if isinstance(obj, dict):
        kids = [_expanded(v) for v in obj.values()]
        return 1 + max((d for d, _ in kids), default=0), 1 + len(obj) + sum(n for _, n in kids)
    if isinstance(obj, list | tuple):
        kids = [_expanded(v) for v in obj]
        return 1 + max((d for d, _ in kids), default=0), 1 + sum(n for _, n in kids)
    return 0, 1


def _documents():
    leaves = st.one_of(st.integers(-3, 3), st.text(max_size=2), st.none(), st.floats(allow_nan=False))
    return st.recursive(leaves, lambda kids: st.one_of(
        st.lists(kids, max_size=4), st.dictionaries(st.text(max_size=2), kids, max_size=3)), max_leaves=25)


@given(doc=_documents(), repeat=st.integers(1, 5))
@settings(max_examples=150, deadline=None)
def test_document_counts_shared_parts_as_often_as_they_appear(doc, repeat):
    shared = [doc] * repeat + [[doc, doc]]  # the same object several times, as YAML aliases build it
    for d in (doc, shared, {"a": shared, "b": doc}):
        assert limits.document(d, "doc") == _expanded(d)


@given(doc=_documents())
@settings(max_examples=100, deadline=None)
def test_yaml_scan_agrees_with_the_document_walk(doc):
    """The event scan of YAML text (anchors and aliases expanded) counts what the walk counts."""
    shared = {"x": doc, "y": [doc, doc], "z": {"k": doc}}
    text = yaml.safe_dump(shared)  # PyYAML writes one anchor and aliases for the shared object
    loaded = yaml.safe_load(text)
    assert spec._scan_yaml(text) == limits.document(loaded, "doc") == _expanded(shared)


def test_document_limits_and_cycles():
    deep = []
    for _ in range(40):
        deep = [deep]
    with pytest.raises(limits.LimitExceededError, match="spec_depth"):
        limits.document(deep, "doc")
    with limits.override(spec_depth=100):
        assert limits.document(deep, "doc")[0] == 41
    with pytest.raises(limits.LimitExceededError, match="spec_depth"):
        limits.document([[[1]]], "doc", outer_depth=30)
    loop: list = [1]
    loop.append(loop)
    with pytest.raises(limits.LimitExceededError, match="contains itself"):
        limits.document(loop, "doc")
    row = list(range(1000))
    with pytest.raises(limits.LimitExceededError, match="spec_nodes") as err:
        limits.document([row] * 40_000, "doc")  # 4e7 values from 41 distinct objects
    assert err.value.value == 40_000 * 1001 + 1
    assert limits.document(np.ones((3, 4)), "doc") == (2, 12)
    assert limits.document({"m": np.ones((3, 4))}, "doc") == (3, 14)


@pytest.mark.slow  # builds the large objects the raised limits allow: 10-80 s under load on 2 cores (the full suite runs it)
def test_limits_raised_for_a_big_machine_allow_what_they_say():
    with limits.override(cells=2**25, queries=2**25):
        W = dpx.workloads.random_ranges(2**25, 10)
        assert W.n == 2**25
        with pytest.raises(limits.LimitExceededError, match="cells"):
            dpx.workloads.random_ranges(2**25 + 1, 10)
    with pytest.raises(limits.LimitExceededError, match="cells"):
        dpx.workloads.random_ranges(2**25, 10)
