"""Quantities as Go's JSON round trip leaves them: a JSON number becomes its canonical string.

kube-apiserver decodes a built-in object into Go types and encodes it again. A
`resource.Quantity` reads a JSON number as well as a string (`cpu: 1`, `storage: 1073741824`,
as YAML manifests write them) and always writes the canonical string (`"1"`,
`"1073741824"`, `0.5` → `"500m"`), so no response ever carries a quantity as a number, and
the official clients' typed models (which type quantities as strings) rely on that.

`quantities_as_strings(api_version, kind, obj)` does the same to a decoded dict: every
quantity field of the kind's Go type (found through the generated message table: resource
lists of containers, nodes, claims, volumes and quotas, limit ranges, metric targets...)
that holds a number gets its canonical string. A string that is no quantity (`"lots"`) fails
there upstream, while the body is decoded: `MalformedQuantity` is raised (the registry answers
upstream's 400); other JSON types are left to the per-kind checks (a 422). Copy-on-write:
`obj` and its parts are never changed; what changes is copied along its path, and an object
with no numeric quantity is returned itself.
"""

from __future__ import annotations

import functools
from typing import Any, Final

from kubemesh.apiserver.protobuf import messages
from kubemesh.apiserver.protobuf.schema import QUANTITY, SCALARS, SPECIAL, message_for
from kubemesh.services.model.kinds import Obj
from kubemesh.services.model.quantities import canonical_quantity, parse_quantity

_Plan = tuple[tuple[str, str, str], ...]
"""(json name, shape, what: "q" for a quantity, else the message to go into), inlined fields flattened."""

_OPAQUE: Final = frozenset(SPECIAL) - {QUANTITY}


@functools.cache
def _has_quantity(message: str, seen: frozenset[str] = frozenset()) -> bool:
    if message in seen or message not in messages.MESSAGES:
        return False
    inner = seen | {message}
    return any(typ == QUANTITY or (typ not in SCALARS and typ not in _OPAQUE and _has_quantity(typ, inner))
               for _number, _json, typ, _shape, _omitempty in messages.MESSAGES[message])


@functools.cache
def _plan(message: str) -> _Plan:
    out: list[tuple[str, str, str]] = []
    for _number, json, typ, shape, _omitempty in messages.MESSAGES.get(message, ()):
        if typ == QUANTITY:
            out.append((json, shape, "q"))
        elif typ not in SCALARS and typ not in _OPAQUE and _has_quantity(typ):
            if json:
                out.append((json, shape, typ))
            else:  # an inlined Go struct: its fields sit beside these
                out.extend(_plan(typ))
    return tuple(out)


class MalformedQuantity(ValueError):
    """A quantity field holds a string that is no quantity."""


_KNOWN_GOOD: set[str] = set()
"""Quantity strings that parsed before (few distinct values recur: "100m", "64Mi"...): a set
lookup instead of a parse on every write. Bounded: cleared when it reaches `_KNOWN_GOOD_MAX`."""
_KNOWN_GOOD_MAX: Final = 4096


def _quantity(value: Any) -> Any:
    kind = type(value)
    if kind is str:
        if value not in _KNOWN_GOOD:
            try:
                parse_quantity(value)
            except (ValueError, ArithmeticError):
                raise MalformedQuantity(value) from None
            if len(_KNOWN_GOOD) >= _KNOWN_GOOD_MAX:
                _KNOWN_GOOD.clear()
            _KNOWN_GOOD.add(value)
        return value
    if kind is int or kind is float:
        return canonical_quantity(value)
    return value  # another JSON type: the per-kind checks answer it (a 422)


def _value(value: Any, what: str) -> Any:
    if what == "q":
        return _quantity(value)
    return _walk(value, what) if type(value) is dict else value


def _walk(obj: dict[str, Any], message: str) -> dict[str, Any]:
    # The common case changes nothing: no copy is made until a value changes.
    changed: dict[str, Any] | None = None
    for json, shape, what in _plan(message):
        sub = obj.get(json)
        if sub is None:
            continue
        new: Any = sub
        if shape == "list":
            if type(sub) is list:
                items: list[Any] | None = None
                for i, item in enumerate(sub):
                    value = _value(item, what)
                    if value is not item:
                        if items is None:
                            items = list(sub)
                        items[i] = value
                if items is not None:
                    new = items
        elif shape == "map":
            if type(sub) is dict:
                entries: dict[str, Any] | None = None
                for key, item in sub.items():
                    value = _value(item, what)
                    if value is not item:
                        if entries is None:
                            entries = dict(sub)
                        entries[key] = value
                if entries is not None:
                    new = entries
        elif shape in ("val", "ptr"):
            new = _value(sub, what)
        if new is not sub:
            if changed is None:
                changed = dict(obj)
            changed[json] = new
    return obj if changed is None else changed


def quantities_as_strings(api_version: str, kind: str, obj: Obj) -> Obj:
    """`obj` with every quantity that is a JSON number written as its canonical string.

    Raises:
        MalformedQuantity: a quantity field holds a string that does not parse.
    """
    message = message_for(api_version, kind)
    if message is None or not _has_quantity(message):
        return obj
    return _walk(obj, message)
