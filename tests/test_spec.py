"""Tests of the declarative workload spec (dpexplorer.queries.spec)."""

import json

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from dpexplorer.queries import workloads as wl
from dpexplorer.queries.matrix import Dense, Kronecker
from dpexplorer.queries.spec import dumps, fingerprint, from_spec, load, loads, save, to_spec

WORKLOADS = {
    "prefix": lambda: wl.prefix(16),
    "all_range": lambda: wl.all_range(8),
    "width_range": lambda: wl.width_range(32, 4),
    "ranges": lambda: wl.ranges(10, [[0, 3], [2, 9], [5, 5]]),
    "random_ranges": lambda: wl.random_ranges(64, m=50, kind="clustered", seed=7),
    "random_uniform": lambda: wl.random_ranges(20, m=30, kind="uniform", seed=1),
    "predicates": lambda: wl.predicates([[0, 1, 1, 0], [1, 0, 0, 1], [1, 1, 1, 1]]),
    "permuted": lambda: wl.permuted(wl.all_range(8), seed=3),
    "identity_total": lambda: wl.identity_total(5),
    "kron": lambda: wl.kron([wl.prefix(4), wl.identity_total(3)]),
    "union": lambda: wl.union([wl.kron([wl.prefix(4), wl.identity(3)]),
                               wl.kron([wl.all_range(4), wl.width_range(3, 2)])], [1, 2]),
    "marginals": lambda: wl.marginals((3, 4, 2), [1, 2]),
    "range_marginals": lambda: wl.range_marginals((4, 5), 1, kind="prefix"),
}


def assert_same(W, V):
    assert V.domain == W.domain
    assert V.shape == W.shape
    np.testing.assert_array_equal(V.dense(), W.dense())


@pytest.mark.parametrize("key", sorted(WORKLOADS))
def test_round_trip(key):
    W = WORKLOADS[key]()
    spec = to_spec(W)
    assert spec["version"] == 1 and spec["domain"] == list(W.domain)
    json.dumps(spec)  # plain, serialisable
    V = from_spec(spec)
    assert_same(W, V)
    assert V.name == W.name
    assert to_spec(V) == spec


@pytest.mark.parametrize("key", sorted(WORKLOADS))
@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_text_round_trip(key, fmt):
    W = WORKLOADS[key]()
    text = dumps(W, fmt)
    assert_same(W, loads(text))  # auto-detected
    assert_same(W, loads(text, format=fmt))


@pytest.mark.parametrize("suffix", [".json", ".yaml", ".yml"])
def test_save_load(tmp_path, suffix):
    W = WORKLOADS["union"]()
    path = save(W, tmp_path / f"w{suffix}")
    text = path.read_text()
    parsed = json.loads(text) if suffix == ".json" else yaml.safe_load(text)
    assert parsed == to_spec(W)
    assert_same(W, load(path))


def test_random_ranges_keep_intervals():
    W = wl.random_ranges(100, m=40, kind="large_clustered", seed=11)
    V = loads(dumps(W, "yaml"))
    np.testing.assert_array_equal(V.lo, W.lo)
    np.testing.assert_array_equal(V.hi, W.hi)


def test_single_block_and_kron_structure():
    assert isinstance(from_spec({"domain": [5], "products": [{"factors": ["prefix"]}]}), type(wl.prefix(5)))
    K = from_spec({"domain": [2, 3], "products": [{"factors": ["identity", "total"]}]})
    assert isinstance(K, Kronecker) and K.domain == (2, 3)
    Wt = from_spec({"domain": [3], "products": [{"weight": 2.5, "factors": ["total"]}]})
    np.testing.assert_array_equal(Wt.dense(), 2.5 * np.ones((1, 3)))


def test_name_and_attributes_kept():
    spec = {"version": 1, "name": "census", "domain": [3, 2], "attributes": ["age", "sex"],
            "products": [{"factors": ["prefix", "identity"]}, {"weight": 3, "factors": ["total", "total"]}]}
    W = from_spec(spec)
    assert W.name == "census"
    out = to_spec(W)
    assert out["name"] == "census" and out["attributes"] == ["age", "sex"]
    assert [p["weight"] for p in out["products"]] == [1.0, 3.0]
    assert out["products"][0]["factors"] == [{"type": "prefix"}, {"type": "identity"}]


