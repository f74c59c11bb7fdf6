"""x-kubernetes-validations: CEL rules on create and update, wording and bounds."""

from __future__ import annotations

from typing import Any

from kubemesh.apiserver.structural import StructuralSchema

ROOT = "spec.versions[0].schema.openAPIV3Schema"


def compiled(spec: dict[str, Any], **root_extra: Any) -> StructuralSchema:
    schema, causes = StructuralSchema.compile({"type": "object", "properties": {"spec": spec}, **root_extra}, path=ROOT)
    assert causes == []
    assert schema is not None
    return schema


def rule_on(props: dict[str, Any], *rules: dict[str, Any]) -> StructuralSchema:
    return compiled({"type": "object", "properties": props, "x-kubernetes-validations": list(rules)})


INT = {"type": "integer"}
STR = {"type": "string"}


def test_failing_rule_on_an_object() -> None:
    schema = rule_on({"min": INT, "max": INT}, {"rule": "self.min <= self.max"})
    assert schema.validate({"spec": {"min": 1, "max": 2}}) == []
    assert schema.validate({"spec": {"min": 3, "max": 2}}) == [
        {"reason": "FieldValueInvalid", "field": "spec", "message": "Invalid value: failed rule: self.min <= self.max"}]


def test_failing_rule_on_a_scalar_prints_the_value() -> None:
    schema = compiled({"type": "object", "properties": {"name": {"type": "string", "x-kubernetes-validations": [
        {"rule": "self.startsWith('a')", "message": "must start with a"}]}}})
    assert schema.validate({"spec": {"name": "bob"}}) == [
        {"reason": "FieldValueInvalid", "field": "spec.name", "message": 'Invalid value: "bob": must start with a'}]


def test_message_expression_reason_and_field_path() -> None:
    schema = rule_on({"a": INT, "b": INT}, {
        "rule": "self.a < self.b", "messageExpression": "'a (' + string(self.a) + ') must be below b'",
        "reason": "FieldValueForbidden", "fieldPath": ".a"})
    assert schema.validate({"spec": {"a": 5, "b": 1}}) == [
        {"reason": "FieldValueForbidden", "field": "spec.a", "message": "Forbidden: a (5) must be below b"}]


def test_required_and_duplicate_reasons() -> None:
    schema = rule_on({"a": INT}, {"rule": "has(self.a)", "reason": "FieldValueRequired", "message": "a is needed"},
                     {"rule": "false", "reason": "FieldValueDuplicate"})
    assert schema.validate({"spec": {}}) == [
        {"reason": "FieldValueRequired", "field": "spec", "message": "Required value: a is needed"},
        {"reason": "FieldValueDuplicate", "field": "spec", "message": "Duplicate value"}]


def test_message_expression_falls_back_to_message() -> None:
    schema = rule_on({"a": INT}, {"rule": "false", "message": "plain", "messageExpression": "''"})
    assert schema.validate({"spec": {"a": 1}})[0]["message"] == "Invalid value: plain"


def test_rules_on_list_items_and_map_values() -> None:
    spec = {"type": "object", "properties": {
        "items": {"type": "array", "items": {"type": "object", "properties": {"name": STR},
                                             "x-kubernetes-validations": [{"rule": "self.name != ''"}]}},
        "labels": {"type": "object", "additionalProperties": {"type": "string", "x-kubernetes-validations": [
            {"rule": "self.size() < 3"}]}}}}
    causes = compiled(spec).validate({"spec": {"items": [{"name": "a"}, {"name": ""}], "labels": {"k": "long"}}})
    assert [(c["field"], c["message"]) for c in causes] == [
        ("spec.items[1]", "Invalid value: failed rule: self.name != ''"),
        ("spec.labels[k]", 'Invalid value: "long": failed rule: self.size() < 3')]


def test_has_and_optional_field_access() -> None:
    schema = rule_on({"a": INT, "b": INT}, {"rule": "!has(self.a) || self.?b.orValue(0) > self.a"})
    assert schema.validate({"spec": {}}) == []
    assert schema.validate({"spec": {"a": 1, "b": 2}}) == []
    assert len(schema.validate({"spec": {"a": 1}})) == 1


def test_string_and_list_library() -> None:
    schema = compiled({"type": "array", "items": STR, "x-kubernetes-validations": [
        {"rule": "self.all(x, x.lowerAscii() == x)", "message": "lower"},
        {"rule": "self.map(x, x.size()).sum() <= 6", "message": "sum"},
        {"rule": "self.isSorted()", "message": "sorted"},
        {"rule": "self.exists_one(x, x.split('-').size() == 2)", "message": "one dash"},
        {"rule": "self.filter(x, x.matches('^[a-z-]+$')).size() == self.size()", "message": "matches"},
    ]})
    assert schema.validate({"spec": ["a-b", "c"]}) == []
    messages = [c["message"] for c in schema.validate({"spec": ["z", "B-c-d", "ab"]})]
    assert messages == ["Invalid value: lower", "Invalid value: sum", "Invalid value: sorted",
                        "Invalid value: one dash", "Invalid value: matches"]


