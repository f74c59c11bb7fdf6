r"""Field errors as Kubernetes reports them: `metav1.StatusCause` dicts with Go's exact wording.

Upstream builds a `field.Error` (a type, a path, a bad value and a detail) and the apiserver turns
each one into a cause `{"reason": <type>, "message": <ErrorBody()>, "field": <path>}`. The helpers
here produce those dicts directly, printing bad values the way apimachinery's `ErrorBody` does:
strings Go-quoted (`%q`), numbers and booleans with `%v`, anything else as Go's `json.Marshal`
(sorted keys, `<`, `>` and `&` escaped as `\\u003c`...), and no value at all for the types whose
body omits it (Required, Forbidden, Too long, Internal error).

Paths are plain strings in Kubernetes' notation: `spec.items[0].name`, `spec.labels[key]`. The
empty path is printed `<nil>`, as Go prints a nil `*field.Path`.
"""

from __future__ import annotations

import json
import math
from typing import Any, Final

__all__ = [
    "NIL_PATH",
    "OMIT",
    "Cause",
    "GoStruct",
    "child",
    "duplicate",
    "forbidden",
    "go_json",
    "go_quote",
    "go_value",
    "index",
    "internal",
    "invalid",
    "key",
    "not_supported",
    "required",
    "too_long",
    "too_many",
    "type_invalid",
]

Cause = dict[str, str]
"""`{"reason": ..., "field": ..., "message": ...}`, exactly a `metav1.StatusCause`."""

NIL_PATH: Final = "<nil>"


class _Omit:
    """The bad value of errors whose body prints only the type (`field.OmitValueType`)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "OMIT"


OMIT: Final = _Omit()


class GoStruct(dict[str, Any]):
    """A Go struct as a bad value: `go_json` keeps its fields in declaration (insertion) order."""


# ---------------------------------------------------------------------------------------------
# Paths.


def child(path: str, name: str) -> str:
    """`path.name` (`name` alone at the root)."""
    return f"{path}.{name}" if path else name


def index(path: str, i: int) -> str:
    """`path[i]`."""
    return f"{path}[{i}]"


def key(path: str, k: str) -> str:
    """`path[k]`: a map entry, as `field.Path.Key` prints it (no quotes)."""
    return f"{path}[{k}]"


def _shown(path: str) -> str:
    return path if path else NIL_PATH


# ---------------------------------------------------------------------------------------------
# Go formatting.

_GO_ESCAPES: Final = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t",
                      "\v": "\\v", "\\": "\\\\", '"': '\\"'}


def go_quote(text: str) -> str:
    """`strconv.Quote`: double quotes, Go escapes, printable Unicode kept as is."""
    out = ['"']
    for ch in text:
        escaped = _GO_ESCAPES.get(ch)
        if escaped is not None:
            out.append(escaped)
        elif ch == " " or ch.isprintable():
            out.append(ch)
        else:
            code = ord(ch)
            if code < 0x80:
                out.append(f"\\x{code:02x}")
            elif code < 0x10000:
                out.append(f"\\u{code:04x}")
            else:
                out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


def _float_parts(value: float) -> tuple[str, int]:
    """The shortest round-tripping decimal digits of `value` and its decimal exponent."""
    text = repr(abs(value))
    mantissa, _, exponent = text.partition("e")
    whole, _, frac = mantissa.partition(".")
    digits = (whole + frac).lstrip("0")
    point = len(whole) + (int(exponent) if exponent else 0)
    if not digits:
        return "0", 0
    # strip leading zeros of the whole part from the point position (0.001 -> digits 1, point -2)
    lead = len(whole + frac) - len((whole + frac).lstrip("0"))
    point -= lead
    digits = digits.rstrip("0") or "0"
    return digits, point - 1


def go_float(value: float) -> str:
    """`fmt.Sprintf("%v", value)` for a float64: shortest `%g`, exponent from 1e+06 and below 1e-04."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    digits, exp = _float_parts(value)
    sign = "-" if value < 0 else ""
    if exp < -4 or exp >= 6:
        mant = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mant}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    if exp >= len(digits) - 1:
        return sign + digits + "0" * (exp - len(digits) + 1)
    if exp >= 0:
        return sign + digits[: exp + 1] + "." + digits[exp + 1 :]
    return sign + "0." + "0" * (-exp - 1) + digits


