r"""Label and field selectors with Kubernetes semantics, compiled once and matched fast.

Used by the apiserver (list and watch filtering: every watcher's selector is evaluated on
every event), by the scheduler and by the controllers (workload selectors), so parsing is
done once and matching works on precompiled tuples: no regular expression, no string
splitting and no allocation per match.

Label selectors (`parse_label_selector`), the string syntax of `?labelSelector=`:

* `k=v`, `k==v` (equality), `k!=v` (inequality: also true when `k` is absent),
  `k in (a,b)`, `k notin (a,b)` (`notin` is also true when `k` is absent), `k` (exists),
  `!k` (does not exist), `k>N`, `k<N` (the label's value parsed as an integer);
* comma means AND; whitespace around tokens is ignored; the empty string selects everything;
* keys must be qualified names (`[prefix/]name`, the prefix a DNS subdomain), values valid label
  values (at most 63 characters, alphanumerics, `-`, `_`, `.`, alphanumeric at both ends, or empty);
  anything else raises `SelectorError` with a message fit for a 400 Status.

`label_selector_from_dict` converts a `metav1.LabelSelector` (`matchLabels`, `matchExpressions`
with In/NotIn/Exists/DoesNotExist), as workloads and PDBs carry it. As Kubernetes'
`LabelSelectorAsSelector`: `None` selects nothing, `{}` selects everything.

`str(selector)` is a canonical form: requirements sorted by key (stable), `==` written `=`,
set values sorted; parsing the canonical form gives an equal selector.

Field selectors (`parse_field_selector`), the syntax of `?fieldSelector=`: `f=v`, `f==v`,
`f!=v`, comma means AND, values may be empty (`involvedObject.namespace=`), `\,`, `\=` and
`\\` escape those characters in values. Fields are resolved against the kind
(`Kind.field_getter`); an unsupported field raises `SelectorError("field label not supported: f")`.
`FieldSelector.exact(field)` exposes an equality term so that the apiserver can use an index
(pods by `spec.nodeName`) instead of a scan.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from kubemesh.services.model.kinds import FieldGetter, Kind, Obj

__all__ = [
    "EVERYTHING",
    "NOTHING",
    "FieldSelector",
    "LabelSelector",
    "Requirement",
    "SelectorError",
    "label_selector_from_dict",
    "parse_field_selector",
    "parse_label_selector",
    "validate_label_key",
    "validate_label_value",
]


class SelectorError(ValueError):
    """A selector that cannot be parsed or uses an unsupported field; `str()` is the 400 message."""


# ---------------------------------------------------------------------------------------------
# Key and value validation (run at parse time only).

_NAME_RE: Final = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_SUBDOMAIN_RE: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


@functools.lru_cache(maxsize=65536)
def validate_label_key(key: str) -> str | None:
    """Why `key` is not a valid label key (a qualified name), or None when it is."""
    prefix, slash, name = key.rpartition("/")
    if slash:
        if not prefix:
            return f"{key!r}: prefix part must be non-empty"
        if len(prefix) > 253:
            return f"{key!r}: prefix part must be no more than 253 characters"
        if not _DNS_SUBDOMAIN_RE.fullmatch(prefix):
            return (
                f"{key!r}: prefix part must be a lowercase RFC 1123 subdomain "
                "(lower case alphanumerics, '-' or '.', alphanumeric at both ends)"
            )
    if not name:
        return f"{key!r}: name part must be non-empty"
    if len(name) > 63:
        return f"{key!r}: name part must be no more than 63 characters"
    if not _NAME_RE.fullmatch(name):
        return (
            f"{key!r}: name part must consist of alphanumeric characters, '-', '_' or '.', "
            "and must start and end with an alphanumeric character"
        )
    return None


@functools.lru_cache(maxsize=65536)
def validate_label_value(value: str) -> str | None:
    """Why `value` is not a valid label value, or None when it is (the empty string is valid)."""
    if not value:
        return None
    if len(value) > 63:
        return f"{value!r}: must be no more than 63 characters"
    if not _NAME_RE.fullmatch(value):
        return (
            f"{value!r}: a valid label value must be empty or consist of alphanumeric characters, "
            "'-', '_' or '.', and must start and end with an alphanumeric character"
        )
    return None


# ---------------------------------------------------------------------------------------------
# Label selectors.

# Operators, as small ints so that matching compares ints, not strings.
_EQ: Final = 0
_NE: Final = 1
_IN: Final = 2
_NOTIN: Final = 3
_EXISTS: Final = 4
_NOT_EXISTS: Final = 5
_GT: Final = 6
_LT: Final = 7

_OP_NAMES: Final = {
    _EQ: "=", _NE: "!=", _IN: "in", _NOTIN: "notin", _EXISTS: "exists",
    _NOT_EXISTS: "!", _GT: ">", _LT: "<",
}


@dataclass(frozen=True, slots=True)
class Requirement:
    """One term of a label selector: `key`, an operator and its values (sorted, deduplicated)."""

    key: str
    operator: str
    """One of `=`, `!=`, `in`, `notin`, `exists`, `!`, `>`, `<`."""
    values: tuple[str, ...]

    def __str__(self) -> str:
        op = self.operator
        if op == "exists":
            return self.key
        if op == "!":
            return f"!{self.key}"
        if op in ("in", "notin"):
            return f"{self.key} {op} ({','.join(self.values)})"
        return f"{self.key}{op}{self.values[0]}"


_Compiled = tuple[int, str, Any]
"""(operator code, key, operand): a str for =/!=, a frozenset for in/notin, an int for >/<."""


class LabelSelector:
    """A compiled label selector: an AND of requirements, or the selector that matches nothing."""

    __slots__ = ("_equal", "_nothing", "_others", "_requirements")

    def __init__(self, requirements: Iterable[Requirement] = (), *, nothing: bool = False) -> None:
        reqs = sorted(requirements, key=lambda r: r.key)
        self._requirements: tuple[Requirement, ...] = tuple(reqs)
        self._nothing = nothing
        # Equality terms are by far the most common (app=web): checked first, as plain pairs.
        equal: list[tuple[str, str]] = []
        others: list[_Compiled] = []
        for r in reqs:
            code = _OP_CODES[r.operator]
            if code == _EQ:
                equal.append((r.key, r.values[0]))
            elif code == _NE:
                others.append((code, r.key, r.values[0]))
            elif code in (_IN, _NOTIN):
                others.append((code, r.key, frozenset(r.values)))
            elif code in (_GT, _LT):
                others.append((code, r.key, int(r.values[0])))
            else:
                others.append((code, r.key, None))
        self._equal: tuple[tuple[str, str], ...] = tuple(equal)
        self._others: tuple[_Compiled, ...] = tuple(others)

    @property
    def requirements(self) -> tuple[Requirement, ...]:
        """The requirements, sorted by key."""
        return self._requirements

    @property
    def empty(self) -> bool:
        """Whether this selector has no requirement and so matches everything."""
        return not self._requirements and not self._nothing

    @property
    def matches_nothing(self) -> bool:
        """Whether this is the selector of a `None` metav1.LabelSelector, which selects nothing."""
        return self._nothing

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether an object with these labels is selected."""
        if self._nothing:
            return False
        get = labels.get
        for key, value in self._equal:
            if get(key) != value:
                return False
        for code, key, operand in self._others:
            have = get(key)
            if code == _NE:
                if have == operand:
                    return False
            elif code == _IN:
                if have is None or have not in operand:
                    return False
            elif code == _NOTIN:
                if have is not None and have in operand:
                    return False
            elif code == _EXISTS:
                if have is None:
                    return False
            elif code == _NOT_EXISTS:
                if have is not None:
                    return False
            else:
                if have is None:
                    return False
                try:
                    number = int(have)
                except ValueError:
                    return False
                if (code == _GT and not number > operand) or (code == _LT and not number < operand):
                    return False
        return True

    def __str__(self) -> str:
        return ",".join(str(r) for r in self._requirements)

    def __repr__(self) -> str:
        if self._nothing:
            return "LabelSelector(<nothing>)"
        return f"LabelSelector({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LabelSelector):
            return NotImplemented
        return self._nothing == other._nothing and self._requirements == other._requirements

    def __hash__(self) -> int:
        return hash((self._nothing, self._requirements))


