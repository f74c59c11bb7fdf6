"""StructuralSchema.prune and .default, as the apiextensions decoder applies them."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kubemesh.apiserver.structural import StructuralSchema

ROOT = "spec.versions[0].schema.openAPIV3Schema"


def compiled(props: dict[str, Any]) -> StructuralSchema:
    schema, causes = StructuralSchema.compile({"type": "object", "properties": props}, path=ROOT)
    assert causes == []
    assert schema is not None
    return schema


SCHEMA = compiled({
    "spec": {"type": "object", "properties": {
        "name": {"type": "string"},
        "items": {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "string"}}}},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                 "properties": {"known": {"type": "object", "properties": {"k": {"type": "string"}}}}},
        "template": {"type": "object", "x-kubernetes-embedded-resource": True,
                     "properties": {"spec": {"type": "object", "properties": {"x": {"type": "string"}}}}},
    }},
})


def test_prune_removes_unknown_fields_and_reports_their_paths() -> None:
    obj = {"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "n", "bogus": 1},
           "spec": {"name": "a", "foo": 1, "items": [{"a": "x", "bar": 2}], "labels": {"k": "v"},
                    "free": {"anything": {"goes": 1}, "known": {"k": "v", "drop": 1}},
                    "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "junk": True},
                                 "spec": {"x": "1", "y": "2"}, "extra": 1}},
           "status": {"s": 1}}
    assert SCHEMA.prune(obj) == [
        "metadata.bogus", "spec.foo", "spec.free.known.drop", "spec.items[0].bar", "spec.template.extra",
        "spec.template.metadata.junk", "spec.template.spec.y", "status",
    ]
    assert obj == {"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "n"},
                   "spec": {"name": "a", "items": [{"a": "x"}], "labels": {"k": "v"},
                            "free": {"anything": {"goes": 1}, "known": {"k": "v"}},
                            "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                                         "spec": {"x": "1"}}}}


def test_prune_drops_nulls_that_are_neither_nullable_nor_defaulted() -> None:
    schema = compiled({"spec": {"type": "object", "properties": {
        "a": {"type": "string"}, "b": {"type": "string", "nullable": True}, "c": {"type": "string", "default": "x"}}}})
    obj: dict[str, Any] = {"spec": {"a": None, "b": None, "c": None}}
    assert schema.prune(obj) == []
    assert obj == {"spec": {"b": None, "c": None}}
    schema.default(obj)
    assert obj == {"spec": {"b": None, "c": "x"}}


def test_defaults_apply_where_the_parent_exists() -> None:
    schema = compiled({"spec": {"type": "object", "properties": {
        "replicas": {"type": "integer", "default": 1},
        "strategy": {"type": "object", "properties": {"type": {"type": "string", "default": "Rolling"}}},
        "withDefault": {"type": "object", "default": {}, "properties": {"x": {"type": "integer", "default": 7}}},
        "ports": {"type": "array", "items": {"type": "object", "properties": {
            "protocol": {"type": "string", "default": "TCP"}}}},
        "map": {"type": "object", "additionalProperties": {"type": "object", "properties": {
            "on": {"type": "boolean", "default": True}}}},
    }}})
    obj: dict[str, Any] = {"spec": {"ports": [{}, {"protocol": "UDP"}], "map": {"a": {}}}}
    schema.default(obj)
    assert obj == {"spec": {"replicas": 1, "withDefault": {"x": 7},
                            "ports": [{"protocol": "TCP"}, {"protocol": "UDP"}], "map": {"a": {"on": True}}}}
    assert "strategy" not in obj["spec"]


def test_defaults_are_copies() -> None:
    schema = compiled({"spec": {"type": "object", "properties": {
        "tags": {"type": "array", "items": {"type": "string"}, "default": ["a"]}}}})
    first: dict[str, Any] = {"spec": {}}
    second: dict[str, Any] = {"spec": {}}
    schema.default(first)
    first["spec"]["tags"].append("b")
    schema.default(second)
    assert second == {"spec": {"tags": ["a"]}}


def test_null_list_items_take_the_items_default() -> None:
    schema = compiled({"spec": {"type": "object", "properties": {
        "l": {"type": "array", "items": {"type": "string", "default": "d"}}}}})
    obj: dict[str, Any] = {"spec": {"l": [None, "x"]}}
    schema.default(obj)
    assert obj == {"spec": {"l": ["d", "x"]}}


def test_has_defaults() -> None:
    assert not SCHEMA.has_defaults
    assert compiled({"a": {"type": "string", "default": "x"}}).has_defaults


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=3),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                                 max_size=3),
                    max_leaves=10))
def test_prune_is_idempotent(junk: Any) -> None:
    obj = {"spec": {"name": "a", "junk": junk, "free": {"x": junk}, "items": [{"a": "b", "j": junk}]}}
    once = copy.deepcopy(obj)
    SCHEMA.prune(once)
    twice = copy.deepcopy(once)
    assert SCHEMA.prune(twice) == []
    assert twice == once