def go_json_float(value: float) -> str:
    """A float64 as Go's `encoding/json` writes it (no exponent between 1e-6 and 1e21)."""
    if value == 0:
        return "0"
    digits, exp = _float_parts(value)
    sign = "-" if value < 0 else ""
    if exp < -7 or exp >= 21:
        mant = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mant}e{'-' if exp < 0 else '+'}{abs(exp)}"
    if exp >= len(digits) - 1:
        return sign + digits + "0" * (exp - len(digits) + 1)
    if exp >= 0:
        return sign + digits[: exp + 1] + "." + digits[exp + 1 :]
    return sign + "0." + "0" * (-exp - 1) + digits


def go_json(value: Any) -> str:
    """`json.Marshal(value)` as Go writes it: sorted keys, HTML-safe escapes, Go number forms."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_json_float(value)
    if isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)
        return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
                .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))
    if isinstance(value, GoStruct):
        return "{" + ",".join(f"{go_json(str(k))}:{go_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, dict):
        return "{" + ",".join(f"{go_json(str(k))}:{go_json(v)}" for k, v in sorted(value.items())) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(go_json(v) for v in value) + "]"
    return go_json(str(value))


def go_value(value: Any) -> str:
    """A bad value as `field.Error.ErrorBody` prints it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_float(value)
    if isinstance(value, str):
        return go_quote(value)
    return go_json(value)


# ---------------------------------------------------------------------------------------------
# Errors.


def _cause(reason: str, path: str, message: str) -> Cause:
    return {"reason": reason, "message": message, "field": _shown(path)}


def _with_detail(head: str, detail: str) -> str:
    return f"{head}: {detail}" if detail else head


def _valued(kind: str, value: Any) -> str:
    return kind if value is OMIT else f"{kind}: {go_value(value)}"


def invalid(path: str, value: Any, detail: str) -> Cause:
    """`field.Invalid`: `Invalid value: <value>: <detail>`."""
    return _cause("FieldValueInvalid", path, _with_detail(_valued("Invalid value", value), detail))


def type_invalid(path: str, value: Any, detail: str) -> Cause:
    """`field.TypeInvalid`: worded as Invalid, reason `FieldValueTypeInvalid`."""
    return _cause("FieldValueTypeInvalid", path, _with_detail(_valued("Invalid value", value), detail))


def required(path: str, detail: str = "") -> Cause:
    """`field.Required`: `Required value[: detail]`."""
    return _cause("FieldValueRequired", path, _with_detail("Required value", detail))


def forbidden(path: str, detail: str) -> Cause:
    """`field.Forbidden`: `Forbidden: <detail>`."""
    return _cause("FieldValueForbidden", path, _with_detail("Forbidden", detail))


def duplicate(path: str, value: Any) -> Cause:
    """`field.Duplicate`: `Duplicate value: <value>`."""
    return _cause("FieldValueDuplicate", path, _valued("Duplicate value", value))


def not_supported(path: str, value: Any, supported: list[str]) -> Cause:
    """`field.NotSupported`: `Unsupported value: <value>: supported values: "a", "b"`."""
    detail = "supported values: " + ", ".join(go_quote(v) for v in supported) if supported else ""
    return _cause("FieldValueNotSupported", path, _with_detail(_valued("Unsupported value", value), detail))


def too_long(path: str, max_length: int) -> Cause:
    """`field.TooLong`: `Too long: may not be more than N bytes`."""
    if max_length >= 0:
        detail = f"may not be more than {max_length} {'byte' if max_length == 1 else 'bytes'}"
    else:
        detail = "value is too long"
    return _cause("FieldValueTooLong", path, f"Too long: {detail}")


def too_many(path: str, actual: int, maximum: int) -> Cause:
    """`field.TooMany`: `Too many: N: must have at most M items`."""
    if maximum >= 0:
        detail = f"must have at most {maximum} {'item' if maximum == 1 else 'items'}"
    else:
        detail = "has too many items"
    return _cause("FieldValueTooMany", path, _with_detail(_valued("Too many", actual if actual >= 0 else OMIT), detail))


def internal(path: str, detail: str) -> Cause:
    """`field.InternalError`: `Internal error: <detail>`."""
    return _cause("InternalError", path, f"Internal error: {detail}")
