r"""`pattern` with Go's RE2 semantics: RE2 decides what is valid, Python's `re` does the matching.

Kubernetes compiles `pattern` with Go's `regexp` (RE2 syntax: no look-around, no back-references,
`$` only at the very end of the text, ASCII `\\d`/`\\w`/`\\s`). The validity check goes through
the C++ RE2 that the CEL runtime embeds (a constant `matches()` call), so a pattern is accepted
exactly when RE2 accepts it. Matching then uses a translated Python pattern, which is ten times
faster; the few constructs with no faithful translation (Unicode classes `\\p{..}`, POSIX
classes, flags groups, `\\Q..\\E`) keep matching through RE2 as well.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache
from typing import Any, Final

from cel_expr_python import cel  # type: ignore[import-untyped]

__all__ = ["Matcher", "cel_string_literal", "compile_pattern"]

Matcher = Callable[[str], bool]

_UNTRANSLATABLE: Final = re.compile(r"\\[pPQEC]|\[\[:|\(\?[a-zA-Z]|\{,")


def cel_string_literal(text: str) -> str:
    """`text` as a CEL string literal that survives any content (every character escaped)."""
    return '"' + "".join(f"\\u{ord(c):04x}" if ord(c) < 0x10000 else f"\\U{ord(c):08x}" for c in text) + '"'


@cache
def _env() -> Any:
    return cel.NewEnv(variables={"s": cel.Type.STRING})


def _re2_matcher(pattern: str) -> tuple[Matcher | None, str | None]:
    try:
        program = _env().compile(f"s.matches({cel_string_literal(pattern)})")
        probe = program.eval(data={"s": ""})
        if probe.type() == cel.Type.ERROR:
            raise RuntimeError(str(probe.value()))
    except RuntimeError as err:
        text = str(err).removeprefix("INVALID_ARGUMENT: ").removesuffix(" [INVALID_ARGUMENT]")
        return None, f"error parsing regexp: {text.removeprefix('invalid regular expression: ')}"

    def match(value: str) -> bool:
        return bool(program.eval(data={"s": value}).value())

    return match, None


def _translate(pattern: str) -> str:
    r"""Go's `$` (end of text) and `\\z` as Python's `\\Z`, outside character classes."""
    out: list[str] = []
    in_class = False
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            out.append("\\Z" if nxt == "z" and not in_class else ch + nxt)
            i += 2
            continue
        if in_class:
            if ch == "]":
                in_class = False
        elif ch == "[":
            in_class = True
            if pattern[i + 1 : i + 2] == "^":
                out.append("[^")
                i += 2
                if pattern[i : i + 1] == "]":
                    out.append("\\]")
                    i += 1
                continue
            if pattern[i + 1 : i + 2] == "]":
                out.append("[\\]")
                i += 2
                continue
        elif ch == "$":
            out.append("\\Z")
            i += 1
            continue
        out.append(ch)
        i += 1
    return "".join(out)


@cache
def compile_pattern(pattern: str) -> tuple[Matcher | None, str | None]:
    """(matcher, None) for a valid RE2 pattern, (None, why) otherwise. Matchers search, as Go's do."""
    re2_match, problem = _re2_matcher(pattern)
    if problem is not None or _UNTRANSLATABLE.search(pattern):
        return re2_match, problem
    try:
        compiled = re.compile(_translate(pattern), re.ASCII)
    except re.error:
        return re2_match, None
    search = compiled.search
    return (lambda value: search(value) is not None), None
