"""The Kubernetes CEL libraries that the CEL runtime lacks, implemented in Python.

Lists (`isSorted`, `sum`, `min`, `max`, `indexOf`, `lastIndexOf`), regex (`find`, `findAll`),
sets (`sets.contains`, `sets.intersects`, `sets.equivalent`), IP addresses and CIDRs (`isIP`,
`ip(...)`, `.family()`, `.isLoopback()`..., `isCIDR`, `cidr(...)`, `.containsIP()`...), URLs
(`isURL`, `url(...)`, `.getHost()`...), quantities (`isQuantity`, `quantity(...)`,
`.compareTo()`, `.isLessThan()`, `.asInteger()`...), semantic versions (`isSemver`,
`semver(...)`, `.major()`...) and formats (`format.dns1123Label().validate(s)`...).

Kubernetes gives IPs, CIDRs, URLs, quantities and versions opaque types; here their values are
their (canonical) strings and their methods are string methods, so a rule that type-checks
upstream type-checks here, while a few that mix them with plain strings would compile here and
not upstream. A function given an invalid argument raises, which the rule reports as an
evaluation error, as upstream.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from fractions import Fraction
from functools import cache
from typing import Any, Final
from urllib.parse import parse_qs, urlsplit

from cel_expr_python import cel  # type: ignore[import-untyped]

from kubemesh.apiserver import names
from kubemesh.apiserver.structural.regex import compile_pattern

__all__ = ["kubernetes_library"]


# ---------------------------------------------------------------------------------------------
# Lists, regex, sets.


def _is_sorted(items: list[Any]) -> bool:
    return all(items[i] <= items[i + 1] for i in range(len(items) - 1))


def _sum(items: list[Any]) -> Any:
    return sum(items) if items else 0


def _min(items: list[Any]) -> Any:
    if not items:
        raise ValueError("min(list) argument must not be empty")
    return min(items)


def _max(items: list[Any]) -> Any:
    if not items:
        raise ValueError("max(list) argument must not be empty")
    return max(items)


def _same(a: Any, b: Any) -> bool:
    return bool(a == b) and type(a) is type(b)


def _index_of(items: list[Any], value: Any) -> int:
    return next((i for i, item in enumerate(items) if _same(item, value)), -1)


def _last_index_of(items: list[Any], value: Any) -> int:
    return next((i for i in range(len(items) - 1, -1, -1) if _same(items[i], value)), -1)


def _search(pattern: str) -> re.Pattern[str]:
    problem = compile_pattern(pattern)[1]
    if problem is not None:
        raise ValueError(problem)
    return re.compile(pattern)


def _find(text: str, pattern: str) -> str:
    found = _search(pattern).search(text)
    return found.group(0) if found else ""


def _find_all(text: str, pattern: str) -> list[str]:
    return [m.group(0) for m in _search(pattern).finditer(text)]


def _sets_contains(a: list[Any], b: list[Any]) -> bool:
    return all(any(_same(x, y) for x in a) for y in b)


def _sets_intersects(a: list[Any], b: list[Any]) -> bool:
    return any(any(_same(x, y) for x in a) for y in b)


def _sets_equivalent(a: list[Any], b: list[Any]) -> bool:
    return _sets_contains(a, b) and _sets_contains(b, a)


# ---------------------------------------------------------------------------------------------
# IPs and CIDRs (Kubernetes accepts no zones and no IPv4-mapped IPv6 addresses).


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    if "%" in text:
        raise ValueError(f"IP address with zone value is not allowed: {text}")
    address = ipaddress.ip_address(text)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        raise ValueError(f"IPv4-mapped IPv6 address is not allowed: {text}")
    return address


def _is_ip(text: str) -> bool:
    try:
        _ip(text)
    except ValueError:
        return False
    return True


def _cidr(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    if "/" not in text:
        raise ValueError(f"network address parse error during conversion from string: {text}")
    address, _, _ = text.partition("/")
    _ip(address)
    return ipaddress.ip_network(text, strict=False)


def _is_cidr(text: str) -> bool:
    try:
        _cidr(text)
    except ValueError:
        return False
    return True


def _contains_ip(network: str, address: str) -> bool:
    return _ip(address) in _cidr(network)


def _contains_cidr(network: str, other: str) -> bool:
    outer, inner = _cidr(network), _cidr(other)
    return inner.version == outer.version and inner.subnet_of(outer)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# URLs.


def _url(text: str) -> str:
    if not _is_url(text):
        raise ValueError(f"URL parse error during conversion from string: {text}")
    return text


def _is_url(text: str) -> bool:
    if not text or " " in text:
        return False
    if text.startswith("/"):
        return True
    parts = urlsplit(text)
    return bool(parts.scheme) and re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", parts.scheme) is not None


def _url_port(text: str) -> str:
    netloc = urlsplit(text).netloc.rpartition("@")[2]
    if netloc.startswith("["):
        return netloc.rpartition("]:")[2] if "]:" in netloc else ""
    return netloc.rpartition(":")[2] if ":" in netloc else ""


def _url_hostname(text: str) -> str:
    return urlsplit(text).hostname or ""


def _url_host(text: str) -> str:
    return urlsplit(text).netloc.rpartition("@")[2]


def _url_query(text: str) -> dict[str, list[str]]:
    return {k: list(v) for k, v in parse_qs(urlsplit(text).query, keep_blank_values=True).items()}


# ---------------------------------------------------------------------------------------------
# Quantities (resource.Quantity).

_QUANTITY: Final = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|"
                              r"[eE][+-]?[0-9]+)?$")
_SUFFIXES: Final = {"Ki": Fraction(2**10), "Mi": Fraction(2**20), "Gi": Fraction(2**30), "Ti": Fraction(2**40),
                    "Pi": Fraction(2**50), "Ei": Fraction(2**60), "n": Fraction(1, 10**9), "u": Fraction(1, 10**6),
                    "m": Fraction(1, 1000), "k": Fraction(1000), "M": Fraction(10**6), "G": Fraction(10**9),
                    "T": Fraction(10**12), "P": Fraction(10**15), "E": Fraction(10**18), "": Fraction(1)}


def _quantity(text: str) -> Fraction:
    m = _QUANTITY.match(text)
    if m is None:
        raise ValueError(f"quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
                         f": {text}")
    number, suffix = Fraction(m.group(1)), m.group(2) or ""
    if suffix[:1] in ("e", "E"):
        return number * Fraction(10) ** int(suffix[1:])
    return number * _SUFFIXES[suffix]


def _is_quantity(text: str) -> bool:
    try:
        _quantity(text)
    except ValueError:
        return False
    return True


def _quantity_text(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    for suffix, scale in (("m", 1000), ("u", 10**6), ("n", 10**9)):
        scaled = value * scale
        if scaled.denominator == 1:
            return f"{scaled.numerator}{suffix}"
    return f"{-(-value.numerator * 10**9 // value.denominator)}n"


_SEMVER: Final = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-([0-9A-Za-z.-]+))?(?:\+([0-9A-Za-z.-]+))?$")


def _semver(text: str) -> tuple[int, int, int, str]:
    m = _SEMVER.match(text)
    if m is None:
        raise ValueError(f"could not parse {text!r} as semver")
    return int(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(4) or ""


def _version_key(text: str) -> tuple[int, int, int, int, str]:
    major, minor, patch, pre = _semver(text)
    return major, minor, patch, 0 if pre else 1, pre


def _compare(a: str, b: str) -> int:
    """CompareTo for quantities, or for semantic versions when both are versions."""
    if _SEMVER.match(a) and _SEMVER.match(b):
        left: Any = _version_key(a)
        right: Any = _version_key(b)
    else:
        left, right = _quantity(a), _quantity(b)
    return int(left > right) - int(left < right)


def _as_integer(text: str) -> int:
    value = _quantity(text)
    if value.denominator != 1 or not -(2**63) <= value.numerator < 2**63:
        raise ValueError("cannot convert value to integer")
    return value.numerator


# ---------------------------------------------------------------------------------------------
# Formats.

_QUALIFIED: Final = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE: Final = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def _label(value: str) -> list[str]:
    return list(names.label_problems(value))


def _subdomain(value: str) -> list[str]:
    return list(names.subdomain_problems(value))


def _dns1035(value: str) -> list[str]:
    return list(names.dns1035_problems(value))


def _qualified_name(value: str) -> list[str]:
    prefix, slash, name = value.rpartition("/")
    out = _subdomain(prefix) if slash else []
    if not name or len(name) > 63 or not _QUALIFIED.fullmatch(name):
        out.append("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
                   "with an alphanumeric character")
    return out


def _label_value(value: str) -> list[str]:
    out = ["must be no more than 63 characters"] if len(value) > 63 else []
    if not _LABEL_VALUE.fullmatch(value):
        out.append("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
                   "and must start and end with an alphanumeric character")
    return out


_FORMATS: Final[dict[str, Callable[[str], list[str]]]] = {
    "dns1123Label": _label, "dns1123Subdomain": _subdomain, "dns1035Label": _dns1035,
    "qualifiedName": _qualified_name, "dns1123LabelPrefix": _label, "dns1123SubdomainPrefix": _subdomain,
    "dns1035LabelPrefix": _dns1035, "labelValue": _label_value, "uri": lambda v: [] if _is_url(v) else ["invalid URI"],
    "uuid": lambda v: [] if re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", v)
    else ["invalid UUID"],
    "byte": lambda v: [] if re.fullmatch(r"[A-Za-z0-9+/]*={0,2}", v) and len(v) % 4 == 0 else ["invalid base64"],
    "date": lambda v: [] if re.fullmatch(r"\d{4}-\d{2}-\d{2}", v) else ["invalid date"],
    "datetime": lambda v: [] if re.fullmatch(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})",
                                             v) else ["invalid datetime"],
}


def _format_named(name: str) -> str:
    if name not in _FORMATS:
        raise ValueError(f"unknown format: {name}")
    return name


def _format_validate(name: str, value: str) -> list[str] | None:
    problems = _FORMATS[name](value)
    return problems or None


# ---------------------------------------------------------------------------------------------
# The extension.


@cache
def kubernetes_library() -> Any:
    """The CEL extension with every function above (built once)."""
    s, b, i, d, dyn = cel.Type.STRING, cel.Type.BOOL, cel.Type.INT, cel.Type.DOUBLE, cel.Type.DYN
    dyn_list, str_list = cel.Type.List(dyn), cel.Type.List(s)
    decls: list[Any] = []

    def member(name: str, result: Any, params: list[Any], impl: Callable[..., Any]) -> None:
        decls.append(cel.FunctionDecl(name, [cel.Overload(f"k8s_{name}_member", result, params, is_member=True,
                                                          impl=impl)]))

    def function(name: str, result: Any, params: list[Any], impl: Callable[..., Any]) -> None:
        decls.append(cel.FunctionDecl(name, [cel.Overload(f"k8s_{name}", result, params, is_member=False,
                                                          impl=impl)]))

    member("isSorted", b, [dyn_list], _is_sorted)
    member("sum", dyn, [dyn_list], _sum)
    member("min", dyn, [dyn_list], _min)
    member("max", dyn, [dyn_list], _max)
    member("indexOf", i, [dyn_list, dyn], _index_of)
    member("lastIndexOf", i, [dyn_list, dyn], _last_index_of)
    member("find", s, [s, s], _find)
    member("findAll", str_list, [s, s], _find_all)
    function("sets.contains", b, [dyn_list, dyn_list], _sets_contains)
    function("sets.intersects", b, [dyn_list, dyn_list], _sets_intersects)
    function("sets.equivalent", b, [dyn_list, dyn_list], _sets_equivalent)
    function("isIP", b, [s], _is_ip)
    function("ip", s, [s], lambda t: str(_ip(t)))
    function("ip.isCanonical", b, [s], lambda t: str(_ip(t)) == t)
    member("family", i, [s], lambda t: _ip(t).version)
    member("isUnspecified", b, [s], lambda t: _ip(t).is_unspecified)
    member("isLoopback", b, [s], lambda t: _ip(t).is_loopback)
    member("isLinkLocalMulticast", b, [s], lambda t: _ip(t).is_multicast and _ip(t).is_link_local)
    member("isLinkLocalUnicast", b, [s], lambda t: _ip(t).is_link_local and not _ip(t).is_multicast)
    member("isGlobalUnicast", b, [s], lambda t: not (_ip(t).is_multicast or _ip(t).is_loopback
                                                     or _ip(t).is_link_local or _ip(t).is_unspecified))
    function("isCIDR", b, [s], _is_cidr)
    function("cidr", s, [s], lambda t: (_cidr(t), t)[1])
    member("containsIP", b, [s, s], _contains_ip)
    member("containsCIDR", b, [s, s], _contains_cidr)
    member("prefixLength", i, [s], lambda t: _cidr(t).prefixlen)
    member("masked", s, [s], lambda t: str(_cidr(t)))
    function("isURL", b, [s], _is_url)
    function("url", s, [s], _url)
    member("getScheme", s, [s], lambda t: urlsplit(t).scheme)
    member("getHost", s, [s], _url_host)
    member("getHostname", s, [s], _url_hostname)
    member("getPort", s, [s], _url_port)
    member("getEscapedPath", s, [s], lambda t: urlsplit(t).path)
    member("getQuery", cel.Type.Map(s, str_list), [s], _url_query)
    function("isQuantity", b, [s], _is_quantity)
    function("quantity", s, [s], lambda t: (_quantity(t), t)[1])
    member("sign", i, [s], lambda t: (_quantity(t) > 0) - (_quantity(t) < 0))
    member("isInteger", b, [s], lambda t: _quantity(t).denominator == 1 and -(2**63) <= _quantity(t) < 2**63)
    member("asInteger", i, [s], _as_integer)
    member("asApproximateFloat", d, [s], lambda t: float(_quantity(t)))
    member("add", s, [s, s], lambda a, c: _quantity_text(_quantity(a) + _quantity(c)))
    member("sub", s, [s, s], lambda a, c: _quantity_text(_quantity(a) - _quantity(c)))
    member("compareTo", i, [s, s], _compare)
    member("isLessThan", b, [s, s], lambda a, c: _compare(a, c) < 0)
    member("isGreaterThan", b, [s, s], lambda a, c: _compare(a, c) > 0)
    function("isSemver", b, [s], lambda t: _SEMVER.match(t) is not None)
    function("semver", s, [s], lambda t: (_semver(t), t)[1])
    member("major", i, [s], lambda t: _semver(t)[0])
    member("minor", i, [s], lambda t: _semver(t)[1])
    member("patch", i, [s], lambda t: _semver(t)[2])
    function("format.named", s, [s], _format_named)
    for name in _FORMATS:
        function(f"format.{name}", s, [], lambda n=name: n)
    # upstream returns optional<list<string>>; here null (valid) or the list of problems
    member("validate", dyn, [s, s], _format_validate)
    return cel.CelExtension("kubernetes", decls)
