"""Pruning of unknown fields, as the apiextensions decoder does on every write and read.

* Fields not specified by `properties` (nor allowed by `additionalProperties`) are removed, and
  their paths returned (`spec.foo`, `spec.items[0].bar`, `spec.labels.x.y` under a map entry),
  sorted as upstream sorts them.
* `x-kubernetes-preserve-unknown-fields` keeps unknown fields at that level; specified fields
  below it are still pruned by their own schema (and the items of a list below it are handled
  the same way, as upstream's `skipPrune` does).
* At the root and in every `x-kubernetes-embedded-resource` object, `apiVersion`, `kind` and
  `metadata` are kept whatever the schema says, and `metadata` is pruned to the fields of a Go
  ObjectMeta (its unknown fields reported as `metadata.foo`), as decoding into ObjectMeta does.
* Nulls that the schema does not accept (not nullable) and could not default (no `default`) are
  dropped (`PruneNonNullableNullsWithoutDefaults`); those are not reported. A null is looked up
  by field name only (`properties`, else `additionalProperties`), list items are never dropped.

Values are decoded JSON: dicts, lists, strings, numbers, booleans and None, of exactly those
types (no subclasses), which lets the walk dispatch on `type()`.

`compile_pruner` turns a schema into closures once. Upstream prunes fields in one walk and drops
nulls in a second; both only ever delete, and a field's null check depends on nothing but its
own value and schema, so the compiled pruner does both in a single walk with the same result.
Paths are built only for containers and for what is pruned, never for every scalar.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from kubemesh.apiserver.structural.nodes import Node
from kubemesh.apiserver.structural.objectmeta import prune_object_meta

__all__ = ["Pruner", "compile_pruner", "prune_nulls"]

_META_FIELDS: Final = frozenset(("apiVersion", "kind", "metadata"))
_CONTAINERS: Final = frozenset((dict, list))  # values are decoded JSON: exactly these types, no subclasses

Pruner = Callable[[Any, str, list[str]], None]
"""pruner(value, path, pruned): prune `value` (at `path`) in place, appending removed paths."""


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _drops_null(node: Node | None) -> bool:
    """Whether a null field with this schema is dropped (PruneNonNullableNullsWithoutDefaults)."""
    return node is not None and not node.nullable and not node.has_default


def _field_schema(node: Node | None, name: str) -> Node | None:
    """The schema prune_nulls uses for a field: by property name, else additionalProperties."""
    if node is None:
        return None
    prop = node.properties.get(name)
    return prop if prop is not None else node.additional


def prune_nulls(value: Any, node: Node | None) -> None:
    """Drop null fields whose schema is neither nullable nor defaulted (list items are kept).

    The plain recursive form, used where the compiled pruner does not walk (below the metadata
    of an embedded resource, whose schema the prune walk ignores).
    """
    if isinstance(value, dict):
        for name in list(value):
            schema = _field_schema(node, name)
            item = value[name]
            if item is None and _drops_null(schema):
                del value[name]
            else:
                prune_nulls(item, schema)
    elif isinstance(value, list):
        items = node.items if node is not None else None
        for item in value:
            prune_nulls(item, items)


def _prune_unspecified(value: Any, path: str, pruned: list[str]) -> None:
    """No schema at all (`additionalProperties: true`, or items without a schema): objects lose every field."""
    if type(value) is dict:
        for name in list(value):
            pruned.append(_join(path, name))
            del value[name]
    elif type(value) is list:
        for i, item in enumerate(value):
            if type(item) in _CONTAINERS:
                _prune_unspecified(item, f"{path}[{i}]", pruned)


class _Compiler:
    """Builds the pruner closures; one per (node, embedded, mode), memoized for shared subtrees."""

    def __init__(self, *, nulls: bool) -> None:
        self.nulls = nulls
        self.memo: dict[tuple[int, bool, bool], Pruner] = {}

    def pruner(self, node: Node | None, *, embedded: bool, skip: bool = False, top: bool = False) -> Pruner:
        """`skip`: keep unknown fields (below x-kubernetes-preserve-unknown-fields)."""
        if node is None:
            return _prune_unspecified
        skip = skip or node.preserve_unknown
        memo_key = (id(node), embedded, skip)
        found = self.memo.get(memo_key)
        if found is not None and not top:
            return found
        built = self._build(node, embedded=embedded, skip=skip, top=top)
        if not top:
            self.memo[memo_key] = built
        return built

    def _child(self, node: Node | None) -> tuple[Pruner, bool]:
        """The pruner of a field with schema `node` and whether a null there is dropped."""
        if node is None:
            return _prune_unspecified, False
        return self.pruner(node, embedded=node.embedded), self.nulls and _drops_null(node)

    def _build(self, node: Node, *, embedded: bool, skip: bool, top: bool) -> Pruner:
        nulls = self.nulls
        # per field name: what prunes inside a container value, and whether a null is dropped
        children: dict[str, Pruner] = {}
        drops: set[str] = set()
        for name, prop in node.properties.items():
            children[name], drop = self._child(prop)
            if drop:
                drops.add(name)
        if embedded:
            # apiVersion, kind and metadata are kept whatever the schema says; metadata is reduced
            # to ObjectMeta's fields; nulls go by the schema prune_nulls looks up for them
            for name in _META_FIELDS:
                children[name] = _meta_pruner(name, _field_schema(node, name) if nulls else None)
                drops.discard(name)
                if nulls and _drops_null(_field_schema(node, name)):
                    drops.add(name)
        known = frozenset(children)
        has_extra = node.additional_allows is not None
        # any other name: pruned by additionalProperties, else kept (skip) or removed
        extra, extra_drops = self._child(node.additional) if has_extra else (None, False)
        # the names that stay; None when every name stays
        allowed = None if skip or has_extra else known
        items_node = node.items
        if skip:
            # skipPrune: list items are walked in skip mode too, and only when items are specified
            items = self.pruner(items_node, embedded=items_node.embedded, skip=True) if items_node else None
        else:
            items = self.pruner(items_node, embedded=items_node.embedded) if items_node else _prune_unspecified

        def prune_value(value: Any, path: str, pruned: list[str]) -> None:
            kind = type(value)
            if kind is dict:
                if allowed is not None and not value.keys() <= allowed:  # (a C-level subset test)
                    for name in [name for name in value if name not in allowed]:
                        # unknown meta field names are reported only below the root
                        if name not in _META_FIELDS or not top:
                            pruned.append(_join(path, name))
                        del value[name]
                dropped: list[str] | None = None
                for name, item in value.items():
                    if type(item) in _CONTAINERS:
                        child = children.get(name, extra)
                        if child is not None:
                            child(item, f"{path}.{name}" if path else name, pruned)
                    elif item is None and (name in drops if name in known else extra_drops):
                        if dropped is None:
                            dropped = []
                        dropped.append(name)
                if dropped is not None:
                    for name in dropped:
                        del value[name]
            elif kind is list and items is not None:
                for i, item in enumerate(value):
                    if type(item) in _CONTAINERS:
                        items(item, f"{path}[{i}]", pruned)

        return prune_value


def _meta_pruner(name: str, schema: Node | None) -> Pruner:
    """apiVersion, kind, metadata of a resource: metadata to ObjectMeta's fields, then the nulls of `schema`."""

    def prune_meta(value: Any, path: str, pruned: list[str]) -> None:
        if name == "metadata":
            prune_object_meta(value, path, pruned)
        if schema is not None:
            prune_nulls(value, schema)

    return prune_meta


def compile_pruner(node: Node, *, embedded: bool, top: bool = False, nulls: bool = True) -> Pruner:
    """A pruner for values of `node`.

    `embedded`: the value is a resource (the root, or an x-kubernetes-embedded-resource object),
    whose apiVersion, kind and metadata are kept. `top`: the root of the custom object (unknown
    apiVersion/kind/metadata names are not reported there). `nulls`: also drop the nulls the
    schema neither accepts nor defaults (as decoding does); without it only unknown fields go
    (as the check of a `default` value prunes it).
    """
    return _Compiler(nulls=nulls).pruner(node, embedded=embedded, top=top)
