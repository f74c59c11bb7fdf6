"""The fast paths of the structural machinery against their plain counterparts.

Each optimisation that could diverge has its oracle here: the one-walk pruner against the two
upstream walks, compiled defaulting against the recursive algorithm, `deep_equal` against the
recursive comparison, ratcheting-first OpenAPI validation against upstream's order, the list-type
skip of unchanged values, and the CEL evaluation shortcuts (memo of passing values, `self`
restricted to the fields read, all rules in one program) against evaluating every rule alone
on the whole value.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from cel_expr_python import cel  # type: ignore[import-untyped]
from hypothesis import given, settings
from hypothesis import strategies as st

from kubemesh.apiserver.structural import StructuralSchema
from kubemesh.apiserver.structural.celast import decode, field_reads
from kubemesh.apiserver.structural.equality import Unchanged, deep_equal, strict_deep_equal
from kubemesh.apiserver.structural.nodes import Node, parse
from kubemesh.apiserver.structural.objectmeta import prune_object_meta
from kubemesh.apiserver.structural.rules import MEMO_ENTRIES, RuleTree, _env_for
from kubemesh.apiserver.structural.validating import NO_OLD, Sink

ROOT = "spec.versions[0].schema.openAPIV3Schema"


def compiled(raw: dict[str, Any]) -> StructuralSchema:
    schema, causes = StructuralSchema.compile(copy.deepcopy(raw), path=ROOT)
    assert causes == []
    assert schema is not None
    return schema


def typed(value: Any) -> str:
    """A comparison that tells 1, 1.0 and True apart."""
    return repr(value)


SCALARS = st.none() | st.booleans() | st.sampled_from([0, 1, 2, 7, -1, 1.0, 2.5, 2**70, "", "a", "abc", "zz"])
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.sampled_from(["a", "b", "x", "kind", "metadata", "name"]), inner, max_size=3), max_leaves=10)

SCHEMA: dict[str, Any] = {"type": "object", "properties": {
    "spec": {"type": "object", "x-kubernetes-validations": [
        {"rule": "!has(self.count) || self.count < 10", "message": "count below 10"},
        {"rule": "!has(self.name) || self.name != 'zz'"},
        {"rule": "!has(self.count) || !has(oldSelf.count) || self.count >= oldSelf.count",
         "message": "count only grows"},
    ], "properties": {
        "name": {"type": "string", "maxLength": 3},
        "count": {"type": "integer", "minimum": 0},
        "ratio": {"type": "number", "nullable": True},
        "mode": {"type": "string", "enum": ["a", "abc"], "default": "a"},
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                 "properties": {"known": {"type": "object", "properties": {"k": {"type": "string"}}}}},
        "labels": {"type": "object", "additionalProperties": {"type": "string", "default": "d"}},
        "anything": {"type": "object", "additionalProperties": True},
        "counts": {"type": "object", "additionalProperties": {"type": "integer", "maximum": 5}},
        "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set",
                 "x-kubernetes-validations": [{"rule": "self.all(t, t != 'zz')"}]},
        "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                  "items": {"type": "object", "required": ["name"], "properties": {
                      "name": {"type": "string"}, "port": {"type": "integer", "default": 80,
                                                           "x-kubernetes-validations": [{"rule": "self > 0"}]}}}},
        "template": {"type": "object", "x-kubernetes-embedded-resource": True,
                     "x-kubernetes-preserve-unknown-fields": True,
                     "properties": {"spec": {"type": "object", "properties": {"x": {"type": "string"}}}}},
        "choice": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                   "oneOf": [{"properties": {"a": {"minimum": 5}}}, {"properties": {"b": {"minimum": 0}}}]},
    }},
}}
FIELDS = list(SCHEMA["properties"]["spec"]["properties"])
GOOD = {"name": "abc", "count": 3, "ratio": 0.5, "mode": "a", "free": {"known": {"k": "v"}, "other": 1},
        "labels": {"x": "y"}, "anything": {}, "counts": {"a": 1}, "tags": ["a", "b"],
        "ports": [{"name": "a", "port": 1}],
        "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"x": "1"}},
        "choice": {"a": 1, "b": 2}}


@st.composite
def specs(draw: st.DrawFn) -> dict[str, Any]:
    """Mostly valid specs, with fields dropped, replaced by junk, or given junk inside."""
    spec = copy.deepcopy(GOOD)
    for name in FIELDS:
        action = draw(st.sampled_from(["keep", "keep", "keep", "drop", "junk", "inside"]))
        if action == "drop":
            del spec[name]
        elif action == "junk":
            spec[name] = draw(JSON)
        elif action == "inside":
            value = spec[name]
            if isinstance(value, dict):
                value[draw(st.sampled_from(["a", "x", "k", "name", "other"]))] = draw(JSON)
            elif isinstance(value, list) and value:
                value.append(draw(JSON) if draw(st.booleans()) else copy.deepcopy(value[0]))
    if draw(st.booleans()):
        spec[draw(st.sampled_from(["unknown", "count", "ratio"]))] = draw(SCALARS)
    return spec


def objects(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "n"}, "spec": spec}


# ---------------------------------------------------------------------------------------------
# Equality.


def _swap_types(value: Any, flips: list[bool]) -> Any:
    """A copy with some ints turned to floats and bools to ints (equal to Python, not to Go)."""
    flip = flips.pop() if flips else False
    if isinstance(value, bool):
        return int(value) if flip else value
    if isinstance(value, int) and abs(value) < 2**53:
        return float(value) if flip else value
    if isinstance(value, list):
        return [_swap_types(v, flips) for v in value]
    if isinstance(value, dict):
        return {k: _swap_types(v, flips) for k, v in value.items()}
    return value


@settings(max_examples=300)
@given(a=JSON, b=JSON, flips=st.lists(st.booleans(), max_size=12))
def test_deep_equal_is_the_recursive_comparison(a: Any, b: Any, flips: list[bool]) -> None:
    for x, y in ((a, b), (a, copy.deepcopy(a)), (a, a), (a, _swap_types(a, flips))):
        assert deep_equal(x, y) == strict_deep_equal(x, y)


def test_deep_equal_tells_go_types_apart() -> None:
    assert not deep_equal({"a": [1]}, {"a": [1.0]})
    assert not deep_equal({"a": True}, {"a": 1})
    assert deep_equal({"a": -0.0, "b": 1}, {"b": 1, "a": 0.0})
    nan = float("nan")
    assert not deep_equal([nan], [nan])
    assert deep_equal({"a": 2**70}, {"a": 2**70})


# ---------------------------------------------------------------------------------------------
# Pruning in one walk.


_META = frozenset(("apiVersion", "kind", "metadata"))


def _joiner(path: str) -> Callable[[str], str]:
    def join(name: str) -> str:
        return f"{path}.{name}" if path else name

    return join


def _reference_prune_fields(value: Any, node: Node | None, path: str, pruned: list[str], *, embedded: bool,
                            top: bool = False) -> None:
    """structuralpruning.Prune, as a plain recursive walk."""
    join = _joiner(path)
    if node is not None and node.preserve_unknown:
        _reference_skip(value, node, path, pruned, embedded=embedded)
        return
    if isinstance(value, dict):
        for name in list(value):
            if node is None:
                pruned.append(join(name))
                del value[name]
            elif embedded and name in _META:
                if name == "metadata":
                    prune_object_meta(value[name], join(name), pruned)
            elif name in node.properties:
                prop = node.properties[name]
                _reference_prune_fields(value[name], prop, join(name), pruned, embedded=prop.embedded)
            elif node.additional_allows is not None:
                extra = node.additional
                _reference_prune_fields(value[name], extra, join(name), pruned,
                                        embedded=extra is not None and extra.embedded)
            else:
                if name not in _META or not top:
                    pruned.append(join(name))
                del value[name]
    elif isinstance(value, list):
        items = node.items if node is not None else None
        for i, item in enumerate(value):
            _reference_prune_fields(item, items, f"{path}[{i}]", pruned, embedded=items is not None and items.embedded)


def _reference_skip(value: Any, node: Node, path: str, pruned: list[str], *, embedded: bool) -> None:
    join = _joiner(path)
    if isinstance(value, dict):
        for name, item in value.items():
            if embedded and name in _META:
                if name == "metadata":
                    prune_object_meta(item, join(name), pruned)
            elif name in node.properties:
                prop = node.properties[name]
                _reference_prune_fields(item, prop, join(name), pruned, embedded=prop.embedded)
            elif node.additional_allows is not None:
                extra = node.additional
                _reference_prune_fields(item, extra, join(name), pruned, embedded=extra is not None and extra.embedded)
    elif isinstance(value, list) and node.items is not None:
        for i, item in enumerate(value):
            _reference_skip(item, node.items, f"{path}[{i}]", pruned, embedded=node.items.embedded)


def _reference_prune_nulls(value: Any, node: Node | None) -> None:
    """PruneNonNullableNullsWithoutDefaults, as a second walk."""
    if isinstance(value, dict):
        for name in list(value):
            schema = None if node is None else node.properties.get(name) or node.additional
            if value[name] is None and schema is not None and not schema.nullable and not schema.has_default:
                del value[name]
            else:
                _reference_prune_nulls(value[name], schema)
    elif isinstance(value, list):
        for item in value:
            _reference_prune_nulls(item, node.items if node is not None else None)


ROOT_NODE = parse(copy.deepcopy(SCHEMA), ROOT, [])
PRUNING = compiled(SCHEMA)


@settings(max_examples=300)
@given(spec=specs(), extra=JSON)
def test_one_walk_pruning_is_the_two_upstream_walks(spec: dict[str, Any], extra: Any) -> None:
    obj = objects(spec)
    obj["metadata"]["junk"] = extra
    obj["status"] = extra
    expected = copy.deepcopy(obj)
    reported: list[str] = []
    _reference_prune_fields(expected, ROOT_NODE, "", reported, embedded=True, top=True)
    _reference_prune_nulls(expected, ROOT_NODE)
    assert PRUNING.prune(obj) == sorted(reported)
    assert typed(obj) == typed(expected)


# ---------------------------------------------------------------------------------------------
# Defaulting along the paths with defaults.


def _reference_default(value: Any, node: Node | None) -> None:
    if node is None:
        return
    if isinstance(value, dict):
        for name, prop in node.properties.items():
            if prop.has_default and (name not in value or (value[name] is None and not prop.nullable)):
                value[name] = copy.deepcopy(prop.default)
        extra = node.additional
        for name, item in value.items():
            if name in node.properties:
                _reference_default(item, node.properties[name])
            elif extra is not None:
                if item is None and not extra.nullable and extra.has_default:
                    value[name] = copy.deepcopy(extra.default)
                _reference_default(value[name], extra)
    elif isinstance(value, list) and node.items is not None:
        for i, item in enumerate(value):
            if item is None and not node.items.nullable and node.items.has_default:
                value[i] = copy.deepcopy(node.items.default)
            _reference_default(value[i], node.items)


@settings(max_examples=200)
@given(spec=specs(), nulls=st.lists(st.sampled_from(["mode", "ratio", "labels", "ports"]), max_size=3))
def test_compiled_defaulting_is_the_recursive_one(spec: dict[str, Any], nulls: list[str]) -> None:
    for name in nulls:
        target = spec.get(name)
        if isinstance(target, dict):
            target["n"] = None
        elif isinstance(target, list):
            target.append(None)
        else:
            spec[name] = None
    obj = objects(spec)
    expected = copy.deepcopy(obj)
    _reference_default(expected, ROOT_NODE)
    PRUNING.default(obj)
    assert typed(obj) == typed(expected)


# ---------------------------------------------------------------------------------------------
# Ratcheting-first OpenAPI validation, and the list-type check of unchanged values.


def _reference_schema_causes(schema: StructuralSchema, obj: dict[str, Any], old: dict[str, Any] | None) -> Any:
    """Upstream's order: a plain pass, then (on update, if it failed) a ratcheting pass."""
    validator = schema._validator
    sink = Sink("")
    validator(obj, "", sink, NO_OLD)
    if sink.causes and old is not None:
        sink = Sink("")
        validator(obj, "", sink, old)
    return sink.causes