def test_spec_example_from_docs():
    spec = {"version": 1, "name": "my workload", "domain": [50, 100, 7],
            "products": [{"weight": 1.0, "factors": [{"type": "prefix"}, {"type": "identity"}, {"type": "total"}]},
                         {"weight": 2.0, "factors": ["all_range", {"type": "width_range", "w": 8}, "total"]}]}
    W = from_spec(spec)
    assert W.domain == (50, 100, 7)
    assert W.shape == (50 * 100 + 1275 * 93, 35000)
    assert to_spec(W)["products"][1]["factors"][1] == {"type": "width_range", "w": 8}


def test_marginals_shorthand():
    for dom, k in [((3, 4, 2), [0, 1, 2]), ((3, 4, 2), 2), ((5,), [1])]:
        W = from_spec({"domain": list(dom), "marginals": k})
        assert_same(wl.marginals(dom, k), W)
        assert "products" in to_spec(W) and "marginals" not in to_spec(W)


def test_range_marginals_shorthand():
    W = from_spec({"domain": [4, 5, 3], "range_marginals": {"orders": [1, 2], "kind": "prefix"}})
    assert_same(wl.range_marginals((4, 5, 3), [1, 2], kind="prefix"), W)
    W = from_spec({"domain": [4, 5], "range_marginals": {"orders": 1}})
    assert_same(wl.range_marginals((4, 5), 1), W)


def test_nested_unions_flatten_and_weights_multiply():
    inner = wl.union([wl.prefix(4), wl.total(4)], [3, 1])
    W = wl.union([wl.identity(4), inner], [1, 2])
    spec = to_spec(W)
    assert [p["weight"] for p in spec["products"]] == [1.0, 6.0, 2.0]
    assert_same(W, from_spec(spec))
    K = Kronecker([wl.prefix(2) * 2.0, wl.kron([wl.identity(2), wl.total(3) * 0.5])])
    spec = to_spec(K)
    assert spec["domain"] == [2, 2, 3] and spec["products"][0]["weight"] == 1.0
    assert_same(K, from_spec(spec))


