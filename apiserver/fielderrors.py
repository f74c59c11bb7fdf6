"""Field errors as kube-apiserver words them: the causes of a 422 Invalid.

Each constructor returns one `Cause` (a `metav1.StatusCause`) whose `message` is what
apimachinery's `field.Error.ErrorBody()` prints and whose `reason` is its `CauseType`
(`FieldValueRequired`, `FieldValueInvalid`, ...). `errors.invalid` joins them into the
Status message (`Kind "name" is invalid: [field: message, ...]`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

Cause = dict[str, str]
"""One entry of `Status.details.causes`: `reason`, `message` and `field`."""


def show(value: Any) -> str:
    """A value as causes print it: JSON, cut short."""
    try:
        text = json.dumps(value, sort_keys=True, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def required(field: str, detail: str = "") -> Cause:
    """`Required value` (with an optional detail)."""
    message = f"Required value: {detail}" if detail else "Required value"
    return {"reason": "FieldValueRequired", "message": message, "field": field}


def invalid(field: str, value: Any, detail: str) -> Cause:
    """`Invalid value: <value>: <detail>`."""
    return {"reason": "FieldValueInvalid", "message": f"Invalid value: {show(value)}: {detail}", "field": field}


def invalid_text(field: str, value: str, detail: str) -> Cause:
    """`Invalid value: "<value>": <detail>` with the string value as Go's `%q` prints it."""
    return {"reason": "FieldValueInvalid", "message": f"Invalid value: {go_quote(value)}: {detail}", "field": field}


def type_invalid(field: str, value: Any, expected: str) -> Cause:
    """A value of the wrong JSON type."""
    return {"reason": "FieldValueTypeInvalid", "message": f"Invalid value: {show(value)}: must be of type {expected}",
            "field": field}


def not_supported(field: str, value: Any, supported: tuple[str, ...]) -> Cause:
    """`Unsupported value: <value>: supported values: "a", "b"`."""
    listed = ", ".join(f'"{s}"' for s in supported)
    return {"reason": "FieldValueNotSupported",
            "message": f"Unsupported value: {show(value)}: supported values: {listed}", "field": field}


def duplicate(field: str, value: Any) -> Cause:
    """`Duplicate value: <value>`."""
    return {"reason": "FieldValueDuplicate", "message": f"Duplicate value: {show(value)}", "field": field}


def forbidden(field: str, detail: str) -> Cause:
    """`Forbidden: <detail>`."""
    return {"reason": "FieldValueForbidden", "message": f"Forbidden: {detail}", "field": field}


def immutable(field: str, value: Any) -> Cause:
    """An immutable field that an update changed."""
    return invalid(field, value, "field is immutable")


_GO_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v",
               '"': '\\"', "\\": "\\\\"}


def go_quote(text: str) -> str:
    r"""`text` as Go's `%q` writes it: quoted, with quotes, backslashes and non-printables escaped.

    Upstream names an unknown field this way (`unknown field "bo\ngus"`), so a field name
    carrying control characters never reaches a response header raw.
    """
    out = ['"']
    for c in text:
        if c in _GO_ESCAPES:
            out.append(_GO_ESCAPES[c])
        elif c.isprintable() or c == " ":
            out.append(c)
        elif ord(c) < 0x80:
            out.append(f"\\x{ord(c):02x}")
        elif 0xD800 <= ord(c) <= 0xDFFF:
            out.append("\ufffd")
        elif ord(c) > 0xFFFF:
            out.append(f"\\U{ord(c):08x}")
        else:
            out.append(f"\\u{ord(c):04x}")
    out.append('"')
    return "".join(out)


def go_strings(values: Sequence[str]) -> str:
    """A `[]string` as Go's `%#v` prints it (`[]string{"a", "b"}`): how v1.30 shows a list's bad value."""
    return "[]string{" + ", ".join(go_quote(v) for v in values) + "}"