def _reference_list_causes(schema: StructuralSchema, obj: dict[str, Any], old: dict[str, Any] | None) -> Any:
    """The list-type check of the whole object, ratcheted when the old object broke it too."""
    assert schema._lists is not None
    found: list[Any] = []
    schema._lists(obj, "", found, NO_OLD, {})
    if found and old is not None:
        before: list[Any] = []
        schema._lists(old, "", before, NO_OLD, {})
        if before:
            return []
    return found


def test_ratcheting_first_reports_nothing_the_plain_pass_accepts() -> None:
    # the ratcheting pass sees both oneOf branches valid (spec.choice.a is unchanged), the plain
    # pass only one: upstream reports nothing, since it ratchets only when the plain pass fails
    schema = PRUNING
    old = objects({"choice": {"a": 1, "b": 3}})
    new = objects({"choice": {"a": 1, "b": 2}})
    ratcheted = Sink("")
    schema._validator(new, "", ratcheted, old)
    assert ratcheted.causes
    assert schema.validate(new, old=old) == []
    changed = objects({"choice": {"a": 2, "b": 2}})
    assert schema.validate(changed, old=old) == []
    # a unchanged: its branch passes by ratcheting, and exactly one branch is valid
    assert schema.validate(objects({"choice": {"a": 1, "b": -1}}), old=old) == []
    both_bad = objects({"choice": {"a": 2, "b": -1}})
    causes = schema.validate(both_bad, old=old)
    assert causes == _reference_schema_causes(schema, both_bad, old)
    assert causes[0]["message"] == (
        'Invalid value: "": "spec.choice" must validate one and only one schema (oneOf). Found none valid')