@pytest.mark.parametrize("spec, match", [
    ([1, 2], "must be a mapping"),
    ({"products": [{"factors": ["prefix"]}]}, "domain: missing"),
    ({"domain": [], "products": []}, "non-empty list of attribute sizes"),
    ({"domain": [3, 0], "products": [{"factors": ["prefix", "prefix"]}]}, r"domain\[1\]: .*positive"),
    ({"domain": [3, -2], "products": [{"factors": ["prefix", "prefix"]}]}, r"domain\[1\]"),
    ({"domain": [3.5], "products": [{"factors": ["prefix"]}]}, r"domain\[0\]: .*whole"),
    ({"domain": [3], "version": 2, "products": [{"factors": ["prefix"]}]}, "unsupported spec version 2"),
    ({"domain": [3], "prodcts": [{"factors": ["prefix"]}]}, r"unknown top-level key\(s\) \['prodcts'\]"),
    ({"domain": [3]}, "exactly one of 'products'"),
    ({"domain": [3], "marginals": [1], "products": [{"factors": ["prefix"]}]}, "exactly one of"),
    ({"domain": [3], "products": []}, "products: must be a non-empty list"),
    ({"domain": [3, 4], "products": [{"factors": ["prefix"]}]},
     r"products\[0\]\.factors: 1 factor\(s\) for a domain of 2 attribute\(s\)"),
    ({"domain": [3], "products": [{"factors": ["prefix"]}, {"factors": ["foo"]}]},
     r"products\[1\]\.factors\[0\]: unknown block type 'foo'; known: \[.*'prefix'"),
    ({"domain": [3], "products": [{"weight": 0, "factors": ["prefix"]}]},
     r"products\[0\]\.weight: must be a positive finite number"),
    ({"domain": [3], "products": [{"weight": -1.0, "factors": ["prefix"]}]}, r"products\[0\]\.weight"),
    ({"domain": [3], "products": [{"weight": float("inf"), "factors": ["prefix"]}]}, "positive finite"),
    ({"domain": [3], "products": [{"weight": float("nan"), "factors": ["prefix"]}]}, "positive finite"),
    ({"domain": [3], "products": [{"weight": "2", "factors": ["prefix"]}]}, "positive finite"),
    ({"domain": [3], "products": [{"factors": ["prefix"], "w": 1}]}, r"products\[0\]: unknown key\(s\) \['w'\]"),
    ({"domain": [3], "products": [{"weight": 1}]}, r"products\[0\]\.factors: missing"),
    ({"domain": [3], "products": [{"factors": [{"type": "width_range"}]}]}, r"needs parameter\(s\) \['w'\]"),
    ({"domain": [3], "products": [{"factors": [{"type": "width_range", "w": 9}]}]}, "larger than the domain"),
    ({"domain": [3], "products": [{"factors": [{"type": "prefix", "w": 2}]}]}, r"unknown parameter\(s\) \['w'\]"),
    ({"domain": [3], "products": [{"factors": [{"w": 2}]}]}, "string 'type' key"),
    ({"domain": [3], "products": [{"factors": [7]}]}, "string 'type' key"),
    ({"domain": [3], "products": [{"factors": [{"type": "ranges", "ranges": [[2, 1]]}]}]}, "invalid"),
    ({"domain": [3], "products": [{"factors": [{"type": "predicates", "matrix": [[0, 1]]}]}]}, "columns"),
    ({"domain": [3], "products": [{"factors": [{"type": "predicates", "matrix": [[0, 2, 1]]}]}]}, "0/1"),
    ({"domain": [3], "products": [{"factors": [{"type": "permuted", "base": "bar"}]}]},
     r"factors\[0\]\.base: unknown block type 'bar'"),
    ({"domain": [3], "products": [{"factors": [{"type": "random_ranges", "kind": "odd"}]}]}, "kind must be one of"),
    ({"domain": [3], "attributes": ["a", "b"], "products": [{"factors": ["prefix"]}]}, "attributes: must be 1"),
    ({"domain": [3], "name": 5, "products": [{"factors": ["prefix"]}]}, "name: must be a string"),
    ({"domain": [3, 2], "marginals": [3]}, r"marginal orders \[3\] are not in \[0, 2\]"),
    ({"domain": [3, 2], "marginals": []}, "non-empty list"),
    ({"domain": [3, 2], "range_marginals": {"orders": [1], "kind": "suffix"}}, "range_marginals.kind"),
    ({"domain": [3, 2], "range_marginals": {"kind": "prefix"}}, "'orders' \\(required\\)"),
])
def test_invalid_specs(spec, match):
    with pytest.raises(ValueError, match=match):
        from_spec(spec)


def test_to_spec_rejects_parts_without_spec():
    with pytest.raises(ValueError, match=r"W: Dense matrix .* has no spec"):
        to_spec(Dense(np.ones((2, 3))))
    W = wl.union([wl.prefix(3), wl.kron([wl.identity(3)]), Dense(np.eye(3))])
    with pytest.raises(ValueError, match=r"W\.blocks\[2\]: Dense"):
        to_spec(W)
    with pytest.raises(ValueError, match=r"W\.factors\[1\]: Dense"):
        to_spec(wl.kron([wl.prefix(2), Dense(np.eye(3))]))
    with pytest.raises(ValueError, match="not positive"):
        to_spec(wl.prefix(3) * -1.0)
    with pytest.raises(ValueError, match="union of 2 products inside a Kronecker factor"):
        to_spec(Kronecker([wl.identity(2), wl.union([wl.prefix(3), wl.total(3)])]))
    with pytest.raises(ValueError, match="has no spec"):
        to_spec(wl.permuted(Dense(np.eye(3)), seed=1))


