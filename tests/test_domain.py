"""Public domains of record tables: declared, discovered privately, or read from the data (simulations only),
and releases that hold nothing private."""

from __future__ import annotations

import copy
import io
import json
import math
import pickle

import numpy as np
import pandas as pd
import pytest

import dpexplorer as dpx
from dpexplorer import datasets
from dpexplorer.privacy import PrivacyLedger, discovery
from dpexplorer.queries.domain import Attribute, Domain, PublicTable, Table

GAUSS = dpx.Gaussian(1.0, 1e-6, "zcdp")
SCHEMA_YAML = """\
attributes:
  - name: dept
    categories: [a, b, c]
  - name: salary
    range: [0, 100000]
    bins: 10
"""


def _records(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"dept": rng.choice(["a", "b", "c"], n),
                         "salary": rng.uniform(20000, 90000, n).round(2)})


def _declared():
    return Domain.from_text(SCHEMA_YAML)


# ================================================================ schema files
def test_schema_text_and_files_round_trip(tmp_path):
    d = _declared()
    assert d.source == "declared" and not d.inferred and d.shape == (3, 10)
    assert d.attributes[1].edges == tuple(np.linspace(0, 100000, 11))
    for name in ("schema.yaml", "schema.json"):
        path = tmp_path / name
        d.to_file(path)
        back = Domain.from_file(path)
        assert back == d and back.source == "declared"
    assert json.loads((tmp_path / "schema.json").read_text())["attributes"][0] == \
        {"name": "dept", "categories": ["a", "b", "c"]}
    # a domain read from the data keeps its mark through a round trip
    inferred = Table.from_dataframe(_records(), ["dept", "salary"]).domain
    assert inferred.source == "data" and Domain.from_dict(inferred.to_dict()).source == "data"


@pytest.mark.parametrize("text, message", [
    ("attributes: 3", "a list 'attributes'"),
    ("[1, 2]", "a list 'attributes'"),
    ("attributes: [{categories: [a]}]", "schema attribute 0 needs a non-empty string 'name'"),
    ("attributes: [{name: x, categories: [a], edges: [0, 1]}]", r"schema attribute 0 \('x'\).*exactly one"),
    ("attributes: [{name: x, edges: [1, 0]}]", r"schema attribute 0 \('x'\).*strictly increasing"),
    ("attributes: [{name: x, range: [0, 1]}]", "exactly one of"),
    ("attributes: [{name: x, range: [1, 0], bins: 2}]", "hi > lo"),
    ("attributes: [{name: x, categories: a}]", "'categories' must be a list"),
    ("attributes: [{name: x, categories: [a]}]\nextra: 1", "only the keys"),
    ("attributes: [{name: x, categories: [a]}]\nsource: made-up", "source is one of"),
    ("attributes: [", "not valid YAML or JSON"),
    ("attributes: []", "at least one attribute"),
])
def test_bad_schema_is_refused_with_a_clear_error(text, message):
    with pytest.raises(ValueError, match=message):
        Domain.from_text(text)


# ========================================================= read from the data
def test_from_dataframe_marks_the_domain_as_read_from_the_data():
    df = _records()
    assert Table.from_dataframe(df, ["dept", "salary"]).domain.inferred
    # numeric attributes with declared ranges only: nothing was read, the domain is declared
    t = Table.from_dataframe(df, ["salary"], bins={"salary": 4}, ranges={"salary": (0, 1e5)})
    assert t.domain.source == "declared"


def test_inf_in_a_numeric_column_is_refused_by_count_not_value():
    df = pd.DataFrame({"x": [1.0, 2.0, np.inf, 3.0, -np.inf]})
    with pytest.raises(ValueError, match=r"'x' has 2 infinite value\(s\)") as err:
        Table.from_dataframe(df, ["x"])
    assert "inf," not in str(err.value)


