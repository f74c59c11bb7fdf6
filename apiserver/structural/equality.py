"""Go's `reflect.DeepEqual` on decoded JSON, fast: what ratcheting means by "unchanged".

Python's `==` is almost right for JSON values, except that it equates `1`, `1.0` and `True`
where Go's decoded `int64`, `float64` and `bool` differ. `deep_equal` therefore asks `==` first
(C speed, and the common answer for changed values) and then, for containers, confirms that the
two values also have the same types everywhere by comparing their orjson serializations, which
print `1`, `1.0` and `true` differently. Whenever that shortcut could be wrong (orjson refuses the
value, or prints `null`, which NaN and infinities also print as, or the texts differ, which `-0.0`
against `0.0` or a different key order also cause) the exact recursive comparison decides.

Values are decoded JSON: dicts, lists, strings, numbers, booleans and None of exactly those types.
"""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["Unchanged", "deep_equal", "equal_text", "strict_deep_equal"]

Unchanged = dict[int, bytes | None]
"""Per validate call: the ids of the objects and lists found equal to their correlated old value,
with their JSON text when known (see `equal_text`)."""


def strict_deep_equal(a: Any, b: Any) -> bool:
    """reflect.DeepEqual on decoded JSON, recursively: int and float differ, bools are not numbers."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(strict_deep_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(strict_deep_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def deep_equal(a: Any, b: Any) -> bool:
    """Exactly `strict_deep_equal(a, b)`, in C for the common cases."""
    return equal_text(a, b) is not False


def equal_text(a: Any, b: Any) -> bytes | bool:
    """`deep_equal(a, b)`, answered with the JSON text of `a` when it was needed to decide.

    False when the values differ; when they are equal, the orjson text of `a` (integers beyond
    2^53 refused: `OPT_STRICT_INTEGER`) if it was computed, else True. Callers keep the text to
    spare serializing the same value again (the CEL memo keys values by that very text).
    """
    kind = type(a)
    if kind is not type(b):
        return False
    if kind is not dict and kind is not list:
        return strict_deep_equal(a, b)  # a scalar (or a subclass of dict or list: compared the long way)
    if a != b:
        return False
    try:
        text_a = orjson.dumps(a, option=orjson.OPT_STRICT_INTEGER)
        text_b = orjson.dumps(b, option=orjson.OPT_STRICT_INTEGER)
    except TypeError:  # big integers, non-JSON values
        return strict_deep_equal(a, b)
    if text_a == text_b and b"null" not in text_a:
        return text_a
    return strict_deep_equal(a, b)
