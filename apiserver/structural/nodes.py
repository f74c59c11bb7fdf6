"""The parsed form of an `openAPIV3Schema` (`JSONSchemaProps`), one `Node` per schema object.

`parse` reads the raw dict once and keeps every keyword typed (numbers as numbers, extensions as
booleans...). The same class serves the structural part of a schema (reached through
`properties`, `items`, `additionalProperties`) and its value validations (under `allOf`, `anyOf`,
`oneOf`, `not`); `checking` decides which keywords each part may use. A keyword of the wrong JSON
type is reported as a cause, as Kubernetes' decoder would refuse it, and then ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from kubemesh.apiserver.structural.causes import Cause, child, index, invalid, key

__all__ = ["KNOWN_KEYWORDS", "Node", "parse"]

_NUMBER_KEYS: Final = ("maximum", "minimum", "multipleOf")
_INT_KEYS: Final = ("maxLength", "minLength", "maxItems", "minItems", "maxProperties", "minProperties")
_BOOL_KEYS: Final = ("exclusiveMaximum", "exclusiveMinimum", "uniqueItems", "nullable",
                      "x-kubernetes-embedded-resource",
                     "x-kubernetes-int-or-string", "x-kubernetes-preserve-unknown-fields")
_STRING_KEYS: Final = ("type", "format", "pattern", "title", "description", "x-kubernetes-list-type",
                       "x-kubernetes-map-type", "id", "$schema", "$ref")

KNOWN_KEYWORDS: Final = frozenset((
    *_NUMBER_KEYS, *_INT_KEYS, *_BOOL_KEYS, *_STRING_KEYS, "default", "enum", "example", "externalDocs",
    "required", "items", "properties", "additionalProperties", "allOf", "anyOf", "oneOf", "not",
    "x-kubernetes-list-map-keys", "x-kubernetes-validations", "patternProperties", "definitions",
    "dependencies", "additionalItems",
))


@dataclass(slots=True, eq=False)
class Node:
    """One schema object. Absent keywords are None (or empty), as in `JSONSchemaProps`."""

    raw: dict[str, Any]
    type: str = ""
    format: str = ""
    title: str = ""
    description: str = ""
    nullable: bool = False
    has_default: bool = False
    default: Any = None
    enum: list[Any] | None = None
    maximum: float | int | None = None
    exclusive_maximum: bool = False
    minimum: float | int | None = None
    exclusive_minimum: bool = False
    max_length: int | None = None
    min_length: int | None = None
    pattern: str = ""
    max_items: int | None = None
    min_items: int | None = None
    unique_items: bool = False
    multiple_of: float | int | None = None
    max_properties: int | None = None
    min_properties: int | None = None
    required: list[str] = field(default_factory=list)
    properties: dict[str, Node] = field(default_factory=dict)
    has_properties: bool = False
    additional: Node | None = None
    additional_allows: bool | None = None  # set when additionalProperties is present
    items: Node | None = None
    items_is_array: bool = False
    all_of: list[Node] = field(default_factory=list)
    any_of: list[Node] = field(default_factory=list)
    one_of: list[Node] = field(default_factory=list)
    not_: Node | None = None
    preserve_unknown: bool = False
    preserve_unknown_false: bool = False
    embedded: bool = False
    int_or_string: bool = False
    list_type: str | None = None
    list_map_keys: list[str] = field(default_factory=list)
    map_type: str | None = None
    validations: list[dict[str, Any]] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)  # id, $schema, $ref, patternProperties...

    @property
    def nested_nodes(self) -> list[tuple[str, Node]]:
        """The (path suffix, node) of every value-validation child: allOf/anyOf/oneOf/not."""
        out: list[tuple[str, Node]] = []
        for name, group in (("allOf", self.all_of), ("anyOf", self.any_of), ("oneOf", self.one_of)):
            out.extend((index(name, i), n) for i, n in enumerate(group))
        if self.not_ is not None:
            out.append(("not", self.not_))
        return out


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def parse(raw: Any, path: str, causes: list[Cause]) -> Node:
    """Parse one schema object (and everything below it), appending decoding problems to causes."""
    if not isinstance(raw, dict):
        causes.append(invalid(path, raw, "must be an object"))
        return Node(raw={})
    node = Node(raw=raw)
    for name in _STRING_KEYS:
        if name in raw:
            value = raw[name]
            if not isinstance(value, str):
                causes.append(invalid(child(path, name), value, "must be a string"))
                continue
            if name == "type":
                node.type = value
            elif name == "format":
                node.format = value
            elif name == "pattern":
                node.pattern = value
            elif name == "title":
                node.title = value
            elif name == "description":
                node.description = value
            elif name == "x-kubernetes-list-type":
                node.list_type = value
            elif name == "x-kubernetes-map-type":
                node.map_type = value
            elif value:
                node.unsupported.append(name)
    for name in _BOOL_KEYS:
        if name in raw:
            value = raw[name]
            if not isinstance(value, bool):
                causes.append(invalid(child(path, name), value, "must be a boolean"))
                continue
            if name == "exclusiveMaximum":
                node.exclusive_maximum = value
            elif name == "exclusiveMinimum":
                node.exclusive_minimum = value
            elif name == "uniqueItems":
                node.unique_items = value
            elif name == "nullable":
                node.nullable = value
            elif name == "x-kubernetes-embedded-resource":
                node.embedded = value
            elif name == "x-kubernetes-int-or-string":
                node.int_or_string = value
            else:
                node.preserve_unknown = value
                node.preserve_unknown_false = not value
    for name in _NUMBER_KEYS:
        if name in raw:
            value = raw[name]
            if not _number(value):
                causes.append(invalid(child(path, name), value, "must be a number"))
            elif name == "maximum":
                node.maximum = value
            elif name == "minimum":
                node.minimum = value
            else:
                node.multiple_of = value
    for name in _INT_KEYS:
        if name in raw:
            value = raw[name]
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            if not isinstance(value, int) or isinstance(value, bool):
                causes.append(invalid(child(path, name), value, "must be an integer"))
                continue
            setattr(node, {"maxLength": "max_length", "minLength": "min_length", "maxItems": "max_items",
                           "minItems": "min_items", "maxProperties": "max_properties",
                           "minProperties": "min_properties"}[name], value)
    if "default" in raw:
        node.has_default = raw["default"] is not None
        node.default = raw["default"]
    if "enum" in raw:
        if isinstance(raw["enum"], list):
            node.enum = raw["enum"]
        else:
            causes.append(invalid(child(path, "enum"), raw["enum"], "must be an array"))
    for name, target in (("required", "required"), ("x-kubernetes-list-map-keys", "list_map_keys")):
        if name in raw:
            value = raw[name]
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                setattr(node, target, list(value))
            else:
                causes.append(invalid(child(path, name), value, "must be an array of strings"))
    if "properties" in raw:
        props = raw["properties"]
        if isinstance(props, dict):
            node.has_properties = bool(props)
            node.properties = {k: parse(v, key(child(path, "properties"), k), causes) for k, v in props.items()}
        else:
            causes.append(invalid(child(path, "properties"), props, "must be an object"))
    if "additionalProperties" in raw:
        extra = raw["additionalProperties"]
        if isinstance(extra, bool):
            node.additional_allows = extra
        else:
            node.additional_allows = True
            node.additional = parse(extra, child(path, "additionalProperties"), causes)
    if "items" in raw:
        items = raw["items"]
        if isinstance(items, list):
            node.items_is_array = True
        else:
            node.items = parse(items, child(path, "items"), causes)
    for name, members in (("allOf", node.all_of), ("anyOf", node.any_of), ("oneOf", node.one_of)):
        if name in raw:
            group = raw[name]
            if isinstance(group, list):
                members.extend(parse(v, index(child(path, name), i), causes) for i, v in enumerate(group))
            else:
                causes.append(invalid(child(path, name), group, "must be an array"))
    if "not" in raw:
        node.not_ = parse(raw["not"], child(path, "not"), causes)
    if "x-kubernetes-validations" in raw:
        rules = raw["x-kubernetes-validations"]
        if isinstance(rules, list) and all(isinstance(r, dict) for r in rules):
            node.validations = list(rules)
        else:
            causes.append(invalid(child(path, "x-kubernetes-validations"), rules, "must be an array of objects"))
    for name in ("patternProperties", "definitions", "dependencies", "additionalItems"):
        if raw.get(name) is not None and raw.get(name) != {}:
            node.unsupported.append(name)
    return node