def test_to_spec_rejects_specs_that_do_not_rebuild():
    P = wl.predicates(np.eye(4))
    P.domain = (2, 2)
    with pytest.raises(ValueError, match="1D spec .* 2-attribute domain"):
        to_spec(P)
    K = wl.kron([wl.prefix(2), wl.identity(3)])
    K.domain = (6,)
    with pytest.raises(ValueError, match=r"attribute sizes \[2, 3\] but the workload's domain is \[6\]"):
        to_spec(K)
    R = wl.ranges(5, [[0, 1], [2, 4]])
    R.spec = {"type": "ranges", "ranges": [[0, 1], [1, 4]]}  # stale spec
    with pytest.raises(ValueError, match="does not rebuild"):
        to_spec(R)


def test_random_ranges_centers_never_silently_lost():
    # workloads.random_ranges does not record `centers` in its spec; to_spec
    # must refuse rather than save a different workload
    for W in (wl.random_ranges(50, m=20, kind="clustered", seed=2, centers=2),
              wl.permuted(wl.random_ranges(50, m=20, kind="clustered", seed=2, centers=2), seed=1)):
        try:
            spec = to_spec(W)
        except ValueError as exc:
            assert "does not rebuild" in str(exc)
        else:
            assert_same(W, from_spec(spec))


def test_text_errors(tmp_path):
    with pytest.raises(ValueError, match="cannot parse the spec as JSON or YAML"):
        loads("{domain: [3, ")
    with pytest.raises(ValueError, match="cannot parse the spec as JSON"):
        loads("domain: [3]", format="json")
    with pytest.raises(ValueError, match="must be a mapping"):
        loads("just text")
    with pytest.raises(ValueError, match="unknown spec format"):
        dumps(wl.prefix(3), "toml")
    with pytest.raises(ValueError, match="suffix"):
        save(wl.prefix(3), tmp_path / "w.txt")
    bad = tmp_path / "bad.yaml"
    bad.write_text("domain: [3]\nproducts:\n- factors: [foo]\n")
    with pytest.raises(ValueError, match=r"bad\.yaml: products\[0\]\.factors\[0\]: unknown block type 'foo'"):
        load(bad)


def test_dumps_accepts_spec_dict():
    text = dumps({"domain": [3, 2], "marginals": 1}, "json")
    assert json.loads(text)["products"][0]["factors"] == [{"type": "identity"}, {"type": "total"}]


BLOCK_NAMES = ["identity", "total", "prefix", "all_range", "identity_total"]


@st.composite
def random_specs(draw):
    domain = draw(st.lists(st.integers(1, 6), min_size=1, max_size=3))
    products = draw(st.lists(
        st.fixed_dictionaries({
            "weight": st.floats(0.1, 10, allow_nan=False, allow_infinity=False),
            "factors": st.lists(st.sampled_from(BLOCK_NAMES), min_size=len(domain), max_size=len(domain)),
        }), min_size=1, max_size=3))
    return {"version": 1, "domain": domain, "products": products}


@settings(max_examples=60, deadline=None)
@given(random_specs())
def test_random_specs_round_trip(spec):
    W = from_spec(spec)
    out = to_spec(W)
    assert out["domain"] == spec["domain"]
    expected = [{"weight": p["weight"], "factors": [{"type": f} for f in p["factors"]]} for p in spec["products"]]
    assert out["products"] == expected
    V = from_spec(out)
    assert_same(W, V)
    assert_same(W, loads(dumps(W, "yaml")))
    # the dense matrix is the stacked, weighted Kronecker products
    dense = np.vstack([p["weight"] * _kron_dense(p["factors"], spec["domain"]) for p in spec["products"]])
    np.testing.assert_allclose(W.dense(), dense)


def _kron_dense(factors, domain):
    out = np.ones((1, 1))
    for f, n in zip(factors, domain, strict=True):
        out = np.kron(out, wl.block(f, n).dense())
    return out


