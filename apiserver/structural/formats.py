"""The string `format`s Kubernetes checks, as kube-openapi's `strfmt.Default` registry checks them.

apiextensions keeps a format only where it means something: `int32`/`int64` on integers,
`float`/`double` on numbers, and for strings the list below (names compared without dashes, so
`date-time` is `datetime`); any other format is dropped before validation (`supported_format`).
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from collections.abc import Callable
from datetime import date
from typing import Final
from urllib.parse import urlsplit

__all__ = ["STRING_FORMATS", "parse_go_duration", "supported_format"]


def _re(pattern: str, flags: int = 0) -> Callable[[str], bool]:
    compiled = re.compile(pattern, flags)
    return lambda s: compiled.search(s) is not None


def _is_date(s: str) -> bool:
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", s):
        return False
    try:
        date(int(s[:4]), int(s[5:7]), int(s[8:10]))
    except ValueError:
        return False
    return True


_TIME: Final = re.compile(r"^([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))$")


def _is_datetime(s: str) -> bool:
    # strfmt.IsDateTime: a full-date, a "t", then a partial time with a zone, hours <= 23...
    if len(s) < 4:
        return False
    parts = s.lower().split("t")
    if len(parts) < 2 or not _is_date(parts[0]):
        return False
    m = _TIME.match(parts[1])
    return m is not None and m.group(1) <= "23" and m.group(2) <= "59" and m.group(3) <= "59"


_GO_DURATION: Final = re.compile(r"([0-9]*(?:\.[0-9]*)?)(ns|us|µs|μs|ms|s|m|h)")
_GO_UNITS: Final = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_go_duration(s: str) -> float | None:
    """Go's `time.ParseDuration` in seconds, or None."""
    text = s
    sign = 1.0
    if text[:1] in "+-" and text:
        sign = -1.0 if text[0] == "-" else 1.0
        text = text[1:]
    if text == "0":
        return 0.0
    if not text:
        return None
    total = 0.0
    pos = 0
    while pos < len(text):
        m = _GO_DURATION.match(text, pos)
        if m is None or m.group(1) in ("", "."):
            return None
        total += float(m.group(1)) * _GO_UNITS[m.group(2)]
        pos = m.end()
    return sign * total


_SCALA_UNITS: Final = (("ns", "nano"), ("us", "µs", "micro"), ("ms", "milli"), ("s", "sec"), ("m", "min"),
                       ("h", "hr", "hour"), ("d", "day"), ("w", "wk", "week"))


def _is_duration(s: str) -> bool:
    if parse_go_duration(s) is not None:
        return True
    ok = False
    for m in re.finditer(r"((\d+)\s*([A-Za-zµ]+))", s):
        unit = m.group(3).strip().lower()
        for variants in _SCALA_UNITS:
            last = len(variants) - 1
            if any((i == last and unit.startswith(v)) or v == unit for i, v in enumerate(variants)):
                ok = True
    return ok


def _is_uri(s: str) -> bool:
    # url.ParseRequestURI: an absolute URI or an absolute path, no fragment handling subtleties
    if not s or " " in s:
        return False
    if s.startswith("/"):
        return True
    parts = urlsplit(s)
    return bool(parts.scheme) and re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", parts.scheme) is not None


def _is_email(s: str) -> bool:
    return re.fullmatch(r"(?:[^<>@\s]+ )*<?[^@\s<>]+@[^@\s<>]+>?", s) is not None


def _is_ipv4(s: str) -> bool:
    try:
        ipaddress.IPv4Address(s)
    except ValueError:
        return False
    return True


def _is_ipv6(s: str) -> bool:
    try:
        ipaddress.IPv6Address(s)
    except ValueError:
        return False
    return True


def _is_cidr(s: str) -> bool:
    try:
        ipaddress.ip_network(s, strict=False)
    except ValueError:
        return False
    return "/" in s


