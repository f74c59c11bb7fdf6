"""The checks apiextensions runs on an `openAPIV3Schema` when a CRD is created or updated.

Two passes, as upstream:

* `check_openapi` mirrors `ValidateCustomResourceDefinitionOpenAPISchema`: keywords Kubernetes does
  not support, `type` values, defaults where they are forbidden (top-level metadata, inside
  `additionalProperties` of metadata), `uniqueItems`, `properties` next to `additionalProperties`,
  the `x-kubernetes-*` extensions (list/map types, list-map keys that are required-or-defaulted
  scalars) and the shape of each `x-kubernetes-validations` entry. Rules are compiled (through the
  `compile_rules` callback) only where no schema error was found at or below their node, and only
  when the schema is structural and its defaults are valid, as upstream does.
* `check_structural` mirrors `ValidateStructural`: every specified field has a type (unless
  int-or-string or preserve-unknown-fields), arrays have items, value validations (`allOf`,
  `anyOf`, `oneOf`, `not`) do not specify types, defaults, descriptions, nullable or extensions and
  only constrain fields the structural part specifies, metadata at the root only restricts
  `name`/`generateName`, embedded resources are objects, and the int-or-string patterns.

The wording of every cause is upstream's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Final

from kubemesh.apiserver.structural.causes import (
    Cause,
    GoStruct,
    child,
    forbidden,
    index,
    invalid,
    key,
    not_supported,
    required,
)
from kubemesh.apiserver.structural.fieldpaths import resolve_field_path
from kubemesh.apiserver.structural.nodes import Node
from kubemesh.apiserver.structural.regex import compile_pattern

__all__ = ["RuleCompiler", "check_openapi", "check_status_root", "check_structural", "rule_value"]

RuleCompiler = Callable[[Node, str, "str | None"], list[Cause]]
"""compile_rules(node, path, uncorrelatable_path) -> causes; the path is that of the node."""

_OPENAPI_TYPES: Final = ["array", "boolean", "integer", "number", "object", "string"]
_META_FIELDS: Final = frozenset(("metadata", "kind", "apiVersion"))
_REASONS: Final = ["FieldValueDuplicate", "FieldValueForbidden", "FieldValueInvalid", "FieldValueRequired"]
_NEWLINES: Final = re.compile(r"[\n\r]+")
_ROOT_WITH_STATUS: Final = (
    "Description", "Type", "Format", "Title", "Maximum", "ExclusiveMaximum", "Minimum", "ExclusiveMinimum",
    "MaxLength", "MinLength", "Pattern", "MaxItems", "MinItems", "UniqueItems", "MultipleOf", "Required", "Items",
    "Properties", "ExternalDocs", "Example", "XPreserveUnknownFields", "XValidations",
)
_KEYWORD_FIELDS: Final = {
    "description": "Description", "type": "Type", "format": "Format", "title": "Title", "maximum": "Maximum",
    "exclusiveMaximum": "ExclusiveMaximum", "minimum": "Minimum", "exclusiveMinimum": "ExclusiveMinimum",
    "maxLength": "MaxLength", "minLength": "MinLength", "pattern": "Pattern", "maxItems": "MaxItems",
    "minItems": "MinItems", "uniqueItems": "UniqueItems", "multipleOf": "MultipleOf", "required": "Required",
    "items": "Items", "properties": "Properties", "externalDocs": "ExternalDocs", "example": "Example",
    "x-kubernetes-preserve-unknown-fields": "XPreserveUnknownFields", "x-kubernetes-validations": "XValidations",
}


def _zero(value: Any) -> bool:
    return value is None or value is False or value in (0, "", [], {})


def check_status_root(schema: dict[str, Any], path: str) -> list[Cause]:
    """With the status subresource, only keywords that survive extracting `properties.status` at the root."""
    for name, value in schema.items():
        if _zero(value):
            continue
        if name == "type":
            if value != "object":
                return [invalid(child(path, "type"), value,
                                'only "object" is allowed as the type at the root of the schema if the status '
                                "subresource is enabled")]
            continue
        if _KEYWORD_FIELDS.get(name) not in _ROOT_WITH_STATUS:
            return [invalid(path, schema, f"only [{' '.join(_ROOT_WITH_STATUS)}] fields are allowed at the root of "
                                          "the schema if the status subresource is enabled")]
    return []


# ---------------------------------------------------------------------------------------------
# ValidateCustomResourceDefinitionOpenAPISchema.


@dataclass(frozen=True, slots=True)
class _Context:
    allow_defaults: bool = True
    no_defaults_reason: str = ""
    inside_meta: bool = False
    uncorrelatable: str | None = None  # where oldSelf became unusable

    def forbid_defaults(self, reason: str) -> _Context:
        return replace(self, allow_defaults=False, no_defaults_reason=reason)

    def forbid_old_self(self, path: str) -> _Context:
        return self if self.uncorrelatable is not None else replace(self, uncorrelatable=path)


def rule_value(rule: dict[str, Any]) -> GoStruct:
    """A rule as Go marshals `ValidationRule`: fields in declaration order, empty ones omitted."""
    out = GoStruct(rule=rule.get("rule", ""))
    for name in ("message", "messageExpression", "reason", "fieldPath", "optionalOldSelf"):
        if rule.get(name) not in (None, ""):
            out[name] = rule[name]
    return out


def check_openapi(node: Node, path: str, *, compile_rules: RuleCompiler | None) -> list[Cause]:
    """All schema errors, then all rule (CEL) errors, as upstream orders them."""
    schema_errs, cel_errs = _check(node, path, _Context(), is_root=True, compile_rules=compile_rules)
    return schema_errs + cel_errs


def _check(node: Node, path: str, ctx: _Context, *, is_root: bool,
           compile_rules: RuleCompiler | None) -> tuple[list[Cause], list[Cause]]:
    errs: list[Cause] = []
    cel: list[Cause] = []

    def merge(result: tuple[list[Cause], list[Cause]]) -> None:
        errs.extend(result[0])
        cel.extend(result[1])

    errs.extend(_standard(node, path, ctx))
    if node.unique_items:
        errs.append(forbidden(child(path, "uniqueItems"),
                              "uniqueItems cannot be set to true since the runtime complexity becomes quadratic"))
    if node.additional_allows is not None:
        if node.has_properties and (not node.additional_allows or node.additional is not None):
            errs.append(forbidden(child(path, "additionalProperties"),
                                  "additionalProperties and properties are mutual exclusive"))
        if node.additional is not None:
            sub = ctx
            if ctx.inside_meta:
                sub = ctx.forbid_defaults("inside additionalProperties applying to object metadata")
            merge(_check(node.additional, child(path, "additionalProperties"), sub, is_root=False,
                         compile_rules=compile_rules))
    for name, prop in node.properties.items():
        sub = ctx
        if node.map_type not in (None, "granular", "atomic"):
            sub = sub.forbid_old_self(path)
        if (is_root or node.embedded) and name in _META_FIELDS:
            sub = replace(sub, inside_meta=True)
            if is_root:
                sub = sub.forbid_defaults(f"in top-level {name}")
        merge(_check(prop, key(child(path, "properties"), name), sub, is_root=False, compile_rules=compile_rules))
    for suffix, nested in node.nested_nodes:
        merge(_check(nested, child(path, suffix), ctx, is_root=False, compile_rules=None))
    if node.items is not None:
        sub = ctx if node.list_type == "map" else ctx.forbid_old_self(path)
        merge(_check(node.items, child(path, "items"), sub, is_root=False, compile_rules=compile_rules))
    if node.preserve_unknown_false:
        errs.append(invalid(child(path, "x-kubernetes-preserve-unknown-fields"), False, "must be true or undefined"))
    errs.extend(_extensions(node, path))
    if node.validations:
        errs.extend(_rule_shapes(node, path))
        if not errs and compile_rules is not None:
            cel.extend(compile_rules(node, path, ctx.uncorrelatable))
    return errs, cel


def _standard(node: Node, path: str, ctx: _Context) -> list[Cause]:
    """specStandardValidatorV3.validate."""
    errs: list[Cause] = []
    if node.type and node.type not in _OPENAPI_TYPES:
        errs.append(not_supported(child(path, "type"), node.type, _OPENAPI_TYPES))
    if node.has_default and not ctx.allow_defaults:
        detail = "must not be set" + (f" {ctx.no_defaults_reason}" if ctx.no_defaults_reason else "")
        errs.append(forbidden(child(path, "default"), detail))
    messages = {"id": "id is not supported", "additionalItems": "additionalItems is not supported",
                "patternProperties": "patternProperties is not supported",
                "definitions": "definitions is not supported", "dependencies": "dependencies is not supported",
                "$ref": "$ref is not supported"}
    for name, message in messages.items():
        if name in node.unsupported:
            errs.append(forbidden(child(path, name), message))
    if node.type == "null":
        errs.append(forbidden(child(path, "type"), "type cannot be set to null, use nullable as an alternative"))
    if node.items_is_array:
        errs.append(forbidden(child(path, "items"), "items must be a schema object and not an array"))
    if ctx.inside_meta and node.embedded:
        errs.append(forbidden(child(path, "x-kubernetes-embedded-resource"),
                              "must not be used inside of resource meta"))
    return errs


def _extensions(node: Node, path: str) -> list[Cause]:
    errs: list[Cause] = []
    type_path = child(path, "type")
    if node.map_type is not None and node.type != "object":
        if not node.type:
            errs.append(required(type_path, "must be object if x-kubernetes-map-type is specified"))
        else:
            errs.append(invalid(type_path, node.type, "must be object if x-kubernetes-map-type is specified"))
    if node.map_type is not None and node.map_type not in ("atomic", "granular"):
        errs.append(not_supported(child(path, "x-kubernetes-map-type"), node.map_type, ["atomic", "granular"]))
    items = node.items
    if node.list_type is not None and node.type != "array":
        if not node.type:
            errs.append(required(type_path, "must be array if x-kubernetes-list-type is specified"))
        else:
            errs.append(invalid(type_path, node.type, "must be array if x-kubernetes-list-type is specified"))
    elif node.list_type == "set" and items is not None:
        message = "must be atomic as item of a list with x-kubernetes-list-type=set"
        if items.type == "array" and items.list_type not in (None, "atomic"):
            errs.append(invalid(child(child(path, "items"), "x-kubernetes-list-type"), items.list_type, message))
        elif items.type == "object" and items.map_type != "atomic":
            # upstream reports the items' list type (normally unset) as the bad value
            errs.append(invalid(child(child(path, "items"), "x-kubernetes-map-type"), items.list_type, message))
    if node.list_type is not None and node.list_type not in ("atomic", "set", "map"):
        errs.append(not_supported(child(path, "x-kubernetes-list-type"), node.list_type, ["atomic", "set", "map"]))
    if node.list_map_keys:
        if node.list_type is None:
            errs.append(required(child(path, "x-kubernetes-list-type"),
                                 "must be map if x-kubernetes-list-map-keys is non-empty"))
        elif node.list_type != "map":
            errs.append(invalid(child(path, "x-kubernetes-list-type"), node.list_type,
                                "must be map if x-kubernetes-list-map-keys is non-empty"))
    if node.list_type == "map":
        errs.extend(_map_list(node, path))
    if node.list_type in ("set", "map") and items is not None:
        errs.extend(_map_set_items(node, items, path))
    return errs


def _map_list(node: Node, path: str) -> list[Cause]:
    errs: list[Cause] = []
    keys_path = child(path, "x-kubernetes-list-map-keys")
    if not node.list_map_keys:
        errs.append(required(keys_path, "must not be empty if x-kubernetes-list-type is map"))
    items = node.items
    if items is None:
        if not node.items_is_array:
            errs.append(required(child(path, "items"), "must have a schema if x-kubernetes-list-type is map"))
        else:
            errs.append(invalid(child(path, "items"), node.raw.get("items"),
                                "must only have a single schema if x-kubernetes-list-type is map"))
        return errs
    if items.type != "object":
        errs.append(invalid(child(child(path, "items"), "type"), items.type,
                            "must be object if parent array's x-kubernetes-list-type is map"))
        return errs
    seen: set[str] = set()
    for name in node.list_map_keys:
        prop = items.properties.get(name)
        if prop is not None:
            if prop.type in ("array", "object"):
                # upstream reports the items' type as the bad value
                errs.append(invalid(child(key(child(child(path, "items"), "properties"), name), "type"), items.type,
                                    "must be a scalar type if parent array's x-kubernetes-list-type is map"))
        else:
            errs.append(invalid(keys_path, node.list_map_keys, "entries must all be names of item properties"))
        if name in seen:
            errs.append(invalid(keys_path, node.list_map_keys, "must not contain duplicate entries"))
        seen.add(name)
    return errs


def _map_set_items(node: Node, items: Node, path: str) -> list[Cause]:
    """validateMapListKeysMapSet: set/map items are not nullable, map keys are required or defaulted."""
    errs: list[Cause] = []
    items_path = child(path, "items")
    if items.nullable:
        errs.append(forbidden(child(items_path, "nullable"), f"cannot be nullable when x-kubernetes-list-type is "
                                                             f"{node.list_type}"))
    if node.list_type == "map":
        for name in node.list_map_keys:
            prop = items.properties.get(name)
            if prop is None:
                continue
            prop_path = key(child(items_path, "properties"), name)
            if name not in items.required and not prop.has_default:
                errs.append(required(child(prop_path, "default"), "this property is in x-kubernetes-list-map-keys, so "
                                                                  "it must have a default or be a required property"))
            if prop.nullable:
                errs.append(forbidden(child(prop_path, "nullable"),
                                      "this property is in x-kubernetes-list-map-keys, so it cannot be nullable"))
    return errs


def _rule_shapes(node: Node, path: str) -> list[Cause]:
    errs: list[Cause] = []
    for i, rule in enumerate(node.validations):
        base = index(child(path, "x-kubernetes-validations"), i)
        text = rule.get("rule", "")
        message = rule.get("message", "")
        msg_expr = rule.get("messageExpression", "")
        field_path = rule.get("fieldPath", "")
        if not all(isinstance(v, str) for v in (text, message, msg_expr, field_path)):
            errs.append(invalid(base, rule_value(rule), "rule, message, messageExpression and fieldPath "
                                                                   "must be strings"))
            continue
        if not text.strip():
            errs.append(required(child(base, "rule"), "rule is not specified"))
        elif message and not message.strip():
            errs.append(invalid(child(base, "message"), message, "must be non-empty if specified"))
        elif _NEWLINES.search(message.strip()):
            errs.append(invalid(child(base, "message"), message, "must not contain line breaks"))
        elif _NEWLINES.search(text.strip()) and not message.strip():
            errs.append(required(child(base, "message"), "message must be specified if rule contains line breaks"))
        if msg_expr and not msg_expr.strip():
            errs.append(required(child(base, "messageExpression"), "messageExpression must be non-empty if specified"))
        reason = rule.get("reason")
        if reason is not None and reason not in _REASONS:
            errs.append(not_supported(child(base, "reason"), reason, _REASONS))
        if field_path and not field_path.strip():
            errs.append(invalid(child(base, "fieldPath"), field_path, "must be non-empty if specified"))
        if _NEWLINES.search(field_path):
            errs.append(invalid(child(base, "fieldPath"), field_path, "must not contain line breaks"))
        if field_path and resolve_field_path(field_path, node)[0] is None:
            errs.append(invalid(child(base, "fieldPath"), field_path, "must be a valid path"))
    return errs


# ---------------------------------------------------------------------------------------------
# ValidateStructural.

_ROOT, _ITEM, _FIELD = 0, 1, 2


def check_structural(node: Node, path: str) -> list[Cause]:
    """Structural invariants and completeness, sorted as upstream sorts them (by their text)."""
    errs = _invariants(node, _ROOT, path) + _completeness(node, node, path, path)
    return sorted(errs, key=lambda c: f"{c['field']}: {c['message']}")


def _int_or_string_pair(group: list[Node]) -> bool:
    """`anyOf: [{type: integer}, {type: string}]` with nothing else in either branch."""
    if len(group) != 2:
        return False
    return [json.dumps(n.raw, sort_keys=True) for n in group] == ['{"type": "integer"}', '{"type": "string"}']


def _invariants(node: Node | None, level: int, path: str) -> list[Cause]:
    if node is None:
        return []
    errs: list[Cause] = []
    if node.type == "array" and node.items is None:
        errs.append(required(child(path, "items"), "must be specified"))
    errs.extend(_invariants(node.items, _ITEM, child(path, "items")))
    for name, prop in node.properties.items():
        errs.extend(_invariants(prop, _FIELD, key(child(path, "properties"), name)))
    if node.additional_allows is not None:
        if level == _ROOT:
            errs.append(forbidden(child(path, "additionalProperties"), "must not be used at the root"))
        errs.extend(_invariants(node.additional, _FIELD, child(path, "additionalProperties")))
    if node.int_or_string and node.preserve_unknown:
        errs.append(invalid(child(path, "x-kubernetes-preserve-unknown-fields"), True,
                            "must be false if x-kubernetes-int-or-string is true"))
    if node.int_or_string and node.embedded:
        errs.append(invalid(child(path, "x-kubernetes-embedded-resource"), True,
                            "must be false if x-kubernetes-int-or-string is true"))
    skip_any_of = _int_or_string_pair(node.any_of)
    skip_first_all_of = bool(node.all_of) and _int_or_string_pair(node.all_of[0].any_of)
    errs.extend(_value_validation(node, skip_any_of, skip_first_all_of, path))
    check_meta = level == _ROOT or node.embedded
    type_path = child(path, "type")
    if node.embedded and node.type != "object":
        if not node.type:
            errs.append(required(type_path, "must be object if x-kubernetes-embedded-resource is true"))
        else:
            errs.append(invalid(type_path, node.type, "must be object if x-kubernetes-embedded-resource is true"))
    elif not node.type and not node.int_or_string and not node.preserve_unknown:
        where = {_ROOT: "at the root", _ITEM: "for specified array items", _FIELD: "for specified object fields"}[level]
        errs.append(required(type_path, f"must not be empty {where}"))
    if node.embedded and node.additional_allows is not None:
        errs.append(forbidden(child(path, "additionalProperties"),
                              "must not be used if x-kubernetes-embedded-resource is set"))
    if level == _ROOT and node.type and node.type != "object":
        errs.append(invalid(type_path, node.type, "must be object at the root"))
    props_path = child(path, "properties")
    for name in ("kind", "apiVersion"):
        meta_field = node.properties.get(name)
        if meta_field is not None and check_meta and meta_field.type != "string":
            errs.append(invalid(child(key(props_path, name), "type"), meta_field.type, "must be string"))
    metadata = node.properties.get("metadata")
    if metadata is not None:
        errs.extend(_metadata(metadata, check_meta, level, key(props_path, "metadata")))
    if node.embedded and not node.preserve_unknown and not node.properties:
        errs.append(required(props_path, "must not be empty if x-kubernetes-embedded-resource is true without "
                                         "x-kubernetes-preserve-unknown-fields"))
    return errs


# what a root metadata schema may contain besides name/generateName restrictions
_METADATA_NEUTRAL: Final = frozenset(("type", "default"))


def _metadata(node: Node, check_meta: bool, level: int, path: str) -> list[Cause]:
    errs: list[Cause] = []
    if check_meta and node.type != "object":
        errs.append(invalid(child(path, "type"), node.type, "must be object"))
    if level == _ROOT:
        names = set(node.properties)
        only_names = names <= {"name", "generateName"}
        extra = [k for k, v in node.raw.items() if k not in _METADATA_NEUTRAL and k != "properties"
                 and not (k in ("x-kubernetes-preserve-unknown-fields",) and v is False) and not _zero(v)]
        if not only_names or extra:
            errs.append(forbidden(path, "must not specify anything other than name and generateName, but metadata "
                                        "is implicitly specified"))
    return errs


def _value_validation(node: Node, skip_any_of: bool, skip_first_all_of_any_of: bool, path: str) -> list[Cause]:
    errs: list[Cause] = []
    if not skip_any_of:
        for i, n in enumerate(node.any_of):
            errs.extend(_nested(n, False, index(child(path, "anyOf"), i)))
    for i, n in enumerate(node.all_of):
        errs.extend(_nested(n, skip_first_all_of_any_of and i == 0, index(child(path, "allOf"), i)))
    for i, n in enumerate(node.one_of):
        errs.extend(_nested(n, False, index(child(path, "oneOf"), i)))
    if node.not_ is not None:
        errs.extend(_nested(node.not_, False, child(path, "not")))
    if node.pattern:
        problem = compile_pattern(node.pattern)[1]
        if problem is not None:
            errs.append(invalid(child(path, "pattern"), node.pattern,
                                f"must be a valid regular expression, but isn't: {problem}"))
    return errs


def _nested(node: Node, skip_any_of: bool, path: str) -> list[Cause]:
    errs = _value_validation(node, skip_any_of, False, path)
    if node.items is not None:
        errs.extend(_nested(node.items, False, child(path, "items")))
    for name, prop in node.properties.items():
        errs.extend(_nested(prop, False, key(child(path, "properties"), name)))
    if node.type:
        errs.append(forbidden(child(path, "type"), "must be empty to be structural"))
    if node.additional_allows is not None:
        errs.append(forbidden(child(path, "additionalProperties"), "must be undefined to be structural"))
    checks = (
        (node.has_default, "default", "must be undefined to be structural"),
        (bool(node.title), "title", "must be empty to be structural"),
        (bool(node.description), "description", "must be empty to be structural"),
        (node.nullable, "nullable", "must be false to be structural"),
        (node.preserve_unknown, "x-kubernetes-preserve-unknown-fields", "must be false to be structural"),
        (node.embedded, "x-kubernetes-embedded-resource", "must be false to be structural"),
        (node.int_or_string, "x-kubernetes-int-or-string", "must be false to be structural"),
        (bool(node.list_map_keys), "x-kubernetes-list-map-keys", "must be empty to be structural"),
        (node.list_type is not None, "x-kubernetes-list-type", "must be undefined to be structural"),
        (node.map_type is not None, "x-kubernetes-map-type", "must be undefined to be structural"),
        (bool(node.validations), "x-kubernetes-validations", "must be empty to be structural"),
    )
    errs.extend(forbidden(child(path, name), message) for present, name, message in checks if present)
    if "metadata" in node.properties:
        errs.append(forbidden(key(child(path, "properties"), "metadata"), "must not be specified in a nested context"))
    return errs


def _completeness(root: Node, node: Node | None, s_path: str, v_path: str) -> list[Cause]:
    """Every value validation constrains only fields that the structural part specifies."""
    errs: list[Cause] = []
    for suffix, nested in root.nested_nodes:
        errs.extend(_nested_complete(nested, node, s_path, child(v_path, suffix)))
    return errs


def _nested_complete(v: Node, s: Node | None, s_path: str, v_path: str) -> list[Cause]:
    if s is None:
        return [required(s_path, f"because it is defined in {v_path}")]
    errs: list[Cause] = []
    for suffix, nested in v.nested_nodes:
        errs.extend(_nested_complete(nested, s, s_path, child(v_path, suffix)))
    if v.items is not None:
        errs.extend(_nested_complete(v.items, s.items, child(s_path, "items"), child(v_path, "items")))
    for name, prop in v.properties.items():
        s_prop = s.properties.get(name)
        if s_prop is None:
            errs.append(required(key(child(s_path, "properties"), name),
                                 f"because it is defined in {key(child(v_path, 'properties'), name)}"))
        else:
            errs.extend(_nested_complete(prop, s_prop, key(child(s_path, "properties"), name),
                                         key(child(v_path, "properties"), name)))
    return errs
