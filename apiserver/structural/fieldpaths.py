"""`fieldPath` of a validation rule, checked against the schema and normalized (`ValidFieldPath`).

A JSONPath of field and map accessors, resolved against the schema of the rule's node and written
in `field.Path` notation.

`.spec.replicas` becomes `spec.replicas`, `.labels['app.kubernetes.io/name']` on a map becomes
`labels[app.kubernetes.io/name]`, `['foo.bar']` on an object names the property `foo.bar`.
"""

from __future__ import annotations

import re
from typing import Final

from kubemesh.apiserver.structural.causes import child, key
from kubemesh.apiserver.structural.nodes import Node

__all__ = ["resolve_field_path"]

_TOKENS: Final = re.compile(r"'(?:[^'\\]|\\.)*'|[.\[\]]|[^.\[\]']+")
_ESCAPES: Final = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "'": "'", "\\": "\\"}


def _unquote(token: str) -> str | None:
    out: list[str] = []
    i = 0
    body = token[1:-1]
    while i < len(body):
        ch = body[i]
        if ch == "\\":
            nxt = _ESCAPES.get(body[i + 1 : i + 2])
            if nxt is None:
                return None
            out.append(nxt)
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def resolve_field_path(json_path: str, node: Node) -> tuple[str | None, Node | None]:
    """(normalized path, schema at that path), or (None, None) when the path is not valid."""
    tokens = _TOKENS.findall(json_path)
    if "".join(tokens) != json_path:
        return None, None
    path = ""
    current: Node | None = node
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if current is None:
            return None, None
        if tok == "[":
            if i + 2 >= len(tokens) or tokens[i + 2] != "]":
                return None, None
            quoted = tokens[i + 1]
            if len(quoted) < 2 or quoted[0] != "'" or quoted[-1] != "'":
                return None, None
            name = _unquote(quoted)
            if name is None:
                return None, None
            i += 3
        elif tok == ".":
            if i + 1 >= len(tokens):
                return None, None
            name = tokens[i + 1]
            i += 2
        else:
            return None, None
        if current.properties:
            prop = current.properties.get(name)
            if prop is None:
                return None, None
            path, current = child(path, name), prop
        elif current.additional_allows is not None:
            path, current = key(path, name), current.additional
        else:
            return None, None
    return path, current