_OP_CODES: Final = {name: code for code, name in _OP_NAMES.items()}

EVERYTHING: Final = LabelSelector()
"""The selector that matches every object."""
NOTHING: Final = LabelSelector(nothing=True)
"""The selector that matches no object."""


def _requirement(key: str, operator: str, values: Iterable[str]) -> Requirement:
    """Build and validate one requirement."""
    problem = validate_label_key(key)
    if problem is not None:
        raise SelectorError(f"unable to parse requirement: invalid label key {problem}")
    vals = tuple(sorted(set(values)))
    if operator in ("in", "notin"):
        if not vals:
            raise SelectorError(
                f"unable to parse requirement: for 'in', 'notin' operators, values set can't be empty"
                f" (key {key!r})"
            )
    elif operator in ("=", "!="):
        if len(vals) != 1:
            raise SelectorError(
                f"unable to parse requirement: exact-match operators need one value (key {key!r})"
            )
    elif operator in (">", "<"):
        if len(vals) != 1:
            raise SelectorError(f"unable to parse requirement: '>' and '<' need one value (key {key!r})")
        try:
            int(vals[0])
        except ValueError:
            raise SelectorError(
                f"unable to parse requirement: for '>', '<' operators, the value must be an integer"
                f" (key {key!r}, value {vals[0]!r})"
            ) from None
        return Requirement(key, operator, vals)
    elif vals:
        raise SelectorError(
            "unable to parse requirement: values set must be empty for exists and does not exist"
            f" (key {key!r})"
        )
    for v in vals:
        problem = validate_label_value(v)
        if problem is not None:
            raise SelectorError(f"unable to parse requirement: invalid label value {problem}")
    return Requirement(key, operator, vals)


