"""The Workload page's model (dpexplorer.queries.terms), without Panel.

Parsing of domains and matrices, terms and their spec parameters, the state
transitions of the page (add, ranges, weights, removal, domain changes,
presets, links), sensitivities, what the heatmap and the summary show, and
the record-table marginals plan.
"""

from __future__ import annotations

import io
import sys

import numpy as np
import pytest

import dpexplorer as dpx
from dpexplorer.queries import spec as dspec
from dpexplorer.queries import terms as tmod
from dpexplorer.queries.terms import (
    PRESETS,
    Term,
    WorkloadTerms,
    brush_cells,
    encode_terms,
    heatmap_data,
    parse_domain,
    parse_matrix,
    parse_sets,
    plan_marginals,
    structure_frame,
    summary_text,
    term_params,
    terms_from_link,
    terms_from_matrix,
    workload_sensitivity,
)

wl = dpx.workloads


def same(A, B) -> None:
    np.testing.assert_allclose(A.dense(), B.dense())


def test_the_model_imports_no_panel_and_no_ui():
    import subprocess

    code = ("import sys, dpexplorer.queries.terms; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('panel', 'param', 'bokeh', "
            "'holoviews') or m.startswith('dpexplorer.ui')); print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --------------------------------------------------------------------------- parsing
def test_terms_compare_by_value():
    a = Term("predicates", {"matrix": np.eye(2)})
    assert a == Term("predicates", {"matrix": np.eye(2)})
    assert a != Term("predicates", {"matrix": np.ones((2, 2))})


def test_parsers():
    assert parse_domain("age:50, income=100; 2", 1) == ((50, 100, 2), ("age", "income", "a3"))
    assert parse_domain("", 64) == ((64,), ())
    np.testing.assert_array_equal(parse_matrix("[[1, 0], [0, 1]]"), np.eye(2))
    buf = io.BytesIO()
    np.save(buf, np.eye(3))
    np.testing.assert_array_equal(parse_matrix(buf.getvalue(), "m.npy"), np.eye(3))
    np.testing.assert_array_equal(parse_matrix("1 1 0; 0 1 1"), [[1, 1, 0], [0, 1, 1]])


@pytest.mark.parametrize("attributes, n, message", [
    ("", 0, "at least 1 cell"),
    ("", tmod.MAX_N_1D + 1, "too large"),
    ("a:5000", 1, "'a' = 5,000 cells is too large"),
    (", ".join(f"a{i}:2" for i in range(tmod.MAX_ATTRIBUTES + 1)), 1, "at most 16 are allowed"),
    ("a:4000, b:4000, c:4000, d:4000, e:4000, f:4000", 1, "cells; at most"),
])
def test_bad_domains_say_what_is_allowed(attributes, n, message):
    with pytest.raises(ValueError, match=message):
        parse_domain(attributes, n)


@pytest.mark.parametrize("text, message", [
    ("", "no matrix given"),
    ("1 0\n1", "row 2 has 1 entries but row 1 has 2"),
    ("1 x", "'x' is not a number"),
    ("[[1, 0], [1]]", "JSON list of rows"),
])
def test_bad_matrices_say_why(text, message):
    with pytest.raises(ValueError, match=message):
        parse_matrix(text)


# ----------------------------------------------------------------------------- terms
def test_term_parameters_from_options_and_inputs():
    assert term_params("width_range", {"k": 8}) == {"w": 8}
    assert term_params("random_ranges", {}, {**tmod.DEFAULT_INPUTS, "m": 5}) == \
        {"m": 5, "kind": "uniform", "seed": 0}
    assert term_params("marginals", {"orders": "0-2"}) == {"k": [0, 1, 2]}
    assert term_params("range_marginals", {"k": 2, "range_kind": "prefix"}) == {"k": 2, "kind": "prefix"}
    assert term_params("ranges", {"ranges": "0-3, 5-5"}) == {"ranges": [(0, 3), (5, 5)]}
    assert term_params("product", {"blocks": ["prefix", "width_range"], "k": 3}, d=2) == \
        {"factors": [{"type": "prefix"}, {"type": "width_range", "w": 3}]}
    for family, options, message in [
            ("width_range", {"k": 0}, "at least 1"), ("random_ranges", {"m": 0}, "1 to 1,000,000"),
            ("random_ranges", {"kind": "x"}, "kind must be one of"),
            ("range_marginals", {"k": 1, "range_kind": "x"}, "'all_range' or 'prefix'"),
            ("product", {"blocks": ["prefix"]}, "1 block type"), ("product", {"blocks": ["x", "y"]}, "unknown block"),
            ("nope", {}, "unknown query family")]:
        with pytest.raises(ValueError, match=message):
            term_params(family, options, d=2)


def test_a_term_is_built_from_the_spec_grammar():
    """A block family is its block spec on every attribute, a product's factors are block specs,
    and ``terms_from_matrix`` reads a workload's spec back as the same terms."""
    domain = (8, 4)
    for term in [Term("prefix"), Term("width_range", {"w": 3}, 2.0),
                 Term("product", {"factors": [{"type": "prefix"}, {"type": "identity_total"}]}),
                 Term("ranges", {"ranges": [(0, 1), (2, 3)]})]:
        factors = term.params["factors"] if term.family == "product" else \
            [{"type": term.family, **term.params}] * len(domain)
        spec = {"domain": list(domain), "products": [{"weight": term.weight, "factors": factors}]}
        same(term.build(domain) if term.weight == 1 else wl.union([term.build(domain)], [term.weight]),
             dspec.from_spec(spec))
        built = WorkloadTerms((term,), domain).build()
        assert terms_from_matrix(built.workload) == [term]
    with pytest.raises(ValueError, match="attribute 'b' \\(4 cells\\)"):
        Term("width_range", {"w": 6}).build(domain, ("a", "b"))


def test_terms_of_a_workload_without_a_spec_keep_the_matrix():
    W = wl.predicates(np.eye(3)[:, [0, 2, 1]] @ np.eye(3))
    (term,) = terms_from_matrix(wl.kron([wl.prefix(3), dpx.queries.matrix.Dense(np.ones((2, 2)))]))
    assert term.family in ("external", "product")
    assert terms_from_matrix(W)[0].family in ("predicates", "external")


# ----------------------------------------------------------------------------- state
def test_state_transitions_are_pure_and_checked():
    s0 = WorkloadTerms((), (16,))
    s1 = s0.added(Term("prefix")).added(Term("identity"))
    assert s0.terms == () and [t.family for t in s1.terms] == ["prefix", "identity"]
    s2 = s1.with_ranges("0-3", 2.0).with_ranges([(5, 9)])
    assert s2.custom_ranges() == [(0, 3), (5, 9)] and s2.terms[-1].weight == 2.0
    assert s2.reweighted(0, 3).terms[0].weight == 3.0 and s2.terms[0].weight == 1.0
    assert [t.family for t in s2.without([0, 2]).terms] == ["identity"]
    for change, message in [(lambda: s2.with_ranges("0-16"), "outside the domain"),
                            (lambda: s2.reweighted(7, 1), "there is no term 7"),
                            (lambda: s2.reweighted(0, -1), "positive finite"),
                            (lambda: s2.without([3]), "numbered 0 to 2")]:
        with pytest.raises(ValueError, match=message):
            change()
    built = s2.build()
    same(built.workload, wl.union([wl.prefix(16), wl.identity(16), wl.ranges(16, [(0, 3), (5, 9)])],
                                  [1, 1, 2]))
    assert all(t.matrix is not None and t.domain == (16,) for t in built.terms)
    assert built.stats["m"] == 16 + 16 + 2 and built.stats["l1_exact"] and built.spec_error == ""
    with pytest.raises(ValueError, match=r"term #2 \(Custom ranges .*\): .*"):
        s2.over((8,)).build()


def test_building_names_the_attributes():
    built = WorkloadTerms((Term("marginals", {"k": 1}),), (3, 4)).build()
    assert built.names == ("a1", "a2") and built.workload.attributes == ("a1", "a2")
    assert built.stats["names"] == ()
    assert WorkloadTerms((), (8,)).build().workload is None


def test_presets_and_links_round_trip():
    state = PRESETS["cps_all_prefix_marginals"].workload_terms()
    assert state.domain == (50, 100, 7, 4, 2) and state.names[0] == "income"
    assert state.build().stats["l1"] == 40000.0  # HDMM Table 6's workload, as the page shows it
    items = encode_terms(state.terms)
    assert terms_from_link(items, d=5) == list(state.terms)
    with pytest.raises(ValueError, match="cannot carry a 'spec' term"):
        terms_from_link([["spec", {}, 1.0]])
    with pytest.raises(ValueError, match="list of \\[family, parameters, weight\\]"):
        terms_from_link([["prefix", {}]])
    with pytest.raises(ValueError, match="positive"):
        terms_from_link([["prefix", {}, 0]])
    assert encode_terms([Term("external", {"name": "x"})]) == []


# ---------------------------------------------------------------------- sensitivity
def test_workload_sensitivity_from_kronecker_factors(monkeypatch):
    from hypothesis import given, settings
    from hypothesis import strategies as st

    blocks = ["identity", "total", "identity_total", "prefix", "all_range"]

    @settings(max_examples=40, deadline=None)
    @given(st.lists(st.tuples(st.sampled_from(blocks), st.sampled_from(blocks),
                              st.floats(0.1, 5.0)), min_size=1, max_size=4),
           st.tuples(st.integers(1, 6), st.integers(1, 5)))
    def check(products, domain):
        W = wl.union([wl.kron([wl.block(a, domain[0]), wl.block(b, domain[1])])
                      for a, b, _ in products], [w for _, _, w in products])
        for p in (1, 2):
            with monkeypatch.context() as m:
                m.setattr(tmod, "SENSITIVITY_CELLS", 0)  # force the factor path
                value, exact = workload_sensitivity(W, p)
            true = W.sensitivity(p)
            if exact:
                assert value == pytest.approx(true, rel=1e-9)
            else:  # the sum of the products' maxima: an upper bound
                assert value >= true * (1 - 1e-12)
            assert workload_sensitivity(W, p) == (pytest.approx(true), True)

    check()
    # not exact: prefix is largest at the first cell, "ranges [2, 3]" at the last ones
    W = wl.union([wl.kron([wl.prefix(4), wl.identity(2)]),
                  wl.kron([wl.ranges(4, [(2, 3)]), wl.identity(2)])])
    monkeypatch.setattr(tmod, "SENSITIVITY_CELLS", 0)
    value, exact = workload_sensitivity(W, 1)
    assert not exact and value == 5.0 and W.sensitivity(1) == 4.0
    with pytest.raises(ValueError, match="not a union of Kronecker products"):
        workload_sensitivity(wl.prefix(8), 1)


# -------------------------------------------------------------------------- display
def test_brushed_spans_become_cells():
    edges = np.linspace(0.0, 8.0, 9)  # 8 cells of width 1
    assert brush_cells(edges, 2.9, 5.2) == (3, 4)  # centres 3.5 and 4.5
    assert brush_cells(edges, 5.2, 2.9) == (3, 4)
    assert brush_cells(edges, 6.1, 6.2) == (6, 6)  # narrower than a cell: the cell under it
    for x0, x1, message in [(9.0, 10.0, "outside the histogram's range"),
                            ("a", 1.0, "not numbers"), (0.0, float("inf"), "not finite")]:
        with pytest.raises(ValueError, match=message):
            brush_cells(edges, x0, x1)


def test_heatmap_draws_w_then_its_gram_then_nothing():
    which, A, note = heatmap_data(wl.prefix(16))
    assert which == "W" and A.shape == (16, 16) and "W itself" in note
    which, A, note = heatmap_data(wl.all_range(1024))
    assert which == "WᵀW" and A.shape == (512, 512) and "block means" in note
    which, A, note = heatmap_data(wl.kron([wl.identity(100), wl.identity(100)]))
    assert which == "" and A is None and "Too large to draw" in note
    assert heatmap_data(None)[0] == ""


def test_structure_frame_lists_the_products():
    W = PRESETS["adult_marginals"].workload_terms().build().workload
    frame = structure_frame(W)
    assert frame.attrs["products"] == 470 and len(frame) == tmod.MAX_PRODUCTS_SHOWN
    assert frame.iloc[0]["product"] == "Total (all cells)"
    assert structure_frame(wl.predicates(np.eye(3))) is None


def test_summary_text():
    built = WorkloadTerms((Term("prefix"),), (8,)).build()
    text = summary_text(built.stats, WorkloadTerms(built.terms, (8,)), built.workload, "d", 16)
    assert "**m** = 8 queries" in text and "**L1 sensitivity** = 8" in text
    assert "has 16 cells but the domain is 8" in text
    empty = summary_text(built.stats, WorkloadTerms((), (4,)), built.workload)
    assert empty.startswith("**No terms:**") and "The domain is now 4" in empty


# --------------------------------------------------------------------- record tables
def test_parse_sets():
    assert parse_sets("B, A; C\n total", ["A", "B", "C"]) == [("A", "B"), ("C",), ()]
    with pytest.raises(ValueError, match="repeats"):
        parse_sets("A, A", ["A"])


def test_plan_marginals():
    plan = plan_marginals(["A", "B", "C"], [3, 4, 5], "orders", "1-2")
    assert plan["sets"] == [(0,), (1,), (2,), (0, 1), (0, 2), (1, 2)]
    assert plan["queries"] == 3 + 4 + 5 + 12 + 15 + 20 and plan["largest"] == 20
    assert tmod.marginals_term(plan).params == {"k": [1, 2]}
    plan = plan_marginals(["A", "B"], [3, 4], "sets", sets="B; total")
    assert plan["sets"] == [(1,), ()] and tmod.marginals_term(plan, "sets").family == "marginal_sets"
    for args, message in [(([], []), "choose at least one"), ((["A"], [5000]), "per attribute"),
                          ((["A", "B"], [3, 4], "orders", "3"), r"must be in \[0, 2\]")]:
        with pytest.raises(ValueError, match=message):
            plan_marginals(*args)
