"""`x-kubernetes-list-type: set|map` uniqueness, as apiextensions' listtype validation reports it.

A set may not hold the same value twice; a map list may not hold two items with the same values
of `x-kubernetes-list-map-keys` (absent keys compare as equal). Each duplicate is reported once,
at its second occurrence, as `Duplicate value: <value>` (for map lists the value is the key
object, e.g. `{"name":"a"}`). Paths use `[i]` and `[key]` like `field.Path`.

On update the checker is given the old object: a list equal to its old counterpart (reached by
the same property names and map keys) is not checked, since whatever it breaks the old object
breaks too (see `StructuralSchema._list_causes` for why that is enough), and neither is a value
the OpenAPI validation already found unchanged. Objects are not compared on the way down:
comparing the lists alone is cheaper and skips the same errors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubemesh.apiserver.structural.causes import Cause, child, duplicate, go_json, index, invalid, key
from kubemesh.apiserver.structural.equality import Unchanged, deep_equal
from kubemesh.apiserver.structural.nodes import Node
from kubemesh.apiserver.structural.validating import NO_OLD

__all__ = ["ListChecker", "compile_list_checker"]

ListChecker = Callable[[Any, str, list[Cause], Any, Unchanged], None]
"""checker(value, path, errs, old, unchanged): `old` is the value's old counterpart, or NO_OLD;
`unchanged` the values already known to equal their old counterpart (see `Sink`)."""


def _identity(value: Any) -> tuple[str, Any]:
    if isinstance(value, dict | list):
        return ("json", go_json(value))
    return (type(value).__name__, value)


def _second_occurrences(values: list[Any]) -> list[int]:
    counts: dict[tuple[str, Any], int] = {}
    out: list[int] = []
    for i, value in enumerate(values):
        ident = _identity(value)
        seen = counts.get(ident, 0)
        if seen == 1:
            out.append(i)
        counts[ident] = seen + 1
    return out


_UNSPECIFIED = object()


def _map_list(path: str, keys: list[str], items: list[Any], errs: list[Cause]) -> None:
    for i, item in enumerate(items):
        if item is not None and not isinstance(item, dict):
            errs.append(invalid(index(path, i), item, "must be an object for an array of list-type map"))
            return
    if len(items) <= 1:
        return
    if len(keys) == 1:
        name = keys[0]
        values = [(item or {}).get(name, _UNSPECIFIED) for item in items]
        idents = [("unspecified", None) if v is _UNSPECIFIED else _identity(v) for v in values]
        counts: dict[tuple[str, Any], int] = {}
        for i, ident in enumerate(idents):
            seen = counts.get(ident, 0)
            if seen == 1:
                shown = {} if values[i] is _UNSPECIFIED else {name: values[i]}
                errs.append(duplicate(index(path, i), shown))
            counts[ident] = seen + 1
        return
    key_objects = [{k: item[k] for k in keys if k in item} if item is not None else {} for item in items]
    for i in _second_occurrences(key_objects):
        errs.append(duplicate(index(path, i), key_objects[i]))


def compile_list_checker(node: Node) -> ListChecker | None:
    """A checker for the set/map lists at or below `node`, None when there are none."""
    props = {name: c for name, prop in node.properties.items() if (c := compile_list_checker(prop)) is not None}
    extra = compile_list_checker(node.additional) if node.additional is not None else None
    items = compile_list_checker(node.items) if node.items is not None else None
    list_type = node.list_type if node.list_type in ("set", "map") else None
    map_keys = list(node.list_map_keys)
    if not props and extra is None and items is None and list_type is None:
        return None

    # with a single property to look into, no need to scan the value's fields for it (and the
    # order of the causes, value order, cannot differ)
    only = next(iter(props.items())) if len(props) == 1 else None

    def check(value: Any, path: str, errs: list[Cause], old: Any, unchanged: Unchanged) -> None:
        if old is not NO_OLD and id(value) in unchanged:
            return
        if type(value) is dict:
            olds = old if type(old) is dict else {}
            if extra is not None:
                for k, v in value.items():
                    extra(v, key(path, k), errs, olds.get(k, NO_OLD), unchanged)
            if only is not None:
                name, single = only
                if name in value:
                    single(value[name], child(path, name), errs, olds.get(name, NO_OLD), unchanged)
                return
            for k, v in value.items():
                sub = props.get(k)
                if sub is not None:
                    sub(v, child(path, k), errs, olds.get(k, NO_OLD), unchanged)
        elif type(value) is list:
            if old is not NO_OLD and deep_equal(value, old):
                return
            if list_type == "set" and len(value) > 1:
                for i in _second_occurrences(value):
                    errs.append(duplicate(index(path, i), value[i]))
            elif list_type == "map":
                _map_list(path, map_keys, value, errs)
            if items is not None:
                for i, v in enumerate(value):
                    items(v, index(path, i), errs, NO_OLD, unchanged)

    return check
