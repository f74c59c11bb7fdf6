"""Defaulting, as apiextensions applies it after decoding (on writes and on reads from storage).

For every object value, each property that has a `default` and is absent (or null while not
nullable) gets a deep copy of the default; then defaulting descends into the values present, so
defaults of nested objects apply only where their parent exists (an absent parent is created only
by its own default, which is then defaulted further). Map entries (`additionalProperties`) and
list items that are null while their schema is not nullable are replaced by that schema's default.
Null fields without a default are not touched here: pruning drops them.

`compile_defaulter` builds closures once, only along the paths of the schema that lead to a
`default`: a value whose schema has no default at or below it is never visited. Values are
decoded JSON (dicts and lists of exactly those types).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from kubemesh.apiserver.structural.nodes import Node

__all__ = ["Defaulter", "compile_defaulter", "has_defaults"]

Defaulter = Callable[[Any], None]
"""defaulter(value): apply the defaults to `value` in place."""


def has_defaults(node: Node) -> bool:
    """Whether any default is declared at or below `node` (structural part only)."""
    if node.has_default:
        return True
    if node.items is not None and has_defaults(node.items):
        return True
    if node.additional is not None and has_defaults(node.additional):
        return True
    return any(has_defaults(p) for p in node.properties.values())


def _copy_json(value: Any) -> Any:
    """A deep copy of a decoded JSON value."""
    if isinstance(value, dict):
        return {k: _copy_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy_json(v) for v in value]
    if value is None or isinstance(value, str | int | float):  # immutable (bool is an int)
        return value
    return copy.deepcopy(value)


def _factory(default: Any) -> Callable[[], Any]:
    """What produces a fresh copy of `default` (the value itself when it is immutable)."""
    if default is None or isinstance(default, str | int | float):  # immutable: sharing it is safe
        return lambda: default
    return lambda: _copy_json(default)


def compile_defaulter(node: Node | None) -> Defaulter | None:
    """The defaulter of values of `node`; None when it would never change one."""
    if node is None or not has_defaults(node):
        return None
    # properties with their own default, in schema order: (name, fresh copy, null is replaced)
    own = [(name, _factory(prop.default), not prop.nullable) for name, prop in node.properties.items()
           if prop.has_default]
    below = [(name, sub) for name, prop in node.properties.items() if (sub := compile_defaulter(prop)) is not None]
    extra_node = node.additional
    extra = compile_defaulter(extra_node)
    extra_default = (_factory(extra_node.default) if extra_node is not None and extra_node.has_default
                     and not extra_node.nullable else None)
    walk_extra = extra is not None or extra_default is not None
    names = frozenset(node.properties)
    items_node = node.items
    items = compile_defaulter(items_node)
    items_default = (_factory(items_node.default) if items_node is not None and items_node.has_default
                     and not items_node.nullable else None)
    if not own and not below and not walk_extra and items is None and items_default is None:
        return None  # e.g. a scalar with a default: its parent applies it, nothing happens inside

    def default_value(value: Any) -> None:
        if type(value) is dict:
            for name, fresh, replaces_null in own:
                if name not in value or (replaces_null and value[name] is None):
                    value[name] = fresh()
            # each subtree is defaulted independently, so the order of these walks is free
            for name, sub in below:
                if name in value:
                    sub(value[name])
            if walk_extra:
                for name, item in value.items():
                    if name in names:
                        continue
                    current = item
                    if item is None and extra_default is not None:
                        current = value[name] = extra_default()
                    if extra is not None:
                        extra(current)
        elif type(value) is list and (items is not None or items_default is not None):
            for i, item in enumerate(value):
                current = item
                if item is None and items_default is not None:
                    current = value[i] = items_default()
                if items is not None:
                    items(current)

    return default_value
