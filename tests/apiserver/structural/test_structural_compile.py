"""StructuralSchema.compile: the CRD-time checks, worded as apiextensions words them."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubemesh.apiserver.structural import Cause, StructuralSchema

ROOT = "spec.versions[0].schema.openAPIV3Schema"


def problems(schema: dict[str, Any], **kwargs: Any) -> list[Cause]:
    compiled, causes = StructuralSchema.compile(schema, path=ROOT, **kwargs)
    assert (compiled is None) == bool(causes)
    return causes


def lines(schema: dict[str, Any], **kwargs: Any) -> list[str]:
    return [f"{c['field']}: {c['message']}" for c in problems(schema, **kwargs)]


def obj(**props: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props}


def test_valid_schema_compiles_without_causes() -> None:
    schema = obj(spec=obj(replicas={"type": "integer", "minimum": 0}, name={"type": "string"}),
                 status=obj(ready={"type": "boolean"}))
    compiled, causes = StructuralSchema.compile(schema, path=ROOT)
    assert causes == []
    assert compiled is not None


def test_every_cause_field_starts_with_the_path() -> None:
    causes = problems(obj(spec={"properties": {"a": {}}}))
    assert causes
    assert all(c["field"].startswith(ROOT) for c in causes)


def test_missing_type_of_a_field() -> None:
    assert lines(obj(spec={"properties": {}})) == [
        f"{ROOT}.properties[spec].type: Required value: must not be empty for specified object fields",
    ]
    cause = problems(obj(spec={"properties": {}}))[0]
    assert cause["reason"] == "FieldValueRequired"


def test_missing_type_of_items_and_root() -> None:
    assert lines({"properties": {"a": {"type": "array", "items": {}}}}) == [
        f"{ROOT}.properties[a].items.type: Required value: must not be empty for specified array items",
        f"{ROOT}.type: Required value: must not be empty at the root",
    ]


def test_type_may_be_empty_under_int_or_string_and_preserve_unknown_fields() -> None:
    assert problems(obj(a={"x-kubernetes-int-or-string": True}, b={"x-kubernetes-preserve-unknown-fields": True})) == []


def test_array_needs_items() -> None:
    assert lines(obj(a={"type": "array"})) == [f"{ROOT}.properties[a].items: Required value: must be specified"]


def test_unknown_type_is_not_supported() -> None:
    assert lines(obj(a={"type": "int"})) == [
        f'{ROOT}.properties[a].type: Unsupported value: "int": supported values: "array", "boolean", "integer", '
        '"number", "object", "string"',
    ]


def test_null_type_is_forbidden() -> None:
    assert f"{ROOT}.properties[a].type: Forbidden: type cannot be set to null, use nullable as an alternative" in \
        lines(obj(a={"type": "null"}))


def test_additional_properties_with_properties() -> None:
    schema = obj(a={"type": "object", "properties": {"x": {"type": "string"}},
                    "additionalProperties": {"type": "string"}})
    assert lines(schema) == [
        f"{ROOT}.properties[a].additionalProperties: Forbidden: additionalProperties and properties are mutual "
        "exclusive",
    ]


def test_additional_properties_at_the_root() -> None:
    assert lines({"type": "object", "additionalProperties": {"type": "string"}}) == [
        f"{ROOT}.additionalProperties: Forbidden: must not be used at the root",
    ]


def test_metadata_at_the_root_may_only_restrict_name() -> None:
    ok = obj(metadata={"type": "object", "properties": {"name": {"type": "string", "maxLength": 10}}})
    assert problems(ok) == []
    bad = obj(metadata={"type": "object", "properties": {"labels": {"type": "object"}}})
    assert lines(bad) == [
        f"{ROOT}.properties[metadata]: Forbidden: must not specify anything other than name and generateName, "
        "but metadata is implicitly specified",
    ]


def test_default_in_top_level_metadata_is_forbidden() -> None:
    schema = obj(metadata={"type": "object", "default": {"name": "x"}})
    assert f"{ROOT}.properties[metadata].default: Forbidden: must not be set in top-level metadata" in lines(schema)


def test_value_validations_may_not_specify_structure() -> None:
    schema = obj(a={"type": "string", "anyOf": [{"type": "string", "description": "d", "nullable": True}]})
    assert lines(schema) == [
        f"{ROOT}.properties[a].anyOf[0].description: Forbidden: must be empty to be structural",
        f"{ROOT}.properties[a].anyOf[0].nullable: Forbidden: must be false to be structural",
        f"{ROOT}.properties[a].anyOf[0].type: Forbidden: must be empty to be structural",
    ]


def test_value_validations_only_constrain_specified_fields() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}},
              "anyOf": [{"properties": {"b": {"minLength": 1}}}, {"required": ["a"]}]}
    assert lines(schema) == [
        f"{ROOT}.properties[b]: Required value: because it is defined in {ROOT}.anyOf[0].properties[b]",
    ]


def test_metadata_in_a_nested_context() -> None:
    schema = {"type": "object", "properties": {"metadata": {"type": "object"}},
              "allOf": [{"properties": {"metadata": {"required": ["name"]}}}]}
    assert f"{ROOT}.allOf[0].properties[metadata]: Forbidden: must not be specified in a nested context" in \
        lines(schema)


def test_int_or_string_patterns_are_structural() -> None:
    any_of = obj(port={"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]})
    all_of = obj(port={"x-kubernetes-int-or-string": True,
                       "allOf": [{"anyOf": [{"type": "integer"}, {"type": "string"}]}, {"pattern": "^[0-9]+$"}]})
    assert problems(any_of) == []
    assert problems(all_of) == []


def test_int_or_string_excludes_preserve_unknown_fields() -> None:
    schema = obj(a={"x-kubernetes-int-or-string": True, "x-kubernetes-preserve-unknown-fields": True})
    assert lines(schema) == [
        f"{ROOT}.properties[a].x-kubernetes-preserve-unknown-fields: Invalid value: true: must be false if "
        "x-kubernetes-int-or-string is true",
    ]


def test_embedded_resource_must_be_an_object() -> None:
    schema = obj(a={"type": "string", "x-kubernetes-embedded-resource": True,
                    "x-kubernetes-preserve-unknown-fields": True})
    assert lines(schema) == [
        f'{ROOT}.properties[a].type: Invalid value: "string": must be object if x-kubernetes-embedded-resource is true',
    ]
    no_props = obj(a={"type": "object", "x-kubernetes-embedded-resource": True})
    assert lines(no_props) == [
        f"{ROOT}.properties[a].properties: Required value: must not be empty if x-kubernetes-embedded-resource is "
        "true without x-kubernetes-preserve-unknown-fields",
    ]


def test_list_type_values() -> None:
    schema = obj(a={"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "bag"})
    assert lines(schema) == [
        f'{ROOT}.properties[a].x-kubernetes-list-type: Unsupported value: "bag": supported values: "atomic", "set", '
        '"map"',
    ]


def test_list_type_on_a_non_array() -> None:
    assert lines(obj(a={"type": "string", "x-kubernetes-list-type": "set"})) == [
        f'{ROOT}.properties[a].type: Invalid value: "string": must be array if x-kubernetes-list-type is specified',
    ]


def test_map_list_needs_keys_that_are_required_or_defaulted_scalars() -> None:
    item = {"type": "object", "properties": {"name": {"type": "string"}, "sub": {"type": "object"}}}
    schema = obj(a={"type": "array", "items": item, "x-kubernetes-list-type": "map"})
    assert lines(schema) == [
        f"{ROOT}.properties[a].x-kubernetes-list-map-keys: Required value: must not be empty if "
        "x-kubernetes-list-type is map",
    ]
    schema["properties"]["a"]["x-kubernetes-list-map-keys"] = ["name", "sub", "nope"]
    assert lines(schema) == [
        f'{ROOT}.properties[a].items.properties[sub].type: Invalid value: "object": must be a scalar type if parent '
        "array's x-kubernetes-list-type is map",
        f'{ROOT}.properties[a].x-kubernetes-list-map-keys: Invalid value: ["name","sub","nope"]: entries must all be '
        "names of item properties",
        f"{ROOT}.properties[a].items.properties[name].default: Required value: this property is in "
        "x-kubernetes-list-map-keys, so it must have a default or be a required property",
        f"{ROOT}.properties[a].items.properties[sub].default: Required value: this property is in "
        "x-kubernetes-list-map-keys, so it must have a default or be a required property",
    ]
    item["required"] = ["name"]
    schema["properties"]["a"]["x-kubernetes-list-map-keys"] = ["name"]
    assert problems(schema) == []


def test_set_of_objects_must_be_atomic() -> None:
    schema = obj(a={"type": "array", "x-kubernetes-list-type": "set", "items": obj(x={"type": "string"})})
    assert lines(schema) == [
        f"{ROOT}.properties[a].items.x-kubernetes-map-type: Invalid value: null: must be atomic as item of a list "
        "with x-kubernetes-list-type=set",
    ]


def test_unique_items_is_forbidden() -> None:
    assert lines(obj(a={"type": "array", "items": {"type": "string"}, "uniqueItems": True})) == [
        f"{ROOT}.properties[a].uniqueItems: Forbidden: uniqueItems cannot be set to true since the runtime "
        "complexity becomes quadratic",
    ]


def test_invalid_pattern() -> None:
    causes = lines(obj(a={"type": "string", "pattern": "(?=x)"}))
    assert len(causes) == 1
    assert causes[0].startswith(f'{ROOT}.properties[a].pattern: Invalid value: "(?=x)": must be a valid regular '
                                "expression, but isn't: error parsing regexp: ")


def test_unsupported_keywords() -> None:
    assert lines(obj(a={"type": "string", "$ref": "#/x"})) == [f"{ROOT}.properties[a].$ref: Forbidden: $ref is not "
                                                               "supported"]


def test_nullable_root() -> None:
    assert f"{ROOT}.nullable: Forbidden: nullable cannot be true at the root" in \
        lines({"type": "object", "nullable": True})


def test_status_subresource_restricts_the_root() -> None:
    schema = {"type": "object", "properties": {"status": {"type": "object"}}, "anyOf": [{"required": ["status"]}]}
    causes = lines(schema, status_subresource=True)
    assert causes[0].startswith(f"{ROOT}: Invalid value: ")
    assert causes[0].endswith("fields are allowed at the root of the schema if the status subresource is enabled")


def test_wrongly_typed_keyword_is_reported() -> None:
    assert lines(obj(a={"type": "string", "maxLength": "5"})) == [
        f'{ROOT}.properties[a].maxLength: Invalid value: "5": must be an integer',
    ]


# ---------------------------------------------------------------------------------------------
# Defaults.


def test_default_must_validate() -> None:
    schema = obj(spec=obj(replicas={"type": "integer", "minimum": 1, "default": 0}))
    assert lines(schema) == [
        f"{ROOT}.properties[spec].properties[replicas].default: Invalid value: 0:  in body should be greater than "
        "or equal to 1",
    ]


def test_default_must_not_have_unknown_fields() -> None:
    schema = obj(spec={"type": "object", "properties": {"a": {"type": "string"}}, "default": {"a": "x", "b": 1}})
    assert lines(schema) == [
        f'{ROOT}.properties[spec].default: Invalid value: {{"a":"x","b":1}}: must not have unknown fields',
    ]


def test_default_must_satisfy_the_rules_of_its_node() -> None:
    schema = obj(spec={"type": "object", "properties": {"a": {"type": "integer"}}, "default": {"a": 5},
                       "x-kubernetes-validations": [{"rule": "self.a < 3", "message": "a too big"}]})
    assert lines(schema) == [f"{ROOT}.properties[spec].default: Invalid value: a too big"]


# ---------------------------------------------------------------------------------------------
# Rules at CRD time.


def test_rule_that_does_not_compile() -> None:
    causes = problems(obj(spec={"type": "object", "properties": {"a": {"type": "integer"}},
                                "x-kubernetes-validations": [{"rule": "self.a >"}]}))
    assert len(causes) == 1
    cause = causes[0]
    assert cause["field"] == f"{ROOT}.properties[spec].x-kubernetes-validations[0].rule"
    assert cause["reason"] == "FieldValueInvalid"
    assert cause["message"].startswith('Invalid value: {"rule":"self.a \\u003e"}: compilation failed: ERROR: '
                                       "<input>:1:")


def test_rule_with_a_type_error_is_refused_at_compile_time() -> None:
    causes = lines(obj(a={"type": "string", "x-kubernetes-validations": [{"rule": "self + 1 == 2"}]}))
    assert len(causes) == 1
    assert "compilation failed: ERROR: <input>:1:6: found no matching overload for '_+_'" in causes[0]


def test_undefined_field_is_a_compile_error() -> None:
    schema = obj(spec={"type": "object", "properties": {"replicas": {"type": "integer"},
                                                        "items": {"type": "array", "maxItems": 5, "items": obj(
                                                            name={"type": "string", "maxLength": 5})}},
                       "x-kubernetes-validations": [{"rule": "self.replica > 0 && self.items.all(i, i.nam != '')"}]})
    [cause] = problems(schema)
    assert cause["message"].endswith(
        "compilation failed: ERROR: <input>:1:5: undefined field 'replica'\n"
        " | self.replica > 0 && self.items.all(i, i.nam != '')\n"
        " | ....^\n"
        "ERROR: <input>:1:40: undefined field 'nam'\n"
        " | self.replica > 0 && self.items.all(i, i.nam != '')\n"
        " | .......................................^")


def test_maps_and_open_objects_accept_any_field() -> None:
    schema = obj(spec={"type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {
        "labels": {"type": "object", "maxProperties": 10, "additionalProperties": {"type": "string",
                                                                                   "maxLength": 10}}},
        "x-kubernetes-validations": [{"rule": "self.anything == 1 || self.labels.app == 'x'"}]})
    assert problems(schema) == []


def test_rule_too_expensive_for_unbounded_lists() -> None:
    schema = obj(spec={"type": "object", "properties": {"l": {"type": "array", "items": {"type": "string"}}},
                       "x-kubernetes-validations": [{"rule": "self.l.all(a, self.l.all(b, a != b))"}]})
    assert lines(schema) == [
        f"{ROOT}.properties[spec].x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget "
        "by factor of more than 100x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength "
        "where arrays, maps, and strings are declared)"]
    schema["properties"]["spec"]["properties"]["l"]["maxItems"] = 100
    assert problems(schema) == []


def test_rule_cost_counts_how_often_it_runs() -> None:
    item = {"type": "object", "properties": {"l": {"type": "array", "maxItems": 1000, "items": {"type": "integer"}}},
            "x-kubernetes-validations": [{"rule": "self.l.all(x, x > 0)"}]}
    bounded = obj(items={"type": "array", "maxItems": 10, "items": item})
    assert problems(bounded) == []
    unbounded = obj(items={"type": "array", "items": item})
    assert "estimated rule cost exceeds budget" in lines(unbounded)[0]


def test_rule_must_be_boolean() -> None:
    assert lines(obj(a={"type": "string", "x-kubernetes-validations": [{"rule": "self + 'x'"}]})) == [
        f'{ROOT}.properties[a].x-kubernetes-validations[0].rule: Invalid value: {{"rule":"self + \'x\'"}}: cel '
        "expression must evaluate to a bool",
    ]


def test_rule_shape_checks() -> None:
    schema = obj(a={"type": "string", "x-kubernetes-validations": [
        {"rule": " "}, {"rule": "true", "message": " "}, {"rule": "true", "reason": "Nope"},
        {"rule": "true", "fieldPath": ".nope"},
    ]})
    assert lines(schema) == [
        f"{ROOT}.properties[a].x-kubernetes-validations[0].rule: Required value: rule is not specified",
        f'{ROOT}.properties[a].x-kubernetes-validations[1].message: Invalid value: " ": must be non-empty if '
        "specified",
        f'{ROOT}.properties[a].x-kubernetes-validations[2].reason: Unsupported value: "Nope": supported values: '
        '"FieldValueDuplicate", "FieldValueForbidden", "FieldValueInvalid", "FieldValueRequired"',
        f'{ROOT}.properties[a].x-kubernetes-validations[3].fieldPath: Invalid value: ".nope": must be a valid path',
    ]


def test_old_self_under_an_atomic_list_is_refused() -> None:
    schema = obj(a={"type": "array", "items": obj(x={"type": "string", "x-kubernetes-validations": [
        {"rule": "self == oldSelf"}]})})
    assert lines(schema) == [
        f'{ROOT}.properties[a].items.properties[x].x-kubernetes-validations[0].rule: Invalid value: "self == '
        f'oldSelf": oldSelf cannot be used on the uncorrelatable portion of the schema within {ROOT}.properties[a]',
    ]


def test_optional_old_self_needs_old_self() -> None:
    schema = obj(a={"type": "string", "x-kubernetes-validations": [{"rule": "self != ''", "optionalOldSelf": True}]})
    assert lines(schema) == [
        f"{ROOT}.properties[a].x-kubernetes-validations[0].optionalOldSelf: Invalid value: true: may not be set if "
        "oldSelf is not used in rule",
    ]


def test_rules_are_not_compiled_when_the_schema_is_not_structural() -> None:
    schema = obj(a={"x-kubernetes-validations": [{"rule": "self >"}]})
    assert lines(schema) == [f"{ROOT}.properties[a].type: Required value: must not be empty for specified object "
                             "fields"]


@pytest.mark.parametrize("rule", [
    "self.all(x, x.startsWith('a'))", "self.exists_one(x, x == 'a')", "self.map(x, x.size()).sum() < 100",
    "self.filter(x, x.matches('^[a-z]+$')).size() == self.size()", "self.isSorted()",
    "self.all(x, x.lowerAscii() == x && x.upperAscii() != '' && x.split('-').size() < 5)",
    "self.all(x, x.trim() == x && x.replace('-', '_') != '' && x.contains('') && x.endsWith(''))",
    "size(self) <= 10 && self.size() <= 10", "self.indexOf('a') >= -1", "self.min() <= self.max()",
    "self.all(x, x.find('[0-9]+') == '' || int(x.find('[0-9]+')) >= 0)",
    "sets.contains(self, []) && !sets.intersects([], self)",
])
def test_kubernetes_functions_compile(rule: str) -> None:
    schema = obj(a={"type": "array", "maxItems": 20, "items": {"type": "string", "maxLength": 64},
                    "x-kubernetes-validations": [{"rule": rule}]})
    assert problems(schema) == []


KEYWORDS = ["type", "format", "properties", "items", "additionalProperties", "required", "enum", "default",
            "nullable", "minimum", "maxLength", "pattern", "anyOf", "allOf", "not", "x-kubernetes-int-or-string",
            "x-kubernetes-preserve-unknown-fields", "x-kubernetes-embedded-resource", "x-kubernetes-list-type",
            "x-kubernetes-list-map-keys", "x-kubernetes-map-type", "x-kubernetes-validations", "metadata", "spec"]
SCALARS = (st.none() | st.booleans() | st.integers(-5, 5)
           | st.sampled_from(["object", "string", "array", "integer", "null", "int32", "date-time", "set", "map",
                              "atomic", "(", "self.x > 0", "oldSelf == self", "self >"]))
SCHEMAS = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                       | st.dictionaries(st.sampled_from(KEYWORDS), inner, max_size=5), max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(SCHEMAS)
def test_any_schema_is_answered_without_exceptions(schema: Any) -> None:
    compiled, causes = StructuralSchema.compile(schema if isinstance(schema, dict) else {"type": schema}, path=ROOT)
    assert (compiled is None) == bool(causes)
    assert all(set(c) == {"reason", "field", "message"} and c["field"].startswith(ROOT) for c in causes)
    if compiled is not None:
        obj: dict[str, Any] = {"spec": {"a": [None, {"b": "x"}]}, "metadata": {"name": "n"}}
        compiled.prune(obj)
        compiled.default(obj)
        compiled.validate(obj)
        compiled.validate(obj, old={"spec": 1})
        compiled.validate_status(obj, old=obj)
