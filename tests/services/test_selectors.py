"""Label and field selectors: syntax, semantics, canonical form, errors."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubemesh.services.model.kinds import DEPLOYMENTS, EVENTS, NODES, PODS
from kubemesh.services.model.selectors import (
    EVERYTHING,
    LabelSelector,
    Requirement,
    SelectorError,
    label_selector_from_dict,
    parse_field_selector,
    parse_label_selector,
)

# ---------------------------------------------------------------------------------------------
# Label selectors.


@pytest.mark.parametrize(
    ("text", "labels", "expected"),
    [
        ("", {}, True),
        ("", {"a": "b"}, True),
        ("app=web", {"app": "web"}, True),
        ("app==web", {"app": "web"}, True),
        ("app=web", {"app": "db"}, False),
        ("app=web", {}, False),
        ("app!=web", {}, True),
        ("app!=web", {"app": "db"}, True),
        ("app!=web", {"app": "web"}, False),
        ("app in (solo,x)", {"app": "x"}, True),
        ("app in (solo,x)", {"app": "y"}, False),
        ("app in (solo,x)", {}, False),
        ("app notin (solo,x)", {}, True),
        ("app notin (solo,x)", {"app": "y"}, True),
        ("app notin (solo,x)", {"app": "solo"}, False),
        ("app", {"app": ""}, True),
        ("app", {"other": "x"}, False),
        ("!app", {"other": "x"}, True),
        ("!app", {"app": "x"}, False),
        ("app=web,tier=front", {"app": "web", "tier": "front"}, True),
        ("app=web,tier=front", {"app": "web"}, False),
        ("  app = web ,  tier in ( a , b )  ", {"app": "web", "tier": "b"}, True),
        ("app=", {"app": ""}, True),
        ("app=", {"app": "x"}, False),
        ("kubernetes.io/cluster-service=true", {"kubernetes.io/cluster-service": "true"}, True),
        ("n>3", {"n": "5"}, True),
        ("n>3", {"n": "3"}, False),
        ("n<3", {"n": "2"}, True),
        ("n<3", {"n": "x"}, False),
        ("n<3", {}, False),
    ],
)
def test_label_selector_semantics(text: str, labels: dict[str, str], expected: bool) -> None:
    assert parse_label_selector(text).matches(labels) is expected


@pytest.mark.parametrize(
    "text",
    [
        "a b",
        "a=b=c",
        "a in b",
        "in in",
        "a in ()",
        "a in (b",
        "!",
        ",",
        "a,",
        ",a",
        "a=(",
        "a!",
        "!a=b",
        "Bad Key=x",
        "UPPER.example.com/x=y",
        "a=" + "v" * 64,
        "a=-bad",
        "/x=y",
        "a/b/c=d",
        "n>x",
        "a==",
    ],
)
def test_label_selector_rejects_garbage(text: str) -> None:
    if text == "a==":  # an empty value is valid for == too
        assert parse_label_selector(text).matches({"a": ""})
        return
    with pytest.raises(SelectorError, match="unable to parse requirement"):
        parse_label_selector(text)


def test_label_selector_canonical_string() -> None:
    sel = parse_label_selector("tier in (b,a), app==web,!legacy, env")
    assert str(sel) == "app=web,env,!legacy,tier in (a,b)"
    assert parse_label_selector(str(sel)) == sel
    assert not sel.empty
    assert parse_label_selector("").empty
    assert parse_label_selector("   ") == EVERYTHING
    assert sel.requirements[0] == Requirement("app", "=", ("web",))


def test_label_selector_from_dict() -> None:
    assert label_selector_from_dict(None).matches({}) is False
    assert label_selector_from_dict(None).matches_nothing
    assert not label_selector_from_dict(None).empty
    assert label_selector_from_dict({}).matches({"x": "y"})
    assert label_selector_from_dict({}).empty
    sel = label_selector_from_dict(
        {
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["a", "b"]},
                {"key": "track", "operator": "NotIn", "values": ["canary"]},
                {"key": "team", "operator": "Exists"},
                {"key": "legacy", "operator": "DoesNotExist", "values": []},
            ],
        }
    )
    assert sel.matches({"app": "web", "tier": "a", "team": "x"})
    assert not sel.matches({"app": "web", "tier": "a", "team": "x", "track": "canary"})
    assert not sel.matches({"app": "web", "tier": "a", "team": "x", "legacy": "1"})
    assert not sel.matches({"app": "web", "tier": "c", "team": "x"})
    assert str(sel) == "app=web,!legacy,team,tier in (a,b),track notin (canary)"


@pytest.mark.parametrize(
    "sel",
    [
        {"matchExpressions": [{"key": "a", "operator": "Bogus", "values": ["x"]}]},
        {"matchExpressions": [{"key": "a", "operator": "In", "values": []}]},
        {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
        {"matchLabels": {"a": 1}},
        {"matchLabels": {"bad key": "x"}},
        {"matchLabels": "a=b"},
        {"matchExpressions": {"key": "a"}},
    ],
)
def test_label_selector_from_dict_errors(sel: dict[str, object]) -> None:
    with pytest.raises(SelectorError):
        label_selector_from_dict(sel)


_name = st.sampled_from(["a", "b", "app", "web-1", "x.y", "tier_2", "K8s", "in", "notin", "0"])
_key = st.one_of(_name, st.builds(lambda p, n: f"{p}.io/{n}", st.sampled_from(["example", "k8s"]), _name))
_value = st.one_of(st.just(""), _name)


@st.composite
def _requirements(draw: st.DrawFn) -> Requirement:
    key = draw(_key)
    op = draw(st.sampled_from(["=", "!=", "in", "notin", "exists", "!"]))
    if op in ("in", "notin"):
        values = tuple(sorted(set(draw(st.lists(_name, min_size=1, max_size=3)))))
    elif op in ("=", "!="):
        values = (draw(_value),)
    else:
        values = ()
    return Requirement(key, op, values)


@given(st.lists(_requirements(), max_size=5))
def test_label_selector_canonical_roundtrip(reqs: list[Requirement]) -> None:
    sel = LabelSelector(reqs)
    assert parse_label_selector(str(sel)) == sel
    assert str(parse_label_selector(str(sel))) == str(sel)


@given(st.lists(_requirements(), max_size=5), st.dictionaries(_key, _value, max_size=5))
def test_label_selector_is_a_conjunction(reqs: list[Requirement], labels: dict[str, str]) -> None:
    whole = LabelSelector(reqs).matches(labels)
    assert whole == all(LabelSelector([r]).matches(labels) for r in reqs)


# ---------------------------------------------------------------------------------------------
# Field selectors.


def _pod(node: str = "", phase: str = "Running", name: str = "p", ns: str = "default") -> dict[str, object]:
    return {
        "metadata": {"name": name, "namespace": ns},
        "spec": {"nodeName": node, "hostNetwork": False},
        "status": {"phase": phase},
    }


def test_field_selector_kubectl_describe_node() -> None:
    sel = parse_field_selector("spec.nodeName=node1,status.phase!=Succeeded,status.phase!=Failed", PODS)
    assert sel.exact("spec.nodeName") == "node1"
    assert sel.exact("status.phase") is None
    assert sel.matches(_pod("node1"))
    assert not sel.matches(_pod("node1", phase="Succeeded"))
    assert not sel.matches(_pod("node2"))
    assert sel.fields == ("spec.nodeName", "status.phase", "status.phase")


def test_field_selector_empty_values_and_double_equals() -> None:
    sel = parse_field_selector(
        "involvedObject.name=node1,involvedObject.namespace=,involvedObject.kind==Node", EVENTS
    )
    event = {"involvedObject": {"name": "node1", "kind": "Node"}, "metadata": {"name": "e"}}
    assert sel.matches(event)
    assert not sel.matches({**event, "involvedObject": {"name": "node1", "kind": "Node", "namespace": "x"}})
    assert sel.exact("involvedObject.namespace") == ""
    unscheduled = parse_field_selector("spec.nodeName=", PODS)
    assert unscheduled.matches(_pod(""))
    assert not unscheduled.matches(_pod("n"))


def test_field_selector_common_fields_and_booleans() -> None:
    assert parse_field_selector("metadata.name=web", DEPLOYMENTS).matches({"metadata": {"name": "web"}})
    assert parse_field_selector("metadata.namespace!=kube-system", PODS).matches(_pod())
    assert parse_field_selector("spec.hostNetwork=false", PODS).matches(_pod())
    node = {"metadata": {"name": "n"}, "spec": {"unschedulable": True}}
    assert parse_field_selector("spec.unschedulable=true", NODES).matches(node)
    assert parse_field_selector("spec.unschedulable!=true", NODES).matches({"metadata": {"name": "n"}})
    assert parse_field_selector("", PODS).empty
    assert parse_field_selector("", PODS).matches(_pod())


def test_field_selector_escapes() -> None:
    sel = parse_field_selector(r"metadata.name=a\,b\=c", PODS)
    assert sel.exact("metadata.name") == "a,b=c"
    assert sel.matches(_pod(name="a,b=c"))
    assert parse_field_selector(str(sel), PODS).exact("metadata.name") == "a,b=c"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("foo=bar", "field label not supported: foo"),
        ("spec.unschedulable=true", "field label not supported: spec.unschedulable"),
        ("metadata.name", "invalid selector"),
        ("=x", "invalid selector"),
        ("metadata.name=a,,", "invalid selector"),
        ("metadata.name=a=b", "invalid field selector"),
    ],
)
def test_field_selector_errors(text: str, message: str) -> None:
    with pytest.raises(SelectorError, match=message):
        parse_field_selector(text, PODS)