def test_encode_names_the_attribute_and_count_never_a_value():
    a = Attribute("dept", categories=("a", "b"))
    with pytest.raises(ValueError, match=r"'dept' has 2 value\(s\) outside its 2 categories") as err:
        a.encode(["a", "ceo-only-dept", "ceo-only-dept"])
    assert "ceo-only" not in str(err.value)
    num = Attribute("salary", edges=(0.0, 10.0))
    with pytest.raises(ValueError, match=r"1 value\(s\) outside \[0, 10\]") as err:
        num.encode([9876543.21, 1.0])
    assert "9876543" not in str(err.value)


def test_release_refuses_a_domain_read_from_the_data_and_simulate_accepts_it():
    table = datasets.table_from_csv(io.StringIO(_records().to_csv(index=False)), ["dept", "salary"])
    assert table.domain.inferred and "3,000" not in table.description and "3000" not in table.description
    W = dpx.workloads.marginals(table.shape, [1])
    led = PrivacyLedger()
    with pytest.raises(ValueError, match=r"read from the records.*dpx\.Domain\(.*Domain\.from_file.*"
                                         r"discover_domain"):
        dpx.release(table, W, "residual_planner", GAUSS, ledger=led)
    assert len(led) == 0  # refused before anything was spent
    r = dpx.simulate(table, W, "residual_planner", GAUSS, seed=1, ledger=led)
    assert r.mode == "simulation" and len(led) == 1


def test_table_from_csv_with_a_declared_domain_releases(tmp_path):
    path = tmp_path / "schema.yaml"
    path.write_text(SCHEMA_YAML)
    csv = io.StringIO(_records().to_csv(index=False))
    table = datasets.table_from_csv(csv, domain=str(path), name="staff")
    assert table.domain == _declared() and table.domain.source == "declared"
    W = dpx.workloads.marginals(table.shape, [1])
    r = dpx.release(table, W, "residual_planner", GAUSS)
    assert r.mode == "release" and r.table == PublicTable("staff", table.domain)
    with pytest.raises(TypeError, match="either domain or bins"):
        datasets.table_from_csv(io.StringIO("a\n1\n"), domain=_declared(), bins={"salary": 3})


# ============================================================== out of domain
def test_records_outside_the_domain_are_dropped_and_counted_nowhere():
    dom = _declared()
    inside = _records(2000, seed=2)
    outside = pd.DataFrame({"dept": ["ceo-only-dept", "a", None], "salary": [50000.0, 9876543.21, 100.0]})
    W = dpx.workloads.marginals(dom.shape, [0, 1, 2])
    clean = dpx.simulate(Table(inside, dom, "t"), W, "residual_planner", GAUSS, seed=5)
    dirty = dpx.simulate(Table(pd.concat([inside, outside], ignore_index=True), dom, "t"), W,
                         "residual_planner", GAUSS, seed=5)
    np.testing.assert_array_equal(clean.answers, dirty.answers)  # exactly as if they were not there
    # "error" only where nothing is released: names the attribute and the number of rows, not values
    table = Table(pd.concat([inside, outside], ignore_index=True), dom, "t")
    with pytest.raises(ValueError, match=r"'dept': 2 record\(s\) are outside the domain") as err:
        dpx.simulate(table, W, "residual_planner", GAUSS, seed=5, out_of_domain="error")
    assert "ceo" not in str(err.value) and "9876543" not in str(err.value)
    led = PrivacyLedger()
    with pytest.raises(ValueError, match="allowed only in simulations"):
        dpx.release(table, W, "residual_planner", GAUSS, ledger=led, out_of_domain="error")
    with pytest.raises(ValueError, match="'drop' or 'error'"):
        dpx.simulate(table, W, "residual_planner", GAUSS, seed=5, out_of_domain="clip")
    with pytest.raises(ValueError, match="record tables only"):
        dpx.simulate(np.ones(4), dpx.workloads.identity(4), "identity", dpx.Laplace(1.0), seed=0,
                     out_of_domain="error")
    assert len(led) == 0