@settings(max_examples=300)
@given(old_spec=specs(), new_spec=specs(), keep=st.lists(st.sampled_from(FIELDS), max_size=6))
def test_update_validation_is_upstreams(old_spec: dict[str, Any], new_spec: dict[str, Any], keep: list[str]) -> None:
    for name in keep:  # share some unchanged subtrees
        if name in old_spec:
            new_spec[name] = copy.deepcopy(old_spec[name])
    old, new = objects(old_spec), objects(new_spec)
    unchanged: Unchanged = {}
    causes = PRUNING._schema_causes(PRUNING._validator, new, old, "", unchanged)
    assert causes == _dedupe(_reference_schema_causes(PRUNING, new, old))
    assert PRUNING._list_causes(new, old, unchanged) == _reference_list_causes(PRUNING, new, old)


def _dedupe(causes: list[Any]) -> list[Any]:
    seen: set[tuple[str, str]] = set()
    out = []
    for cause in causes:
        if (cause["field"], cause["message"]) not in seen:
            seen.add((cause["field"], cause["message"]))
            out.append(cause)
    return out


def test_a_changed_list_is_still_checked_next_to_unchanged_ones() -> None:
    old = objects({"tags": ["a", "a"], "ports": [{"name": "a"}]})
    new = objects({"tags": ["a", "a"], "ports": [{"name": "a"}, {"name": "a"}]})
    assert PRUNING.validate(new, old=old) == []  # the old object broke the list invariants already
    clean_old = objects({"tags": ["a"], "ports": [{"name": "a"}]})
    assert [c["field"] for c in PRUNING.validate(new, old=clean_old)] == ["spec.tags[1]", "spec.ports[1]"]
    assert [c["field"] for c in PRUNING.validate(objects({"tags": ["a"], "ports": [{"name": "a"}, {"name": "a"}]}),
                                                 old=clean_old)] == ["spec.ports[1]"]