# ------------------------------------------------------- flow depth read before parsing
@pytest.mark.parametrize("text, depth", [
    ("[[1]]", 2), ("a: [b, [c]]", 2), ("- [a]\n- {b: [c]}", 2), ('{"a": [{"b": "]]]"}]}', 3),
    ("name: a[1]", 0),                    # a bracket inside a plain scalar opens nothing
    ("a: it's [x", 0),                    # nor does a quote inside one
    ("name: 'a[[['", 0), ('x: "[[\\"[["', 0), ("['it''s [', [1]]", 2),   # quoted scalars, escapes
    ("# [[[\n[1]", 1), ("[a # [[\n, b]", 1),                             # comments
    ("[a 'b, [c]]", 2), ("k: &x [1]", 1), ("k: !!seq [1]", 1),           # plain, anchor, tag
    ("a: |\n  [[[[\n  ]\nb: [1]", 1), ("a: >-\n   [[\n  q\nb: [[1]]", 2),  # block scalars skipped
    ("[" * 100_000 + "]" * 100_000, 100_000),
])
def test_flow_depth_matches_the_parser(text, depth):
    from dpexplorer.queries.spec import _flow_depth
    assert _flow_depth(text) == depth
    try:  # where the text parses, the parser's own nesting agrees
        doc = yaml.safe_load(text) if depth < 1000 else None
    except yaml.YAMLError:
        return
    if doc is not None:
        def flow(o, d=0):
            kids = list(o.values()) + list(o.keys()) if isinstance(o, dict) else o if isinstance(o, list) else []
            return max([d] + [flow(k, d + 1) for k in kids if isinstance(k, dict | list)])
        assert flow(doc) + (isinstance(doc, dict | list)) >= depth


@pytest.mark.parametrize("text", ["a: " + "[" * 2000, "[" * 2000 + "]" * 2000, '{"a":' * 1500 + "1" + "}" * 1500])
def test_deep_flow_text_hits_the_limit_before_the_parser(text):
    """libyaml (PyYAML 6.0.4) refuses 1,000 flow levels on one line with its own error; ours comes first."""
    from dpexplorer.queries.limits import LimitExceededError
    for fmt in ("yaml", None):
        with pytest.raises(LimitExceededError, match="spec_depth"):
            loads(text, fmt)


# ------------------------------------------------------- text forms of a spec's parts
from dpexplorer.queries import spec as dspec  # noqa: E402


def test_attributes_text_round_trip():
    assert dspec.parse_attributes("age:50, income=100; 2") == ((50, 100, 2), ("age", "income", "a3"))
    assert dspec.parse_attributes(" ") == ((), ())
    text = dspec.format_attributes((50, 100), ("age", "income"))
    assert text == "age:50, income:100" and dspec.parse_attributes(text) == ((50, 100), ("age", "income"))
    assert dspec.format_attributes((64,), ()) == ""
    with pytest.raises(ValueError, match="distinct"):
        dspec.parse_attributes("a:2, a:3")
    with pytest.raises(ValueError, match="cannot read attribute 'age'"):
        dspec.parse_attributes("age, b:2")
    with pytest.raises(ValueError, match="1 attribute name"):
        dspec.format_attributes((2, 3), ("a",))


def test_orders_text_and_in_a_spec():
    assert dspec.parse_orders("0-3") == [0, 1, 2, 3] == dspec.parse_orders("0..3")
    assert dspec.parse_orders("3, 1 1") == [1, 3] and dspec.parse_orders([2, 0, 2]) == [0, 2]
    assert dspec.parse_orders(2.0) == [2] and dspec.parse_orders(np.array([1, 2])) == [1, 2]
    assert [dspec.format_orders(v) for v in ("0-3", [1, 3], 2, "x")] == ["0–3", "1, 3", "2", "x"]
    for text in ("0-3", "1, 3", "2"):
        assert dspec.parse_orders(dspec.format_orders(text)) == dspec.parse_orders(text)
    for bad, why in (("2-1", "reversed"), ("x", "cannot read"), ("", "no marginal order"),
                     ([], "no marginal order"), (True, "whole number"), ([-1], ">= 0")):
        with pytest.raises(ValueError, match=why):
            dspec.parse_orders(bad)
    with pytest.raises(ValueError, match=r"must be in \[0, 3\]"):
        dspec.parse_orders("0-4", 3)
    # a spec takes the same text: all 1- and 2-way marginals of 3 attributes
    W = from_spec({"domain": [3, 4, 2], "marginals": "1-2"})
    np.testing.assert_array_equal(W.dense(), wl.marginals((3, 4, 2), [1, 2]).dense())
    with pytest.raises(ValueError, match=r"^marginals: the marginal orders \[3\] must be in"):
        from_spec({"domain": [3, 2], "marginals": "1-3"})


