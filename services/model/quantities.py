"""Kubernetes resource quantities (`resource.Quantity`): parsing, rounding and printing.

Guarantees:

* `parse_quantity` accepts Kubernetes quantities, a signed decimal number followed by an
  optional binary suffix (`Ki` .. `Ei`), decimal suffix (`n`, `u`, `m`, `k`, `M` .. `E`) or
  decimal exponent (`e3`, `E-2`): `100m`, `1.5`, `2Gi`, `1e3`, `500M`, `.5`; anything else
  raises `ValueError`. Numbers (`int`, `float`) are read as their decimal text, as a JSON
  number in a manifest would be (`0.1` is one tenth, not its binary approximation).
* Values are exact (`Fraction`), never floats; parsed strings are cached, so the hot paths
  (a scheduler filtering every pod against every node) parse each distinct text once.
* `milli_value` and `int_value` round up, as `Quantity.MilliValue()` and `Quantity.Value()`:
  `0.0001` cpu is 1 millicore, `1.5` bytes is 2.
* `format_cpu` and `format_bytes` print amounts as Kubernetes does (`8`, `7900m`, `32Gi`);
  `canonical_quantity` prints any quantity as `Quantity.String()` does (`1000m` → `1`, `0.5` →
  `500m`, the JSON number `2` → `2`).
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction
from typing import Final

_BINARY: Final[dict[str, int]] = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL: Final[dict[str, Fraction]] = {
    "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": Fraction(1),
    "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
    "P": Fraction(10**15), "E": Fraction(10**18)}
QUANTITY_FORMAT: Final = ("quantities must match the regular expression "
                          "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
"""What kube-apiserver's decoder says of a value that is no quantity (a 400 before any validation)."""
_QUANTITY: Final = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+))(?:(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE]([+-]?\d+))?")

Quantity = str | int | float
"""What a manifest may hold where a quantity is expected."""


def parse_quantity(value: Quantity) -> Fraction:
    """A Kubernetes quantity as an exact number (`"250m"` → 1/4, `"1Gi"` → 1073741824).

    Raises:
        ValueError: `value` is not a quantity.
    """
    if isinstance(value, bool):
        return Fraction(int(value))
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"invalid quantity {value!r}")
        return _parse_text(repr(value))
    if not isinstance(value, str):
        raise ValueError(f"invalid quantity {value!r}")
    return _parse_text(value.strip())


@functools.lru_cache(maxsize=4096)
def _parse_text(text: str) -> Fraction:
    m = _QUANTITY.fullmatch(text)
    if m is None:
        raise ValueError(f"invalid quantity {text!r}")
    number = Fraction(m.group(1))
    suffix, exponent = m.group(2), m.group(3)
    if exponent is not None:
        return number * Fraction(10) ** int(exponent)
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    return number * _DECIMAL[suffix or ""]


def milli_value(value: Fraction) -> int:
    """A quantity in thousandths, rounded up (`Quantity.MilliValue`): cpu in millicores."""
    return math.ceil(value * 1000)


def int_value(value: Fraction) -> int:
    """A quantity as an integer, rounded up (`Quantity.Value`): bytes, counts."""
    return math.ceil(value)


def format_cpu(millis: int) -> str:
    """CPU millicores as Kubernetes prints them (`8`, `7900m`)."""
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def format_bytes(n: int) -> str:
    """A byte count in the largest exact binary unit (`32Gi`, `31388Mi`; `0` and odd counts plain)."""
    for suffix, size in reversed(_BINARY.items()):
        if n and n % size == 0:
            return f"{n // size}{suffix}"
    return str(n)


_BINARY_SUFFIXES: Final = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_DECIMAL_SUFFIXES: Final = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
_EXPONENT_FORM: Final = re.compile(r"[eE][+-]?\d+$")


def canonical_quantity(value: object) -> str:
    """A quantity as `resource.Quantity.String()` prints it: canonical, in the notation it was written in.

    A binary-suffixed amount of at least 1024 that is whole keeps the largest binary suffix that
    divides it (`1024Mi` → `1Gi`, `1.5Gi` → `1536Mi`); anything else is decimal, its exponent a
    multiple of three (`1000M` → `1G`, `0.5` → `500m`, `1e3` → `1e3`), rounded up to nano units.
    Text that is no quantity, or too long or too far out to be worth the arithmetic, is printed
    as it is.
    """
    if value is None or isinstance(value, bool):
        return "0"
    text = str(value).strip()
    if not isinstance(value, str | int | float):
        return text
    exponent_form = _EXPONENT_FORM.search(text)
    if len(text) > 64 or (exponent_form is not None and abs(int(exponent_form.group()[1:])) > 64):
        return text
    try:
        amount = parse_quantity(value)
    except ValueError:
        return text
    sign = "-" if amount < 0 else ""
    nanos = math.ceil(abs(amount) * 10**9)
    if nanos == 0:
        return "0"
    if text.endswith("i") and nanos % 10**9 == 0 and nanos >= 1024 * 10**9:
        whole, power = nanos // 10**9, 0
        while whole % 1024 == 0 and power < len(_BINARY_SUFFIXES) - 1:
            whole, power = whole // 1024, power + 1
        return f"{sign}{whole}{_BINARY_SUFFIXES[power]}"
    mantissa, exponent = nanos, -9
    while mantissa % 10 == 0:
        mantissa, exponent = mantissa // 10, exponent + 1
    shift = exponent % 3
    mantissa, exponent = mantissa * 10**shift, exponent - shift
    if exponent_form is not None or exponent not in _DECIMAL_SUFFIXES:
        return f"{sign}{mantissa}" + (f"e{exponent}" if exponent else "")
    return f"{sign}{mantissa}{_DECIMAL_SUFFIXES[exponent]}"