# =================================================================== discovery
@pytest.mark.parametrize("epsilon, delta", [(1.0, 1e-6), (0.5, 1e-9), (2.0, 1e-3), (0.1, 1e-7)])
def test_partition_selection_threshold_and_scale(epsilon, delta):
    b, tau = discovery.threshold_for(epsilon, delta)
    assert b == pytest.approx(1.0 / epsilon, rel=1e-15)
    # τ = 1 + b·ln(1/(2δ)) (Korolova et al. 2009; Gopi et al. 2020), with a 1e-6 slack in the exponent
    assert tau == pytest.approx(1.0 + b * math.log(1.0 / (2.0 * delta)), rel=1e-5)
    assert discovery.threshold_delta(b, tau) == pytest.approx(delta * math.exp(-1e-6), rel=1e-12)
    # opendp's own privacy map of its Laplace threshold agrees, and stays within what is recorded
    eps_dp, dlt_dp = discovery.opendp_threshold_privacy(b, tau)
    assert eps_dp == pytest.approx(epsilon, rel=1e-12) and dlt_dp <= delta
    assert dlt_dp == pytest.approx(delta, rel=1e-5)
    with pytest.raises(ValueError, match="0 < δ < 1/2"):
        discovery.threshold_for(epsilon, 0.0)


def test_quantile_sensitivity():
    # adding a record x: #{x <= c} and α·N move together (change 1 − α) or only α·N moves (change α)
    assert discovery.quantile_sensitivity(0.01) == pytest.approx(0.99)
    assert discovery.quantile_sensitivity(0.5) == 0.5
    rng = np.random.default_rng(0)
    for alpha in (0.01, 0.3, 0.99):
        v = np.sort(rng.normal(size=200))
        c = np.linspace(-3, 3, 41)
        u = -np.abs(np.searchsorted(v, c, side="right") - alpha * v.size)
        for extra in (-5.0, 0.0, 5.0):
            w = np.sort(np.append(v, extra))
            u2 = -np.abs(np.searchsorted(w, c, side="right") - alpha * w.size)
            assert np.abs(u2 - u).max() <= discovery.quantile_sensitivity(alpha) + 1e-12


def test_a_category_of_one_record_is_not_discovered_and_common_ones_are():
    rng = np.random.default_rng(11)
    common = rng.choice(["a", "b", "c"], 3000)
    rare = [f"only-{i}" for i in range(300)]  # 300 categories of one record each
    df = pd.DataFrame({"dept": np.concatenate([common, rare])})
    # each rare category is kept with probability δ = 1e-6, so P(any of 300 kept) ≤ 3e-4; the
    # common ones (≈ 1000 records) miss τ ≈ 28 only if Lap(1) < −970: never. Seeded: deterministic.
    for seed in range(5):
        d = dpx.discover_domain(df, {"dept": "categorical"}, epsilon=1.0, delta=1e-6,
                                rng=np.random.default_rng(seed))
        assert d.attributes[0].categories == ("a", "b", "c")
    d = dpx.discover_domain(df, {"dept": "categorical"}, epsilon=1.0, delta=1e-6)  # release mode
    assert d.attributes[0].categories == ("a", "b", "c") and d.source == "discovered"


