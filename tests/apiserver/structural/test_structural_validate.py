"""StructuralSchema.validate: kube-openapi's checks with the causes apiextensions returns."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubemesh.apiserver.structural import Cause, StructuralSchema
from kubemesh.apiserver.structural.causes import go_float, go_json, go_quote

ROOT = "spec.versions[0].schema.openAPIV3Schema"


def compiled(spec_props: dict[str, Any], **extra: Any) -> StructuralSchema:
    spec = {"type": "object", "properties": spec_props, **extra}
    schema, causes = StructuralSchema.compile({"type": "object", "properties": {"spec": spec}}, path=ROOT)
    assert causes == []
    assert schema is not None
    return schema


def one(spec_props: dict[str, Any], spec: dict[str, Any], **extra: Any) -> Cause:
    causes = compiled(spec_props, **extra).validate({"apiVersion": "x/v1", "kind": "X", "spec": spec})
    assert len(causes) == 1, causes
    return causes[0]


def check(spec_props: dict[str, Any], spec: dict[str, Any], reason: str, field: str, message: str,
          **extra: Any) -> None:
    assert one(spec_props, spec, **extra) == {"reason": reason, "field": field, "message": message}


def valid(spec_props: dict[str, Any], spec: dict[str, Any], **extra: Any) -> None:
    assert compiled(spec_props, **extra).validate({"spec": spec}) == []


def test_type() -> None:
    check({"replicas": {"type": "integer"}}, {"replicas": "string"}, "FieldValueTypeInvalid", "spec.replicas",
          'Invalid value: "string": spec.replicas in body must be of type integer: "string"')
    check({"on": {"type": "boolean"}}, {"on": 1}, "FieldValueTypeInvalid", "spec.on",
          'Invalid value: "integer": spec.on in body must be of type boolean: "integer"')
    check({"o": {"type": "object"}}, {"o": []}, "FieldValueTypeInvalid", "spec.o",
          'Invalid value: "array": spec.o in body must be of type object: "array"')


def test_integral_floats_are_integers_and_integers_are_numbers() -> None:
    valid({"a": {"type": "integer"}, "b": {"type": "number"}}, {"a": 2.0, "b": 3})
    cause = compiled({"a": {"type": "integer"}}).validate({"spec": {"a": 2.5}})
    assert cause[0]["message"] == 'Invalid value: "number": spec.a in body must be of type integer: "number"'


def test_null_needs_nullable() -> None:
    check({"a": {"type": "string"}}, {"a": None}, "FieldValueTypeInvalid", "spec.a",
          'Invalid value: "null": spec.a in body must be of type string: "null"')
    valid({"a": {"type": "string", "nullable": True}}, {"a": None})


def test_required() -> None:
    check({"a": {"type": "string"}}, {}, "FieldValueRequired", "spec.a", "Required value", required=["a"])


def test_required_at_the_root() -> None:
    schema, _ = StructuralSchema.compile({"type": "object", "required": ["spec"], "properties": {
        "spec": {"type": "object"}}}, path=ROOT)
    assert schema is not None
    assert schema.validate({}) == [{"reason": "FieldValueRequired", "field": "spec", "message": "Required value"}]


def test_enum() -> None:
    check({"mode": {"type": "string", "enum": ["a", "b"]}}, {"mode": "x"}, "FieldValueNotSupported", "spec.mode",
          'Unsupported value: "x": supported values: "a", "b"')
    check({"n": {"type": "integer", "enum": [1, 2]}}, {"n": 3}, "FieldValueNotSupported", "spec.n",
          'Unsupported value: 3: supported values: "1", "2"')
    valid({"n": {"type": "number", "enum": [1.5, 2]}}, {"n": 2})


def test_null_never_matches_an_enum() -> None:
    causes = compiled({"a": {"type": "string", "nullable": True, "enum": ["a", None]}}).validate({"spec": {"a": None}})
    assert causes == [{"reason": "FieldValueNotSupported", "field": "spec.a",
                       "message": 'Unsupported value: null: supported values: "a", "null"'}]


def test_minimum_and_maximum() -> None:
    props = {"r": {"type": "integer", "minimum": 1, "maximum": 5}}
    check(props, {"r": 0}, "FieldValueInvalid", "spec.r",
          "Invalid value: 0: spec.r in body should be greater than or equal to 1")
    check(props, {"r": 6}, "FieldValueInvalid", "spec.r",
          "Invalid value: 6: spec.r in body should be less than or equal to 5")
    exclusive = {"r": {"type": "number", "minimum": 1, "exclusiveMinimum": True, "maximum": 2.5,
                       "exclusiveMaximum": True}}
    check(exclusive, {"r": 1}, "FieldValueInvalid", "spec.r", "Invalid value: 1: spec.r in body should be greater "
                                                               "than 1")
    check(exclusive, {"r": 2.5}, "FieldValueInvalid", "spec.r", "Invalid value: 2.5: spec.r in body should be less "
                                                                 "than 2.5")


def test_lengths() -> None:
    props = {"s": {"type": "string", "minLength": 2, "maxLength": 5}}
    check(props, {"s": "abcdef"}, "FieldValueTooLong", "spec.s", "Too long: may not be more than 5 bytes")
    check(props, {"s": "a"}, "FieldValueInvalid", "spec.s",
          'Invalid value: "a": spec.s in body should be at least 2 chars long')
    valid(props, {"s": "ééé"})  # counted in characters


def test_pattern() -> None:
    check({"s": {"type": "string", "pattern": "^[a-z]+$"}}, {"s": "A1"}, "FieldValueInvalid", "spec.s",
          "Invalid value: \"A1\": spec.s in body should match '^[a-z]+$'")
    valid({"s": {"type": "string", "pattern": "^[a-z]+$"}}, {"s": "abc"})


def test_pattern_dollar_is_end_of_text() -> None:
    check({"s": {"type": "string", "pattern": "^a$"}}, {"s": "a\n"}, "FieldValueInvalid", "spec.s",
          "Invalid value: \"a\\n\": spec.s in body should match '^a$'")


def test_pattern_with_unicode_classes_goes_through_re2() -> None:
    valid({"s": {"type": "string", "pattern": r"^\p{L}+$"}}, {"s": "héllo"})
    assert one({"s": {"type": "string", "pattern": r"^\p{L}+$"}}, {"s": "h3"})["reason"] == "FieldValueInvalid"


def test_items_counts() -> None:
    props = {"l": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2}}
    check(props, {"l": ["a", "b", "c"]}, "FieldValueTooMany", "spec.l", "Too many: 3: must have at most 2 items")
    check(props, {"l": []}, "FieldValueInvalid", "spec.l", "Invalid value: 0: spec.l in body should have at least 1 "
                                                           "items")


def test_item_paths() -> None:
    props = {"l": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}},
                                              "required": ["name"]}}}
    causes = compiled(props).validate({"spec": {"l": [{"name": "a"}, {}, {"name": 1}]}})
    assert [c["field"] for c in causes] == ["spec.l[1].name", "spec.l[2].name"]
    assert causes[1]["message"] == 'Invalid value: "integer": spec.l[2].name in body must be of type string: ' \
                                   '"integer"'


def test_properties_counts() -> None:
    props = {"m": {"type": "object", "additionalProperties": {"type": "string"}, "minProperties": 1,
                   "maxProperties": 1}}
    check(props, {"m": {"a": "1", "b": "2"}}, "FieldValueTooMany", "spec.m", "Too many: 2: must have at most 1 item")
    check(props, {"m": {}}, "FieldValueInvalid", "spec.m", "Invalid value: 0: spec.m in body should have at least 1 "
                                                           "properties")


def test_additional_properties_paths_are_dotted() -> None:
    check({"labels": {"type": "object", "additionalProperties": {"type": "string"}}}, {"labels": {"app": 1}},
          "FieldValueTypeInvalid", "spec.labels.app",
          'Invalid value: "integer": spec.labels.app in body must be of type string: "integer"')


def test_additional_properties_false() -> None:
    check({"m": {"type": "object", "additionalProperties": False}}, {"m": {"x": 1}}, "FieldValueInvalid", "spec.m",
          'Invalid value: "x": spec.m.x in body is a forbidden property')


def test_multiple_of() -> None:
    check({"n": {"type": "integer", "multipleOf": 3}}, {"n": 4}, "FieldValueInvalid", "spec.n",
          "Invalid value: 4: spec.n in body should be a multiple of 3")
    check({"n": {"type": "number", "multipleOf": 0.5}}, {"n": 0.7}, "FieldValueInvalid", "spec.n",
          "Invalid value: 0.7: spec.n in body should be a multiple of 0.5")
    valid({"n": {"type": "number", "multipleOf": 0.5}}, {"n": 1.5})


def test_int32_range() -> None:
    check({"n": {"type": "integer", "format": "int32"}}, {"n": 1 << 40}, "FieldValueInvalid", "<nil>",
          'Invalid value: "": Checked value must be of type integer with format int32 in spec.n')


@pytest.mark.parametrize(("fmt", "good", "bad"), [
    ("date-time", "2024-01-02T03:04:05Z", "yesterday"), ("date", "2024-02-29", "2023-02-29"),
    ("uuid", "123e4567-e89b-12d3-a456-426614174000", "nope"), ("ipv4", "10.0.0.1", "10.0.0.256"),
    ("ipv6", "::1", "1:2"), ("cidr", "10.0.0.0/8", "10.0.0.0"), ("byte", "aGVsbG8=", "not base64!"),
    ("duration", "1h30m", "soon"), ("hostname", "example.com", "-bad-"), ("email", "a@b.io", "nobody"),
    ("mac", "01:23:45:67:89:ab", "01:23"), ("k8s-short-name", "abc", "ABC"),
])
def test_formats(fmt: str, good: str, bad: str) -> None:
    props = {"v": {"type": "string", "format": fmt}}
    valid(props, {"v": good})
    check(props, {"v": bad}, "FieldValueTypeInvalid", "spec.v",
          f"Invalid value: {go_quote(bad)}: spec.v in body must be of type {fmt}: {go_quote(bad)}")


def test_unknown_formats_are_ignored() -> None:
    valid({"v": {"type": "string", "format": "my-format"}}, {"v": "anything"})


def test_int_or_string() -> None:
    props = {"port": {"x-kubernetes-int-or-string": True}}
    valid(props, {"port": 80})
    valid(props, {"port": "http"})
    check(props, {"port": True}, "FieldValueTypeInvalid", "spec.port",
          'Invalid value: "boolean": spec.port in body must be of type integer,string: "boolean"')


def test_any_of() -> None:
    props = {"a": {"type": "string"}, "b": {"type": "string"}}
    causes = compiled(props, anyOf=[{"required": ["a"]}, {"required": ["b"]}]).validate({"spec": {}})
    assert causes == [
        {"reason": "FieldValueInvalid", "field": "<nil>",
         "message": 'Invalid value: "": "spec" must validate at least one schema (anyOf)'},
        {"reason": "FieldValueRequired", "field": "spec.a", "message": "Required value"},
    ]
    valid(props, {"b": "x"}, anyOf=[{"required": ["a"]}, {"required": ["b"]}])


def test_one_of() -> None:
    props = {"a": {"type": "string"}, "b": {"type": "string"}}
    causes = compiled(props, oneOf=[{"required": ["a"]}, {"required": ["b"]}]).validate({"spec": {"a": "", "b": ""}})
    assert causes == [{"reason": "FieldValueInvalid", "field": "<nil>", "message":
                       'Invalid value: "": "spec" must validate one and only one schema (oneOf). Found 2 valid '
                       "alternatives"}]


def test_all_of_and_not() -> None:
    props = {"a": {"type": "string"}}
    causes = compiled(props, allOf=[{"required": ["a"]}]).validate({"spec": {}})
    assert [c["message"] for c in causes] == [
        "Required value", 'Invalid value: "": "spec" must validate all the schemas (allOf). None validated']
    causes = compiled(props, **{"not": {"required": ["a"]}}).validate({"spec": {"a": "x"}})
    assert [c["message"] for c in causes] == ['Invalid value: "": "spec" must not validate the schema (not)']


def test_set_and_map_list_duplicates() -> None:
    props = {
        "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
        "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                  "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"},
                                                                                   "port": {"type": "integer"}}}},
    }
    causes = compiled(props).validate({"spec": {"tags": ["a", "b", "a", "a"],
                                                "ports": [{"name": "x", "port": 1}, {"name": "x", "port": 2}]}})
    assert causes == [
        {"reason": "FieldValueDuplicate", "field": "spec.tags[2]", "message": 'Duplicate value: "a"'},
        {"reason": "FieldValueDuplicate", "field": "spec.ports[1]", "message": 'Duplicate value: {"name":"x"}'},
    ]


def test_list_duplicates_ratchet_on_update() -> None:
    schema = compiled({"tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"}})
    bad = {"spec": {"tags": ["a", "a"]}}
    assert schema.validate(bad, old=bad) == []
    assert len(schema.validate(bad, old={"spec": {"tags": []}})) == 1


def test_embedded_resource_needs_type_meta() -> None:
    props = {"template": {"type": "object", "x-kubernetes-embedded-resource": True,
                          "x-kubernetes-preserve-unknown-fields": True}}
    causes = compiled(props).validate({"spec": {"template": {"kind": "bad_kind", "metadata": {"name": "a/b"}}}})
    assert causes == [
        {"reason": "FieldValueRequired", "field": "spec.template.apiVersion", "message": "Required value"},
        {"reason": "FieldValueInvalid", "field": "spec.template.kind", "message":
         'Invalid value: "bad_kind": may have mixed case, but should otherwise match: a DNS-1035 label must consist '
         "of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an "
         "alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is "
         "'[a-z]([-a-z0-9]*[a-z0-9])?')"},
        {"reason": "FieldValueInvalid", "field": "spec.template.metadata.name",
         "message": "Invalid value: \"a/b\": may not contain '/'"},
    ]


def test_metadata_name_restrictions_apply() -> None:
    metadata = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 3}}}
    schema, _ = StructuralSchema.compile({"type": "object", "properties": {"metadata": metadata}}, path=ROOT)
    assert schema is not None
    assert schema.validate({"metadata": {"name": "toolong"}}) == [
        {"reason": "FieldValueTooLong", "field": "metadata.name", "message": "Too long: may not be more than 3 bytes"}]


def test_status_validation() -> None:
    schema, _ = StructuralSchema.compile({"type": "object", "properties": {
        "spec": {"type": "object", "properties": {"a": {"type": "string"}}},
        "status": {"type": "object", "properties": {"replicas": {"type": "integer"}}}}}, path=ROOT)
    assert schema is not None
    obj = {"spec": {"a": 1}, "status": {"replicas": "x"}}
    assert schema.validate_status(obj, old={"spec": {"a": 1}, "status": {"replicas": 1}}) == [
        {"reason": "FieldValueTypeInvalid", "field": "status.replicas",
         "message": 'Invalid value: "string": replicas in body must be of type integer: "string"'}]


# ---------------------------------------------------------------------------------------------
# Ratcheting on update: errors of values that did not change are not reported.


def test_unchanged_invalid_values_are_ratcheted() -> None:
    schema = compiled({"a": {"type": "string", "maxLength": 2}, "b": {"type": "integer", "minimum": 5}})
    old = {"spec": {"a": "long", "b": 1}}
    assert schema.validate({"spec": {"a": "long", "b": 1}}, old=old) == []
    assert [c["field"] for c in schema.validate({"spec": {"a": "longer", "b": 1}}, old=old)] == ["spec.a"]
    assert len(schema.validate({"spec": {"a": "long", "b": 1}})) == 2


def test_ratcheting_correlates_map_list_items_but_not_atomic_lists() -> None:
    item = {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"},
                                                                  "v": {"type": "string", "maxLength": 1}}}
    schema = compiled({
        "m": {"type": "array", "items": item, "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
        "l": {"type": "array", "items": item},
    })
    old = {"spec": {"m": [{"name": "a", "v": "xx"}], "l": [{"name": "a", "v": "xx"}]}}
    new = {"spec": {"m": [{"name": "b", "v": "y"}, {"name": "a", "v": "xx"}],
                    "l": [{"name": "b", "v": "y"}, {"name": "a", "v": "xx"}]}}
    assert [c["field"] for c in schema.validate(new, old=old)] == ["spec.l[1].v"]


def test_status_ratchets_against_the_old_status() -> None:
    schema, _ = StructuralSchema.compile({"type": "object", "properties": {"status": {"type": "object", "properties": {
        "n": {"type": "integer", "minimum": 1}, "m": {"type": "integer", "minimum": 1}}}}}, path=ROOT)
    assert schema is not None
    old = {"status": {"n": 0, "m": 1}}
    assert [c["field"] for c in schema.validate_status({"status": {"n": 0, "m": 0}}, old=old)] == ["status.m"]


# ---------------------------------------------------------------------------------------------
# Go-compatible printing.


def test_go_float_formatting() -> None:
    assert [go_float(v) for v in (1.0, 1.5, 1e6, 123456.0, 1e21, 1e-5, 0.0001, -2.25, 1e20)] == [
        "1", "1.5", "1e+06", "123456", "1e+21", "1e-05", "0.0001", "-2.25", "1e+20"]


def test_go_json() -> None:
    assert go_json({"b": [1, 2.0, None, True], "a": "<&>"}) == '{"a":"\\u003c\\u0026\\u003e","b":[1,2,null,true]}'


@given(st.text(max_size=20))
def test_go_quote_round_trips_printable_text(text: str) -> None:
    quoted = go_quote(text)
    assert quoted.startswith('"')
    assert quoted.endswith('"')
    if text.isprintable() and '"' not in text and "\\" not in text:
        assert quoted == f'"{text}"'


@given(st.integers(min_value=-(10**6), max_value=10**6))
def test_integer_bounds_agree_with_python(value: int) -> None:
    schema = compiled({"n": {"type": "integer", "minimum": 0, "maximum": 1000}})
    assert (schema.validate({"spec": {"n": value}}) == []) == (0 <= value <= 1000)