def test_escaped_property_names() -> None:
    schema = rule_on({"my-field": INT, "namespace": STR, "a.b": INT},
                     {"rule": "self.my__dash__field > 0 && self.__namespace__ != '' && self.a__dot__b == 1"})
    assert schema.validate({"spec": {"my-field": 1, "namespace": "x", "a.b": 1}}) == []
    assert len(schema.validate({"spec": {"my-field": 0, "namespace": "x", "a.b": 1}})) == 1


def test_root_rules_see_metadata_name() -> None:
    schema = compiled({"type": "object"}, **{"x-kubernetes-validations": [
        {"rule": "self.metadata.name.startsWith('x-')"}]})
    assert schema.validate({"metadata": {"name": "x-1"}, "spec": {}}) == []
    assert schema.validate({"metadata": {"name": "y"}, "spec": {}}) == [
        {"reason": "FieldValueInvalid", "field": "<nil>",
         "message": "Invalid value: failed rule: self.metadata.name.startsWith('x-')"}]


def test_evaluation_error() -> None:
    schema = rule_on({"a": INT}, {"rule": "self.a > 0"})
    assert schema.validate({"spec": {}}) == [
        {"reason": "FieldValueInvalid", "field": "spec",
         "message": 'Invalid value: "object": no such key: a evaluating rule: self.a > 0'}]


def test_dynamic_overload_error_on_int_or_string() -> None:
    schema = compiled({"type": "object", "properties": {"port": {"x-kubernetes-int-or-string": True,
                                                                 "x-kubernetes-validations": [{"rule": "self > 0"}]}}})
    assert schema.validate({"spec": {"port": 80}}) == []
    [cause] = schema.validate({"spec": {"port": "http"}})
    assert cause["field"] == "spec.port"
    assert "call arguments did not match a supported operator, function or macro signature for rule: self > 0" in \
        cause["message"]


def test_rules_are_skipped_when_the_object_is_already_invalid() -> None:
    schema = rule_on({"a": INT}, {"rule": "self.a > 0"})
    assert schema.validate({"spec": {"a": "x"}})[-1] == {
        "reason": "FieldValueInvalid", "field": "<nil>",
        "message": "Invalid value: null: some validation rules were not checked because the object was invalid; "
                   "correct the existing errors to complete validation"}


# ---------------------------------------------------------------------------------------------
# Transition rules.


def immutable(props: dict[str, Any]) -> StructuralSchema:
    return rule_on(props, {"rule": "self.a == oldSelf.a", "message": "a is immutable"})


def test_transition_rule_runs_only_on_update() -> None:
    schema = immutable({"a": INT})
    assert schema.validate({"spec": {"a": 1}}) == []
    assert schema.validate({"spec": {"a": 1}}, old={"spec": {"a": 1}}) == []
    assert schema.validate({"spec": {"a": 2}}, old={"spec": {"a": 1}}) == [
        {"reason": "FieldValueInvalid", "field": "spec", "message": "Invalid value: a is immutable"}]


def test_transition_rule_needs_the_old_value_at_its_path() -> None:
    schema = immutable({"a": INT})
    assert schema.validate({"spec": {"a": 2}}, old={"other": 1}) == []