def test_discovered_ranges_contain_most_of_the_data():
    rng = np.random.default_rng(3)
    salary = rng.lognormal(10.5, 0.6, 5000)
    df = pd.DataFrame({"salary": salary})
    spec = {"salary": {"kind": "numeric", "bounds": (0, 1e6), "bins": 8}}
    for seed in range(5):
        d = dpx.discover_domain(df, spec, epsilon=1.0, rng=np.random.default_rng(seed))
        e = d.attributes[0].edges
        inside = np.mean((salary >= e[0]) & (salary <= e[-1]))
        # quantiles 0.01 and 0.99 at ε/2 = 0.5 each: report-noisy-max with Exponential(3.96) over
        # 1001 candidates errs by a few dozen ranks (≈ 4·ln 1001 ≈ 27 of 5000) plus one grid step
        # (1000 USD ≈ 0.5 % of the records near the top): ≥ 95 % inside in every seeded run
        assert inside >= 0.95 and len(e) == 9
        assert e[-1] < 2.5 * np.quantile(salary, 0.99)  # not the public bound 1e6
    # without bounds: the noisy histogram over powers of two; its bins with ≥ about τ = ln(122/0.02) ≈ 8.7
    # records (ε = 1) are kept, so at most a few dozen of 5,000 records fall outside
    d = dpx.discover_domain(df, {"salary": {"kind": "numeric"}}, epsilon=1.0, rng=np.random.default_rng(9))
    e = d.attributes[0].edges
    assert np.mean((salary >= e[0]) & (salary <= e[-1])) >= 0.95
    assert np.isin([e[0], e[-1]], discovery.POWER_OF_TWO_EDGES).all()


def test_a_range_without_bounds_from_few_records_at_a_small_epsilon():
    """400 salaries uniform on [20,000, 90,000] at ε = 0.25: the quantiles over a wide grid gave edges such
    as [-18, 6.5e9]; the power-of-two histogram gives [16384, 131072] -- its three bins hold about 73, 187
    and 140 records, far above τ = 4·ln(122/0.02) ≈ 34.9 (noise sd 5.7), and each of the 119 empty bins
    passes with probability 0.01/122 (the seeds below are fixed, so the test is deterministic)."""
    salary = np.random.default_rng(4).uniform(20_000, 90_000, 400)
    df = pd.DataFrame({"salary": salary})
    for seed in range(5):
        d = dpx.discover_domain(df, {"salary": {"kind": "numeric", "bins": 8}}, epsilon=0.25,
                                rng=np.random.default_rng(seed))
        e = d.attributes[0].edges
        assert (e[0], e[-1]) == (16384.0, 131072.0) and len(e) == 9


def test_bounds_threshold_and_the_power_of_two_bins():
    b, tau = discovery.bounds_threshold(0.5, 122, 0.01)
    assert b == 2.0 and tau == pytest.approx(2.0 * math.log(122 / 0.02))
    # an empty bin passes with probability failure / bins: P(Lap(b) >= τ) = exp(-τ/b)/2
    assert 0.5 * math.exp(-tau / b) == pytest.approx(0.01 / 122)
    edges = discovery.POWER_OF_TWO_EDGES
    assert edges.size == 123 and np.all(np.diff(edges) > 0) and 0.0 in edges
    assert edges[-1] == 2.0 ** 50 and edges[0] == -(2.0 ** 50)
    with pytest.raises(ValueError, match="quantiles and grid go with public"):
        dpx.discover_domain(pd.DataFrame({"v": [1.0, 2.0]}), {"v": {"kind": "numeric", "quantiles": (0.1, 0.9)}},
                            epsilon=1.0, rng=np.random.default_rng(0))


