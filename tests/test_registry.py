"""The mechanism registry holds every fact about a mechanism, and those facts hold.

Every registered entry is checked against what it claims (an optimiser reports
progress and attaches its ``optimization`` record; a ``structured_1d`` entry
builds All Range over 2**16 cells without an ``n × n`` matrix; a ``tables``
entry's strategy measures marginal counts; its audit facts name a case kind
that builds), and a mechanism added the way a user adds
one (one module-level builder, one ``register``) shows in the comparison, the
audit case list and, as an optimiser, in a worker process of the explorer.
"""

from __future__ import annotations

import logging
import os
import tracemalloc

import numpy as np
import pytest
import toy_mechanism

import dpexplorer as dpx
from dpexplorer import audit as aud
from dpexplorer.core import registry
from dpexplorer.ui import compare_view, workers

#: All Range over this many cells: the largest 1D interval workload the pages compare.
BIG = compare_view.STRUCTURED_MAX_CELLS
#: Peak memory allowed to a structured build and its error at BIG cells (one n × n matrix of
#: doubles is 32 GiB; measured peaks 0.5-73 MB, 2 cores).
STRUCTURED_PEAK_BYTES = 2**28


def _audit_setting(mech: registry.Mechanism):
    """The small workload and unit noise the entry's audit facts name."""
    spec = mech.audit_spec()
    W = aud.case_workload(spec)
    noise = dpx.Gaussian(1.0, aud.CASE_DELTA) if spec.noise == "gaussian" else dpx.Laplace(1.0)
    return W, noise


def _optimization(A):
    return getattr(A, "optimization", None) or getattr(getattr(A, "base", None), "optimization", None)


@pytest.mark.parametrize("name", registry.names())
def test_every_entrys_facts_hold(name):
    mech = registry.get(name)
    assert isinstance(mech.optimizer, bool)
    if mech.data_dependent:
        assert mech.runner is not None and mech.build is None
        assert not mech.optimizer and mech.structured_1d is False
    else:
        assert mech.build is not None
    # optimiser: reports progress, attaches its record, runs in a worker of the explorer
    if mech.optimizer:
        W, noise = _audit_setting(mech)
        reports = []
        with dpx.optimization.progress(lambda *r: reports.append(r)):
            A = mech.strategy(W, noise)
        assert reports, f"{name} is registered as an optimiser but reported no progress"
        assert _optimization(A) is not None, f"{name}: no optimization record on its strategy"
        assert workers.in_worker(mech) and name in workers.optimizers()
    else:
        assert not workers.in_worker(mech) and name not in workers.optimizers()
    # structured 1D path: All Range over 2**16 cells, strategy and error, no n × n matrix
    if mech.structured_1d is not False:
        assert mech.structured_reason(BIG) is None and name in compare_view.structured_mechanisms()
        noise = _audit_setting(mech)[1]  # Gaussian for (ε,δ)-only mechanisms
        W = dpx.workloads.all_range(BIG)
        if mech.not_applicable(W, noise):  # streaming mechanisms: the running total
            W = dpx.workloads.prefix(BIG)
        tracemalloc.start()
        try:
            A = mech.strategy(W, noise)
            tse = dpx.error.unit_tse(W, A, noise.norm)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert np.isfinite(tse) and tse > 0
        assert peak < STRUCTURED_PEAK_BYTES, f"{name}: {peak / 2**20:.0f} MiB at n = {BIG}"
        assert compare_view.too_large(W, name) is None
    else:
        assert isinstance(mech.structured_reason(BIG), str)
        assert name not in compare_view.structured_mechanisms()
        if not mech.data_dependent:  # the pages say why they do not build it at this size
            assert "n × n matrix" in compare_view.too_large(dpx.workloads.prefix(BIG), name)
    # table releases: exactly the entries whose strategy measures marginal counts
    if not mech.data_dependent:
        W, noise = _audit_setting(mech)
        A = mech.strategy(W, noise)
        measures = getattr(A, "marginal_measure", None) is not None and getattr(A, "answer", None) is not None
        assert measures == mech.tables, f"{name}: tables={mech.tables} but marginal_measure: {measures}"
    assert mech.tables == (name in registry.names(tables=True))
    # audit facts: a known case kind whose cases build, under the noise the facts name
    spec = mech.audit_spec()
    assert spec.case in aud.CASE_KINDS, f"{name} names the unknown audit case kind {spec.case!r}"
    cases = aud.cases(name)
    assert cases
    if spec.case == "one_cell":
        W, noise = _audit_setting(mech)
        assert cases[0].W.shape == W.shape and (cases[0].delta > 0) == (spec.noise == "gaussian")
        assert mech.not_applicable(cases[0].W, noise) is None