def test_transition_rules_correlate_map_list_items_by_key() -> None:
    item = {"type": "object", "required": ["name"], "properties": {"name": STR, "size": INT},
            "x-kubernetes-validations": [{"rule": "self.size >= oldSelf.size", "message": "no shrinking"}]}
    schema = compiled({"type": "object", "properties": {"disks": {
        "type": "array", "items": item, "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}}})
    old = {"spec": {"disks": [{"name": "a", "size": 5}, {"name": "b", "size": 5}]}}
    new = {"spec": {"disks": [{"name": "b", "size": 4}, {"name": "a", "size": 6}, {"name": "c", "size": 1}]}}
    assert schema.validate(new, old=old) == [
        {"reason": "FieldValueInvalid", "field": "spec.disks[0]", "message": "Invalid value: no shrinking"}]


def test_optional_old_self() -> None:
    schema = rule_on({"a": INT}, {"rule": "!oldSelf.hasValue() || self.a >= oldSelf.value().a",
                                  "optionalOldSelf": True, "message": "a only grows"})
    assert schema.validate({"spec": {"a": 1}}) == []
    assert schema.validate({"spec": {"a": 1}}, old={"spec": {"a": 2}})[0]["message"] == "Invalid value: a only grows"


def test_unchanged_values_are_ratcheted() -> None:
    schema = rule_on({"a": INT, "b": INT}, {"rule": "self.a > 5"})
    old = {"spec": {"a": 1, "b": 1}}
    assert schema.validate({"spec": {"a": 1, "b": 1}}, old=old) == []
    assert len(schema.validate({"spec": {"a": 1, "b": 2}}, old=old)) == 1


# ---------------------------------------------------------------------------------------------
# Bounds.


def test_runaway_rule_is_cut_off() -> None:
    schema = compiled({"type": "object", "properties": {"l": {"type": "array", "items": INT, "maxItems": 100}},
                       "x-kubernetes-validations": [
                           {"rule": "self.l.all(a, self.l.all(b, self.l.all(c, a + b + c >= 0)))"},
                           {"rule": "false", "message": "never reached"}]})
    causes = schema.validate({"spec": {"l": list(range(100))}})
    assert causes == [{"reason": "FieldValueInvalid", "field": "spec", "message":
                       "Invalid value: \"object\": 'operation cancelled: actual cost limit exceeded': no further "
                       "validation rules will be run due to call cost exceeds limit for rule: "
                       "self.l.all(a, self.l.all(b, self.l.all(c, a + b + c >= 0)))"}]


def test_time_budget_stops_evaluation() -> None:
    schema = compiled({"type": "object", "properties": {"l": {"type": "array", "items": {
        "type": "object", "properties": {"n": INT}, "x-kubernetes-validations": [{"rule": "self.n >= 0"}]}}}})
    schema.budget_seconds = 0.0
    causes = schema.validate({"spec": {"l": [{"n": 1}, {"n": 2}]}})
    assert causes == [{"reason": "FieldValueInvalid", "field": "spec.l[0]", "message":
                       'Invalid value: "object": validation failed due to running out of cost budget, no further '
                       "validation rules will be run"}]


# ---------------------------------------------------------------------------------------------
# Kubernetes libraries and typed values.


def string_rule(rule: str, **extra: Any) -> StructuralSchema:
    return compiled({"type": "object", "properties": {"v": {"type": "string", "maxLength": 256, **extra,
                                                            "x-kubernetes-validations": [{"rule": rule}]}}})


def holds(schema: StructuralSchema, value: str) -> bool:
    causes = schema.validate({"spec": {"v": value}})
    assert all("failed rule" in c["message"] for c in causes), causes
    return not causes


def test_ip_and_cidr_library() -> None:
    schema = string_rule("isIP(self) && ip(self).family() == 4 && !ip(self).isLoopback()")
    assert holds(schema, "10.0.0.1")
    assert not holds(schema, "127.0.0.1")
    assert not holds(schema, "::1")
    assert not holds(schema, "example.com")
    cidr = string_rule("isCIDR(self) && cidr(self).containsIP('10.1.2.3') && cidr(self).prefixLength() >= 8")
    assert holds(cidr, "10.0.0.0/8")
    assert not holds(cidr, "192.168.0.0/16")


def test_quantity_library() -> None:
    schema = string_rule("isQuantity(self) && quantity(self).isLessThan(quantity('1Gi')) && "
                         "quantity(self).compareTo(quantity('100m')) > 0")
    assert holds(schema, "512Mi")
    assert holds(schema, "0.5")
    assert not holds(schema, "2Gi")
    assert not holds(schema, "10m")
    assert not holds(schema, "lots")


def test_url_semver_and_format_libraries() -> None:
    assert holds(string_rule("isURL(self) && url(self).getScheme() == 'https' && url(self).getHostname() == 'x.io'"),
                 "https://x.io:8443/path")
    assert not holds(string_rule("isSemver(self) && semver(self).major() >= 1"), "0.9.1")
    schema = string_rule("format.dns1123Label().validate(self) == null")
    assert holds(schema, "my-name")
    assert not holds(schema, "My_Name")


def test_date_time_and_duration_rules_see_typed_values() -> None:
    before = string_rule("self < timestamp('2030-01-01T00:00:00Z')", format="date-time")
    assert holds(before, "2025-06-01T12:00:00.123456789Z")
    assert not holds(before, "2031-01-01T00:00:00+02:00")
    short = string_rule("self <= duration('1h')", format="duration")
    assert holds(short, "45m")
    assert not holds(short, "1h30m")


def test_field_path_into_a_map_entry() -> None:
    schema = rule_on({"labels": {"type": "object", "maxProperties": 10,
                                 "additionalProperties": {"type": "string", "maxLength": 10}}},
                     {"rule": "!has(self.labels.app) || self.labels.app != ''", "fieldPath": ".labels['app']",
                      "message": "app must not be empty"})
    assert schema.validate({"spec": {"labels": {"app": ""}}}) == [
        {"reason": "FieldValueInvalid", "field": "spec.labels[app]", "message": "Invalid value: app must not be empty"}]


def test_message_expression_that_does_not_compile() -> None:
    _, causes = StructuralSchema.compile({"type": "object", "properties": {"spec": {
        "type": "object", "x-kubernetes-validations": [{"rule": "true", "messageExpression": "self.x +"}]}}},
        path=ROOT)
    assert [c["field"] for c in causes] == [f"{ROOT}.properties[spec].x-kubernetes-validations[0].messageExpression"]
    assert "messageExpression compilation failed: ERROR: <input>:1:" in causes[0]["message"]
