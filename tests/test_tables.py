"""Releases from record tables: marginals counted by group-by, never the full domain."""

import io
import math

import numpy as np
import pandas as pd
import pytest

import dpexplorer as dpx
from dpexplorer import datasets
from dpexplorer.core.registry import NotApplicableError
from dpexplorer.privacy import PrivacyLedger, PrivateTable
from dpexplorer.queries.domain import Attribute, Domain, Table

GAUSS = dpx.Gaussian(1.0, 1e-6, "zcdp")


def _table(n=4000, seed=0):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"a": rng.choice(["x", "y", "z"], n), "b": rng.integers(0, 4, n),
                       "c": rng.normal(size=n).clip(-4.9, 4.9)})
    dom = Domain((Attribute("a", categories=("x", "y", "z")), Attribute("b", categories=(0, 1, 2, 3)),
                  Attribute("c", edges=tuple(np.linspace(-5, 5, 6)))))
    return Table(df, dom, "toy"), df


def _dense(table):
    """The full data vector, for checking (only possible on small domains)."""
    x = np.zeros(table.shape)
    codes = [a.encode(table.records[a.name]) for a in table.domain.attributes]
    np.add.at(x, tuple(codes), 1)
    return x


def test_domain_and_encoding():
    a = Attribute("c", edges=(0, 1, 2))
    np.testing.assert_array_equal(a.encode([0, 0.5, 1, 2]), [0, 0, 1, 1])  # last bin closed
    assert a.labels() == ["[0, 1)", "[1, 2]"] and a.size == 2 and a.kind == "numeric"
    with pytest.raises(ValueError, match="outside"):
        a.encode([2.5])
    with pytest.raises(ValueError, match="missing"):
        a.encode([np.nan])
    cat = Attribute("k", categories=("u", "v"))
    with pytest.raises(ValueError, match="outside its 2 categories"):
        cat.encode(["u", "w"])
    with pytest.raises(ValueError, match="either categories or bin edges"):
        Attribute("z")
    with pytest.raises(ValueError, match="strictly increasing"):
        Attribute("z", edges=(1, 1))
    with pytest.raises(ValueError, match="repeat"):
        Domain((cat, cat))
    dom = Domain((cat, a))
    assert dom.shape == (2, 2) and dom.cells == 4 and dom.index(["c", "k"]) == (0, 1)
    with pytest.raises(ValueError, match="unknown attribute"):
        dom.index(["nope"])
    with pytest.raises(ValueError, match="no column"):
        Table(pd.DataFrame({"k": ["u"]}), dom)
    with pytest.raises(TypeError, match="DataFrame"):
        Table([1, 2], dom)


@pytest.mark.parametrize("orders", [[1], [1, 2], [0, 1, 2, 3]])
def test_table_release_equals_the_data_vector_path(orders):
    table, _ = _table()
    x = _dense(table)
    W = dpx.workloads.marginals(table.shape, orders)
    # same seed, same strategy: the table path (group-by counts) and the vector path agree exactly
    r_table = dpx.simulate(table, W, "residual_planner", GAUSS, seed=3)
    r_vector = dpx.simulate(x, W, "residual_planner", GAUSS, seed=3)
    np.testing.assert_allclose(r_table.answers, r_vector.answers, rtol=1e-10, atol=1e-8)
    np.testing.assert_allclose(r_table.y, r_vector.y, rtol=1e-12, atol=1e-9)
    assert r_table.x_hat is None and r_table.analytic_rmse == pytest.approx(r_vector.analytic_rmse)
    np.testing.assert_allclose(r_table.per_query_std(), r_vector.per_query_std())


def test_release_from_a_table_spends_and_describes():
    table, _ = _table()
    W = dpx.workloads.marginals(table.shape, [2])
    led = PrivacyLedger(dpx.Budget.approx(2.0, 1e-5))
    r = dpx.release(table, W, "residual_planner", GAUSS, ledger=led)
    assert r.mode == "release" and r.seed is None and len(led) == 1
    assert "marginals of 'toy'" in led.entries[0].label
    meta = r.metadata()
    assert meta["table"] == {"name": "toy", "attributes": ["a", "b", "c"], "cells": [3, 4, 5]}
    assert "seed" not in meta
    frame = r.to_frame()
    assert frame["label"].iloc[0] == "a=x, b=0" and frame["ci_method"].iloc[0] == "gaussian"
    parts = r.marginals()
    assert [p["attributes"] for p in parts] == [("a", "b"), ("a", "c"), ("b", "c")]
    assert parts[1]["shape"] == (3, 5) and parts[1]["labels"][1][0] == "[-5, -3)"
    total = sum(p["answer"].size for p in parts)
    assert total == W.m
    # per-cell std of every marginal is the plan's marginal variance (ResidualPlanner, closed form)
    plan = r.strategy.plan
    for p, axes in zip(parts, [(0, 1), (0, 2), (1, 2)], strict=True):
        np.testing.assert_allclose(p["std"], math.sqrt(plan.marginal_variance(axes, GAUSS)), rtol=1e-9)


