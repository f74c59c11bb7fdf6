"""The JSONPath that CRDs use: `additionalPrinterColumns[].jsonPath`, scale paths and selectable fields.

Kubernetes' JSONPath (`k8s.io/client-go/util/jsonpath`) as printer columns use it: a path
relative to the object, with or without surrounding braces, made of

* fields: `.spec.replicas`, `.metadata.labels.app`, `['key.with.dots']`;
* indexes and slices: `.spec.containers[0]`, `[-1]`, `[1:3]`, `[*]`;
* filters on list items: `.status.conditions[?(@.type=="Ready")].status` (`==`, `!=`, `<`,
  `<=`, `>`, `>=` against a string or number literal, or a bare `@.field` for existence).

`compile_path` checks a path once (a CRD with a path it cannot parse is refused);
`Path.values(obj)` returns every value it reaches, in order, missing fields giving none.
A printer column shows the first value; kubectl prints the rest of a multi-valued path
joined with commas, as `Path.text` does.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

import orjson

Step = Callable[[Any], Iterator[Any]]

_FIELD: Final = re.compile(r"\.([A-Za-z_$][\w$-]*)")
_FILTER: Final = re.compile(
    r"\[\?\(@((?:\.[\w$-]+)+)\s*(?:(==|!=|<=|>=|<|>)\s*(\"[^\"]*\"|'[^']*'|-?\d+(?:\.\d+)?|true|false))?\)\]")


class PathError(ValueError):
    """A path this module cannot parse."""


@dataclass(frozen=True, slots=True)
class Path:
    """A compiled JSONPath."""

    source: str
    steps: tuple[Step, ...]

    def values(self, obj: Any) -> list[Any]:
        """Every value the path reaches in `obj`."""
        current: list[Any] = [obj]
        for step in self.steps:
            current = [v for c in current for v in step(c)]
            if not current:
                break
        return current

    def first(self, obj: Any) -> Any:
        """The first value reached, or None."""
        found = self.values(obj)
        return found[0] if found else None

    def text(self, obj: Any) -> str:
        """What kubectl prints for the path: values joined by commas, "" when none."""
        return ",".join(_text(v) for v in self.values(obj))

    def simple_fields(self) -> tuple[str, ...] | None:
        """The field names of a path made only of fields (`.spec.replicas`), else None."""
        names = []
        for step in self.steps:
            if not isinstance(step, _Field):
                return None
            names.append(step.name)
        return tuple(names)


def _text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (dict, list)):
        return orjson.dumps(v).decode()
    return "" if v is None else str(v)


@dataclass(frozen=True, slots=True)
class _Field:
    name: str

    def __call__(self, v: Any) -> Iterator[Any]:
        if isinstance(v, dict) and self.name in v:
            yield v[self.name]


def _wildcard(v: Any) -> Iterator[Any]:
    if isinstance(v, list):
        yield from v
    elif isinstance(v, dict):
        yield from v.values()


def _index(i: int) -> Step:
    def step(v: Any) -> Iterator[Any]:
        if isinstance(v, list) and -len(v) <= i < len(v):
            yield v[i]
    return step


def _slice(start: int | None, stop: int | None, stride: int | None) -> Step:
    def step(v: Any) -> Iterator[Any]:
        if isinstance(v, list):
            yield from v[start:stop:stride]
    return step


def _literal(text: str) -> Any:
    if text[0] in "\"'":
        return text[1:-1]
    if text in ("true", "false"):
        return text == "true"
    return float(text) if "." in text else int(text)


_OPS: Final[dict[str, Callable[[Any, Any], bool]]] = {
    "==": lambda a, b: a == b, "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
}


def _filter(fields: tuple[str, ...], op: str | None, literal: Any) -> Step:
    def reach(item: Any) -> tuple[bool, Any]:
        cur = item
        for f in fields:
            if not isinstance(cur, dict) or f not in cur:
                return False, None
            cur = cur[f]
        return True, cur

    def step(v: Any) -> Iterator[Any]:
        items = v if isinstance(v, list) else [v]
        for item in items:
            found, value = reach(item)
            if not found:
                continue
            if op is None:
                yield item
                continue
            try:
                if _OPS[op](value, literal):
                    yield item
            except TypeError:
                continue
    return step


def compile_path(source: str) -> Path:
    """Parse a JSONPath (`.a.b[0]`, `{.a.b}`, `.a[?(@.k=="v")].c`); PathError when it cannot."""
    text = source.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1].strip()
    if text.startswith("$"):
        text = text[1:]
    if not text.startswith(".") and not text.startswith("["):
        raise PathError(f"{source!r}: a path starts with '.'")
    steps: list[Step] = []
    pos = 0
    while pos < len(text):
        if text.startswith("..", pos):
            raise PathError(f"{source!r}: recursive descent is not supported")
        m = _FIELD.match(text, pos)
        if m:
            steps.append(_Field(m.group(1)))
            pos = m.end()
            continue
        if text.startswith("[*]", pos) or text.startswith(".*", pos):
            steps.append(_wildcard)
            pos += 3 if text[pos] == "[" else 2
            continue
        m = _FILTER.match(text, pos)
        if m:
            fields = tuple(m.group(1).split(".")[1:])
            steps.append(_filter(fields, m.group(2), _literal(m.group(3)) if m.group(3) else None))
            pos = m.end()
            continue
        if text.startswith("[", pos):
            end = text.find("]", pos)
            if end < 0:
                raise PathError(f"{source!r}: unclosed '['")
            inner = text[pos + 1:end].strip()
            pos = end + 1
            if inner[:1] in "\"'" and inner[-1:] == inner[:1] and len(inner) >= 2:
                steps.append(_Field(inner[1:-1]))
                continue
            try:
                if ":" in inner:
                    parts = [int(p) if p.strip() else None for p in inner.split(":")]
                    if len(parts) > 3:
                        raise ValueError
                    steps.append(_slice(*(parts + [None] * (3 - len(parts)))))
                else:
                    steps.append(_index(int(inner)))
            except ValueError:
                raise PathError(f"{source!r}: invalid array index {inner!r}") from None
            continue
        raise PathError(f"{source!r}: unexpected {text[pos:pos + 10]!r}")
    return Path(source=source, steps=tuple(steps))