def test_discovery_checks_the_whole_cost_before_the_first_draw_and_records_each_step():
    df = _records()
    spec = {"dept": "categorical", "salary": {"kind": "numeric", "bounds": (0, 2e5)}}
    small = PrivacyLedger(dpx.Budget.approx(0.9, 1e-5))
    with pytest.raises(dpx.BudgetExceededError, match="domain discovery of 2 attribute"):
        dpx.discover_domain(df, spec, epsilon=1.0, delta=1e-6, ledger=small)
    assert len(small) == 0  # nothing drawn, nothing recorded
    with pytest.raises(dpx.BudgetExceededError):  # an (ε, δ) step never fits a zCDP budget
        dpx.discover_domain(df, {"dept": "categorical"}, epsilon=0.1, delta=1e-6,
                            ledger=PrivacyLedger(dpx.Budget.zcdp(10.0)))
    led = PrivacyLedger(dpx.Budget.approx(3.0, 1e-5))
    d = dpx.discover_domain(df, spec, epsilon=1.0, delta=1e-6, ledger=led)
    assert d.source == "discovered" and d.spent == (("dept", 0.5, 1e-6), ("salary", 0.5, 0.0))
    assert len(led) == 3 and led.basic() == pytest.approx((1.0, 1e-6))
    assert all(e.mode == "release" for e in led.entries)
    assert "partition selection" in led.entries[0].label and "quantile" in led.entries[1].label
    # the discovered domain releases; a domain discovered in a simulation does not
    W = dpx.workloads.marginals(d.shape, [1])
    dpx.release(Table(df, d, "staff"), W, "residual_planner", GAUSS, ledger=led)
    sim = dpx.discover_domain(df, spec, epsilon=1.0, delta=1e-6, rng=np.random.default_rng(0))
    assert sim.source == "data" and led.entries[-1].mode == "release"
    with pytest.raises(ValueError, match="read from the records"):
        dpx.release(Table(df, sim, "staff"), W, "residual_planner", GAUSS)


def test_discovery_on_a_stored_ledger_keeps_its_cost_across_a_reopen(tmp_path):
    """Partition selection has no zCDP bound (ρ = ∞): the SQLite store keeps that total as ∞, settles the
    reservation to its stages, and a reopened ledger composes by adding up ε and δ."""
    store = tmp_path / "ledgers.sqlite"
    led = PrivacyLedger.open(store, "staff", budget=dpx.Budget.approx(3.0, 1e-5))
    spec = {"dept": "categorical", "salary": {"kind": "numeric", "bounds": (0, 2e5)}}
    dpx.discover_domain(_records(), spec, epsilon=1.0, delta=1e-6, ledger=led)
    again = PrivacyLedger.open(store, "staff")
    eps, dlt, rho = again.totals()
    assert (eps, dlt) == pytest.approx((1.0, 1e-6)) and rho == math.inf
    assert again.epsilon == pytest.approx(1.0) and "sequential" in again.accounting
    assert "zCDP" not in again.remaining()  # no ρ is left to speak of once a step has none
    history = again.history()
    assert list(history["kind"]) == ["reservation", "stage", "stage", "stage"]
    assert history["state"].iloc[0] == "settled"
    with pytest.raises(dpx.BudgetExceededError):  # 1.0 spent + 2.5 > 3.0, refused before drawing
        dpx.discover_domain(_records(), {"dept": "categorical"}, epsilon=2.5, delta=1e-6, ledger=again)
    assert len(PrivacyLedger.open(store, "staff")) == 3


@pytest.mark.parametrize("spec, kwargs, message", [
    ({"dept": "categorical"}, {"epsilon": 1.0}, "0 < δ < 1/2"),
    ({"salary": {"kind": "numeric", "bounds": (0, 1)}}, {"epsilon": 1.0, "delta": 1e-6}, "delta=0"),
    ({"nope": "categorical"}, {"epsilon": 1.0, "delta": 1e-6}, "not a column"),
    ({"salary": {"kind": "numeric", "bounds": (0, 1), "candidates": [0, 1]}}, {"epsilon": 1.0}, "not both"),
    ({"salary": {"kind": "numeric", "bounds": (1, 0)}}, {"epsilon": 1.0}, "hi > lo"),
    ({"salary": {"kind": "numeric", "candidates": [0, 2, 1]}}, {"epsilon": 1.0}, "strictly increasing"),
    ({"salary": {"kind": "numeric", "bounds": (0, 1), "quantiles": (0.9, 0.1)}}, {"epsilon": 1.0},
     "quantiles"),
    ({"dept": "categorical"}, {"epsilon": -1.0, "delta": 1e-6}, "ε > 0"),
])
def test_bad_discovery_input_is_refused_before_anything_is_spent(spec, kwargs, message):
    led = PrivacyLedger()
    with pytest.raises(ValueError, match=message):
        dpx.discover_domain(_records(), spec, ledger=led, **kwargs)
    assert len(led) == 0