def test_registration_refuses_facts_of_the_wrong_kind():
    def build(W, noise):
        return dpx.strategies.identity(W.domain)

    for bad, words in [({"optimizer": "yes"}, "optimizer"), ({"structured_1d": 3}, "structured_1d"),
                       ({"tables": 1}, "tables"), ({"audit": "ranges"}, "AuditSpec")]:
        with pytest.raises(TypeError, match=words):
            registry.register(registry.Mechanism("bad_facts", "Bad", build, "d", "s", **bad))
    with pytest.raises(TypeError, match="optimizer"):  # an optimiser needs a strategy builder
        registry.register(registry.Mechanism("bad_facts", "Bad", None, "d", "s", optimizer=True,
                                             data_dependent=True, runner=print))
    for bad, words in [({"workload": "cube"}, "workload"), ({"noise": "geometric"}, "noise"),
                       ({"cells": 1}, "cells"), ({"case": ""}, "case")]:
        with pytest.raises(ValueError, match=words):
            registry.AuditSpec(**bad)
    assert "bad_facts" not in registry.REGISTRY
    assert registry.names(optimizer=True) == list(workers.optimizers())


@pytest.fixture
def toy():
    """``toy_mechanism.TOY`` registered for one test; the worker pool stopped after it."""
    registry.register(toy_mechanism.TOY)
    try:
        yield toy_mechanism.TOY
    finally:
        registry.REGISTRY.pop("toy_opt", None)
        workers.shutdown()


@pytest.mark.slow  # a worker process, an audit and an optimiser run: 10-80 s under load on 2 cores (the full suite runs it)
@pytest.mark.usefixtures("fresh_strategies")  # its optimiser's progress is checked
def test_a_new_mechanism_is_compared_audited_and_optimised_in_a_worker(toy):
    W, noise = dpx.workloads.all_range(16), dpx.Laplace(1.0)
    table = dpx.compare(W, noise).set_index("mechanism")
    assert table.loc["toy_opt", "rmse"] == pytest.approx(table.loc["identity", "rmse"], rel=1e-12)
    # the audit lists it, with the default case of a strategy
    (case,) = aud.cases("toy_opt")
    assert case.statistic == "loss" and case.W.n == 4 and case.delta == 0
    # the pages treat it as an optimiser: last in the comparison, "minutes to hours" when too big
    assert "toy_opt" in workers.optimizers() and workers.in_worker(toy)
    assert "minutes to hours" in compare_view.too_large(dpx.workloads.prefix(8192), "toy_opt")
    # and the explorer builds it in a worker process, which imported this module
    reports = []
    with dpx.optimization.progress(lambda *r: reports.append(r)):
        A, unit, _, note = dpx.StrategyCache(build=workers.build).entry(W, "toy_opt", noise)
    assert note == "" and unit == pytest.approx(dpx.error.unit_tse(W, A, 1), rel=1e-12)
    assert A.optimization.info["pid"] != os.getpid()
    assert reports and reports[-1][1:3] == (3, 3)


def test_an_optimiser_a_worker_cannot_import_is_built_here_with_one_warning(caplog):
    def build(W, noise):  # a closure: no worker can import it
        return toy_mechanism.build(W, noise, iters=2)

    mech = registry.register(registry.Mechanism("toy_local", "Toy local", build, "d", "s",
                                                optimizer=True))
    try:
        with caplog.at_level(logging.WARNING, logger="dpexplorer.ui.workers"):
            assert not workers.in_worker(mech) and not workers.in_worker(mech)
            A = workers.build(mech, dpx.workloads.prefix(8), dpx.Laplace(1.0), {})
        warnings = [r for r in caplog.records if "toy_local" in r.getMessage()]
        assert len(warnings) == 1 and "calling thread" in warnings[0].getMessage()
        assert A.optimization.info["pid"] == os.getpid()
    finally:
        registry.REGISTRY.pop("toy_local", None)
    assert workers.importable(toy_mechanism.build) and not workers.importable(build)
    assert not workers.importable(lambda W, noise: None)


def test_an_unknown_audit_case_kind_is_refused_with_the_known_ones():
    registry.register(registry.Mechanism("toy_audit", "Toy", toy_mechanism.build, "d", "s",
                                         audit=registry.AuditSpec("no_such_kind")))
    try:
        with pytest.raises(ValueError, match="no_such_kind.*one_cell"):
            aud.cases("toy_audit")
    finally:
        registry.REGISTRY.pop("toy_audit", None)