def _is_base64(s: str) -> bool:
    try:
        base64.b64decode(s, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def _isbn10(s: str) -> bool:
    digits = re.sub(r"[\s-]", "", s)
    if not re.fullmatch(r"\d{9}[\dX]", digits):
        return False
    total = sum((10 - i) * (10 if c == "X" else int(c)) for i, c in enumerate(digits))
    return total % 11 == 0


def _isbn13(s: str) -> bool:
    digits = re.sub(r"[\s-]", "", s)
    if not re.fullmatch(r"\d{13}", digits):
        return False
    total = sum(int(c) * (1 if i % 2 == 0 else 3) for i, c in enumerate(digits[:12]))
    return (10 - total % 10) % 10 == int(digits[12])


def _is_creditcard(s: str) -> bool:
    digits = re.sub(r"[^0-9]", "", s)
    return re.fullmatch(r"(?:4[0-9]{12}(?:[0-9]{3})?|5[1-5][0-9]{14}|6(?:011|5[0-9][0-9])[0-9]{12}|3[47][0-9]{13}|"
                        r"3(?:0[0-5]|[68][0-9])[0-9]{11}|(?:2131|1800|35\d{3})\d{11})", digits) is not None


_HOST_ALNUM: Final = r"[^\W_]"
_HOSTNAME: Final = re.compile(
    rf"^({_HOST_ALNUM}((-?{_HOST_ALNUM}{{0,62}})?)|({_HOST_ALNUM}(((?:{_HOST_ALNUM}|-){{0,61}}{_HOST_ALNUM})?)(\.)){{1,}}"
    rf"([^\W\d_]){{2,63}})$"
)


def _is_hostname(s: str) -> bool:
    # strfmt.IsHostname: the go-openapi pattern (letters and digits of any script), 255 octets, 63 per label
    return _HOSTNAME.match(s) is not None and len(s) <= 255 and all(len(p) <= 63 for p in s.split("."))


_SHORT_NAME: Final = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"

STRING_FORMATS: Final[dict[str, Callable[[str], bool]]] = {
    "bsonobjectid": _re(r"^[0-9a-fA-F]{24}$"),
    "uri": _is_uri,
    "email": _is_email,
    "hostname": _is_hostname,
    "ipv4": _is_ipv4,
    "ipv6": _is_ipv6,
    "cidr": _is_cidr,
    "mac": _re(r"^([0-9A-Fa-f]{2}[:-]){5}[0-9A-Fa-f]{2}$|^([0-9A-Fa-f]{2}[:-]){7}[0-9A-Fa-f]{2}$|"
               r"^([0-9A-Fa-f]{2}[:-]){19}[0-9A-Fa-f]{2}$|^([0-9A-Fa-f]{4}\.){2}[0-9A-Fa-f]{4}$"),
    "uuid": _re(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$"),
    "uuid3": _re(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?3[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}$"),
    "uuid4": _re(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$"),
    "uuid5": _re(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?5[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$"),
    "isbn": lambda s: _isbn10(s) or _isbn13(s),
    "isbn10": _isbn10,
    "isbn13": _isbn13,
    "creditcard": _is_creditcard,
    "ssn": _re(r"^\d{3}[- ]?\d{2}[- ]?\d{4}$"),
    "hexcolor": _re(r"^#?([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$"),
    "rgbcolor": _re(r"^rgb\(\s*(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])\s*,\s*(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])\s*,"
                    r"\s*(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])\s*\)$"),
    "byte": _is_base64,
    "password": lambda _s: True,
    "date": _is_date,
    "duration": _is_duration,
    "datetime": _is_datetime,
    "k8s-short-name": lambda s: len(s) <= 63 and re.fullmatch(_SHORT_NAME, s) is not None,
    "k8s-long-name": lambda s: len(s) <= 253 and re.fullmatch(rf"{_SHORT_NAME}(\.{_SHORT_NAME})*", s) is not None,
}


def supported_format(schema_type: str, fmt: str) -> str:
    """The format validation keeps for this type (StripUnsupportedFormatsPostProcessor), or ''."""
    if not fmt:
        return ""
    if schema_type in ("", "string"):
        normalized = fmt.replace("-", "")
        return fmt if normalized in STRING_FORMATS or fmt in STRING_FORMATS else ""
    if schema_type == "integer":
        return fmt if fmt in ("int32", "int64") else ""
    if schema_type == "number":
        return fmt if fmt in ("float", "double") else ""
    return ""


def string_format_checker(fmt: str) -> Callable[[str], bool] | None:
    """The validator of a kept string format."""
    return STRING_FORMATS.get(fmt) or STRING_FORMATS.get(fmt.replace("-", ""))