def test_ranges_text_round_trip():
    assert dspec.parse_ranges("0-9 20..29;4, 5:6 7–8") == [(0, 9), (20, 29), (4, 4), (5, 6), (7, 8)]
    assert dspec.parse_ranges([[1, 2], [3, 4]]) == [(1, 2), (3, 4)] == dspec.parse_ranges("[1-2, 3-4]")
    assert dspec.parse_ranges(np.array([3, 5])) == [(3, 5)]
    iv = [(0, 9), (20, 29), (4, 4)]
    assert dspec.format_ranges(iv) == "0-9, 20-29, 4"
    assert dspec.format_ranges(iv, 2) == "0-9, 20-29, …"
    assert dspec.parse_ranges(dspec.format_ranges(iv)) == iv
    for bad, why in (("9-2", "reversed"), ("a-b", "cannot read"), ("", "no ranges"),
                     ([[1, 2, 3]], "pairs")):
        with pytest.raises(ValueError, match=why):
            dspec.parse_ranges(bad)
    # what a ranges block of a spec is built from
    W = dspec.factor({"type": "ranges", "ranges": dspec.parse_ranges("0-3, 2-9")}, 10)
    np.testing.assert_array_equal(W.dense(), wl.ranges(10, [[0, 3], [2, 9]]).dense())


def test_factor_and_its_text():
    assert [dspec.factor_text(f) for f in ("prefix", {"type": "width_range", "w": 8},
                                           {"type": "random_ranges", "m": 50},
                                           {"type": "ranges", "ranges": [[0, 1], [2, 3]]},
                                           {"type": "identity_total"}, {"type": "other"})] == \
        ["Prefix", "Width8", "Random50", "Ranges(2)", "Identity+Total", "other"]
    np.testing.assert_array_equal(dspec.factor("prefix", 4).dense(), wl.prefix(4).dense())
    with pytest.raises(ValueError, match=r"^block 'width_range' needs parameter\(s\) \['w'\]$"):
        dspec.factor({"type": "width_range"}, 8)  # no location: the message alone
    with pytest.raises(ValueError, match=r"^attribute 'age' \(8 cells\): width w=9"):
        dspec.factor({"type": "width_range", "w": 9}, 8, "attribute 'age' (8 cells)")
    with pytest.raises(ValueError, match=r"^base: unknown block type 'nope'"):
        dspec.factor({"type": "permuted", "base": {"type": "nope"}}, 8)
    assert dspec.parse_whole(" 12 ", "n") == 12 and dspec.parse_whole(3.0, "n") == 3
    with pytest.raises(ValueError, match="n must be a whole number"):
        dspec.parse_whole(2.5, "n")


def test_fingerprint_is_shared_by_equal_workloads_only():
    """Two objects built from the same blocks share it (names and attribute labels aside); any
    change of the matrix changes it; a workload with no spec has none."""
    same = [wl.all_range(64), wl.all_range(64), from_spec(to_spec(wl.all_range(64)))]
    renamed = wl.all_range(64)
    renamed.name = "my ranges"
    keys = {fingerprint(W) for W in same + [renamed]}
    assert len(keys) == 1 and len(keys.pop()) == 64
    others = [wl.all_range(65), wl.prefix(64), wl.all_range(64) * 2.0,
              wl.kron([wl.prefix(8), wl.identity(8)]), wl.kron([wl.identity(8), wl.prefix(8)]),
              wl.ranges(64, [(0, 9), (10, 19)]), wl.ranges(64, [(0, 9), (10, 20)])]
    found = [fingerprint(W) for W in others]
    assert len(set(found)) == len(found) and fingerprint(wl.all_range(64)) not in found
    assert fingerprint(Dense(np.eye(4))) is None