def test_an_invalid_value_that_changed_type_only_is_not_ratcheted() -> None:
    schema = compiled({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "n": {"type": "integer", "maximum": 1}, "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                                                          "properties": {"v": {"type": "integer", "maximum": 1}}}}}}})
    old = {"spec": {"n": 5, "free": {"v": 5}}}
    assert schema.validate({"spec": {"n": 5, "free": {"v": 5}}}, old=old) == []
    # 5.0 == 5 in Python, not in Go: changed, so checked
    assert [c["field"] for c in schema.validate({"spec": {"n": 5.0, "free": {"v": 5.0}}}, old=old)] == [
        "spec.n", "spec.free.v"]


# ---------------------------------------------------------------------------------------------
# CEL: memo, restricted self, combined program.


def _without_shortcuts(schema: StructuralSchema) -> StructuralSchema:
    """The schema with every rule evaluated alone, on the whole value, every time."""

    def strip(tree: RuleTree | None) -> None:
        if tree is None:
            return
        if tree.rules is not None:
            tree.rules.memoizes = False
            tree.rules.restricted = None
            tree.rules.combined = None
        for sub in (*tree.properties.values(), tree.additional, tree.items):
            strip(sub)

    strip(schema._rules)
    return schema


PLAIN = _without_shortcuts(compiled(SCHEMA))


@settings(max_examples=300)
@given(spec=specs(), old_spec=st.none() | specs())
def test_rule_shortcuts_report_what_plain_evaluation_reports(spec: dict[str, Any], old_spec: Any) -> None:
    obj = objects(spec)
    old = objects(old_spec) if old_spec is not None else None
    for _ in range(2):  # the second time, from the memo
        assert PRUNING.validate(obj, old=old) == PLAIN.validate(obj, old=old)
        assert PRUNING.validate_status(obj, old=old) == PLAIN.validate_status(obj, old=old)


RULES = compiled({"type": "object", "properties": {"spec": {"type": "object", "properties": {
    "a": {"type": "integer"}, "b": {"type": "integer"},
    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
    "x-kubernetes-validations": [
        {"rule": "!has(self.a) || self.a >= 0", "message": "a is negative"},
        {"rule": "!has(self.b) || self.a / self.b >= 0", "message": "a/b is negative"},
        {"rule": "!has(self.free) || !has(self.free.v) || type(self.free.v) == int", "message": "v is no int"},
        {"rule": "!has(self.a) || !has(oldSelf.a) || self.a >= oldSelf.a", "message": "a only grows"},
    ]}}})


def test_memo_skips_only_rules_that_passed_for_the_same_value() -> None:
    ok = {"spec": {"a": 1, "b": 1, "free": {"v": 1}}}
    assert RULES.validate(copy.deepcopy(ok)) == []
    assert RULES.validate(copy.deepcopy(ok)) == []  # from the memo
    # equal to Python, not to CEL: evaluated again
    assert [c["message"] for c in RULES.validate({"spec": {"a": 1, "b": 1, "free": {"v": 1.0}}})] == [
        "Invalid value: v is no int"]
    # evaluation errors are reported every time
    for _ in range(2):
        assert [c["message"] for c in RULES.validate({"spec": {"a": 1, "b": 0}})] == [
            'Invalid value: "object": division by zero evaluating rule: a/b is negative']
    # the transition rule runs even when the others are known to pass
    assert [c["message"] for c in RULES.validate(copy.deepcopy(ok), old={"spec": {"a": 2}})] == [
        "Invalid value: a only grows"]


def test_memo_is_bounded() -> None:
    schema = compiled({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "a": {"type": "integer"}}, "x-kubernetes-validations": [{"rule": "self.a >= 0"}]}}})
    for i in range(MEMO_ENTRIES * 3):
        assert schema.validate({"spec": {"a": i}}) == []
    assert schema._rules is not None
    spec_rules = schema._rules.properties["spec"].rules
    assert spec_rules is not None
    assert 0 < len(spec_rules.passed) <= MEMO_ENTRIES