# Tokens of the string syntax. Identifiers are maximal runs of anything that is neither
# whitespace nor one of the special characters below, as in the Kubernetes lexer.
_SPECIAL: Final = frozenset("!=(),<>")
_T_ID: Final = "id"
_T_END: Final = "end"


def _tokenize(text: str) -> list[tuple[str, str]]:
    """Split selector text into (type, text) tokens; types are `id`, an operator text, or `end`."""
    tokens: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
            continue
        if c in _SPECIAL:
            two = text[i : i + 2]
            if two in ("==", "!="):
                tokens.append((two, two))
                i += 2
            else:
                tokens.append((c, c))
                i += 1
            continue
        j = i
        while j < n and not text[j].isspace() and text[j] not in _SPECIAL:
            j += 1
        word = text[i:j]
        # `in` and `notin` are keywords only as whole words.
        tokens.append((word, word) if word in ("in", "notin") else (_T_ID, word))
        i = j
    tokens.append((_T_END, ""))
    return tokens


class _Parser:
    """Recursive-descent parser over the token list."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.pos = 0

    def peek(self) -> tuple[str, str]:
        return self.tokens[self.pos]

    def take(self) -> tuple[str, str]:
        tok = self.tokens[self.pos]
        if tok[0] != _T_END:
            self.pos += 1
        return tok

    def fail(self, what: str) -> SelectorError:
        return SelectorError(f"unable to parse requirement: {what} in selector {self.text!r}")

    def parse(self) -> list[Requirement]:
        reqs: list[Requirement] = []
        if self.peek()[0] == _T_END:
            return reqs
        while True:
            reqs.append(self.requirement())
            kind, text = self.take()
            if kind == _T_END:
                return reqs
            if kind != ",":
                raise self.fail(f"found {text!r}, expected ','")
            if self.peek()[0] == _T_END:
                raise self.fail("found end of input, expected a requirement after ','")

    def requirement(self) -> Requirement:
        kind, text = self.take()
        # `in` and `notin` are valid label keys; at the start of a requirement they can only be one.
        if kind == "!":
            kind, key = self.take()
            if kind not in (_T_ID, "in", "notin"):
                raise self.fail(f"found {key!r}, expected a label key after '!'")
            nxt = self.peek()[0]
            if nxt not in (",", _T_END):
                raise self.fail(f"found {self.peek()[1]!r}, expected ',' or end of input after '!{key}'")
            return _requirement(key, "!", ())
        if kind not in (_T_ID, "in", "notin"):
            raise self.fail(f"found {text or 'end of input'!r}, expected a label key")
        key = text
        kind, op_text = self.peek()
        if kind in (",", _T_END):
            return _requirement(key, "exists", ())
        self.take()
        if kind in ("=", "=="):
            return _requirement(key, "=", (self.single_value(),))
        if kind == "!=":
            return _requirement(key, "!=", (self.single_value(),))
        if kind in (">", "<"):
            return _requirement(key, kind, (self.single_value(),))
        if kind in ("in", "notin"):
            return _requirement(key, kind, self.value_set())
        raise self.fail(f"found {op_text!r}, expected an operator (=, ==, !=, in, notin, >, <)")

    def single_value(self) -> str:
        kind, text = self.peek()
        if kind == _T_ID:
            self.take()
            return text
        if kind in (",", _T_END):
            return ""  # `k=` selects the empty value
        if kind in ("in", "notin"):
            self.take()
            return text  # a value that happens to spell a keyword
        raise self.fail(f"found {text!r}, expected a value")

    def value_set(self) -> list[str]:
        kind, text = self.take()
        if kind != "(":
            raise self.fail(f"found {text or 'end of input'!r}, expected '('")
        values: list[str] = []
        expect_value = True
        while True:
            kind, text = self.take()
            if kind == ")":
                if expect_value and values:
                    values.append("")  # `(a,)`: a trailing empty value
                return values
            if kind == ",":
                if expect_value:
                    values.append("")
                expect_value = True
                continue
            if kind in (_T_ID, "in", "notin") and expect_value:
                values.append(text)
                expect_value = False
                continue
            raise self.fail(f"found {text or 'end of input'!r} in a value set, expected a value, ',' or ')'")


def parse_label_selector(text: str) -> LabelSelector:
    """Parse the string form of a label selector; `""` (or only whitespace) selects everything."""
    if not text or text.isspace():
        return EVERYTHING
    return LabelSelector(_Parser(text).parse())


def label_selector_from_dict(sel: Mapping[str, Any] | None) -> LabelSelector:
    """Convert a metav1.LabelSelector; `None` selects nothing, `{}` selects everything."""
    if sel is None:
        return NOTHING
    if not isinstance(sel, Mapping):
        raise SelectorError(f"invalid label selector: expected an object, got {type(sel).__name__}")
    reqs: list[Requirement] = []
    match_labels = sel.get("matchLabels") or {}
    if not isinstance(match_labels, Mapping):
        raise SelectorError("invalid label selector: matchLabels must be an object")
    for key, value in match_labels.items():
        if not isinstance(value, str):
            raise SelectorError(f"invalid label selector: matchLabels[{key!r}] must be a string")
        reqs.append(_requirement(str(key), "=", (value,)))
    expressions = sel.get("matchExpressions") or []
    if not isinstance(expressions, list):
        raise SelectorError("invalid label selector: matchExpressions must be a list")
    operators = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
    for expr in expressions:
        if not isinstance(expr, Mapping):
            raise SelectorError("invalid label selector: each matchExpressions item must be an object")
        op = operators.get(str(expr.get("operator")))
        if op is None:
            raise SelectorError(
                f"invalid label selector: {expr.get('operator')!r} is not a valid selector operator"
            )
        values = expr.get("values") or []
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise SelectorError("invalid label selector: values must be a list of strings")
        reqs.append(_requirement(str(expr.get("key", "")), op, values))
    return LabelSelector(reqs)


# ---------------------------------------------------------------------------------------------
# Field selectors.


@dataclass(frozen=True, slots=True)
class _FieldTerm:
    field: str
    equal: bool
    """True for `=`/`==`, False for `!=`."""
    value: str
    getter: FieldGetter


def _escape_field_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")


class FieldSelector:
    """A compiled field selector: an AND of `field=value` / `field!=value` terms."""

    __slots__ = ("_exact", "_terms")

    def __init__(self, terms: Iterable[_FieldTerm] = ()) -> None:
        self._terms: tuple[_FieldTerm, ...] = tuple(terms)
        exact: dict[str, str] = {}
        for t in self._terms:
            if t.equal:
                exact.setdefault(t.field, t.value)
        self._exact = exact

    @property
    def empty(self) -> bool:
        """Whether this selector has no term and so matches everything."""
        return not self._terms

    @property
    def fields(self) -> tuple[str, ...]:
        """The fields the terms test, in selector order."""
        return tuple(t.field for t in self._terms)

    def exact(self, field: str) -> str | None:
        """The value of a `field=value` term, if the selector has one (for index lookups)."""
        return self._exact.get(field)

    def matches(self, obj: Obj) -> bool:
        """Whether `obj` is selected."""
        return all((t.getter(obj) == t.value) == t.equal for t in self._terms)

    def __str__(self) -> str:
        return ",".join(
            f"{t.field}{'=' if t.equal else '!='}{_escape_field_value(t.value)}" for t in self._terms
        )

    def __repr__(self) -> str:
        return f"FieldSelector({str(self)!r})"


def _split_unescaped(text: str, sep: str) -> list[str]:
    """Split on `sep` where it is not preceded by an escaping backslash (escapes are kept)."""
    parts: list[str] = []
    cur: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n:
            cur.append(text[i : i + 2])
            i += 2
            continue
        if c == sep:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    parts.append("".join(cur))
    return parts


def _unescape_field_value(value: str, term: str) -> str:
    out: list[str] = []
    i, n = 0, len(value)
    while i < n:
        c = value[i]
        if c == "\\":
            if i + 1 >= n or value[i + 1] not in "\\,=":
                raise SelectorError(f"invalid field selector: invalid escape sequence in {term!r}")
            out.append(value[i + 1])
            i += 2
            continue
        if c in ",=":
            raise SelectorError(f"invalid field selector: unescaped {c!r} in the value of {term!r}")
        out.append(c)
        i += 1
    return "".join(out)


def _split_term(term: str) -> tuple[str, str, str] | None:
    """Find the first operator in `term`, preferring `!=` and `==` over `=` at one position."""
    i, n = 0, len(term)
    while i < n:
        c = term[i]
        if c == "\\":
            i += 2
            continue
        if c == "!" and term.startswith("!=", i):
            return term[:i], "!=", term[i + 2 :]
        if c == "=":
            if term.startswith("==", i):
                return term[:i], "==", term[i + 2 :]
            return term[:i], "=", term[i + 1 :]
        i += 1
    return None


def parse_field_selector(text: str, kind: Kind) -> FieldSelector:
    """Parse `?fieldSelector=` text for `kind`; `""` selects everything."""
    if not text or text.isspace():
        return FieldSelector()
    terms: list[_FieldTerm] = []
    for raw in _split_unescaped(text, ","):
        term = raw.strip()
        if not term:
            raise SelectorError(f"invalid selector: '{text}'; can't understand an empty term")
        parts = _split_term(term)
        if parts is None:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{term}'")
        field, op, value = parts
        field = field.strip()
        if not field:
            raise SelectorError(f"invalid selector: '{text}'; missing field name in '{term}'")
        getter = kind.field_getter(field)
        if getter is None:
            raise SelectorError(f"field label not supported: {field}")
        terms.append(_FieldTerm(field, op != "!=", _unescape_field_value(value, term), getter))
    return FieldSelector(terms)