# ====================================================== releases hold nothing private
PLANTED_STR = "zz-planted-4711"
PLANTED_SALARY = 54321.123456789
PLANTED_COUNT = 987654321


def _planted_bytes(*values) -> list[bytes]:
    out = []
    for v in values:
        if isinstance(v, str):
            out.append(v.encode())
        else:
            out += [np.float64(v).tobytes(), repr(float(v)).encode()]
            if float(v).is_integer():
                out += [np.int64(int(v)).tobytes(), str(int(v)).encode()]
    return out


def _assert_absent(obj, planted, what):
    for blob in (pickle.dumps(obj), pickle.dumps(copy.deepcopy(obj))):
        for b in planted:
            assert b not in blob, f"{what} carries a planted value {b!r}"


def test_table_releases_and_ledgers_hold_no_record():
    df = _records(2000, seed=4)
    df["note"] = "ordinary"
    df.loc[17, "note"] = PLANTED_STR          # a column NOT in the domain
    df.loc[23, "salary"] = PLANTED_SALARY     # a unique value inside the domain
    table = Table(df, _declared(), "staff")
    planted = _planted_bytes(PLANTED_STR, PLANTED_SALARY)
    assert any(b in pickle.dumps(df) for b in planted)  # the search finds them where they are
    W = dpx.workloads.marginals(table.shape, [1, 2])
    led = PrivacyLedger()
    rel = dpx.release(table, W, "residual_planner", GAUSS, ledger=led)
    sim = dpx.simulate(table, W, "residual_planner", GAUSS, seed=0, ledger=led)
    assert PLANTED_STR not in repr(table) and "54321" not in repr(table)  # a repr shows no record
    for r in (rel, sim):
        assert isinstance(r.table, PublicTable) and not hasattr(r.table, "records")
        _assert_absent(r, planted, f"the {r.mode}")
        for text in (r.to_json(), r.to_frame().to_csv(), json.dumps(r.metadata())):
            assert PLANTED_STR not in text and "54321.12" not in text
    _assert_absent(led, planted, "the ledger")
    d = dpx.discover_domain(df, {"note": "categorical", "salary": {"kind": "numeric", "bounds": (0, 1e5)}},
                            epsilon=1.0, delta=1e-6, ledger=led)
    assert PLANTED_STR not in d.attributes[0].categories
    _assert_absent(d, planted, "the discovered domain")
    _assert_absent(led, planted, "the ledger after discovery")


@pytest.mark.parametrize("mechanism", ["identity", "hb", "dawa", "partition_laplace", "mwem", "efpa",
                                       "uniform"])
def test_vector_releases_hold_no_data(mechanism):
    x = np.random.default_rng(5).integers(0, 50, 64).astype(float)
    x[9] = PLANTED_COUNT
    planted = _planted_bytes(PLANTED_COUNT)
    W = dpx.workloads.prefix(64)
    led = PrivacyLedger()
    rel = dpx.release(x, W, mechanism, dpx.Laplace(1.0), ledger=led, counts=False)
    sim = dpx.simulate(x, W, mechanism, dpx.Laplace(1.0), seed=1, ledger=led, counts=False)
    for r in (rel, sim):
        _assert_absent(r, planted, f"the {mechanism} {r.mode}")
        assert PLANTED_COUNT not in np.asarray(r.answers) and str(PLANTED_COUNT) not in r.to_json()
    _assert_absent(led, planted, "the ledger")


def test_a_deep_schema_is_refused_by_the_depth_limit_before_the_parser():
    """The spec grammar's pre-scan (spec.check_text) guards schema text too: libyaml and the JSON decoder
    never see 100,000 nested brackets."""
    with pytest.raises(dpx.LimitExceededError, match="domain schema: nesting depth"):
        Domain.from_text("[" * 100_000)