def test_unconvertible_unread_fields_still_fail_every_rule() -> None:
    # the rules read spec.a only, but CEL converts the whole map: a value beyond int64 anywhere
    # in it fails every rule, and the restricted map must not hide that
    raw = {"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "a": {"type": "integer"}, "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
        "x-kubernetes-validations": [{"rule": "self.a >= 0"}, {"rule": "self.a < 10"}]}}}
    schema, plain = compiled(raw), _without_shortcuts(compiled(raw))
    for big in (2**70, 2**63, 2**53 + 1, 1e30):
        obj = {"spec": {"a": 1, "free": {"big": big}}}
        assert schema.validate(obj) == plain.validate(obj)
    assert len(schema.validate({"spec": {"a": 1, "free": {"big": 2**70}}})) == 2


def test_combined_program_falls_back_to_each_rule() -> None:
    schema = compiled({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "a": {"type": "integer"}}, "x-kubernetes-validations": [
            {"rule": "self.a / 0 == 1 // a comment"}, {"rule": "self.a > 5", "message": "a is small"},
            {"rule": "self.a != 3"}]}}})
    assert [c["message"] for c in schema.validate({"spec": {"a": 3}})] == [
        'Invalid value: "object": division by zero evaluating rule: self.a / 0 == 1 // a comment',
        "Invalid value: a is small",
        "Invalid value: failed rule: self.a != 3"]


def _reads(source: str) -> set[str] | None:
    env = _env_for("map(string,dyn)", cel.Type.Map(cel.Type.STRING, cel.Type.DYN), old_self=True, optional_old=False)
    return field_reads(decode(env.compile(source).serialize())[0], "self")


def test_field_reads() -> None:
    assert _reads("self.a == 1 && has(self.b) && self.?c.hasValue() && self['d'] == 2") == {"a", "b", "c", "d"}
    assert _reads("self.a.x == oldSelf.b") == {"a"}
    assert _reads("self.all(k, k != 'a')") is None
    assert _reads("size(self) > 1") is None
    assert _reads("self == oldSelf") is None
    assert _reads("[1].all(self, self > 0)") is None  # a comprehension variable named self


def test_nulls_in_a_resources_metadata_go_by_its_declared_schema() -> None:
    schema = compiled({"type": "object", "properties": {"spec": {"type": "object", "properties": {"template": {
        "type": "object", "x-kubernetes-embedded-resource": True, "x-kubernetes-preserve-unknown-fields": True,
        "properties": {"metadata": {"type": "object", "properties": {"name": {"type": "string"}}},
                       "kind": {"type": "string"}}}}}}})
    obj = {"spec": {"template": {"apiVersion": "v1", "kind": None, "metadata": {"name": None, "labels": None}}}}
    assert schema.prune(obj) == []
    assert obj == {"spec": {"template": {"apiVersion": "v1", "metadata": {"labels": None}}}}