def test_dask_counts_equal_pandas():
    dd = pytest.importorskip("dask.dataframe")
    table, df = _table(3000, seed=4)
    dtable = Table(dd.from_pandas(df, npartitions=3), table.domain, "toy (dask)")
    W = dpx.workloads.marginals(table.shape, [1, 2])
    a = dpx.simulate(table, W, "residual_planner", GAUSS, seed=9)
    b = dpx.simulate(dtable, W, "residual_planner", GAUSS, seed=9)
    np.testing.assert_array_equal(a.answers, b.answers)
    for axes in [(0,), (0, 2), (1, 2)]:  # the kernel's counts themselves
        np.testing.assert_array_equal(PrivateTable(table)._marginal(axes), PrivateTable(dtable)._marginal(axes))


def test_strategies_that_need_the_vector_are_refused():
    table, _ = _table()
    W = dpx.workloads.marginals(table.shape, [1])
    led = PrivacyLedger()
    with pytest.raises(NotApplicableError, match="residual_planner"):
        dpx.release(table, W, "hb", dpx.Laplace(1.0), ledger=led)
    with pytest.raises(NotApplicableError, match="data-dependent"):
        dpx.release(table, W, "dawa", dpx.Laplace(1.0), ledger=led)
    with pytest.raises(NotApplicableError):
        dpx.release(table, W, "residual_planner", dpx.Laplace(1.0), ledger=led)  # Gaussian only
    with pytest.raises(ValueError, match="table's domain"):
        dpx.release(table, dpx.workloads.marginals((3, 4), [1]), "residual_planner", GAUSS, ledger=led)
    assert len(led) == 0
    with pytest.raises(NotImplementedError, match="marginal counts"):
        PrivateTable(table).measure(dpx.strategies.identity(table.shape), dpx.Laplace(1.0),
                                    np.random.default_rng(0))


def test_budget_refuses_before_counting():
    table, _ = _table()
    W = dpx.workloads.marginals(table.shape, [1])
    led = PrivacyLedger(dpx.Budget.zcdp(1e-3))
    data = PrivateTable(table, led)
    A = dpx.registry.get("residual_planner").strategy(W, GAUSS)
    with pytest.raises(dpx.BudgetExceededError):
        data.measure(A, GAUSS, np.random.default_rng(0))
    assert len(led) == 0 and data._cache == {}  # nothing was even counted


def test_superstore_table_two_way_marginals():
    T = datasets.superstore_table()
    assert T.domain.source == "declared"  # its categories are the dataset's public schema
    assert T.domain.cells == 4 * 3 * 4 * 3 * 17 * 49 * 32 * 24  # about 9.2e7, never allocated
    assert len(T.records) == 9994
    W = dpx.workloads.marginals(T.shape, [2])
    r = dpx.release(T, W, "residual_planner", GAUSS)
    assert r.answers.shape == (W.m,) and len(r.marginals()) == 28
    # every marginal's noisy total is close to the number of orders (σ·√cells wide)
    for part in r.marginals():
        assert abs(part["answer"].sum() - 9994) < 8 * part["std"].ravel()[0] * math.sqrt(part["answer"].size)


def test_table_from_csv():
    buf = io.StringIO("region,sales\nEast,10.5\nWest,3\nEast,7\n")
    T = datasets.table_from_csv(buf, ["region", "sales"], bins={"sales": 4}, ranges={"sales": (0, 12)})
    assert T.domain.attributes[0].categories == ("East", "West") and T.shape == (2, 4)
    # the categories were read from the records: simulations only, and no record count in the text
    assert T.domain.source == "data" and "3" not in T.description
    W = dpx.workloads.marginals(T.shape, [1])
    with pytest.raises(ValueError, match="read from the records"):
        dpx.release(T, W, "residual_planner", GAUSS)
    assert dpx.simulate(T, W, "residual_planner", GAUSS, seed=0).mode == "simulation"
    with pytest.raises(ValueError, match="empty"):
        datasets.table_from_csv(io.StringIO(""), ["a"])
    with pytest.raises(ValueError, match="no column"):
        datasets.table_from_csv(io.StringIO("a,b\n1,2\n"), ["c"])
